"""Reading what a pipeline run has produced so far; anything missing reads as None."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass
class VariantResults:
    summary: dict | None  # train/summary.json
    scores: dict | None  # bleu.json: {"dev": {...}, "test": {...}}
    curve: list[dict]  # train/metrics.jsonl, dev rows only

    def dev(self, key: str):
        return self.scores["dev"].get(key) if self.scores else None

    def test(self, key: str):
        return self.scores["test"].get(key) if self.scores else None


def _json(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def read_variant(results_dir: Path, dataset: str, variant: str) -> VariantResults:
    folder = results_dir / dataset / variant
    metrics = folder / "train" / "metrics.jsonl"
    curve = []
    if metrics.exists():
        rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
        curve = [row for row in rows if "dev_perplexity" in row]
    return VariantResults(_json(folder / "train" / "summary.json"), _json(folder / "bleu.json"), curve)
