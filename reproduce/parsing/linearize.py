"""Trees as token sequences, the "translation" target of parsing (paper section 6.3).

Vinyals & Kaiser et al. (2014), *Grammar as a Foreign Language*, section 2 and Figure 2: the
tree is written depth first, each constituent as an opening token ``(LABEL``, its children, and
a closing token ``)LABEL`` that repeats the label; the POS tags are normalised to ``XX`` (the
tags are not scored by EVALB), and the words themselves are left out, since the source sentence
holds them. "John has a dog ." becomes::

    (S (NP XX )NP (VP XX (NP XX XX )NP )VP XX )S

:func:`delinearize` turns any model output back into a tree over the sentence's words, the
``i``-th ``XX`` taking the ``i``-th word. Well-formed output is rebuilt exactly; malformed
output is repaired by the rules below, each counted by its kind, so that every sentence is
scored (a repaired tree loses brackets, never the sentence):

``unknown_token``
    a token that is neither ``XX``, ``(LABEL`` nor ``)LABEL`` is dropped (a bare ``)`` is read
    as closing the innermost constituent, whatever its label, and is no repair).
``unmatched_close``
    a closing token with no constituent open is dropped.
``label_mismatch``
    a closing token whose label is not that of the innermost open constituent, nor of any open
    one, closes the innermost constituent, which keeps its opening label.
``unclosed_open``
    a closing token whose label is that of an enclosing open constituent first closes every
    constituent opened inside it (one repair each), then closes it; at the end of the output,
    the constituents still open are closed (one repair each).
``empty_constituent``
    a constituent closed with no children (none predicted, or all of them dropped) is dropped.
``extra_words``
    an ``XX`` beyond the sentence's last word is dropped (one repair per token).
``missing_words``
    words left over at the end of the output are appended, as ``XX`` preterminals, to the
    innermost constituent still open there (where a truncated output stopped) or, with none
    open, to the last top-level constituent (an output that closed its root before the final
    punctuation keeps its root); one repair per word.
``no_root``
    unless the output is exactly one constituent, its top-level parts are wrapped in a ``TOP``
    root: EVALB deletes ``TOP`` (COLLINS.prm), so the wrapper adds no bracket and costs no
    precision, while a guessed label would add a bracket that is usually wrong.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterator

from reproduce.parsing.trees import Tree

PLACEHOLDER_TAG = "XX"
REPAIR_ROOT_LABEL = "TOP"


def linearize(tree: Tree) -> str:
    """``tree`` as Vinyals & Kaiser et al.'s token sequence, POS tags as ``XX``."""
    return " ".join(_linear_tokens(tree))


def _linear_tokens(tree: Tree) -> Iterator[str]:
    if tree.is_preterminal:
        yield PLACEHOLDER_TAG
        return
    yield f"({tree.label}"
    for child in tree.children:
        yield from _linear_tokens(child)
    yield f"){tree.label}"


def mask_tags(tree: Tree) -> Tree:
    """``tree`` with every POS tag replaced by ``XX``: what :func:`delinearize` rebuilds."""
    if tree.is_preterminal:
        return Tree(PLACEHOLDER_TAG, tree.children)
    return Tree(tree.label, tuple(mask_tags(child) for child in tree.children))


class _Builder:
    """The constituents open so far (innermost last) and the finished top-level ones."""

    def __init__(self, words: list[str]):
        self.words = words
        self.used = 0
        self.top_level: list[Tree] = []
        self.open: list[tuple[str, list[Tree]]] = []
        self.repairs: Counter[str] = Counter()

    def children(self) -> list[Tree]:
        return self.open[-1][1] if self.open else self.top_level

    def word(self) -> None:
        if self.used == len(self.words):
            self.repairs["extra_words"] += 1
            return
        self.children().append(Tree(PLACEHOLDER_TAG, (self.words[self.used],)))
        self.used += 1

    def close(self, label: str) -> None:
        if not self.open:
            self.repairs["unmatched_close"] += 1
            return
        open_labels = [open_label for open_label, _ in self.open]
        if label and label != open_labels[-1]:
            if label in open_labels:
                while self.open[-1][0] != label:
                    self.repairs["unclosed_open"] += 1
                    self._close_innermost()
            else:
                self.repairs["label_mismatch"] += 1
        self._close_innermost()

    def _close_innermost(self) -> None:
        label, children = self.open.pop()
        if not children:
            self.repairs["empty_constituent"] += 1
            return
        self.children().append(Tree(label, tuple(children)))

    def finish(self) -> Tree:
        missing = [Tree(PLACEHOLDER_TAG, (word,)) for word in self.words[self.used:]]
        if missing:
            self.repairs["missing_words"] += len(missing)
        if missing and not self.open and self.top_level and not self.top_level[-1].is_preterminal:
            last = self.top_level.pop()
            self.top_level.append(Tree(last.label, (*last.children, *missing)))
        else:
            self.children().extend(missing)
        while self.open:
            self.repairs["unclosed_open"] += 1
            self._close_innermost()
        if len(self.top_level) == 1 and not self.top_level[0].is_preterminal:
            return self.top_level[0]
        self.repairs["no_root"] += 1
        return Tree(REPAIR_ROOT_LABEL, tuple(self.top_level))


def delinearize(sequence: str, words: list[str]) -> tuple[Tree, Counter[str]]:
    """The tree over ``words`` that ``sequence`` (a model output) describes, and the repairs it
    needed by kind (empty for well-formed output; see the module's docstring)."""
    if not words:
        raise ValueError("delinearize needs the sentence's words; got none")
    builder = _Builder(words)
    for token in sequence.split():
        name = token[1:]
        if token == PLACEHOLDER_TAG:
            builder.word()
        elif token[0] == "(" and name and "(" not in name and ")" not in name:
            builder.open.append((name, []))
        elif token[0] == ")" and "(" not in name and ")" not in name:
            builder.close(name)
        else:
            builder.repairs["unknown_token"] += 1
    return builder.finish(), builder.repairs
