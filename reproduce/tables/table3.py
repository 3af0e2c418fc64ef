"""Table 3: variations on the base model, scored on the dev set (newstest2013) with the last
checkpoint (no averaging), our numbers beside the paper's (matched by variant name)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from reproduce.config import Experiment
from reproduce.scoring.significance import ALPHA, RESAMPLES, SEED
from reproduce.tables.comparisons import compare, interval_text, table3_pairs
from reproduce.tables.paper import paper_table3
from reproduce.tables.results import read_variant

COLUMNS = ["row", "variant", "status", "N", "d_model", "d_ff", "h", "d_k", "d_v", "P_drop",
           "eps_ls", "train steps", "positional", "PPL (dev)", "paper PPL", "BLEU (dev)",
           "paper BLEU", "sacreBLEU (dev)", "ΔsacreBLEU vs base", "Δ 95% CI", "p vs base",
           "p < 0.05", "params x10^6", "paper params x10^6"]


def _millions(parameters: int | None) -> float | None:
    return None if parameters is None else parameters / 1e6


def _against_base(comparison) -> dict:
    """The paired bootstrap test against the base row (empty for the base and untested rows)."""
    if comparison is None:
        return {}
    return {"ΔsacreBLEU vs base": comparison.difference, "Δ 95% CI": interval_text(comparison),
            "p vs base": comparison.p_value, "p < 0.05": "*" if comparison.significant else ""}


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
            "N": model.layers, "d_model": model.d_model, "d_ff": model.d_ff, "h": model.heads,
            "d_k": model.d_k, "d_v": model.d_v, "P_drop": model.dropout,
            "eps_ls": model.label_smoothing, "train steps": variant.training.steps,
            "positional": model.positional,
            "PPL (dev)": results.dev("perplexity"),
            "paper PPL": None if cited is None else cited["ppl_dev"],
            "BLEU (dev)": results.dev("tokenized_bleu"),
            "paper BLEU": None if cited is None else cited["bleu_dev"],
            "sacreBLEU (dev)": results.dev("sacrebleu"),
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
        "PPL (dev): perplexity per word-piece of the last checkpoint (no label smoothing). "
        "BLEU (dev): the paper's tokenized, compound-split BLEU; sacreBLEU beside it.",
        "params x10^6: parameters of the trained model (train/summary.json), embeddings included "
        f"(shared {experiment.bpe.vocab_size}-piece vocabulary).",
        "paper columns: the paper's Table 3 row of the same variant name; the paper prints no "
        "parameter count for rows (A), (D) and (E) (unlisted values = same as base).",
        f"ΔsacreBLEU vs base: this row's sacreBLEU (dev) minus the base row's, tested with "
        f"sacreBLEU's paired bootstrap (Koehn 2004) on the same {experiment.name} dev sentences: "
        f"{RESAMPLES} resamples, seed {SEED}; Δ 95% CI: the 2.5th and 97.5th percentiles of the "
        "resampled differences; p vs base: sacreBLEU's p-value (reproduce/scoring/"
        f"significance.py). p < 0.05: * marks a difference significant at {ALPHA}. The two are "
        "read off the same resamples in different ways (the p-value compares the observed |Δ| "
        "with the resampled |Δ| centred on their mean; the interval is percentile) and can "
        "disagree near the threshold: a * with an interval that just reaches 0 is a borderline "
        "difference.",
        "— = not available yet.",
    ]
    return f"Table 3 — {experiment.name}: variations on the base model", measured, notes
