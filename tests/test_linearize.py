"""Vinyals & Kaiser et al.'s linearisation, and rebuilding trees from any model output."""

import random
from collections import Counter

import pytest

from reproduce.data.tiny_treebank import generate_treebank
from reproduce.parsing.linearize import delinearize, linearize, mask_tags
from reproduce.parsing.trees import Tree, clean_tree, format_tree, leaves, read_trees

# The repair rules of reproduce/parsing/linearize.py's docstring, each counted by its kind.
REPAIR_KINDS = ("unknown_token", "unmatched_close", "label_mismatch", "unclosed_open",
                "empty_constituent", "extra_words", "missing_words", "no_root")


def _tree(text):
    return read_trees(text, "test")[0]


def test_the_papers_figure_2_example_with_tags_normalised():
    # "John has a dog ." (Vinyals & Kaiser et al. 2014, Figure 2), POS tags as XX.
    tree = _tree("(S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .))")
    assert linearize(tree) == "(S (NP XX )NP (VP XX (NP XX XX )NP )VP XX )S"


def test_unary_chains_are_linearised_level_by_level():
    tree = _tree("(S (VP (VB Go)) (. .))")
    assert linearize(tree) == "(S (VP XX )VP XX )S"
    rebuilt, repairs = delinearize(linearize(tree), ["Go", "."])
    assert rebuilt == mask_tags(tree) and dict(repairs) == {}


def test_every_tiny_treebank_tree_round_trips_without_repairs():
    splits = generate_treebank(3000, 300, 300, seed=2017)
    trees = [clean_tree(tree) for split in splits.values() for tree in split]
    assert len(trees) == 3600
    for tree in trees:
        rebuilt, repairs = delinearize(linearize(tree), leaves(tree))
        assert rebuilt == mask_tags(tree), format_tree(tree)
        assert dict(repairs) == {}, format_tree(tree)  # not even a kind counted 0 times


WORDS = "the dog barks .".split()


@pytest.mark.parametrize("sequence, expected, repairs", [
    # A token that is not XX, (LABEL or )LABEL is dropped.
    ("(S (NP XX XX )NP junk (VP XX )VP ( XX )S", "(S (NP the dog) (VP barks) .)",
     {"unknown_token": 2}),
    # ...and so is an opening or closing token whose label holds a bracket.
    ("(S (NP XX XX )NP (VP) (VP XX )VP XX )) )S", "(S (NP the dog) (VP barks) .)",
     {"unknown_token": 2}),
    # A closing token with nothing open is dropped.
    ("(S (NP XX XX )NP (VP XX )VP XX )S )S", "(S (NP the dog) (VP barks) .)",
     {"unmatched_close": 1}),
    # A closing label matching no open constituent closes the innermost, which keeps its label.
    ("(S (NP XX XX )VB (VP XX )VP XX )S", "(S (NP the dog) (VP barks) .)", {"label_mismatch": 1}),
    # A closing label of an enclosing constituent closes the ones inside it first.
    ("(S (NP XX XX )NP (VP XX XX )S", "(S (NP the dog) (VP barks .))", {"unclosed_open": 1}),
    # Constituents still open at the end are closed.
    ("(S (NP XX XX )NP (VP XX XX", "(S (NP the dog) (VP barks .))", {"unclosed_open": 2}),
    # A constituent with no children is dropped.
    ("(S (NP XX XX )NP (ADVP )ADVP (VP XX )VP XX )S", "(S (NP the dog) (VP barks) .)",
     {"empty_constituent": 1}),
    # XX beyond the last word are dropped.
    ("(S (NP XX XX )NP (VP XX XX XX )VP XX )S", "(S (NP the dog) (VP barks .))",
     {"extra_words": 2}),
    # Words the output never reached join the innermost constituent open where it stopped.
    ("(S (NP XX XX )NP (VP XX )VP )S", "(S (NP the dog) (VP barks) .)", {"missing_words": 1}),
    ("(S (NP XX )NP (VP", "(S (NP the) (VP dog barks .))",
     {"missing_words": 3, "unclosed_open": 2}),
    # More than one top-level part, or none: wrapped in TOP, which EVALB deletes.
    ("(NP XX XX )NP (VP XX )VP XX", "(TOP (NP the dog) (VP barks) .)", {"no_root": 1}),
    ("", "(TOP the dog barks .)", {"missing_words": 4, "no_root": 1}),
])
def test_each_repair_rule(sequence, expected, repairs):
    tree, counts = delinearize(sequence, WORDS)
    assert _with_words_shown(tree) == expected
    assert dict(counts) == repairs
    assert set(counts) <= set(REPAIR_KINDS)


def _with_words_shown(tree):
    """``(S (NP the dog) ...)``: the tree with its XX preterminals written as their words."""
    if tree.is_preterminal:
        return tree.children[0]
    return f"({tree.label} {' '.join(_with_words_shown(child) for child in tree.children)})"


def test_repaired_trees_always_hold_the_sentence_in_order():
    """Random token soup: whatever the output, the tree is well formed over exactly the words."""
    vocabulary = ["XX"] * 6 + ["(S", ")S", "(NP", ")NP", "(VP", ")VP", ")", "(", "foo", ")PP"]
    rng = random.Random(0)
    kinds = Counter()
    for _ in range(2000):
        words = [f"w{index}" for index in range(rng.randint(1, 8))]
        sequence = " ".join(rng.choice(vocabulary) for _ in range(rng.randint(0, 20)))
        tree, repairs = delinearize(sequence, words)
        assert leaves(tree) == words, sequence
        _assert_well_formed(tree)
        kinds.update(repairs)
    assert set(kinds) == set(REPAIR_KINDS)  # the soup exercised every rule


def _assert_well_formed(tree: Tree):
    assert tree.children
    if not tree.is_preterminal:
        for child in tree.children:
            assert isinstance(child, Tree)
            _assert_well_formed(child)


def test_delinearize_needs_the_words():
    with pytest.raises(ValueError, match="no"):
        delinearize("(S XX )S", [])


def test_a_bare_closing_bracket_closes_the_innermost_without_a_repair():
    """A bare ``)`` is documented as closing the innermost constituent, whatever its label, and
    as no repair: counting it as a label mismatch would inflate 'repaired sentences'."""
    tree, counts = delinearize("(S (NP XX XX ) (VP XX ) XX )", WORDS)
    assert _with_words_shown(tree) == "(S (NP the dog) (VP barks) .)"
    assert dict(counts) == {}


@pytest.mark.parametrize("sequence, repairs", [
    ("XX", {"no_root": 1}),
    ("", {"missing_words": 1, "no_root": 1}),
])
def test_an_output_of_one_bare_word_gets_a_top_root(sequence, repairs):
    """A lone preterminal is no constituent: it must be wrapped in TOP (which EVALB deletes), so
    that the tree handed to scoring always has a root above its words."""
    tree, counts = delinearize(sequence, ["Go"])
    assert tree == Tree("TOP", (Tree("XX", ("Go",)),))
    assert dict(counts) == repairs
