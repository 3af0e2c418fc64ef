"""EVALB's COLLINS.prm scoring: hand-computed cases and the behaviours its README documents;
then score_parses, from decoded lines to F1."""

import pytest

from reproduce.parsing.evalb import BracketScoreError, bracket_scores
from reproduce.parsing.linearize import linearize, mask_tags
from reproduce.parsing.trees import clean_tree, format_tree, read_trees
from reproduce.scoring.parsing import score_parses


def _trees(*texts):
    return [read_trees(text, "test")[0] for text in texts]


def _score(gold, test):
    return bracket_scores(_trees(gold), _trees(test))


GOLD = "(S (NP (DT The) (NN dog)) (VP (VBD saw) (NP (DT a) (NN cat))) (. .))"


def test_identical_trees_score_100():
    scores = _score(GOLD, GOLD)
    assert scores == {"precision": 100.0, "recall": 100.0, "f1": 100.0, "exact_match": 100.0,
                      "matched": 4, "gold_brackets": 4, "test_brackets": 4, "sentences": 1}


def test_a_hand_computed_pair():
    # Gold: S(0,5) NP(0,2) VP(2,5) NP(3,5). Test: S(0,5) NP(0,2) VP(2,3), and no object NP:
    # 3 brackets, 2 matched (S, NP). P = 2/3, R = 2/4, F1 = 2PR/(P+R) = 4/7.
    scores = _score(GOLD, "(S (NP (XX The) (XX dog)) (VP (XX saw)) (XX a) (XX cat) (XX .))")
    assert (scores["matched"], scores["gold_brackets"], scores["test_brackets"]) == (2, 4, 3)
    assert scores["precision"] == pytest.approx(200 / 3)
    assert scores["recall"] == pytest.approx(50.0)
    assert scores["f1"] == pytest.approx(400 / 7)
    assert scores["exact_match"] == 0.0


def test_every_gold_bracket_plus_an_extra_one_is_not_an_exact_match():
    """A complete match needs precision 100% as well as recall: the test tree has all 4 gold
    brackets and an extra NP(0,5) over the whole sentence. P = 4/5, R = 4/4."""
    scores = _score(GOLD, "(S (NP (NP (XX The) (XX dog)) (VP (XX saw) (NP (XX a) (XX cat))))"
                          " (XX .))")
    assert (scores["matched"], scores["gold_brackets"], scores["test_brackets"]) == (4, 4, 5)
    assert scores["precision"] == pytest.approx(80.0) and scores["recall"] == 100.0
    assert scores["exact_match"] == 0.0


def test_pos_tags_are_not_brackets_and_xx_tags_are_enough():
    assert _score(GOLD, format_tree(mask_tags(_trees(GOLD)[0])))["f1"] == 100.0


def test_advp_and_prt_are_the_same_label():
    gold = "(S (NP (PRP He)) (VP (VBD gave) (PRT (RP up))) (. .))"
    assert _score(gold, "(S (NP (XX He)) (VP (XX gave) (ADVP (XX up))) (XX .))")["f1"] == 100.0
    assert _score(gold, "(S (NP (XX He)) (VP (XX gave) (PP (XX up))) (XX .))")["matched"] == 3


def test_spans_are_counted_with_punctuation_deleted():
    # The comma and the period sit in other constituents in the test tree; once the words
    # tagged , and . in the gold tree are deleted, every span is the same.
    gold = "(S (NP (NNP Alice)) (, ,) (VP (VBD slept) (ADVP (RB soundly))) (. .))"
    test = "(S (NP (XX Alice) (XX ,)) (VP (XX slept) (ADVP (XX soundly) (XX .))))"
    assert _score(gold, test)["f1"] == 100.0
    # A constituent over punctuation alone dominates nothing once it is deleted: no bracket.
    moved = "(S (NP (XX Alice) (XX ,)) (VP (XX slept) (ADVP (XX soundly))) (NP (XX .)))"
    assert _score(gold, moved)["test_brackets"] == 4 and _score(gold, moved)["f1"] == 100.0


@pytest.mark.parametrize("tag", [",", ":", "``", "''", "."])
def test_each_collins_punctuation_tag_is_deleted(tag):
    gold = f"(S (NP (NN a) ({tag} x)) (VP (VB b)))"
    assert _score(gold, "(S (NP (XX a)) (VP (XX x) (XX b)))")["f1"] == 100.0


def test_other_tags_are_not_punctuation():
    gold = "(S (NP (NN a) (-LRB- -LRB-)) (VP (VB b)))"
    assert _score(gold, "(S (NP (XX a)) (VP (XX -LRB-) (XX b)))")["matched"] == 1


def test_top_and_traces_are_deleted_as_the_readme_shows():
    # README [6].2 and [7].1: TOP is not counted; -NONE- and constituents dominating only
    # traces are removed, so the raw treebank tree scores 100 against its cleaned parse.
    gold = ("(TOP (S (NP-SBJ (PRP He)) (VP (VBD reported) (SBAR (-NONE- 0) "
            "(S (-NONE- *T*-1)))) (. .)))")
    test = "(S (NP (XX He)) (VP (XX reported)) (XX .))"
    assert _score(gold, test) == _score(test, test)
    assert _score(gold, test)["gold_brackets"] == 3  # S, NP, VP


def test_the_readme_sample_sentence():
    # README [4]/[5]: this sentence has length 8, 5 brackets, 6 words once punctuation is
    # deleted; scored against itself 5 brackets match.
    gold = ("(TOP (S (INTJ (RB No)) (, ,) (NP (PRP it)) (VP (VBD was) (RB n't) "
            "(NP (NNP Black) (NNP Monday))) (. .)))")
    test = format_tree(mask_tags(clean_tree(_trees(gold)[0])))
    scores = _score(gold, test)
    assert (scores["matched"], scores["gold_brackets"], scores["test_brackets"]) == (5, 5, 5)


@pytest.mark.parametrize("gold_copies, test_copies, precision, recall", [
    (2, 1, 100.0, 75.0), (1, 2, 75.0, 100.0), (2, 2, 100.0, 100.0),
])
def test_repeated_brackets_match_as_multisets(gold_copies, test_copies, precision, recall):
    # README [7].5: n gold and m test NPs over "the man" match min(n, m) times. With the S and
    # VP brackets beside them: n=2, m=1 gives P = 3/3, R = 3/4; n=1, m=2 gives P = 3/4, R = 3/3.
    def tree(copies):
        noun_phrase = "(DT the) (NN man)"
        for _ in range(copies):
            noun_phrase = f"(NP {noun_phrase})"
        return f"(S {noun_phrase} (VP (VBD left)))"
    scores = _score(tree(gold_copies), tree(test_copies))
    assert (scores["precision"], scores["recall"]) == (precision, recall)


def test_corpus_scores_sum_brackets_over_sentences():
    # Sentence 1 exact (4 of 4); sentence 2 matches S only: 1 of 3 gold (S, NP, VP), 1 of 1 test.
    # Corpus recall is 5/7, not the mean of the sentences' recalls (1 and 1/3).
    gold = _trees(GOLD, "(S (NP (PRP It)) (VP (VBZ runs)))")
    test = _trees(GOLD, "(S (XX It) (XX runs))")
    scores = bracket_scores(gold, test)
    assert (scores["matched"], scores["gold_brackets"], scores["test_brackets"]) == (5, 7, 5)
    assert scores["recall"] == pytest.approx(500 / 7) and scores["precision"] == 100.0
    assert scores["exact_match"] == 50.0 and scores["sentences"] == 2


def test_different_words_are_an_error_naming_the_sentence():
    with pytest.raises(BracketScoreError,
                       match=r"sentence 2: word 3 is 'saw' in the gold tree but 'sat'"):
        bracket_scores(_trees(GOLD, GOLD), _trees(GOLD, GOLD.replace("saw", "sat")))
    with pytest.raises(BracketScoreError,
                       match=r"sentence 1: the gold tree has 6 words but the test tree has 4"):
        _score(GOLD, "(S (NP (XX The) (XX dog)) (VP (XX saw) (XX a)))")
    with pytest.raises(BracketScoreError, match="2 gold trees but 1 test trees"):
        bracket_scores(_trees(GOLD, GOLD), _trees(GOLD))


# --------------------------------------------------------------------------------------------
# score_parses: decoded lines, source words and gold trees to F1
# --------------------------------------------------------------------------------------------
def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_score_parses_repairs_counts_and_writes_the_trees(tmp_path):
    gold = [clean_tree(tree) for tree in _trees(GOLD,
                                                "( (S (NP-SBJ (PRP It)) (VP (VBZ runs)) (. .)) )")]
    references = _write(tmp_path / "test.ref", [format_tree(tree) for tree in gold])
    sources = _write(tmp_path / "test.src", ["The dog saw a cat .", "It runs ."])
    hypotheses = _write(tmp_path / "test.out", [
        linearize(gold[0]),
        "(S (NP XX )NP (VP XX )NP",  # )NP closes VP (label mismatch); "." missing joins the open S
    ])
    scores = score_parses(hypotheses, sources, references, tmp_path / "trees.txt")
    assert scores["f1"] == 100.0 and scores["exact_match"] == 100.0
    assert scores["sentences"] == 2 and scores["repaired_sentences"] == 1
    assert scores["repairs"] == {"label_mismatch": 1, "missing_words": 1, "unclosed_open": 1}
    assert (tmp_path / "trees.txt").read_text() == (
        "(S (NP (XX The) (XX dog)) (VP (XX saw) (NP (XX a) (XX cat))) (XX .))\n"
        "(S (NP (XX It)) (VP (XX runs)) (XX .))\n"
    )


def test_score_parses_line_counts_must_agree(tmp_path):
    references = _write(tmp_path / "test.ref", [GOLD, GOLD])
    sources = _write(tmp_path / "test.src", ["The dog saw a cat ."] * 2)
    hypotheses = _write(tmp_path / "test.out", ["(S XX )S"])
    with pytest.raises(BracketScoreError,
                       match=r"test\.out has 1 lines, .*test\.src has 2 .*test\.ref has 2 lines"):
        score_parses(hypotheses, sources, references)
    two_per_line = _write(tmp_path / "two.ref", [GOLD + " " + GOLD, GOLD])
    with pytest.raises(BracketScoreError, match=r"two\.ref has 2 lines holding 3 trees"):
        score_parses(_write(tmp_path / "two.out", ["", ""]), sources, two_per_line)
    # As many trees as sentences, but not one per line: not the file `reproduce references` writes.
    one_line = _write(tmp_path / "one.ref", [GOLD + " " + GOLD])
    with pytest.raises(BracketScoreError, match=r"one\.ref has 1 lines holding 2 trees"):
        score_parses(_write(tmp_path / "one.out", ["", ""]), sources, one_line)


def test_score_parses_names_the_files_when_words_differ(tmp_path):
    references = _write(tmp_path / "test.ref", [GOLD])
    sources = _write(tmp_path / "test.src", ["The dog saw a bird ."])
    with pytest.raises(BracketScoreError,
                       match=r"test\.ref against .*test\.src: sentence 1: word 5"):
        score_parses(_write(tmp_path / "test.out", [""]), sources, references)


def test_score_parses_names_the_line_of_an_empty_source_sentence(tmp_path):
    """The words of the tree come from the source line; an empty one is named by its line
    number, counted from 1 as editors count."""
    references = _write(tmp_path / "test.ref", [GOLD, GOLD])
    sources = _write(tmp_path / "test.src", ["The dog saw a cat .", ""])
    with pytest.raises(BracketScoreError, match=r"test\.src line 2: empty"):
        score_parses(_write(tmp_path / "test.out", ["", ""]), sources, references)


def test_score_parses_refuses_empty_files_instead_of_scoring_nothing(tmp_path):
    """No sentence is no score: an F1 of empty files would pass for a result in Table 4."""
    empty = [_write(tmp_path / name, []) for name in ("test.out", "test.src", "test.ref")]
    with pytest.raises(BracketScoreError, match="are empty: nothing to score"):
        score_parses(*empty)
