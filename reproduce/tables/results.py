"""What a pipeline run has produced so far for one variant; anything not there yet reads as None.

A variant is trained once per seed of its ``training.seed``; each training reads
``{results}/{dataset}/{variant}/seed-{n}/train/summary.json`` (with the finished run's dev curve)
and its scores (``.../bleu.json`` for translation, ``.../f1.json`` for parsing): outputs
that the ``final_tables`` rule declares as its inputs. Only for a variant still training (no
summary yet) is the live log ``.../train/metrics.jsonl`` read, by the ``tables`` rule's snapshot,
which renders whatever exists and so never waits for, nor triggers, training.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reproduce.config import Experiment
from reproduce.errors import DataError
from reproduce.files import read_records
from reproduce.provenance import changed_settings, trained_settings
from reproduce.tables.outputs import SCORES_FILE
from reproduce.training.progress import dev_curve


@dataclass(frozen=True)
class VariantResults:
    """What one training of a variant (one seed) has produced; nothing of it is shown when it was
    trained with other settings than the experiment file now gives (``changed``): those are
    another model's results."""

    summary: dict | None  # train/summary.json
    scores: dict | None  # bleu.json or f1.json: {"dev": {...dev.last}, "test": {...test.averaged}}
    dev_curve: list[dict]  # the {"step", "dev_loss", "dev_perplexity"} rows of metrics.jsonl
    changed: tuple[str, ...] = ()  # "key: trained -> now" of each edited setting

    @property
    def stale(self) -> bool:
        return bool(self.changed)

    @property
    def status(self) -> str:
        if self.stale:
            return f"stale: trained with other settings ({'; '.join(self.changed)})"
        if self.scores is not None:
            return "scored"
        if self.summary is not None:
            return "pending: trained, not scored"
        return "pending: training" if self.dev_curve else "pending: not started"

    def trained(self, key: str) -> Any:
        return None if self.summary is None or self.stale else self.summary.get(key)

    def dev(self, key: str) -> Any:
        return None if self.scores is None or self.stale else self.scores.get("dev", {}).get(key)

    def test(self, key: str) -> Any:
        return None if self.scores is None or self.stale else self.scores.get("test", {}).get(key)


def _read_json(path: Path) -> dict | None:
    if not path.exists():
        return None
    try:
        payload = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise DataError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(payload, dict):
        raise DataError(f"{path}: expected a JSON object")
    return payload


def _read_scores(folder: Path) -> dict | None:
    """bleu.json or f1.json, whichever the variant's task wrote."""
    for name in SCORES_FILE.values():
        scores = _read_json(folder / name)
        if scores is not None:
            return scores
    return None


def training_dir(results_dir: Path, dataset: str, variant: str, seed: int) -> Path:
    """The folder of a variant's training with ``seed`` and of all that follows from it."""
    return Path(results_dir) / dataset / variant / f"seed-{seed}"


def read_training(results_dir: Path, experiment: Experiment, variant: str,
                  seed: int) -> VariantResults:
    folder = training_dir(results_dir, experiment.name, variant, seed)
    summary = _read_json(folder / "train" / "summary.json")
    changed = changed_settings(summary,
                               trained_settings(experiment.variant(variant, seed), experiment))
    if changed:
        return VariantResults(summary=summary, scores=None, dev_curve=[], changed=tuple(changed))
    if summary is not None:  # finished: its summary holds the curve
        curve = summary.get("dev_curve", [])
    else:  # training (:func:`reproduce.files.read_records` leaves a torn last line out)
        curve = dev_curve(read_records(folder / "train" / "metrics.jsonl"))
    return VariantResults(summary=summary, scores=_read_scores(folder), dev_curve=curve)


@dataclass(frozen=True)
class SeededResults:
    """A variant's trainings, one per seed of its ``training.seed``, read as one row of a table:
    a number is the mean over the seeds scored (and not stale), anything else (a signature, a
    device) the first such seed's; :meth:`dev_values` and :meth:`test_values` give them seed by
    seed, for the spread."""

    by_seed: dict[int, VariantResults]

    @property
    def scored(self) -> dict[int, VariantResults]:
        return {seed: one for seed, one in self.by_seed.items()
                if one.scores is not None and not one.stale}

    @property
    def trained_seeds(self) -> dict[int, VariantResults]:
        return {seed: one for seed, one in self.by_seed.items()
                if one.summary is not None and not one.stale}

    @property
    def scores(self) -> dict | None:
        """Some scores when any seed is scored, else None (as :class:`VariantResults`)."""
        return next((one.scores for one in self.scored.values()), None)

    @property
    def status(self) -> str:
        """The one status of every seed, or each seed's where they differ."""
        statuses = {one.status for one in self.by_seed.values()}
        if len(statuses) == 1:
            return statuses.pop()
        return "; ".join(f"seed {seed}: {one.status}" for seed, one in self.by_seed.items())

    @property
    def seeds_text(self) -> str:
        """How many seeds the row's scores average: ``2``, or ``1 of 2`` while some are missing."""
        scored, planned = len(self.scored), len(self.by_seed)
        return str(planned) if scored == planned else f"{scored} of {planned}"

    def dev_values(self, key: str) -> list[Any]:
        return [one.dev(key) for one in self.scored.values() if one.dev(key) is not None]

    def test_values(self, key: str) -> list[Any]:
        return [one.test(key) for one in self.scored.values() if one.test(key) is not None]

    def dev(self, key: str) -> Any:
        return _combined(self.dev_values(key))

    def test(self, key: str) -> Any:
        return _combined(self.test_values(key))

    def trained(self, key: str) -> Any:
        values = [one.trained(key) for one in self.trained_seeds.values()]
        return _combined([value for value in values if value is not None])


def spread_text(values: list[float]) -> str | None:
    """``min–max`` over seeds, as the tables print the spread; ``1 seed`` when there is none to
    measure, None when nothing is scored."""
    if not values:
        return None
    if len(values) == 1:
        return "1 seed"
    return f"{min(values):.2f}–{max(values):.2f}"


def _combined(values: list[Any]) -> Any:
    """The value every seed has (a parameter count, a device); else the mean of numbers (bools
    are not numbers here), or the first of anything else."""
    if not values:
        return None
    if all(value == values[0] for value in values):
        return values[0]
    if all(isinstance(value, (int, float)) and not isinstance(value, bool) for value in values):
        return sum(values) / len(values)
    return values[0]


def read_variant(results_dir: Path, experiment: Experiment, variant: str) -> SeededResults:
    """Every training of ``variant``, by seed, in the experiment file's order."""
    return SeededResults({seed: read_training(results_dir, experiment, variant, seed)
                          for seed in experiment.seeds(variant)})
