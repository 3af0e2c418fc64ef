"""Which systems Tables 2 and 3 test against each other, and where their outputs are.

A BLEU difference printed without its uncertainty invites reading noise as a finding. Each
compared pair is tested by a bootstrap over the variants' training seeds and the test sentences
(:mod:`reproduce.scoring.significance`; with one seed a side, sacreBLEU's paired bootstrap) on the
translations that the table's BLEU column scores, so that the difference tested is the
difference of that column's sacreBLEU, averaged over seeds:

* Table 3: every row against the base, on the dev split with the last weights (what Table 3
  reports, as the paper's Table 3 does);
* Table 2: each Transformer row (base, big) against the recurrent baseline, and big against
  base, on the test split with the averaged weights (what Table 2 reports).

The files read are ``{results}/{dataset}/{variant}/seed-{n}/translations/{split}.{weights}.txt``
for each seed of each side (written by the ``decode`` rule) and
``{results}/{dataset}/data/{split}.ref`` (``references``); :func:`compared_files` lists them for
the rule that renders the tables to declare as inputs. A side is tested with the seeds that
its row's BLEU columns average (scored, and not stale) whose translations are there; a pair with
a side without any is not tested (its cells read ``—``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from reproduce.config import Experiment
from reproduce.scoring.bleu import _read_lines
from reproduce.scoring.significance import (
    ALPHA, RESAMPLES, SEED, Comparison, compare_translations,
)
from reproduce.tables.results import read_variant, training_dir

TABLE3_OUTPUTS = ("dev", "last")
TABLE2_OUTPUTS = ("test", "averaged")


@dataclass(frozen=True)
class Pair:
    system: str  # variant names
    baseline: str
    split: str
    weights: str


def table3_pairs(experiment: Experiment) -> list[Pair]:
    """Each Table 3 row against the row labelled ``base`` (none when no row is)."""
    rows = {name: spec.table3_row for name, spec in experiment.variants.items()
            if spec.table3_row is not None}
    base = next((name for name, row in rows.items() if row == "base"), None)
    if base is None:
        return []
    return [Pair(name, base, *TABLE3_OUTPUTS) for name in rows if name != base]


def table2_pairs(experiment: Experiment) -> list[Pair]:
    """base and big against the recurrent baseline, big against base (as ``tables.table2``
    maps them; a role not mapped is left out)."""
    roles = experiment.tables.table2
    wanted = [("base", "rnn"), ("big", "rnn"), ("big", "base")]
    return [Pair(roles[system], roles[baseline], *TABLE2_OUTPUTS)
            for system, baseline in wanted if system in roles and baseline in roles]


def translations_file(results_dir: Path, dataset: str, variant: str, seed: int, split: str,
                      weights: str) -> Path:
    return (training_dir(results_dir, dataset, variant, seed) / "translations"
            / f"{split}.{weights}.txt")


def reference_file(results_dir: Path, dataset: str, split: str) -> Path:
    return Path(results_dir) / dataset / "data" / f"{split}.ref"


def _side_files(results_dir: Path, experiment: Experiment, variant: str,
                pair: Pair) -> dict[int, Path]:
    """Seed -> the translations of ``variant`` that ``pair`` compares."""
    return {seed: translations_file(Path(results_dir), experiment.name, variant, seed,
                                    pair.split, pair.weights)
            for seed in experiment.seeds(variant)}


def compared_files(experiment: Experiment, results_dir: Path | str) -> list[str]:
    """Every translation and reference file the tables' significance tests read (none for a
    parsing experiment), each once, in a stable order."""
    if experiment.task != "translation":
        return []
    files: dict[str, None] = {}
    for pair in table3_pairs(experiment) + table2_pairs(experiment):
        for variant in (pair.system, pair.baseline):
            for path in _side_files(Path(results_dir), experiment, variant, pair).values():
                files[str(path)] = None
        files[str(reference_file(Path(results_dir), experiment.name, pair.split))] = None
    return list(files)


def _side(results_dir: Path, experiment: Experiment, variant: str,
          pair: Pair) -> dict[int, list[str]]:
    """Seed -> translations, for the seeds scored with the settings the experiment file gives
    now (a stale seed's translations are another model's; one decoded but not yet scored is not
    in the row's sacreBLEU, whose difference is the one tested)."""
    scored = read_variant(results_dir, experiment, variant).scored
    return {seed: _read_lines(path)
            for seed, path in _side_files(results_dir, experiment, variant, pair).items()
            if seed in scored and path.exists()}


def compare(experiment: Experiment, results_dir: Path, pair: Pair) -> Comparison | None:
    """The test of ``pair`` over the seeds each side has, or None while a side has none or the
    references are missing."""
    references = reference_file(Path(results_dir), experiment.name, pair.split)
    system = _side(Path(results_dir), experiment, pair.system, pair)
    baseline = _side(Path(results_dir), experiment, pair.baseline, pair)
    if not (system and baseline and references.exists()):
        return None
    return compare_translations(system, baseline, _read_lines(references))


def interval_text(comparison: Comparison | None) -> str | None:
    """``[low, high]`` with signs, as printed in the tables."""
    if comparison is None:
        return None
    low, high = comparison.interval
    return f"[{low:+.2f}, {high:+.2f}]"


def noise_covered(comparison: Comparison) -> str:
    """What the interval and p-value account for, printed beside them."""
    if comparison.covers_training:
        pairing = "paired" if comparison.paired_seeds else "unpaired"
        return (f"seeds ({comparison.system_seeds} vs {comparison.baseline_seeds}, {pairing}) "
                "and sentences")
    return "sentences only: 1 seed, training noise not measured"


def significance_mark(comparison: Comparison) -> str:
    """``*`` for a difference significant at 0.05 over seeds and sentences; over sentences alone
    (one seed a side) the mark carries its caveat, since retraining may undo it."""
    if not comparison.significant:
        return ""
    return "*" if comparison.covers_training else "* (1 seed: sentences only)"


def significance_notes(experiment: Experiment, split: str, pairs: list[Pair]) -> list[str]:
    """What the Δ, CI and p columns test and what their intervals cover, for ``pairs``."""
    if not pairs:
        return []
    one_seed = sorted({variant for pair in pairs for variant in (pair.system, pair.baseline)
                       if len(experiment.seeds(variant)) == 1})
    notes = [
        f"ΔsacreBLEU: the row's sacreBLEU ({split}, the mean over its seeds) minus the compared "
        f"row's. Δ 95% CI and p: a two-level bootstrap over training seeds and {split} sentences "
        "(Davison & Hinkley 1997, Bootstrap Methods and their Application, section 3.8; Clark et "
        "al. 2011, Better Hypothesis Testing for Statistical Machine Translation: Controlling for "
        f"Optimizer Instability): each of {RESAMPLES} replicates (seed {SEED}) draws each row's "
        "seeds with replacement (one draw for both rows when they were trained with the same "
        f"seeds: paired), then the {split} sentences with replacement, the same for every seed "
        "of both rows (Koehn 2004's paired bootstrap), and takes the difference of the two rows' "
        "mean corpus sacreBLEU over their drawn seeds. CI: the 2.5th and 97.5th percentiles of "
        "those differences; p: sacreBLEU's paired-test rule on them "
        f"(reproduce/scoring/significance.py); p < 0.05: * marks a difference significant at "
        f"{ALPHA}. The two are read off the same replicates in different ways and can disagree "
        "near the threshold: a * with an interval that just reaches 0 is borderline.",
    ]
    if one_seed:
        notes.append(
            f"Δ CI covers: trained with one seed: {', '.join(one_seed)}. A comparison with such a "
            "row is sacreBLEU's paired bootstrap over the sentences alone: its interval and "
            "p-value say whether the difference would hold on other sentences, not whether it "
            "would survive retraining (training randomness is not measured), and its mark reads "
            "'* (1 seed: sentences only)'. List more seeds in training.seed to measure it.")
    else:
        notes.append(
            "Δ CI covers: every compared row was trained with more than one seed, so the "
            "intervals cover training randomness and the choice of sentences; with few seeds the "
            "seed level is coarsely estimated (two seeds a row give three distinct seed draws).")
    return notes
