"""BLEU two ways on hand-made cases whose value follows from the formula."""

import math

import pytest

from reproduce.scoring.bleu import paper_tokenize, sacrebleu_score, score_translations, tokenized_bleu


def test_identical_output_scores_100():
    lines = ["The cat sat on the mat .", "A dog barked loudly ."]
    assert sacrebleu_score(lines, lines)[0] == pytest.approx(100.0)
    assert tokenized_bleu(lines, lines, "en") == pytest.approx(100.0)


def test_a_case_computed_by_hand():
    # hypothesis: a b c d e f (6 tokens), reference: a b c d x f g (7 tokens)
    # matches: 1-grams 5/6, 2-grams 3/5 (ab bc cd), 3-grams 2/4 (abc bcd), 4-grams 1/3 (abcd)
    # brevity penalty exp(1 - 7/6)
    expected = 100 * math.exp(1 - 7 / 6) * (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25
    assert tokenized_bleu(["a b c d e f"], ["a b c d x f g"], "en") == pytest.approx(expected, rel=1e-9)


def test_sacrebleu_reports_its_signature():
    _, signature = sacrebleu_score(["Hello there ."], ["Hello there ."])
    assert "tok:13a" in signature and "version:" in signature


def test_hyphenated_compounds_are_split_as_in_get_ende_bleu():
    assert paper_tokenize("Das Hotel-Restaurant ist gut.", "de") == \
        "Das Hotel ##AT##-##AT## Restaurant ist gut ."
    # A wrong compound half still earns the shared half and the hyphen after splitting.
    hypothesis, reference = ["ein Hotel-Bar"], ["ein Hotel-Restaurant"]
    # unsplit: tokens (ein, Hotel-Bar) vs (ein, Hotel-Restaurant) -> 1-gram 1/2, no 2-gram match
    # split: ein Hotel ##AT##-##AT## Bar vs ein Hotel ##AT##-##AT## Restaurant -> 1-grams 3/4,
    # 2-grams 2/3, 3-grams 1/2, 4-grams 0/1 -> 0 without smoothing
    assert tokenized_bleu(hypothesis, reference, "de") == pytest.approx(0.0)
    longer_h = ["ein gutes Hotel-Bar hier"]
    longer_r = ["ein gutes Hotel-Restaurant hier"]
    # 6 tokens each after splitting (##AT##-##AT## is one): 1-grams 5/6, 2-grams 3/5, 3-grams 2/4,
    # 4-grams 1/3; without the split no 3-gram would match and BLEU would be 0.
    split = 100 * (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25
    assert tokenized_bleu(longer_h, longer_r, "de") == pytest.approx(split, rel=1e-9)


def test_line_count_mismatch_names_both_files(tmp_path):
    (tmp_path / "hyp.txt").write_text("a\nb\n")
    (tmp_path / "ref.txt").write_text("a\n")
    with pytest.raises(ValueError, match=r"hyp\.txt has 2 lines but .*ref\.txt has 1"):
        score_translations(tmp_path / "hyp.txt", tmp_path / "ref.txt", "de")
