"""The paper's tables and figures: Tables 2-4 from the finished scores, the attention heads of
Figures 3-5, and Table 1 measured on this machine."""

from __future__ import annotations

import argparse
from pathlib import Path

from reproduce.commands.arguments import (
    add_command, add_experiment, add_threads, checkpoint_file, existing_file, integers,
    positive_int, positive_seconds, seed_number,
)
from reproduce.commands import experiment_of
from reproduce.errors import UsageError


def _tables(commands: argparse._SubParsersAction) -> None:
    sub = add_command(commands, "tables", cmd_tables,
                      "render the experiment's tables (2 and 3, or 4 for parsing) from whatever "
                      "has finished")
    add_experiment(sub)
    sub.add_argument("--results", required=True, help="results root")
    sub.add_argument("--out-dir", required=True, help="folder for the tables and plots")


def cmd_tables(args: argparse.Namespace) -> None:
    from reproduce.tables.render import render_tables
    from reproduce.tracking import log_best_effort, tables_run

    experiment = experiment_of(args)
    results = Path(args.results)
    written = render_tables(experiment, results, Path(args.out_dir))

    def log_tables() -> None:
        with tables_run(results, experiment.name) as run:
            for path in written:
                run.log_artifact(path, "tables")

    log_best_effort(results, "the tables", log_tables)
    for path in written:
        print(path)


def _mlflow_address(commands: argparse._SubParsersAction) -> None:
    sub = add_command(commands, "mlflow-address", cmd_mlflow_address,
                      "print the MLflow UI's address of each experiment: its variants' runs with "
                      "the key results as columns, and its tables")
    sub.add_argument("--results", required=True, help="results root (holds the MLflow store)")
    sub.add_argument("--ui", default=None,
                     help="the UI's address (default: the tracking server's, else mlflow ui's "
                          "http://127.0.0.1:5000)")


def cmd_mlflow_address(args: argparse.Namespace) -> None:
    from reproduce.tracking.view import addresses

    for name, address in addresses(Path(args.results), args.ui).items():
        print(f"{name}: {address}")


def line_numbers(text: str) -> list[int]:
    """--sentences: lines of the source and target files, counted from 0 as Python does."""
    return integers(text, 0, "0-based line numbers")


def layer_numbers(text: str) -> list[int]:
    """--layers: counted from 1, as the paper numbers them (Figure 3 shows layer 5 of 6); the
    model's own range is checked once it is loaded."""
    return integers(text, 1, "1-based layer numbers")


def _attention(commands: argparse._SubParsersAction) -> None:
    sub = add_command(commands, "attention", cmd_attention,
                      "Figures 3-5: plot the attention heads of chosen layers for chosen sentences")
    sub.add_argument("--checkpoint", required=True, type=checkpoint_file,
                     help="trained checkpoint (final.pt or averaged.pt)")
    sub.add_argument("--spm-model", required=True, type=existing_file, help="sentencepiece model")
    sub.add_argument("--source", required=True, help="source sentences, one per line")
    sub.add_argument("--target", required=True,
                     help="their translations (e.g. the model's own), one per line")
    sub.add_argument("--sentences", type=line_numbers, default="0",
                     help="0-based line numbers, comma-separated")
    sub.add_argument("--layers", type=layer_numbers, default=None,
                     help="1-based layers, comma-separated (default: last)")
    sub.add_argument("--out-dir", required=True, help="folder for the figures")
    sub.add_argument("--results", default=None, help="results root, to log to the variant's run")
    sub.add_argument("--dataset", default=None, help="dataset of the variant's MLflow run")
    sub.add_argument("--variant", default=None, help="variant whose MLflow run gets the figures")
    sub.add_argument("--seed", type=seed_number, default=None,
                     help="seed of that variant's training whose run gets them")


def cmd_attention(args: argparse.Namespace) -> None:
    from reproduce.figures.attention import plot_attention
    from reproduce.tracking import log_best_effort, variant_run_for

    if args.results and not (args.dataset and args.variant and args.seed is not None):
        raise UsageError("--results needs --dataset, --variant and --seed (the run to log the "
                         "plots to)")
    written = plot_attention(Path(args.checkpoint), Path(args.spm_model), Path(args.source),
                             Path(args.target), args.sentences, args.layers, Path(args.out_dir))

    def log_figures() -> None:
        run = variant_run_for(Path(args.results), args.dataset, args.variant, args.seed,
                              "attention")
        for path in written:
            run.log_artifact(path, "figures")

    if args.results:
        log_best_effort(Path(args.results), "the attention figures", log_figures)
    for path in written:
        print(path)


def sequence_lengths(text: str) -> list[int]:
    """--lengths: refused before any timing starts, not after minutes of measuring."""
    return integers(text, 1, "positive sequence lengths")


def _table1(commands: argparse._SubParsersAction) -> None:
    sub = add_command(commands, "table1", cmd_table1,
                      "Table 1: complexity per layer, analytic and measured on this machine")
    sub.add_argument("--out-dir", required=True, help="folder for table1.md, .csv and .png")
    sub.add_argument("--lengths", type=sequence_lengths, default="16,32,64,128,256,512,1024",
                     help="sequence lengths n, comma-separated")
    sub.add_argument("--d-model", type=positive_int, default=512, help="model width d")
    sub.add_argument("--kernel", type=positive_int, default=3, help="convolution width k")
    sub.add_argument("--radius", type=positive_int, default=16,
                     help="restricted self-attention's r")
    add_threads(sub)
    sub.add_argument("--min-run-time", type=positive_seconds, default=0.2,
                     help="seconds of repeated runs per timing")


def cmd_table1(args: argparse.Namespace) -> None:
    from reproduce.tables.table1 import render_table1

    if args.d_model % 8:  # positive already (its argparse type)
        raise UsageError(f"--d-model {args.d_model}: expected a positive multiple of 8 (the heads)")
    if args.kernel % 2 == 0:  # positive already (its argparse type), as is --radius
        raise UsageError(f"--kernel {args.kernel} must be odd and positive (same padding)")
    for path in render_table1(Path(args.out_dir), args.lengths, args.d_model, args.kernel,
                              args.radius, args.threads, args.min_run_time):
        print(path)


def register(commands: argparse._SubParsersAction) -> None:
    """Add the commands of the paper's tables and figures, in the order of the pipeline."""
    for add in (_tables, _mlflow_address, _attention, _table1):
        add(commands)
