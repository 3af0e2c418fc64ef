"""Is one variant's BLEU really higher than another's? A bootstrap over seeds and test sentences.

Two kinds of chance move a BLEU difference between two trained variants. One is which sentences
the test set happens to hold: paired bootstrap resampling (Koehn 2004, "Statistical Significance
Tests for Machine Translation Evaluation", EMNLP) draws test sets of the same size from the test
sentences, with replacement, and scores both systems on each: the same sentences for both. The
other is training itself: the same variant retrained with another seed (initialisation, batch
order, dropout) scores differently, often by as much as variants differ (Clark et al. 2011,
"Better Hypothesis Testing for Statistical Machine Translation: Controlling for Optimizer
Instability", ACL, on replicated MT systems). A test on one trained model per variant measures
the first alone.

When the variants were trained with several seeds (``training.seed: [1, 2, 3]``), both are
resampled, by a two-level bootstrap (Davison & Hinkley 1997, *Bootstrap Methods and their
Application*, section 3.8: resample the top level, then within it). Each replicate

1. draws seeds with replacement, as many as each side has: one draw for both sides when they
   were trained with the same seeds (seed n of one variant paired with seed n of the other), and
   a draw per side otherwise;
2. draws test sentences with replacement, as many as there are, the same ones for every drawn
   seed of both sides (Koehn's pairing);
3. scores each drawn seed's translations of the drawn sentences (corpus BLEU from the sentences'
   summed statistics) and takes the difference of the two sides' means over their drawn seeds.

The observed difference is the difference of the two sides' mean BLEU over their seeds. The 95%
interval is sacreBLEU's percentile rule (:func:`sacrebleu.significance.estimate_ci`: the n // 40-th
smallest and largest replicates), and the p-value sacreBLEU's paired test's rule (the replicates'
absolute differences, centred on their mean, beyond the observed absolute difference; +1 on
both sides of the ratio). With one seed per side step 1 draws nothing and the test is sacreBLEU's
paired bootstrap test exactly (:class:`sacrebleu.significance.PairedTest` with ``test_type="bs"``,
which replicates Moses' ``bootstrap-hypothesis-difference-significance.pl``; Post 2018): the same
sentence draws from the same seed, sacreBLEU's BLEU with its default ``13a`` tokenization, 1,000
replicates; its interval then covers the test sentences only.

One case is sacreBLEU's to get wrong: when every replicate's difference is exactly 0 (the
systems' outputs score identically on every sentence, e.g. identical outputs), its count beyond
the observed difference is 0 and it reports the smallest p-value it can, 1/1001, as if identical
systems differed significantly. There is then no evidence of any difference: the p-value is 1.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from sacrebleu.metrics import BLEU

from reproduce.errors import DataError

RESAMPLES = 1000
SEED = 12345  # sacreBLEU's own default (SACREBLEU_SEED), pinned so that tables never vary
ALPHA = 0.05


@dataclass(frozen=True)
class Comparison:
    """``system`` against ``baseline`` on the same sentences; difference = system - baseline,
    each side's BLEU the mean over its seeds."""

    system_bleu: float
    baseline_bleu: float
    difference: float
    interval: tuple[float, float]  # 95% confidence interval of the difference
    p_value: float
    system_seeds: int
    baseline_seeds: int
    paired_seeds: bool  # both sides trained with the same seeds, drawn together

    @property
    def significant(self) -> bool:
        """Whether the difference is significant at ``ALPHA`` (0.05)."""
        return self.p_value < ALPHA

    @property
    def covers_training(self) -> bool:
        """Whether the interval and p-value account for training's randomness: only when each
        side was trained more than once; otherwise they cover the test sentences alone."""
        return self.system_seeds > 1 and self.baseline_seeds > 1


def _sentence_statistics(hypotheses: Sequence[str], references: Sequence[str]) -> np.ndarray:
    """Per sentence: hypothesis length, reference length, then matching and total n-grams for
    n = 1..4 (what corpus BLEU sums over sentences). Read through a sentence-level BLEU with
    effective order, which counts alike and does not warn that it is sentence-level."""
    counter = BLEU(effective_order=True)  # the default 13a tokenization, as corpus BLEU's
    order = BLEU().max_ngram_order
    rows = []
    for hypothesis, reference in zip(hypotheses, references, strict=True):
        score = counter.sentence_score(hypothesis, [reference])
        rows.append([score.sys_len, score.ref_len, *score.counts, *score.totals])
    return np.array(rows, dtype=np.int64).reshape(len(rows), 2 + 2 * order)


def _corpus_bleu(statistics: np.ndarray) -> float:
    """sacreBLEU's corpus BLEU (default settings) from summed sentence statistics."""
    metric = BLEU()
    order = metric.max_ngram_order
    sys_len, ref_len = int(statistics[0]), int(statistics[1])
    correct, total = statistics[2:2 + order].tolist(), statistics[2 + order:].tolist()
    return BLEU.compute_bleu(correct, total, sys_len, ref_len, smooth_method=metric.smooth_method,
                             smooth_value=metric.smooth_value).score


Score = Callable[[np.ndarray], float]  # a corpus score from summed sentence statistics


def _seed_draws(system_seeds: Sequence[int], baseline_seeds: Sequence[int], resamples: int,
                seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Step 1: per replicate, positions in each side's seed list. The same positions for both
    sides when they have the same seeds in the same order (paired); otherwise one draw per side,
    the system's first. Drawn from their own generator, so that the sentence draws stay
    sacreBLEU's whatever the seeds."""
    rng = np.random.default_rng((seed, 1))
    system = rng.choice(len(system_seeds), size=(resamples, len(system_seeds)), replace=True)
    if list(system_seeds) == list(baseline_seeds):
        return system, system
    baseline = rng.choice(len(baseline_seeds), size=(resamples, len(baseline_seeds)),
                          replace=True)
    return system, baseline


def _sentence_draws(sentences: int, resamples: int, seed: int) -> np.ndarray:
    """Step 2, as sacreBLEU's ``_paired_bs_test`` draws: ``default_rng(seed).choice(n, (R, n))``."""
    return np.random.default_rng(seed).choice(sentences, size=(resamples, sentences), replace=True)


def _replicate_scores(statistics: np.ndarray, sentence_draws: np.ndarray,
                      score: Score) -> np.ndarray:
    """One seed's score on each replicate's drawn sentences."""
    return np.array([score(summed) for summed in statistics[sentence_draws].sum(axis=1)])


def _replicate_differences(system: Sequence[np.ndarray], baseline: Sequence[np.ndarray],
                           draws: tuple[np.ndarray, np.ndarray], sentence_draws: np.ndarray,
                           score: Score) -> np.ndarray:
    """Step 3: per replicate, the mean score of the system's drawn seeds on the drawn sentences
    minus the baseline's. ``system`` and ``baseline`` hold each seed's sentence statistics."""
    replicates = np.arange(len(sentence_draws))[:, None]
    sides = []
    for statistics, seed_draws in zip((system, baseline), draws, strict=True):
        scores = np.array([_replicate_scores(one, sentence_draws, score) for one in statistics])
        sides.append(scores[seed_draws, replicates].mean(axis=1))  # scores: (seeds, replicates)
    return sides[0] - sides[1]


def _percentile_interval(samples: np.ndarray) -> tuple[float, float]:
    """sacreBLEU's 95% rule (``estimate_ci``): the (n // 40)-th smallest and largest values."""
    ordered = np.sort(samples)
    lower = len(ordered) // 40
    return float(ordered[lower]), float(ordered[len(ordered) - lower - 1])


def _p_value(differences: np.ndarray, observed: float) -> float:
    """sacreBLEU's paired test's rule (``_paired_bs_test``, ``_compute_p_value``); 1 when no
    replicate differs at all (see the module's docstring)."""
    if not differences.any():
        return 1.0
    spread = np.abs(differences)
    beyond = int(np.sum(spread - spread.mean() > abs(observed)))
    return (beyond + 1) / (len(differences) + 1)


def two_level_bootstrap(system: Mapping[int, np.ndarray], baseline: Mapping[int, np.ndarray],
                        score: Score, resamples: int = RESAMPLES,
                        seed: int = SEED) -> Comparison:
    """The test of the module's docstring on sentence statistics: ``system`` and ``baseline``
    map each training seed to its ``(sentences, statistics)`` array, the same sentences in the
    same order for every seed of both; ``score`` makes a corpus score of summed rows."""
    if not system or not baseline:
        raise DataError("a comparison needs at least one trained seed on each side")
    sentences = {len(statistics) for statistics in [*system.values(), *baseline.values()]}
    if len(sentences) != 1 or 0 in sentences:
        raise DataError(f"the bootstrap needs one hypothesis per reference from every seed of "
                        f"both systems: got {sorted(sentences)} sentences")
    system_seeds, baseline_seeds = sorted(system), sorted(baseline)
    draws = _seed_draws(system_seeds, baseline_seeds, resamples, seed)
    sentence_draws = _sentence_draws(sentences.pop(), resamples, seed)
    ours = [system[one] for one in system_seeds]
    theirs = [baseline[one] for one in baseline_seeds]
    differences = _replicate_differences(ours, theirs, draws, sentence_draws, score)
    system_bleu = float(np.mean([score(one.sum(axis=0)) for one in ours]))
    baseline_bleu = float(np.mean([score(one.sum(axis=0)) for one in theirs]))
    return Comparison(
        system_bleu=system_bleu, baseline_bleu=baseline_bleu,
        difference=system_bleu - baseline_bleu, interval=_percentile_interval(differences),
        p_value=_p_value(differences, system_bleu - baseline_bleu),
        system_seeds=len(system_seeds), baseline_seeds=len(baseline_seeds),
        paired_seeds=system_seeds == baseline_seeds,
    )


def compare_translations(system: Mapping[int, Sequence[str]],
                         baseline: Mapping[int, Sequence[str]], references: Sequence[str],
                         resamples: int = RESAMPLES, seed: int = SEED) -> Comparison:
    """sacreBLEU of ``system`` against ``baseline`` by :func:`two_level_bootstrap`: each maps a
    training seed to its detokenized hypotheses, one per reference line."""
    for side, translations in (("system", system), ("baseline", baseline)):
        for one, hypotheses in translations.items():
            if len(hypotheses) != len(references):
                raise DataError(
                    f"the bootstrap needs one hypothesis per reference: the {side}'s seed {one} "
                    f"has {len(hypotheses)} hypotheses for {len(references)} references")
    if not references:
        raise DataError("the bootstrap needs at least one sentence")
    return two_level_bootstrap(
        {one: _sentence_statistics(hypotheses, references) for one, hypotheses in system.items()},
        {one: _sentence_statistics(hypotheses, references) for one, hypotheses in baseline.items()},
        _corpus_bleu, resamples, seed)
