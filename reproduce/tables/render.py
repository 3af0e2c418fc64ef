"""Writes one experiment's tables (markdown and CSV) and plots: Tables 2 and 3 for translation,
Table 4 for parsing.

Whatever has not finished yet shows as ``—`` in markdown (an empty cell in CSV); rendering
never needs, nor triggers, a missing result.
"""

from __future__ import annotations

from html import escape
from numbers import Integral
from pathlib import Path

import pandas as pd

from reproduce.config import Experiment
from reproduce.files import write_text_whole
from reproduce.tables.plots import bleu_vs_parameters_figure, dev_perplexity_figure, save_figure
from reproduce.tables.results import read_training
from reproduce.tables.table2 import build_table2, table2_caption
from reproduce.tables.table3 import build_table3, table3_caption
from reproduce.tables.table4 import build_table4, table4_caption

MISSING = "—"
# Number formats by column name (first match wins): BLEU and PPL as the paper prints them.
NUMBER_FORMATS = [("p vs", ".3g"), ("FLOPs", ".2e"), ("BLEU", ".2f"), ("PPL", ".2f"),
                  ("GPU-hours", ".3g"), ("params", ".3g"), ("F1", ".2f"), ("exact match", ".2f")]


def _cell(column: str, value) -> str:
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return MISSING
    if isinstance(value, (str, Integral)):
        return str(value)
    number_format = next((spec for key, spec in NUMBER_FORMATS if key in column), "g")
    return format(float(value), number_format)


def markdown_table(frame: pd.DataFrame, title: str, measured: str, notes: list[str]) -> str:
    """A heading, the one-line note on what was measured, the table, then the notes."""
    shown = pd.DataFrame(
        {column: [_cell(column, value) for value in frame[column]] for column in frame.columns},
        columns=frame.columns,
    )
    table = shown.to_markdown(index=False, disable_numparse=True)
    notes_text = "\n".join(f"- {note}" for note in notes)
    return f"# {title}\n\n{measured}\n\n{table}\n\nNotes:\n\n{notes_text}\n"


HTML_STYLE = """
body { font-family: sans-serif; margin: 1.5em; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: right; }
th { background: #f2f2f2; }
td:first-child, td:nth-child(2), th:first-child, th:nth-child(2) { text-align: left; }
"""


def html_table(frame: pd.DataFrame, title: str, measured: str, notes: list[str]) -> str:
    """The markdown table's content as one HTML page, which `snakemake --report` shows inline
    (it shows markdown and CSV only as downloads): heading, what was measured, table, notes."""
    shown = pd.DataFrame(
        {column: [_cell(column, value) for value in frame[column]] for column in frame.columns},
        columns=frame.columns,
    )
    table = shown.to_html(index=False, border=0, escape=True)
    notes_html = "".join(f"<li>{escape(note)}</li>" for note in notes)
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{escape(title)}</title>"
            f"<style>{HTML_STYLE}</style></head>\n<body><h1>{escape(title)}</h1>\n"
            f"<p>{escape(measured)}</p>\n{table}\n<p>Notes:</p><ul>{notes_html}</ul>\n</body></html>\n")


def _write_table(out_dir: Path, stem: str, frame: pd.DataFrame,
                 caption: tuple[str, str, list[str]]) -> list[Path]:
    title, measured, notes = caption
    write_text_whole(out_dir / f"{stem}.md", markdown_table(frame, title, measured, notes))
    write_text_whole(out_dir / f"{stem}.html", html_table(frame, title, measured, notes))
    write_text_whole(out_dir / f"{stem}.csv", frame.to_csv(index=False))
    return [out_dir / f"{stem}.{suffix}" for suffix in ("md", "html", "csv")]


def scores_table(experiment: Experiment, every_training: dict) -> pd.DataFrame:
    """Every training's dev (last weights) and test (averaged) scores, from its bleu.json or
    f1.json, a row per variant and seed: the numbers the tables average, in one page of the
    report."""
    names = (("sacreBLEU", "sacrebleu"), ("BLEU (tokenized)", "tokenized_bleu"),
             ("PPL", "perplexity"))
    if experiment.task == "parsing":
        names = (("F1", "f1"), ("exact match", "exact_match"), ("PPL", "perplexity"))
    rows = []
    for (name, seed), results in every_training.items():
        row = {"variant": name, "seed": seed, "status": results.status}
        for label, key in names:
            row[f"{label} (dev)"] = results.dev(key)
            row[f"{label} (test)"] = results.test(key)
        rows.append(row)
    return pd.DataFrame(rows)


def scores_caption(experiment: Experiment) -> tuple[str, str, list[str]]:
    return (f"Scores per variant ({experiment.name})",
            "dev: the last weights; test: the average of the last checkpoints (Section 6.1).",
            ["PPL: perplexity per target word-piece, teacher-forced, no label smoothing."])


def render_tables(experiment: Experiment, results_dir: Path, out_dir: Path) -> list[Path]:
    """The experiment's tables as ``.md``, ``.html`` and ``.csv``, and its plots
    (:data:`reproduce.tables.outputs.TABLE_FILES`), from
    ``results_dir`` (the results root holding ``{experiment.name}/{variant}/``). Returns the
    files written."""
    results_dir, out_dir = Path(results_dir), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    every_training = {(name, seed): read_training(results_dir, experiment, name, seed)
                      for name in experiment.variants for seed in experiment.seeds(name)}
    written = _write_table(out_dir, "scores", scores_table(experiment, every_training),
                           scores_caption(experiment))
    if experiment.task == "parsing":
        written += _write_table(out_dir, "table4", build_table4(experiment, results_dir),
                                table4_caption(experiment))
        figures = {}
    else:
        table3 = build_table3(experiment, results_dir)
        written += _write_table(out_dir, "table2", build_table2(experiment, results_dir),
                                table2_caption(experiment, results_dir))
        written += _write_table(out_dir, "table3", table3, table3_caption(experiment))
        figures = {"bleu_vs_parameters.png": bleu_vs_parameters_figure(table3, experiment.name)}
    curves = {f"{name} seed {seed}" if len(experiment.seeds(name)) > 1 else name: results
              for (name, seed), results in every_training.items()}
    figures["dev_perplexity.png"] = dev_perplexity_figure(curves, experiment.name)
    for name, figure in figures.items():
        save_figure(figure, out_dir / name)
        written.append(out_dir / name)
    return written
