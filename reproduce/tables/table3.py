"""Table 3: variations on the base model, scored on the dev set (newstest2013) with the last
checkpoint (no averaging), our numbers beside the paper's (matched by variant name). A row's
scores are the mean over the variant's training seeds, their spread beside them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from reproduce.config import Experiment
from reproduce.tables.comparisons import (
    compare, interval_text, noise_covered, significance_mark, significance_notes, table3_pairs,
)
from reproduce.tables.paper import paper_table3
from reproduce.tables.results import read_variant, spread_text

COLUMNS = ["row", "variant", "status", "seeds", "N", "d_model", "d_ff", "h", "d_k", "d_v",
           "P_drop", "eps_ls", "train steps", "positional", "PPL (dev)", "paper PPL",
           "BLEU (dev)", "BLEU (dev) min–max", "paper BLEU", "sacreBLEU (dev)",
           "sacreBLEU (dev) min–max", "ΔsacreBLEU vs base", "Δ 95% CI", "p vs base", "p < 0.05",
           "Δ CI covers", "params x10^6", "paper params x10^6"]


def _millions(parameters: int | None) -> float | None:
    return None if parameters is None else parameters / 1e6


def _against_base(comparison) -> dict:
    """The bootstrap test against the base row (empty for the base and untested rows)."""
    if comparison is None:
        return {}
    return {"ΔsacreBLEU vs base": comparison.difference, "Δ 95% CI": interval_text(comparison),
            "p vs base": comparison.p_value, "p < 0.05": significance_mark(comparison),
            "Δ CI covers": noise_covered(comparison)}


def build_table3(experiment: Experiment, results_dir: Path) -> pd.DataFrame:
    """One row per variant with a ``table3_row`` label, in the experiment file's order."""
    paper = paper_table3()
    tested = {pair.system: compare(experiment, results_dir, pair)
              for pair in table3_pairs(experiment)}
    rows = []
    for name, spec in experiment.variants.items():
        if spec.table3_row is None:
            continue
        variant = experiment.variant(name)
        model = variant.model
        results = read_variant(results_dir, experiment, name)
        cited = paper.loc[name] if name in paper.index else None
        rows.append({
            "row": spec.table3_row, "variant": name, "status": results.status,
            "seeds": results.seeds_text,
            "N": model.layers, "d_model": model.d_model, "d_ff": model.d_ff, "h": model.heads,
            "d_k": model.d_k, "d_v": model.d_v, "P_drop": model.dropout,
            "eps_ls": model.label_smoothing, "train steps": variant.training.steps,
            "positional": model.positional,
            "PPL (dev)": results.dev("perplexity"),
            "paper PPL": None if cited is None else cited["ppl_dev"],
            "BLEU (dev)": results.dev("tokenized_bleu"),
            "BLEU (dev) min–max": spread_text(results.dev_values("tokenized_bleu")),
            "paper BLEU": None if cited is None else cited["bleu_dev"],
            "sacreBLEU (dev)": results.dev("sacrebleu"),
            "sacreBLEU (dev) min–max": spread_text(results.dev_values("sacrebleu")),
            **_against_base(tested.get(name)),
            "params x10^6": _millions(results.trained("parameters")),
            "paper params x10^6": None if cited is None else cited["params_millions"],
        })
    return pd.DataFrame(rows, columns=COLUMNS)


def table3_caption(experiment: Experiment) -> tuple[str, str, list[str]]:
    """Heading, what was measured, and the notes printed under the table."""
    measured = (f"Measured: {experiment.name} ({experiment.source_lang}→{experiment.target_lang})"
                " dev split, last checkpoint (no averaging); paper: WMT14 EN-DE newstest2013.")
    notes = [
        "seeds: the trainings a row averages, one per seed of its training.seed, each trained, "
        "decoded and scored alone (`1 of 2` while one is missing); PPL, BLEU and sacreBLEU are "
        "their mean, min–max their spread over seeds.",
        "PPL (dev): perplexity per word-piece of the last checkpoint (no label smoothing). "
        "BLEU (dev): the paper's tokenized, compound-split BLEU; sacreBLEU beside it.",
        "params x10^6: parameters of the trained model (train/summary.json), embeddings included "
        f"(shared {experiment.bpe.vocab_size}-piece vocabulary).",
        "paper columns: the paper's Table 3 row of the same variant name; the paper prints no "
        "parameter count for rows (A), (D) and (E) (unlisted values = same as base).",
        *significance_notes(experiment, "dev", table3_pairs(experiment)),
        "— = not available yet.",
    ]
    return f"Table 3 — {experiment.name}: variations on the base model", measured, notes
