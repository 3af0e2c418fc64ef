"""What a pipeline run has produced so far for one variant; anything not there yet reads as None.

Reads ``{results}/{dataset}/{variant}/train/summary.json`` (with the finished run's dev curve)
and the variant's scores (``.../bleu.json`` for translation, ``.../f1.json`` for parsing): outputs
that the ``final_tables`` rule declares as its inputs. Only for a variant still training (no
summary yet) is the live log ``.../train/metrics.jsonl`` read, by the ``tables`` rule's snapshot,
which renders whatever exists and so never waits for, nor triggers, training.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reproduce.config import Experiment, trained_settings
from reproduce.errors import DataError
from reproduce.records import dev_curve, read_records
from reproduce.tables.outputs import SCORES_FILE
from reproduce.training.staleness import NOT_RECORDED, changed_settings


@dataclass(frozen=True)
class VariantResults:
    """What a variant has produced; nothing of it is shown when it was trained with other settings
    than the experiment file now gives (``changed``): those are another model's results; nor when
    its summary does not record its settings (``changed`` is then :data:`NOT_RECORDED` alone)."""

    summary: dict | None  # train/summary.json
    scores: dict | None  # bleu.json or f1.json: {"dev": {...dev.last}, "test": {...test.averaged}}
    dev_curve: list[dict]  # the {"step", "dev_loss", "dev_perplexity"} rows of metrics.jsonl
    changed: tuple[str, ...] = ()  # "key: trained -> now" of each edited setting

    @property
    def stale(self) -> bool:
        return bool(self.changed)

    @property
    def status(self) -> str:
        if self.changed == (NOT_RECORDED,):
            return f"stale: {NOT_RECORDED}"
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


def read_variant(results_dir: Path, experiment: Experiment, variant: str) -> VariantResults:
    folder = results_dir / experiment.name / variant
    summary = _read_json(folder / "train" / "summary.json")
    changed = changed_settings(summary, trained_settings(experiment.variant(variant), experiment))
    if changed:
        return VariantResults(summary=summary, scores=None, dev_curve=[], changed=tuple(changed))
    if summary is not None:  # finished: its summary holds the curve
        curve = summary.get("dev_curve", [])
    else:  # training (:func:`reproduce.records.read_records` leaves a torn last line out)
        curve = dev_curve(read_records(folder / "train" / "metrics.jsonl"))
    return VariantResults(summary=summary, scores=_read_scores(folder), dev_curve=curve)
