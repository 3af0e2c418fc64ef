"""Training commands: check the MLflow store, train one variant, average its checkpoints."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from reproduce.commands.arguments import (
    add_command, add_experiment, add_seed, add_threads, add_variant, existing_dir, existing_file,
    output_file, positive_int,
)
from reproduce.commands import experiment_of, set_threads, variant_of
from reproduce.errors import UsageError
from reproduce.training.slurm_request import SlurmRequest


def _init_tracking(commands: argparse._SubParsersAction) -> None:
    sub = add_command(commands, "init-tracking", cmd_init_tracking,
                      "check the MLflow tracking server (a silent one is a warning: the "
                      "trainings log to it when it answers), or create the embedded store")
    sub.add_argument("--results", required=True, help="results root (holds the MLflow store)")


def cmd_init_tracking(args: argparse.Namespace) -> None:
    from reproduce.tracking import prepare_store, redact

    uri = prepare_store(Path(args.results), wait_for_server=True)
    print(f"MLflow store: {redact(uri)}", file=sys.stderr)


def _train(commands: argparse._SubParsersAction) -> None:
    sub = add_command(commands, "train", cmd_train,
                      "train one variant (resumes from its checkpoints)")
    add_experiment(sub)
    add_variant(sub)
    add_seed(sub)
    sub.add_argument("--train-data", required=True, type=existing_dir, help="encoded train split")
    sub.add_argument("--dev-data", required=True, type=existing_dir, help="encoded dev split")
    sub.add_argument("--test-data", type=existing_dir,
                     help="encoded test split, read only to refuse before training a line that "
                          "evaluation, which decodes it after training, would refuse as too long")
    sub.add_argument("--out-dir", required=True,
                     help="the folder of the variant's training with this seed")
    sub.add_argument("--results", required=True, help="results root (holds the MLflow store)")
    sub.add_argument("--launcher", choices=["inline", "local", "slurm"], default="inline",
                     help="run in this process, in local processes, or as a Slurm job via submitit")
    sub.add_argument("--tasks", type=positive_int, default=1,
                     help="processes for the local launcher (default 1)")
    sub.add_argument("--slurm", action="append", default=[], metavar="NAME=VALUE",
                     help=f"the Slurm launcher's request, one resource at a time "
                          f"({', '.join(SlurmRequest.model_fields)}: reproduce settings slurm "
                          f"says what each asks for); the pipeline passes the train rule's "
                          f"resources")
    add_threads(sub)
    sub.add_argument("--restart", action="store_true",
                     help="start from step 0: move checkpoints/ and train/ aside into "
                          "replaced-<time>/")


def cmd_train(args: argparse.Namespace) -> None:
    experiment = experiment_of(args)
    variant = variant_of(experiment, args)
    from reproduce.training.launch import launch_training
    from reproduce.training.slurm_request import parse_request

    slurm = parse_request(args.slurm)
    set_threads(args.threads)
    launch_training(
        experiment=experiment,
        variant=variant,
        train_dir=Path(args.train_data),
        dev_dir=Path(args.dev_data),
        test_dir=None if args.test_data is None else Path(args.test_data),
        output_dir=Path(args.out_dir),
        results_dir=Path(args.results),
        launcher=args.launcher,
        tasks=args.tasks,
        slurm=slurm,
        threads=args.threads,
        restart=args.restart,
    )


def _average(commands: argparse._SubParsersAction) -> None:
    sub = add_command(commands, "average", cmd_average,
                      "average the last K checkpoints on the save grid")
    source = sub.add_mutually_exclusive_group(required=True)
    source.add_argument("--manifest", type=existing_file,
                        help="train/checkpoints.json: the grid checkpoints training kept")
    source.add_argument("--checkpoint-dir", type=existing_dir,
                        help="folder of step_*.pt checkpoints")
    sub.add_argument("--last", type=positive_int,
                     help="how many of the latest to average (default with --manifest: all listed)")
    sub.add_argument("--every-steps", type=positive_int,
                     help="with --checkpoint-dir: average only steps on this grid (default: the "
                          "last K files, refused unless evenly spaced)")
    sub.add_argument("--out", required=True, type=output_file,
                     help="the averaged checkpoint to write")


def cmd_average(args: argparse.Namespace) -> None:
    from reproduce.averaging import average_last, average_manifest

    if args.manifest is not None:
        average_manifest(Path(args.manifest), args.last, Path(args.out))
    elif args.last is None:
        raise UsageError("--checkpoint-dir needs --last (how many checkpoints to average)")
    else:
        average_last(Path(args.checkpoint_dir), args.last, Path(args.out), args.every_steps)


def register(commands: argparse._SubParsersAction) -> None:
    """Add the training commands, in the order the pipeline runs them."""
    for add in (_init_tracking, _train, _average):
        add(commands)
