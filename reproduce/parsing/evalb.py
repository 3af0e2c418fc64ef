"""Labelled-bracket precision, recall and F1 as EVALB scores them with ``COLLINS.prm`` (Sekine &
Collins 1997), the F1 of Table 4 and of Vinyals & Kaiser et al. (2014).

EVALB's README (sections [6] and [7]) documents what the parameter file does; here:

* ``DELETE_LABEL`` TOP, -NONE- and the punctuation tags , : `` '' . (one line each in
  COLLINS.prm): nodes with these labels are removed, and so, recursively, is every node left
  dominating nothing. A deleted POS tag removes its word, so spans are counted over the
  remaining words (punctuation moves no bracket boundary). The unlabelled wrapper of ``.mrg``
  files, which is tgrep's ``TOP``, is deleted like ``TOP``.
* Function tags are removed from labels (``NP-SBJ`` and ``NP=2`` count as ``NP``).
* ``EQ_LABEL ADVP PRT``: the two labels count as the same.
* ``LABELED 1``: a bracket is a (label, start, end) triple; preterminals (POS tags) are not
  brackets. Brackets are matched as multisets: n gold and m test copies of the same bracket
  (``(NP (NP the man))``) match min(n, m) times.
* Precision = matched / test brackets, recall = matched / gold brackets, summed over the corpus
  (EVALB's summary); F1 is their harmonic mean; a complete (exact) match is a sentence whose
  precision and recall are both 100%.

``DELETE_LABEL_FOR_LENGTH -NONE-`` only decides which sentences fall under EVALB's 40-word
cutoff; the scores here are over all sentences, as Table 4's are.

**Which words are punctuation.** EVALB deletes a word by its tag in each tree separately, so a
test tree with other tags than the gold tree at a punctuation word makes EVALB report a length
mismatch and skip the sentence. Our parses carry ``XX`` tags (:mod:`reproduce.parsing.linearize`),
so here punctuation is identified by the *gold* tree's tag at the same word position, in both
trees: exactly what running EVALB on test trees whose tags were replaced by the gold tags gives,
the usual way of scoring parsers that predict no tags. ``-NONE-`` elements are removed from each
tree by its own tags before the words are aligned; then both trees must hold the same words, or
the sentence is an error naming it (EVALB's "length unmatch"/"word unmatch", which skip it).
"""

from __future__ import annotations

from collections import Counter

from reproduce.errors import DataError
from reproduce.parsing.trees import EMPTY_ELEMENT, WRAPPER_LABELS, Tree, preterminals, \
    strip_function_tags

PUNCTUATION_TAGS = frozenset({",", ":", "``", "''", "."})
DELETED_LABELS = frozenset({"TOP", EMPTY_ELEMENT, *WRAPPER_LABELS, *PUNCTUATION_TAGS})
EQUIVALENT_LABELS = {"PRT": "ADVP"}

Bracket = tuple[str, int, int]  # (label, first word, one past the last word), punctuation deleted


class BracketScoreError(DataError):
    """Gold and test trees that cannot be compared (other counts, other words)."""


def bracket_scores(gold: list[Tree], test: list[Tree]) -> dict:
    """Corpus-level EVALB scores (percentages) of ``test`` parses against ``gold`` trees."""
    if len(gold) != len(test):
        raise BracketScoreError(f"{len(gold)} gold trees but {len(test)} test trees; expected "
                                "one test tree per gold tree")
    matched = gold_total = test_total = exact = 0
    for number, (gold_tree, test_tree) in enumerate(zip(gold, test, strict=True), start=1):
        gold_brackets, test_brackets = sentence_brackets(gold_tree, test_tree, number)
        hits = sum((gold_brackets & test_brackets).values())
        gold_count, test_count = sum(gold_brackets.values()), sum(test_brackets.values())
        matched += hits
        gold_total += gold_count
        test_total += test_count
        exact += hits == gold_count == test_count
    precision = 100 * matched / test_total if test_total else 0.0
    recall = 100 * matched / gold_total if gold_total else 0.0
    return {
        "precision": precision,
        "recall": recall,
        "f1": 2 * precision * recall / (precision + recall) if precision + recall else 0.0,
        "exact_match": 100 * exact / len(gold) if gold else 0.0,
        "matched": matched,
        "gold_brackets": gold_total,
        "test_brackets": test_total,
        "sentences": len(gold),
    }


def sentence_brackets(gold: Tree, test: Tree,
                      number: int = 1) -> tuple[Counter[Bracket], Counter[Bracket]]:
    """The scored brackets of sentence ``number``'s gold and test trees."""
    gold_words, test_words = _scored_words(gold), _scored_words(test)
    if gold_words != test_words:
        raise BracketScoreError(f"sentence {number}: {_first_difference(gold_words, test_words)}; "
                                "expected the test tree over the gold tree's words")
    tags = [node.label for node in preterminals(gold) if node.label != EMPTY_ELEMENT]
    kept = [tag not in PUNCTUATION_TAGS for tag in tags]
    return _brackets(gold, kept), _brackets(test, kept)


def _scored_words(tree: Tree) -> list[str]:
    return [node.children[0] for node in preterminals(tree) if node.label != EMPTY_ELEMENT]


def _first_difference(gold: list[str], test: list[str]) -> str:
    if len(gold) != len(test):
        return f"the gold tree has {len(gold)} words but the test tree has {len(test)}"
    position = next(index for index, (a, b) in enumerate(zip(gold, test, strict=True)) if a != b)
    return (f"word {position + 1} is {gold[position]!r} in the gold tree but {test[position]!r} "
            "in the test tree")


def _brackets(tree: Tree, kept: list[bool]) -> Counter[Bracket]:
    """Brackets of ``tree`` whose words (``-NONE-`` skipped) are kept where ``kept`` says."""
    # Position of each word among the kept ones, or None for deleted punctuation.
    positions, count = [], 0
    for keep in kept:
        positions.append(count if keep else None)
        count += keep
    brackets: Counter[Bracket] = Counter()
    _collect(tree, iter(positions), brackets)
    return brackets


def _collect(tree: Tree, positions, brackets: Counter[Bracket]) -> list[int]:
    """Add the brackets of ``tree`` to ``brackets``; return the kept positions it covers."""
    if tree.is_preterminal:
        if tree.label == EMPTY_ELEMENT:
            return []
        position = next(positions)
        return [] if position is None else [position]
    covered = [position for child in tree.children
               for position in _collect(child, positions, brackets)]
    label = strip_function_tags(tree.label)
    if covered and label not in DELETED_LABELS:
        brackets[EQUIVALENT_LABELS.get(label, label), covered[0], covered[-1] + 1] += 1
    return covered
