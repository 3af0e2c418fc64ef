"""The command line's commands, one module per pipeline stage, each command's options beside its
handler: :mod:`~reproduce.commands.data`, :mod:`~reproduce.commands.train`,
:mod:`~reproduce.commands.evaluate` and :mod:`~reproduce.commands.report`, and before them
:mod:`~reproduce.commands.settings`, which explains the experiment file's keys. Each module's
``register`` adds its commands to the parser of :mod:`reproduce.cli`, which holds what they share.

Handlers stay thin: they turn the parsed options into paths and settings and call the stage's
function, importing it (and torch, mlflow) only when the command runs, so that ``--help`` stays
fast. The helpers below are the ones several stages' handlers use.
"""

from __future__ import annotations

import argparse

from reproduce.config import ConfigError, Experiment, ResolvedVariant
from reproduce.experiment_file import load_experiment
from reproduce.errors import UsageError


def experiment_of(args: argparse.Namespace) -> Experiment:
    return load_experiment(args.experiment)


def variant_of(experiment: Experiment, args: argparse.Namespace) -> ResolvedVariant:
    if args.variant not in experiment.variants:
        raise ConfigError(
            f"--variant {args.variant!r}: not a variant of {args.experiment}; "
            f"known: {', '.join(experiment.variants)}"
        )
    return experiment.variant(args.variant, seed_of(experiment, args))


def seed_of(experiment: Experiment, args: argparse.Namespace) -> int:
    """``--seed``, one of the variant's seeds; left out, the first (the pipeline names it)."""
    seeds = experiment.seeds(args.variant)
    if args.seed is None:
        return seeds[0]
    if args.seed not in seeds:
        raise UsageError(f"--seed {args.seed}: not a seed of variant {args.variant!r} in "
                         f"{args.experiment}; its training.seed lists "
                         f"{', '.join(map(str, seeds))}")
    return args.seed


def set_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
