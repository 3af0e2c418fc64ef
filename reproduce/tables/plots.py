"""Plots beside the tables: dev BLEU against model size (Table 3's variants) and dev perplexity
over training steps. Drawn from whatever has finished; an empty plot says so."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import LogFormatter  # noqa: E402

from reproduce.files import written_whole  # noqa: E402
from reproduce.tables.results import VariantResults  # noqa: E402


def save_figure(figure: Figure, path: Path) -> None:
    """Write ``figure`` as a PNG whole or not at all (a reader never sees half a file) and close
    it."""
    try:
        with written_whole(path, "wb") as stream:
            figure.savefig(stream, format="png", dpi=120, bbox_inches="tight")
    finally:
        plt.close(figure)


def _say_no_results_yet(axes: Axes) -> None:
    axes.text(0.5, 0.5, "no results yet", ha="center", va="center", transform=axes.transAxes)


def bleu_vs_parameters_figure(table3: pd.DataFrame, dataset: str) -> Figure:
    """Our tokenized dev BLEU against parameters (millions), one labelled point per variant."""
    figure, axes = plt.subplots(figsize=(6, 4))
    done = table3.dropna(subset=["BLEU (dev)", "params x10^6"])
    axes.scatter(done["params x10^6"], done["BLEU (dev)"])
    for _, row in done.iterrows():
        axes.annotate(row["variant"], (row["params x10^6"], row["BLEU (dev)"]), fontsize=8,
                      xytext=(3, 3), textcoords="offset points")
    if done.empty:
        _say_no_results_yet(axes)
    axes.set(xlabel="parameters (millions)", ylabel="dev BLEU (tokenized)",
             title=f"{dataset}: Table 3 variants")
    return figure


def dev_perplexity_figure(results: dict[str, VariantResults], dataset: str) -> Figure:
    """Dev perplexity per word-piece over training steps, one curve per variant."""
    figure, axes = plt.subplots(figsize=(6, 4))
    curves = {name: variant.dev_curve for name, variant in results.items() if variant.dev_curve}
    for name, curve in curves.items():
        axes.plot([row["step"] for row in curve], [row["dev_perplexity"] for row in curve],
                  label=name, marker=".")
    if curves:
        axes.set_yscale("log")
        # Plain numbers (6, 7, 8) rather than 6 x 10^0; minor ticks labelled when few decades.
        axes.yaxis.set_major_formatter(LogFormatter())
        axes.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False))
        axes.legend(fontsize=8)
    else:
        _say_no_results_yet(axes)
    axes.set(xlabel="training step", ylabel="dev perplexity", title=f"{dataset}: dev perplexity")
    return figure


def table1_figure(measured: pd.DataFrame, machine: str) -> Figure:
    """Table 1 measured: FLOPs and wall time per layer against n, log-log, one line per layer."""
    figure, (flops_axes, time_axes) = plt.subplots(1, 2, figsize=(11, 4.2))
    for layer, rows in measured.groupby("layer", sort=False):
        flops_axes.plot(rows["n"], rows["FLOPs counted"], marker="o", label=layer)
        time_axes.plot(rows["n"], rows["wall ms"], marker="o", label=layer)
        if not (rows["FLOPs formula"] == rows["FLOPs counted"]).all():  # the band-only count
            flops_axes.plot(rows["n"], rows["FLOPs formula"], linestyle="--",
                            label=f"{layer}, band only (formula)")
    for axes, label in ((flops_axes, "FLOPs per layer (counted)"),
                        (time_axes, "wall ms per layer")):
        axes.set_xscale("log", base=2)
        axes.set_yscale("log")
        axes.set_xlabel("sequence length n")
        axes.set_ylabel(label)
        axes.grid(True, which="both", alpha=0.3)
    d = int(measured["d"].iloc[0])
    flops_axes.legend(fontsize=7)
    time_axes.legend(fontsize=7)
    figure.suptitle(f"Table 1 measured, d = {d}: {machine}", fontsize=9)
    return figure
