"""Table 3: variations on the base model, on the dev set (newstest2013), last checkpoint (no
averaging), our numbers beside the paper's (matched by variant name)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from reproduce.config import Experiment
from reproduce.model.parameter_count import analytic_parameter_count
from reproduce.tables.paper import paper_table3
from reproduce.tables.results import read_variant


def build_table3(experiment: Experiment, results_dir: Path) -> pd.DataFrame:
    paper = paper_table3()
    rows = []
    for name, spec in experiment.variants.items():
        if spec.table3_row is None:
            continue
        variant = experiment.variant(name)
        m = variant.model
        results = read_variant(results_dir, experiment.name, name)
        parameters = results.summary["parameters"] if results.summary else None
        cited = paper.loc[name] if name in paper.index else None
        rows.append({
            "row": spec.table3_row, "variant": name, "N": m.layers, "d_model": m.d_model,
            "d_ff": m.d_ff, "h": m.heads, "d_k": m.d_k, "d_v": m.d_v, "P_drop": m.dropout,
            "eps_ls": m.label_smoothing, "positions": m.positional, "train steps": variant.training.steps,
            "PPL (dev)": results.dev("perplexity"),
            "paper PPL": None if cited is None else cited["ppl_dev"],
            "BLEU (dev)": results.dev("tokenized_bleu"),
            "paper BLEU": None if cited is None else cited["bleu_dev"],
            "sacreBLEU (dev)": results.dev("sacrebleu"),
            "params x10^6": None if parameters is None else parameters / 1e6,
            "paper params x10^6": None if cited is None else cited["params_millions"],
        })
    return pd.DataFrame(rows)


def expected_parameters(experiment: Experiment, vocab_size: int) -> dict[str, int]:
    """Analytic parameter counts of every variant for a given vocabulary size."""
    return {name: analytic_parameter_count(experiment.variant(name).model, vocab_size)
            for name in experiment.variants}
