"""The arguments the commands share: argparse types that check a value before any work starts
(a bad one is a usage error of its option, exit status 2) and the options many commands take.

They live apart from :mod:`reproduce.cli`, which builds the parser from the stage modules, so
that those modules import them without importing the command line itself.
"""

from __future__ import annotations

import argparse
import math
import os
import zipfile
from collections.abc import Callable
from pathlib import Path

Handler = Callable[[argparse.Namespace], None]


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def positive_seconds(text: str) -> float:
    """A duration: a finite number above 0 (NaN or infinity would repeat a timing forever)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds above 0, got {text}")
    return value


def integers(text: str, smallest: int, expected: str) -> list[int]:
    """Comma-separated integers, none below ``smallest`` (``expected`` says what they are), for
    the argparse types of options that take a list ("4,8,16"): a bad list is then a usage error
    of its option, refused before any work starts."""
    try:
        values = [int(item) for item in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers") from None
    if any(value < smallest for value in values):
        raise argparse.ArgumentTypeError(f"{text}: expected {expected}")
    return values


def existing_file(text: str) -> Path:
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{path}: is a directory, expected a file")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{path}: no such file")
    return path


def output_file(text: str) -> str:
    """A file to write (the text given, as other path options): an existing folder of that name is
    refused here, before the work whose result could not be written there."""
    if Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text}: is a directory, expected a file to write")
    return text


def existing_dir(text: str) -> Path:
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{path}: no such directory")
    return path


def checkpoint_file(text: str) -> Path:
    """A file in torch's checkpoint format (a zip archive): a truncated or empty one is refused
    here, before any model is built."""
    path = existing_file(text)
    if not zipfile.is_zipfile(path):
        raise argparse.ArgumentTypeError(
            f"{path}: not a readable checkpoint ({path.stat().st_size} bytes, no zip directory: "
            f"truncated or not written by torch.save)"
        )
    return path


def add_command(commands: argparse._SubParsersAction, name: str, handler: Handler,
                help: str) -> argparse.ArgumentParser:
    """A sub-command whose one-line help is also its description, run by ``handler``."""
    sub = commands.add_parser(name, help=help, description=help)
    sub.set_defaults(handler=handler)
    return sub


def add_experiment(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--experiment", required=True, help="experiment file (configs/*.yaml)")


def add_variant(sub: argparse.ArgumentParser,
                help: str = "the variant's name in the experiment file") -> None:
    sub.add_argument("--variant", required=True, help=help)


def seed_number(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a seed, an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a seed, an integer >= 0, got {value}")
    return value


def add_seed(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--seed", type=seed_number, default=None,
                     help="which of the variant's training seeds (training.seed; default: the "
                          "first)")


def usable_cores() -> int:
    """The cores this process may run on (its affinity, which Slurm and taskset narrow)."""
    return len(os.sched_getaffinity(0))


def add_threads(sub: argparse.ArgumentParser, default: int = 1) -> None:
    sub.add_argument("--threads", type=positive_int, default=default,
                     help=f"CPU threads per process (default {default})")
