"""The command line (issue 12): --version, uniform flags, a help string on every option, and the
one-line error mapping of main()."""

from __future__ import annotations

import argparse
import importlib.metadata
import pickle

import pytest

from reproduce.cli import _parser, expected_error_message, main, positive_int
from reproduce.config import ConfigError
from reproduce.errors import CheckpointError


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_version_comes_from_the_installed_package(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0
    assert capsys.readouterr().out.strip() == f"reproduce {importlib.metadata.version('reproduce')}"


def test_every_option_of_every_command_has_a_help_string():
    parsers = {"reproduce": _parser()} | _subcommands()
    missing = [f"{name} {'/'.join(action.option_strings) or action.dest}"
               for name, parser in parsers.items() for action in parser._actions
               if not isinstance(action, argparse._SubParsersAction) and not action.help]
    assert missing == []


def test_every_command_takes_options_not_positional_paths():
    """The one positional argument is the name of a section (``reproduce settings training``)."""
    positional = [f"{name} {action.dest}" for name, parser in _subcommands().items()
                  for action in parser._actions if not action.option_strings]
    assert positional == ["settings section"]


def test_make_tiny_corpus_takes_out_like_every_other_command():
    args = _parser().parse_args(["make-tiny-corpus", "--out", "x.tgz"])
    assert args.out == "x.tgz"


@pytest.mark.parametrize("text, value", [("1", 1), ("16", 16)])
def test_positive_ints_are_accepted(text, value):
    assert positive_int(text) == value


@pytest.mark.parametrize("text", ["0", "-3", "two", "1.5", ""])
def test_anything_else_is_refused_as_a_positive_int(text):
    with pytest.raises(argparse.ArgumentTypeError, match="expected a positive integer"):
        positive_int(text)


def test_a_usage_error_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["average", "--checkpoint-dir", ".", "--last", "0", "--out", "x.pt"])
    assert exit.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "reproduce average: error: argument --last: expected a positive integer, got 0 "
        "(see reproduce average --help)"
    ]


def test_expected_errors_become_one_line_and_bugs_do_not():
    assert expected_error_message(ConfigError("a.yaml: model.x:\n  unknown key")) == \
        "a.yaml: model.x: unknown key"
    not_found = FileNotFoundError(2, "No such file or directory", "data/x.src")
    assert expected_error_message(not_found) == "data/x.src: No such file or directory"
    assert expected_error_message(IsADirectoryError(21, "Is a directory", "run/final.pt")) == \
        "run/final.pt: Is a directory"
    # A checkpoint that cannot be loaded is a CheckpointError, raised where it is loaded.
    assert expected_error_message(CheckpointError("run/final.pt: cannot use the checkpoint: "
                                                  "RuntimeError: size mismatch for w")) == \
        "run/final.pt: cannot use the checkpoint: RuntimeError: size mismatch for w"
    # Anything else is a bug: it keeps its traceback, whatever its message says.
    assert expected_error_message(RuntimeError("CUDA error: an illegal memory access")) is None
    mismatch = RuntimeError("Error(s) in loading state_dict for Transformer:\n\t"
                            "size mismatch for w")
    assert expected_error_message(mismatch) is None
    assert expected_error_message(EOFError("Ran out of input")) is None
    assert expected_error_message(pickle.UnpicklingError("Weights only load failed.")) is None
    assert expected_error_message(ValueError("invalid literal for int() with base 10: 'x'")) is None
    assert expected_error_message(KeyError("x")) is None
