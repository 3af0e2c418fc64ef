"""Table 4's score: EVALB F1 of decoded parses on WSJ section 23 (paper section 6.3).

The decoder writes one linearised tree per source sentence (:mod:`reproduce.parsing.linearize`).
Each is rebuilt over the source sentence's words, malformed output repaired (every repair
counted by kind), and the trees are scored against the gold trees (cleaned, one per line, as
``reproduce references`` writes them) by :func:`reproduce.parsing.evalb.bracket_scores`.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from reproduce.files import read_lines, read_text, write_text_whole
from reproduce.parsing.evalb import BracketScoreError, bracket_scores
from reproduce.parsing.linearize import delinearize
from reproduce.parsing.trees import format_tree, read_trees


def score_parses(hypotheses: Path, sources: Path, references: Path,
                 trees_out: Path | None = None) -> dict:
    """Precision, recall, F1 and exact match (percent) of the decoded ``hypotheses`` and the
    repairs they needed; ``trees_out`` receives the repaired trees, one per line."""
    hypothesis_lines, source_lines = read_lines(Path(hypotheses)), read_lines(Path(sources))
    gold = read_trees(read_text(Path(references)), str(references))
    reference_lines = len(read_lines(Path(references)))
    if not len(hypothesis_lines) == len(source_lines) == len(gold) == reference_lines:
        raise BracketScoreError(
            f"{hypotheses} has {len(hypothesis_lines)} lines, {sources} has {len(source_lines)} "
            f"and {references} has {reference_lines} lines holding {len(gold)} trees; expected "
            "one hypothesis and one gold tree (on its own line) per source sentence"
        )
    if not gold:
        raise BracketScoreError(f"{hypotheses}, {sources} and {references} are empty: nothing to "
                                "score")
    parses, repairs, repaired = [], Counter(), 0
    for number, (line, source) in enumerate(zip(hypothesis_lines, source_lines, strict=True),
                                            start=1):
        words = source.split()
        if not words:
            raise BracketScoreError(f"{sources} line {number}: empty; expected the sentence's "
                                    "words")
        tree, counts = delinearize(line, words)
        parses.append(tree)
        repairs += counts
        repaired += bool(counts)
    try:
        scores = bracket_scores(gold, parses)
    except BracketScoreError as error:
        raise BracketScoreError(f"{references} against {sources}: {error}") from None
    if trees_out is not None:
        _write_trees(Path(trees_out), parses)
    return {**scores, "repaired_sentences": repaired, "repairs": dict(sorted(repairs.items()))}


def _write_trees(path: Path, trees: list) -> None:
    write_text_whole(path, "".join(format_tree(tree) + "\n" for tree in trees))
