"""Is one system's BLEU really higher than another's? Paired bootstrap resampling.

A difference of a few BLEU points on a few hundred sentences may be chance: which sentences the
test set happens to hold. Paired bootstrap resampling (Koehn 2004, "Statistical Significance Tests
for Machine Translation Evaluation", EMNLP) draws, with replacement, test sets of the same size
from the test sentences, and scores both systems on each drawn set: the same sentences for both,
so that what varies is the sample of sentences, not which sentences each system was scored on.

The test is sacreBLEU's (:class:`sacrebleu.significance.PairedTest` with ``test_type="bs"``,
which replicates Moses' ``bootstrap-hypothesis-difference-significance.pl``; Post 2018, "A Call
for Clarity in Reporting BLEU Scores", and sacreBLEU 2.0's paired tests): sacreBLEU's BLEU on
detokenized output with its default ``13a`` tokenization, 1,000 resamples, a fixed seed. Its
p-value is the chance of a resampled difference as far from the resampled mean as the observed
one. sacreBLEU reports a confidence interval for each system's own BLEU, not for the difference;
the 95% interval of the difference here comes from the same 1,000 resampled test sets (the same
seed and the same draw of indices as sacreBLEU's test), with sacreBLEU's percentile rule
(:func:`sacrebleu.significance.estimate_ci`: the 1/40 and 39/40 order statistics).

One case is sacreBLEU's to get wrong: when every resampled difference is exactly 0 (the two
systems' outputs score identically on every sentence, e.g. identical outputs), its count of
resamples beyond the observed difference is 0 and it reports the smallest p-value it can,
1/1001, as if identical systems differed significantly. There is then no evidence of any
difference, and the p-value reported here is 1.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest

from reproduce.errors import DataError

RESAMPLES = 1000
SEED = 12345  # sacreBLEU's own default (SACREBLEU_SEED), pinned so that tables never vary
ALPHA = 0.05


@dataclass(frozen=True)
class PairedComparison:
    """``system`` against ``baseline`` on the same sentences; difference = system - baseline."""

    system_bleu: float
    baseline_bleu: float
    difference: float
    interval: tuple[float, float]  # 95% confidence interval of the difference
    p_value: float
    resamples: int
    signature: str  # sacreBLEU's, with the seed and number of resamples

    @property
    def significant(self) -> bool:
        """Whether the difference is significant at ``ALPHA`` (0.05)."""
        return self.p_value < ALPHA


@contextmanager
def _sacrebleu_seed(seed: int) -> Iterator[None]:
    """sacreBLEU reads its seed from the environment only; set it for one test, then restore."""
    previous = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        yield
    finally:
        if previous is None:
            del os.environ["SACREBLEU_SEED"]
        else:
            os.environ["SACREBLEU_SEED"] = previous


def _sentence_statistics(metric: BLEU, hypotheses: Sequence[str],
                         references: Sequence[str]) -> np.ndarray:
    """Per sentence: hypothesis length, reference length, then matching and total n-grams for
    n = 1..4 (what corpus BLEU sums over sentences). Read through a sentence-level BLEU with
    effective order, which counts alike and does not warn that it is sentence-level."""
    counter = BLEU(effective_order=True)  # the default 13a tokenization, as `metric`
    rows = []
    for hypothesis, reference in zip(hypotheses, references, strict=True):
        score = counter.sentence_score(hypothesis, [reference])
        rows.append([score.sys_len, score.ref_len, *score.counts, *score.totals])
    return np.array(rows, dtype=np.int64).reshape(len(rows), 2 + 2 * metric.max_ngram_order)


def _corpus_bleu(metric: BLEU, statistics: np.ndarray) -> float:
    """Corpus BLEU from summed sentence statistics, smoothed as ``metric`` smooths."""
    order = metric.max_ngram_order
    sys_len, ref_len = int(statistics[0]), int(statistics[1])
    correct, total = statistics[2:2 + order].tolist(), statistics[2 + order:].tolist()
    return BLEU.compute_bleu(correct, total, sys_len, ref_len, smooth_method=metric.smooth_method,
                             smooth_value=metric.smooth_value).score


def _resampled_differences(system: Sequence[str], baseline: Sequence[str],
                           references: Sequence[str], resamples: int, seed: int) -> np.ndarray:
    """BLEU(system) - BLEU(baseline) on each resampled test set, drawn as sacreBLEU's
    ``_paired_bs_test`` draws them (``default_rng(seed).choice(n, (resamples, n))``)."""
    metric = BLEU()
    indices = np.random.default_rng(seed).choice(
        len(references), size=(resamples, len(references)), replace=True)
    system_stats = _sentence_statistics(metric, system, references)[indices].sum(axis=1)
    baseline_stats = _sentence_statistics(metric, baseline, references)[indices].sum(axis=1)
    return np.array([_corpus_bleu(metric, ours) - _corpus_bleu(metric, theirs)
                     for ours, theirs in zip(system_stats, baseline_stats, strict=True)])


def _percentile_interval(samples: np.ndarray) -> tuple[float, float]:
    """sacreBLEU's 95% rule (``estimate_ci``): the (n // 40)-th smallest and largest values."""
    ordered = np.sort(samples)
    lower = len(ordered) // 40
    return float(ordered[lower]), float(ordered[len(ordered) - lower - 1])


def paired_bootstrap(system: Sequence[str], baseline: Sequence[str], references: Sequence[str],
                     resamples: int = RESAMPLES, seed: int = SEED) -> PairedComparison:
    """sacreBLEU's paired bootstrap test of ``system`` against ``baseline``: detokenized
    hypotheses, one per reference line, the same references for both."""
    if not len(system) == len(baseline) == len(references):
        raise DataError(
            f"paired bootstrap needs one hypothesis per reference from each system: got "
            f"{len(system)} and {len(baseline)} hypotheses for {len(references)} references")
    if not references:
        raise DataError("paired bootstrap needs at least one sentence")
    with _sacrebleu_seed(seed):
        signatures, results = PairedTest(
            [("baseline", list(baseline)), ("system", list(system))], {"BLEU": BLEU()},
            [list(references)], test_type="bs", n_samples=resamples)()
    baseline_result, system_result = results["BLEU"]
    differences = _resampled_differences(system, baseline, references, resamples, seed)
    no_difference_anywhere = not differences.any()
    return PairedComparison(
        system_bleu=system_result.score,
        baseline_bleu=baseline_result.score,
        difference=system_result.score - baseline_result.score,
        interval=_percentile_interval(differences),
        p_value=1.0 if no_difference_anywhere else float(system_result.p_value),
        resamples=resamples,
        signature=str(signatures["BLEU"]),
    )
