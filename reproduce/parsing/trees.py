"""Penn Treebank trees: reading s-expressions, writing them on one line, and the standard WSJ
preprocessing of parsing papers (Collins 1997; Vinyals & Kaiser et al. 2014, section 3.1).

A tree is a labelled node whose children are either exactly one word (a preterminal: a POS tag
over its word) or one or more subtrees. The treebank's ``.mrg`` files hold several trees, each
spread over several lines inside an unlabelled wrapper ``( (S ...) )``; one-tree-per-line files
hold the same s-expressions one to a line. :func:`read_trees` reads both.

:func:`clean_tree` is the usual preprocessing before training and scoring:

* empty elements (preterminals tagged ``-NONE-``: traces, null complementizers...) are removed,
  and so is every constituent that dominates nothing once they are gone;
* function tags and co-indices are stripped (``NP-SBJ-1`` and ``NP=2`` become ``NP``); labels
  that begin with ``-`` (``-NONE-``, ``-LRB-``, ``-RRB-``) are kept whole;
* the unlabelled wrapper (or a ``TOP`` root, as tgrep writes it) above a single tree is dropped,
  so the root is the sentence's own label, e.g. ``S``;
* unary chains such as ``(S (VP ...))`` stay.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator, Union

from reproduce.errors import DataError

EMPTY_ELEMENT = "-NONE-"
# Roots that only wrap the sentence's tree: the .mrg files' unlabelled "( ... )" and tgrep's TOP.
WRAPPER_LABELS = ("", "TOP")
_TOKEN = re.compile(r"\(|\)|[^\s()]+")


class TreeError(DataError):
    """A treebank file holds something that is not a well-formed tree."""


@dataclass(frozen=True)
class Tree:
    label: str
    children: tuple[Union["Tree", str], ...]

    @property
    def is_preterminal(self) -> bool:
        return len(self.children) == 1 and isinstance(self.children[0], str)


def leaves(tree: Tree) -> list[str]:
    """The words of ``tree``, left to right."""
    if tree.is_preterminal:
        return [tree.children[0]]
    return [word for child in tree.children for word in leaves(child)]


def preterminals(tree: Tree) -> list[Tree]:
    """The (tag, word) nodes of ``tree``, left to right."""
    if tree.is_preterminal:
        return [tree]
    return [node for child in tree.children for node in preterminals(child)]


# --------------------------------------------------------------------------------------------
# Reading and writing
# --------------------------------------------------------------------------------------------
def read_trees(text: str, origin: str) -> list[Tree]:
    """Every tree of ``text`` (a whole .mrg file, or one tree per line); ``origin`` names the
    file in errors, which also give the tree's number (from 1) and its line."""
    trees: list[Tree] = []
    tokens = _tokens(text)
    for token, line in tokens:
        if token != "(":
            raise TreeError(f"{origin} line {line}: expected '(' to start tree {len(trees) + 1}, "
                            f"got {token!r}")
        trees.append(_read_node(tokens, origin, len(trees) + 1, line))
    return trees


def _tokens(text: str) -> Iterator[tuple[str, int]]:
    """Parentheses and atoms with their 1-based line numbers."""
    line, scanned = 1, 0
    for match in _TOKEN.finditer(text):
        line += text.count("\n", scanned, match.start())
        scanned = match.start()
        yield match.group(), line


def _read_node(tokens: Iterator[tuple[str, int]], origin: str, number: int, start: int) -> Tree:
    """The node whose ``(`` was just read (on line ``start``), up to its matching ``)``."""
    label, children, words = "", [], []
    first = True
    for token, line in tokens:
        if token == ")":
            return _node(label, children, words, f"{origin} line {line} (tree {number})")
        if token == "(":
            children.append(_read_node(tokens, origin, number, start))
        elif first:
            label = token
        else:
            words.append(token)
        first = False
    raise TreeError(f"{origin} tree {number} (from line {start}): unbalanced parentheses, the "
                    "text ends inside the tree")


def _node(label: str, children: list[Tree], words: list[str], where: str) -> Tree:
    if words and (children or len(words) > 1):
        raise TreeError(f"{where}: node {label!r} holds {len(words)} word(s) "
                        f"{' '.join(words[:5])!r} and {len(children)} subtree(s); expected "
                        "either one word or subtrees")
    if not words and not children:
        raise TreeError(f"{where}: node {label!r} is empty; expected one word or subtrees")
    return Tree(label, tuple(words) or tuple(children))


def format_tree(tree: Tree) -> str:
    """``tree`` on one line, PTB style: ``(S (NP (DT the) (NN dog)) (VP (VBZ barks)))``."""
    if tree.is_preterminal:
        return f"({tree.label} {tree.children[0]})"
    return f"({tree.label} {' '.join(format_tree(child) for child in tree.children)})"


# --------------------------------------------------------------------------------------------
# Preprocessing
# --------------------------------------------------------------------------------------------
def clean_tree(tree: Tree) -> Tree:
    """The standard WSJ preprocessing (see the module's docstring)."""
    cleaned = _without_empty_elements(tree)
    if cleaned is None:
        raise TreeError(f"tree {format_tree(tree)[:80]!r} holds no words once empty elements "
                        "are removed")
    while cleaned.label in WRAPPER_LABELS and len(cleaned.children) == 1 \
            and not cleaned.is_preterminal:
        cleaned = cleaned.children[0]
    return cleaned


def strip_function_tags(label: str) -> str:
    """``NP-SBJ-1`` -> ``NP``, ``NP=2`` -> ``NP``; ``-NONE-``, ``-LRB-`` stay whole."""
    if label.startswith("-"):
        return label
    return re.split(r"[-=]", label, maxsplit=1)[0]


def _without_empty_elements(tree: Tree) -> Tree | None:
    if tree.is_preterminal:
        return None if tree.label == EMPTY_ELEMENT else Tree(strip_function_tags(tree.label),
                                                              tree.children)
    children = tuple(kept for kept in map(_without_empty_elements, tree.children) if kept)
    return Tree(strip_function_tags(tree.label), children) if children else None
