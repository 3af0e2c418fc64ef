"""Which systems Tables 2 and 3 test against each other, and where their outputs are.

A BLEU difference printed without its uncertainty invites reading noise as a finding. Each
compared pair is tested with sacreBLEU's paired bootstrap (:mod:`reproduce.scoring.significance`)
on the translations that the table's BLEU column scores, so that the difference tested is the
difference of that column's sacreBLEU:

* Table 3: every row against the base, on the dev split with the last weights (what Table 3
  reports, as the paper's Table 3 does);
* Table 2: each Transformer row (base, big) against the recurrent baseline, and big against
  base, on the test split with the averaged weights (what Table 2 reports).

The files read are ``{results}/{dataset}/{variant}/translations/{split}.{weights}.txt`` (written
by the ``decode`` rule) and ``{results}/{dataset}/data/{split}.ref`` (``references``);
:func:`compared_files` lists them for the rule that renders the tables to declare as inputs.
A pair whose files are not there yet is not tested (its cells read ``—``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from reproduce.config import Experiment
from reproduce.scoring.bleu import _read_lines
from reproduce.scoring.significance import PairedComparison, paired_bootstrap
from reproduce.tables.results import read_variant

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


def translations_file(results_dir: Path, dataset: str, variant: str, split: str,
                      weights: str) -> Path:
    return Path(results_dir) / dataset / variant / "translations" / f"{split}.{weights}.txt"


def reference_file(results_dir: Path, dataset: str, split: str) -> Path:
    return Path(results_dir) / dataset / "data" / f"{split}.ref"


def _pair_files(results_dir: Path, dataset: str, pair: Pair) -> list[Path]:
    return [translations_file(results_dir, dataset, pair.system, pair.split, pair.weights),
            translations_file(results_dir, dataset, pair.baseline, pair.split, pair.weights),
            reference_file(results_dir, dataset, pair.split)]


def compared_files(experiment: Experiment, results_dir: Path | str) -> list[str]:
    """Every translation and reference file the tables' significance tests read (none for a
    parsing experiment), each once, in a stable order."""
    if experiment.task != "translation":
        return []
    files: dict[str, None] = {}
    for pair in table3_pairs(experiment) + table2_pairs(experiment):
        for path in _pair_files(Path(results_dir), experiment.name, pair):
            files[str(path)] = None
    return list(files)


def compare(experiment: Experiment, results_dir: Path, pair: Pair) -> PairedComparison | None:
    """The paired test of ``pair``, or None while one of its files is missing or one of its
    systems is stale (trained with settings since edited: another model's translations)."""
    paths = _pair_files(Path(results_dir), experiment.name, pair)
    if not all(path.exists() for path in paths):
        return None
    if any(read_variant(Path(results_dir), experiment, variant).stale
           for variant in (pair.system, pair.baseline)):
        return None
    system, baseline, references = (_read_lines(path) for path in paths)
    return paired_bootstrap(system, baseline, references)


def interval_text(comparison: PairedComparison | None) -> str | None:
    """``[low, high]`` with signs, as printed in the tables."""
    if comparison is None:
        return None
    low, high = comparison.interval
    return f"[{low:+.2f}, {high:+.2f}]"
