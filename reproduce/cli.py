"""Command line of the package: one sub-command per pipeline stage (``python -m reproduce --help``).

Each command takes explicit input and output paths, so that the Snakemake rules (and users) call
the stages one by one. The commands live by stage in :mod:`reproduce.commands` (data, training,
evaluation, the paper's tables and figures), each beside the options it declares; this module
holds what they share: the parser and its argument types, and :func:`main`. Heavy imports happen
inside the commands to keep ``--help`` fast.

Every expected error (bad input, refused operation) ends the command with one line
``reproduce <command>: error: ...`` naming the file or field and a non-zero exit status; the
traceback is shown only with ``--verbose``. Arguments are checked by their argparse types before
any work starts; errors raised later are mapped to that line in one place, :func:`main`.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import sys
import traceback

from reproduce.errors import ReproduceError

# ------------------------------------------------------------------------------------------------
# Arguments
# ------------------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are the same single line as every other expected error."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _version() -> str:
    try:
        return importlib.metadata.version("reproduce")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (package not installed)"


def _parser() -> argparse.ArgumentParser:
    # Imported here, not at the top: the stage modules import this module's argument types.
    from reproduce.commands import data, evaluate, report, settings, train

    parser = _Parser(
        prog="reproduce", description="Reproduce 'Attention Is All You Need', stage by stage."
    )
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="debug logging, and the traceback of any error")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}",
                        help="print the package version and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for stage in (settings, data, train, evaluate, report):  # --help lists them in this order
        stage.register(commands)
    return parser


# ------------------------------------------------------------------------------------------------
# Errors
# ------------------------------------------------------------------------------------------------
def _one_line(text: str) -> str:
    return " ".join(text.split())


def expected_error_message(error: BaseException) -> str | None:
    """The one-line message of an expected error, or None for a bug (which keeps its traceback).

    Expected are the package's :class:`ReproduceError` (whatever else it derives from) and an
    OSError about a named file (a path given that cannot be read or written). Anything else,
    a ValueError or a RuntimeError included, is a bug: the modules that load checkpoints wrap
    torch's failures into :class:`~reproduce.errors.CheckpointError` themselves."""
    if isinstance(error, ReproduceError):
        return _one_line(str(error))
    if isinstance(error, OSError) and error.filename is not None:
        return _one_line(f"{error.filename}: {error.strerror or error}")
    return None


def main(argv: list[str] | None = None) -> None:
    """Run one command; an expected error ends it with one line. (Ctrl-C is handled by the entry
    point, :mod:`reproduce.__main__`, before this module is imported.)"""
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    try:
        args.handler(args)
    except Exception as error:
        message = expected_error_message(error)
        if message is None:
            raise
        if args.verbose:
            traceback.print_exc()
        sys.exit(f"reproduce {args.command}: error: {message}")
