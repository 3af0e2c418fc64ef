"""The command line's commands, one module per pipeline stage, each command's options beside its
handler: :mod:`~reproduce.commands.data`, :mod:`~reproduce.commands.train`,
:mod:`~reproduce.commands.evaluate` and :mod:`~reproduce.commands.report`. Each module's
``register`` adds its commands to the parser of :mod:`reproduce.cli`, which holds what they share.

Handlers stay thin: they turn the parsed options into paths and settings and call the stage's
function, importing it (and torch, mlflow) only when the command runs, so that ``--help`` stays
fast. The helpers below are the ones several stages' handlers use.
"""

from __future__ import annotations

import argparse

from reproduce.config import ConfigError, Experiment, ResolvedVariant, load_experiment


def experiment_of(args: argparse.Namespace) -> Experiment:
    return load_experiment(args.experiment)


def variant_of(experiment: Experiment, args: argparse.Namespace) -> ResolvedVariant:
    if args.variant not in experiment.variants:
        raise ConfigError(
            f"--variant {args.variant!r}: not a variant of {args.experiment}; "
            f"known: {', '.join(experiment.variants)}"
        )
    return experiment.variant(args.variant)


def set_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
