"""Plots beside the tables: dev BLEU against parameters, and dev perplexity over training."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from reproduce.tables.results import VariantResults  # noqa: E402


def _save(figure, path: Path) -> None:
    temporary = path.with_name(path.stem + ".tmp.png")
    figure.savefig(temporary, dpi=120, bbox_inches="tight")
    plt.close(figure)
    temporary.replace(path)


def plot_bleu_vs_parameters(table3: pd.DataFrame, path: Path, dataset: str) -> None:
    figure, axes = plt.subplots(figsize=(6, 4))
    done = table3.dropna(subset=["BLEU (dev)", "params x10^6"])
    axes.scatter(done["params x10^6"], done["BLEU (dev)"])
    for _, row in done.iterrows():
        axes.annotate(row["variant"], (row["params x10^6"], row["BLEU (dev)"]), fontsize=8,
                      xytext=(3, 3), textcoords="offset points")
    if done.empty:
        axes.text(0.5, 0.5, "no results yet", ha="center", va="center", transform=axes.transAxes)
    axes.set(xlabel="parameters (millions)", ylabel="dev BLEU (tokenized)",
             title=f"{dataset}: Table 3 variants")
    _save(figure, path)


def plot_dev_perplexity(curves: dict[str, VariantResults], path: Path, dataset: str) -> None:
    figure, axes = plt.subplots(figsize=(6, 4))
    plotted = False
    for name, results in curves.items():
        if results.curve:
            axes.plot([row["step"] for row in results.curve],
                      [row["dev_perplexity"] for row in results.curve], label=name, marker=".")
            plotted = True
    if plotted:
        axes.set_yscale("log")
        axes.legend(fontsize=8)
    else:
        axes.text(0.5, 0.5, "no results yet", ha="center", va="center", transform=axes.transAxes)
    axes.set(xlabel="training step", ylabel="dev perplexity", title=f"{dataset}: dev perplexity")
    _save(figure, path)
