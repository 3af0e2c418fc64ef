"""Penn Treebank trees: reading .mrg and one-per-line files, writing, and the WSJ preprocessing."""

import pytest

from reproduce.parsing.trees import (
    Tree, TreeError, clean_tree, format_tree, leaves, read_trees, strip_function_tags,
)

# Two trees as Treebank-3's .mrg files hold them: unlabelled wrapper, several lines, blank line.
MRG = """( (S 
    (NP-SBJ-1 (DT The) (NN dog) )
    (VP (VBD was) 
      (VP (VBN seen) 
        (NP (-NONE- *-1) )))
    (. .) ))

( (S (NP-SBJ (PRP It) ) (VP (VBZ runs) ) (. .) ))
"""  # noqa: W291 (the .mrg files' trailing spaces)


def _leaf(tag, word):
    return Tree(tag, (word,))


def test_a_multi_line_mrg_file_is_read_tree_by_tree():
    first, second = read_trees(MRG, "wsj_0001.mrg")
    assert first.label == "" and first.children[0].label == "S"
    assert leaves(first) == ["The", "dog", "was", "seen", "*-1", "."]
    assert second == Tree("", (Tree("S", (
        Tree("NP-SBJ", (_leaf("PRP", "It"),)), Tree("VP", (_leaf("VBZ", "runs"),)), _leaf(".", "."),
    )),))


def test_one_tree_per_line_files_round_trip_through_format_tree():
    lines = ["(TOP (S (NP (DT the) (NN cat)) (VP (VBD sat)) (. .)))",
             "(S (NP (-LRB- -LRB-) (NN x) (-RRB- -RRB-)) (VP (VB go)))"]
    trees = read_trees("\n".join(lines) + "\n", "gold.txt")
    assert [format_tree(tree) for tree in trees] == lines
    assert format_tree(read_trees(MRG, "m")[1]) == "( (S (NP-SBJ (PRP It)) (VP (VBZ runs)) (. .)))"


@pytest.mark.parametrize("text, message", [
    ("(S (NP (DT a) (NN b))\n(VP (VB c)", r"f\.mrg tree 1 \(from line 1\): unbalanced parentheses"),
    ("(S (NP a))\n)\n", r"f\.mrg line 2: expected '\(' to start tree 2, got '\)'"),
    ("(S (NP a))\nstray (S (NP b))", r"f\.mrg line 2: expected '\(' to start tree 2, got 'stray'"),
    ("(S (NP a))\n\n(S (NP a b))", r"f\.mrg line 3 \(tree 2\): node 'NP' holds 2 word\(s\) 'a b'"),
    ("(S (NP a) word)",
     r"f\.mrg line 1 \(tree 1\): node 'S' holds 1 word\(s\) 'word' and 1 subtree"),
    ("(S (NP (DT a))\n  (VP ))", r"f\.mrg line 2 \(tree 1\): node 'VP' is empty"),
])
def test_malformed_trees_are_errors_naming_the_file_tree_and_line(text, message):
    with pytest.raises(TreeError, match=message):
        read_trees(text, "f.mrg")


def test_an_empty_text_holds_no_trees():
    assert read_trees("\n  \n", "empty.mrg") == []


@pytest.mark.parametrize("label, stripped", [
    ("NP-SBJ-1", "NP"), ("NP=2", "NP"), ("PP-LOC-CLR", "PP"), ("S-TPC-3", "S"), ("WHNP-1", "WHNP"),
    ("ADVP", "ADVP"), ("-NONE-", "-NONE-"), ("-LRB-", "-LRB-"), ("-RRB-", "-RRB-"),
    ("PRP$", "PRP$"),
])
def test_function_tags_and_co_indices_are_stripped(label, stripped):
    assert strip_function_tags(label) == stripped


def test_cleaning_removes_empty_elements_function_tags_and_the_wrapper():
    tree = read_trees(MRG, "m")[0]
    # The passive's object trace goes, and with it its NP; the unary VP chain stays.
    assert format_tree(clean_tree(tree)) == \
        "(S (NP (DT The) (NN dog)) (VP (VBD was) (VP (VBN seen))) (. .))"


def test_evalbs_readme_example_of_trace_removal():
    # EVALB README [7].1: constituents dominating nothing but traces go as well.
    tree = read_trees("( (S (NP-SBJ (PRP He)) (VP (VBD reported) (SBAR (-NONE- 0) "
                      "(S (-NONE- *T*-1)))) (. .)) )", "readme")[0]
    assert format_tree(clean_tree(tree)) == "(S (NP (PRP He)) (VP (VBD reported)) (. .))"


def test_unary_chains_left_by_empty_elements_stay():
    tree = read_trees("(TOP (S (NP-SBJ (DT the) (NN man)) (VP (VBD said) (SBAR (-NONE- 0) "
                      "(S (NP-SBJ-2 (-NONE- *T*-1)) (VP (VBD left)))))))", "t")[0]
    assert format_tree(clean_tree(tree)) == \
        "(S (NP (DT the) (NN man)) (VP (VBD said) (SBAR (S (VP (VBD left))))))"


def test_a_tree_of_only_empty_elements_is_an_error():
    with pytest.raises(TreeError, match="no words once empty elements are removed"):
        clean_tree(read_trees("( (S (-NONE- *)) )", "t")[0])


def test_wrappers_over_one_tree_go_and_a_wrapper_over_several_parts_stays():
    """Only a wrapper over a single tree is dropped (every such wrapper): unwrapping one with
    several parts would keep the first and silently lose the other words (and their brackets)
    from training and F1."""
    tree = read_trees("(TOP (NP (DT the) (NN dog)) (VP (VBZ barks)) (. .))", "t")[0]
    cleaned = clean_tree(tree)
    assert format_tree(cleaned) == "(TOP (NP (DT the) (NN dog)) (VP (VBZ barks)) (. .))"
    assert leaves(cleaned) == ["the", "dog", "barks", "."]
    # Wrappers over one tree go however many there are.
    nested = read_trees("( (TOP (S (NP (DT the)) (VP (VBZ barks)))) )", "t")[0]
    assert format_tree(clean_tree(nested)) == "(S (NP (DT the)) (VP (VBZ barks)))"


def test_function_tags_are_stripped_from_pos_tags_too():
    """The preprocessing strips function tags from every label, preterminals included (a tag
    such as ``NN-HL``): an unstripped tag is another tag."""
    tree = read_trees("(S (NP-SBJ (NN-HL Sales)) (VP (VBD rose)))", "t")[0]
    assert format_tree(clean_tree(tree)) == "(S (NP (NN Sales)) (VP (VBD rose)))"
