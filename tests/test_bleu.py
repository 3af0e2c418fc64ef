"""BLEU two ways, on hand-made cases whose value follows from the formula
BLEU = BP * (p1 p2 p3 p4)^(1/4), BP = exp(1 - r/c) when c < r (corpus-level counts)."""

import math
import random
from collections import Counter

import pytest

from reproduce.scoring.bleu import (
    paper_tokenize,
    sacrebleu_score,
    score_translations,
    tokenized_bleu,
)
from reproduce.scoring.scores import task_scores
from tests.test_tables import make_experiment


def bleu_by_hand(precisions: list[float], hypothesis_length: int, reference_length: int) -> float:
    brevity = min(1.0, math.exp(1 - reference_length / hypothesis_length))
    return 100 * brevity * math.prod(precisions) ** 0.25


def multi_bleu_brute_force(hypotheses: list[str], references: list[str]) -> float:
    """multi-bleu.perl's arithmetic, written out: clipped n-gram counts summed over the corpus."""
    correct, total, hypothesis_length, reference_length = [0] * 4, [0] * 4, 0, 0
    for hypothesis, reference in zip(hypotheses, references, strict=True):
        h, r = hypothesis.split(), reference.split()
        hypothesis_length, reference_length = hypothesis_length + len(h), reference_length + len(r)
        for n in range(1, 5):
            h_ngrams = Counter(tuple(h[i : i + n]) for i in range(len(h) - n + 1))
            r_ngrams = Counter(tuple(r[i : i + n]) for i in range(len(r) - n + 1))
            total[n - 1] += sum(h_ngrams.values())
            correct[n - 1] += sum(min(count, r_ngrams[g]) for g, count in h_ngrams.items())
    if 0 in correct:
        return 0.0
    precisions = [c / t for c, t in zip(correct, total, strict=True)]
    return bleu_by_hand(precisions, hypothesis_length, reference_length)


def test_identical_output_scores_100():
    lines = ["The cat sat on the mat.", "A dog barked loudly."]
    assert sacrebleu_score(lines, lines)[0] == pytest.approx(100.0)
    assert tokenized_bleu(lines, lines, "en") == pytest.approx(100.0)


def test_tokenized_bleu_of_a_case_computed_by_hand():
    # hypothesis a b c d e f (6 tokens), reference a b c d x f g (7 tokens):
    # 1-grams 5/6, 2-grams 3/5 (ab bc cd), 3-grams 2/4 (abc bcd), 4-grams 1/3 (abcd); c=6 < r=7.
    expected = bleu_by_hand([5 / 6, 3 / 5, 2 / 4, 1 / 3], 6, 7)
    assert expected == pytest.approx(45.48, abs=0.01)
    assert tokenized_bleu(["a b c d e f"], ["a b c d x f g"], "en") == pytest.approx(expected)


def test_counts_are_summed_over_the_corpus_before_the_precisions():
    # Sentence 1: "a b c d" vs "a b c d" (4/4, 3/3, 2/2, 1/1); sentence 2: "x y" vs "x z w"
    # (1-grams 1/2, 2-grams 0/1, nothing longer). Corpus: 5/6, 3/4, 2/2, 1/1; c=6 < r=7.
    expected = bleu_by_hand([5 / 6, 3 / 4, 2 / 2, 1 / 1], 6, 7)
    assert tokenized_bleu(["a b c d", "x y"], ["a b c d", "x z w"], "en") == pytest.approx(expected)


def test_an_ngram_order_without_a_match_gives_zero_as_in_multi_bleu():
    assert tokenized_bleu(["a b c x"], ["a b y c"], "en") == 0.0  # no 3-gram matches


def test_tokenized_scoring_equals_multi_bleu_arithmetic_on_random_corpora():
    generator = random.Random(0)
    words = "a b c d e f".split()
    for _ in range(20):
        references = [" ".join(generator.choices(words, k=generator.randint(1, 12)))
                      for _ in range(generator.randint(1, 8))]
        hypotheses = [" ".join(w if generator.random() < 0.7 else generator.choice(words)
                               for w in line.split()[: generator.randint(1, 12)])
                      for line in references]
        assert tokenized_bleu(hypotheses, references, "en") == pytest.approx(
            multi_bleu_brute_force(hypotheses, references), abs=1e-9)


def test_sacrebleu_tokenizes_detokenized_text_with_13a_and_reports_its_signature():
    # 13a splits the final period: "The cat sat on the mat ." (7) vs "The cat sat on a mat ." (7)
    # 1-grams 6/7, 2-grams 4/6, 3-grams 2/5 (The cat sat, cat sat on), 4-grams 1/4; BP = 1.
    score, signature = sacrebleu_score(["The cat sat on the mat."], ["The cat sat on a mat."])
    assert score == pytest.approx(bleu_by_hand([6 / 7, 4 / 6, 2 / 5, 1 / 4], 7, 7))
    assert "tok:13a" in signature and "smooth:exp" in signature and "version:" in signature


def test_sacrebleu_is_case_sensitive_as_its_default_and_signature_say():
    """The paper's and sacreBLEU's reported BLEU are cased: a hypothesis wrong only in case loses
    points. 13a gives 7 tokens each, "the" != "The": 1-grams 6/7, 2-grams 5/6, 3-grams 4/5,
    4-grams 3/4; BP = 1."""
    score, signature = sacrebleu_score(["the cat sat on the mat."], ["The cat sat on the mat."])
    assert score == pytest.approx(bleu_by_hand([6 / 7, 5 / 6, 4 / 5, 3 / 4], 7, 7))
    assert score < 100.0
    assert "case:mixed" in signature.split("|")


def test_moses_tokenization_splits_punctuation_and_keeps_abbreviations():
    assert paper_tokenize('Er sagte: "z.B. 1.000,50 Euro."', "de") == \
        "Er sagte : &quot; z.B. 1.000,50 Euro . &quot;"


def test_hyphenated_compounds_are_split_as_in_get_ende_bleu():
    assert paper_tokenize("Das Hotel-Restaurant ist gut.", "de") == \
        "Das Hotel ##AT##-##AT## Restaurant ist gut ."
    # Non-overlapping, left to right, like perl's s{(\S)-(\S)}{...}g (checked with perl).
    assert paper_tokenize("Der 3-D-Drucker", "de") == "Der 3 ##AT##-##AT## D-Drucker"


def test_compound_split_takes_any_non_space_beside_the_hyphen_as_perls_backslash_s():
    """\\S, not \\w: a period or another hyphen beside the hyphen is split as well (outputs
    checked with perl -ple 's{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g' on the tokenized text)."""
    assert paper_tokenize("Die z.B.-Regel gilt.", "de") == "Die z.B. ##AT##-##AT## Regel gilt ."
    assert paper_tokenize("Nr.-3", "de") == "Nr. ##AT##-##AT## 3"
    assert paper_tokenize("a--b", "de") == "a ##AT##-##AT## -b"


def test_compound_split_rewards_the_correct_half_of_a_wrong_compound():
    hypothesis, reference = ["ein gutes Hotel-Bar hier"], ["ein gutes Hotel-Restaurant hier"]
    # Without the split: 4 tokens each, 1-grams 3/4, 2-grams 1/3, 3-grams 0/2 -> BLEU 0.
    assert multi_bleu_brute_force(hypothesis, reference) == 0.0
    # With it: "ein gutes Hotel ##AT##-##AT## Bar hier" vs "... Restaurant hier", 6 tokens each:
    # 1-grams 5/6, 2-grams 3/5, 3-grams 2/4, 4-grams 1/3.
    expected = bleu_by_hand([5 / 6, 3 / 5, 2 / 4, 1 / 3], 6, 6)
    assert tokenized_bleu(hypothesis, reference, "de") == pytest.approx(expected)
    assert expected == pytest.approx(53.73, abs=0.01)


def test_score_translations_reads_files_line_by_line(tmp_path):
    # U+2028 is inside a sentence: str.splitlines would have broken the line in two.
    (tmp_path / "hyp.txt").write_text("Das Hotel-Restaurant ist gut.\nEin\u2028Test .\n")
    (tmp_path / "ref.txt").write_text("Das Hotel-Restaurant ist gut.\nEin\u2028Test .\n")
    scores = score_translations(tmp_path / "hyp.txt", tmp_path / "ref.txt", "de")
    assert scores["sentences"] == 2
    assert scores["sacrebleu"] == pytest.approx(100.0)
    assert scores["tokenized_bleu"] == pytest.approx(100.0)
    assert scores["sacrebleu_signature"].startswith("nrefs:1|")


def test_empty_files_are_an_error_naming_them(tmp_path):
    (tmp_path / "hyp.txt").write_text("")
    (tmp_path / "ref.txt").write_text("")
    with pytest.raises(ValueError, match=r"hyp\.txt and .*ref\.txt are empty"):
        score_translations(tmp_path / "hyp.txt", tmp_path / "ref.txt", "de")


def test_line_count_mismatch_names_both_files(tmp_path):
    (tmp_path / "hyp.txt").write_text("a\nb\n")
    (tmp_path / "ref.txt").write_text("a\n")
    with pytest.raises(ValueError, match=r"hyp\.txt has 2 lines but .*ref\.txt has 1"):
        score_translations(tmp_path / "hyp.txt", tmp_path / "ref.txt", "de")


def test_unicode_punctuation_is_replaced_before_tokenization_as_in_get_ende_bleu():
    # replace-unicode-punctuation.perl: “ ” -> ", ’ -> ', … -> ...; German „ is not in its table.
    assert paper_tokenize("„Ja“, sagte er… Er’s gut.", "de") == \
        "„ Ja &quot; , sagte er ... Er &apos; s gut ."
    # Curly and straight quotes now count as the same token: 100 instead of a mismatch.
    assert tokenized_bleu(["Er sagte “ja” heute hier."], ['Er sagte "ja" heute hier.'], "de") \
        == pytest.approx(100.0)


def test_compound_split_can_be_turned_off_for_en_fr():
    assert paper_tokenize("Un porte-parole", "fr", compound_split=False) == "Un porte-parole"
    # Without the split "porte-avions" vs "porte-parole" is one wrong token among 4:
    # 1-grams 3/4, 2-grams 1/3 (le navire), 3-grams 0/2 -> 0, as multi-bleu.perl.
    hypothesis, reference = ["le navire porte-avions arrive"], ["le navire porte-parole arrive"]
    assert tokenized_bleu(hypothesis, reference, "fr", compound_split=False) == \
        multi_bleu_brute_force(hypothesis, reference) == 0.0
    # With it: 6 tokens, 1-grams 5/6, 2-grams 3/5, 3-grams 2/4, 4-grams 1/3 (le navire porte
    # ##AT##-##AT##).
    assert tokenized_bleu(hypothesis, reference, "fr") == pytest.approx(
        bleu_by_hand([5 / 6, 3 / 5, 2 / 4, 1 / 3], 6, 6))


def test_multi_bleu_arithmetic_on_papinenis_example_counted_by_hand():
    # Papineni et al. (2002)'s candidate 1 against its reference 1 alone, counted by hand:
    # 18 vs 16 tokens (BP = 1); clipped 1-grams 11/18 (one "that", one "the", "party" != "Party"),
    # 2-grams 8/17, 3-grams 6/16, 4-grams 4/15.
    hypothesis = ["It is a guide to action which ensures that the military always obeys the "
                  "commands of the party"]
    reference = ["It is a guide to action that ensures that the military will forever heed "
                 "Party commands"]
    expected = bleu_by_hand([11 / 18, 8 / 17, 6 / 16, 4 / 15], 18, 16)
    assert expected == pytest.approx(41.18, abs=0.01)
    assert multi_bleu_brute_force(hypothesis, reference) == pytest.approx(expected)
    assert tokenized_bleu(hypothesis, reference, "en", compound_split=False) == \
        pytest.approx(expected)


def test_translations_are_tokenized_as_the_target_language_not_the_source(tmp_path):
    """An EN-DE experiment scores German: Moses' German tokenizer keeps the ordinal "3." one token
    (its English one splits it, "3 .", and gives 59.69). "Sie kam am 3. Mai nach Hause ." against
    "... Juni ...", 8 tokens each: 1-grams 7/8, 2-grams 5/7, 3-grams 3/6, 4-grams 1/5 -> 50."""
    experiment = make_experiment()
    assert (experiment.source_lang, experiment.target_lang) == ("en", "de")
    (tmp_path / "hyp.txt").write_text("Sie kam am 3. Mai nach Hause.\n")
    (tmp_path / "ref.txt").write_text("Sie kam am 3. Juni nach Hause.\n")
    scores = task_scores(experiment, tmp_path / "hyp.txt", tmp_path / "ref.txt", None,
                         tmp_path / "unused.trees")
    expected = bleu_by_hand([7 / 8, 5 / 7, 3 / 6, 1 / 5], 8, 8)
    assert expected == pytest.approx(50.0)
    assert scores["tokenized_bleu"] == pytest.approx(expected)
    assert tokenized_bleu(["Sie kam am 3. Mai nach Hause."], ["Sie kam am 3. Juni nach Hause."],
                          "en") == pytest.approx(bleu_by_hand([8 / 9, 6 / 8, 4 / 7, 2 / 6], 9, 9))


def test_score_translations_keeps_a_last_line_without_its_line_break(tmp_path):
    """A file whose last line lacks its ``\\n`` still has that line: two hypotheses for two
    references, both scored, as multi-bleu.perl scores the two tokenized, compound-split lines
    (str.split("\\n") leaves no empty last item to drop there)."""
    (tmp_path / "hyp.txt").write_text("a b c d\nein gutes Hotel-Bar hier")
    (tmp_path / "ref.txt").write_text("a b c d\nein gutes Hotel-Restaurant hier\n")
    scores = score_translations(tmp_path / "hyp.txt", tmp_path / "ref.txt", "de")
    assert scores["sentences"] == 2
    assert scores["tokenized_bleu"] == pytest.approx(
        multi_bleu_brute_force(["a b c d", "ein gutes Hotel ##AT##-##AT## Bar hier"],
                               ["a b c d", "ein gutes Hotel ##AT##-##AT## Restaurant hier"]))


def test_the_experiments_compound_split_setting_reaches_the_tokenized_bleu(tmp_path):
    """``scoring.compound_split: false`` (our EN-FR choice) scores without the ##AT## split, and
    the scores record which it was: the hyphenated compound is then one wrong token, and no
    3-gram matches (BLEU 0, where the split would give 53.73)."""
    experiment = make_experiment()
    unsplit = experiment.model_copy(update={
        "scoring": experiment.scoring.model_copy(update={"compound_split": False})})
    (tmp_path / "hyp.txt").write_text("ein gutes Hotel-Bar hier\n")
    (tmp_path / "ref.txt").write_text("ein gutes Hotel-Restaurant hier\n")
    split = task_scores(experiment, tmp_path / "hyp.txt", tmp_path / "ref.txt", None,
                        tmp_path / "unused.trees")
    assert split["tokenized_bleu"] == pytest.approx(53.73, abs=0.01)
    assert split["tokenized_bleu_compound_split"] is True
    scores = task_scores(unsplit, tmp_path / "hyp.txt", tmp_path / "ref.txt", None,
                         tmp_path / "unused.trees")
    assert scores["tokenized_bleu"] == 0.0
    assert scores["tokenized_bleu_compound_split"] is False


def test_without_the_compound_split_neither_side_is_split():
    """With the split off, hypotheses and references are tokenized alike: an output identical to
    its reference scores 100 whatever hyphens it holds (a reference split alone would leave
    "Hotel-Restaurant" against "Hotel ##AT##-##AT## Restaurant")."""
    lines = ["Das Hotel-Restaurant ist gut und das Bett-Sofa auch ."]
    assert tokenized_bleu(lines, lines, "de", compound_split=False) == pytest.approx(100.0)
