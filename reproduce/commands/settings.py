"""The settings command: what each key of an experiment file (or of training's Slurm request)
means, read from the schema that validates it (:mod:`reproduce.settings_reference`)."""

from __future__ import annotations

import argparse

from reproduce.commands.arguments import add_command
from reproduce.settings_reference import SECTIONS, listing, section, text


def _settings(commands: argparse._SubParsersAction) -> None:
    sub = add_command(commands, "settings", cmd_settings,
                      "print the experiment file's settings: each key's type, bounds, default and "
                      "meaning")
    sub.add_argument("section", nargs="?", default=None,
                     help=f"the section to print: {', '.join(of.name for of in SECTIONS)}; left "
                          f"out: what each holds")


def cmd_settings(args: argparse.Namespace) -> None:
    if args.section is None:
        print(listing(), end="")
        print("\nreproduce settings SECTION prints a section's keys.")
    else:
        print(text(section(args.section)), end="")


def register(commands: argparse._SubParsersAction) -> None:
    """Add the settings command."""
    _settings(commands)
