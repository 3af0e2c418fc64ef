"""Writes Tables 2 and 3 (markdown and CSV) and the plots for one experiment.

Whatever has not finished yet shows as ``—``; rendering never needs a missing result.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from reproduce.config import Experiment
from reproduce.tables.plots import plot_bleu_vs_parameters, plot_dev_perplexity
from reproduce.tables.results import read_variant
from reproduce.tables.table2 import build_table2
from reproduce.tables.table3 import build_table3

MISSING = "—"


def _write_text(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    temporary.replace(path)


def _cell(column: str, value) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return MISSING
    if isinstance(value, float):
        return f"{value:.2e}" if "FLOPs" in column else f"{value:.4g}" if abs(value) < 10 else f"{value:.2f}"
    return str(value)


def _markdown(frame: pd.DataFrame, title: str, note: str) -> str:
    shown = pd.DataFrame({column: [_cell(column, value) for value in frame[column]] for column in frame})
    table = shown.to_markdown(index=False, disable_numparse=True)
    return f"# {title}\n\n{note}\n\n{table}\n"


def render_tables(experiment: Experiment, results_dir: Path, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    name, pair = experiment.name, experiment.tables.paper_language_pair.replace("_", "-").upper()
    table2, table3 = build_table2(experiment, results_dir), build_table3(experiment, results_dir)
    written = []
    for stem, frame, title, note in (
        ("table2", table2, f"Table 2 — {name}",
         f"Ours: BLEU on the {name} test split with the averaged checkpoint; paper: {pair} newstest2014. "
         "FLOPs (6 N D) = 6 x parameters x source+target tokens processed (attention's "
         "length-dependent terms left out); FLOPs (GPU-hours x rate) uses "
         f"{experiment.tables.gpu_flops_per_second:.3g} FLOP/s per GPU as the paper did."),
        ("table3", table3, f"Table 3 — {name}",
         f"Ours: perplexity per word-piece and BLEU on the {name} dev split, last checkpoint (no "
         "averaging); paper: EN-DE newstest2013."),
    ):
        markdown, csv = out_dir / f"{stem}.md", out_dir / f"{stem}.csv"
        _write_text(markdown, _markdown(frame, title, note))
        _write_text(csv, frame.to_csv(index=False))
        written += [markdown, csv]
    curves = {variant: read_variant(results_dir, name, variant) for variant in experiment.variants}
    plot_bleu_vs_parameters(table3, out_dir / "bleu_vs_parameters.png", name)
    plot_dev_perplexity(curves, out_dir / "dev_perplexity.png", name)
    return written + [out_dir / "bleu_vs_parameters.png", out_dir / "dev_perplexity.png"]
