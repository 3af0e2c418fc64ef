"""The command line (issue 12): --version, uniform flags, a help string on every option, and the
one-line error mapping of main()."""

from __future__ import annotations

import argparse
import importlib.metadata
import pickle

import pytest

from reproduce.cli import _parser, expected_error_message, main, positive_int
from reproduce.config import ConfigError


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
    positional = [f"{name} {action.dest}" for name, parser in _subcommands().items()
                  for action in parser._actions if not action.option_strings]
    assert positional == []


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


def _args(command, **values):
    return argparse.Namespace(command=command, **values)


def test_expected_errors_become_one_line_and_bugs_do_not():
    decode = _args("decode", checkpoint="run/final.pt")
    assert expected_error_message(ConfigError("a.yaml: model.x:\n  unknown key"), decode) == \
        "a.yaml: model.x: unknown key"
    assert expected_error_message(FileNotFoundError(2, "No such file or directory", "data/x.src"), decode) == \
        "data/x.src: No such file or directory"
    assert expected_error_message(IsADirectoryError(21, "Is a directory", "run/final.pt"), decode) == \
        "run/final.pt: Is a directory"
    # What checkpoint loading raises names the checkpoint option and file.
    assert expected_error_message(EOFError("Ran out of input"), decode) == \
        "--checkpoint run/final.pt: cannot use the checkpoint: EOFError: Ran out of input"
    unpickling = expected_error_message(pickle.UnpicklingError("Weights only load failed.\nMore."), decode)
    assert unpickling.startswith("--checkpoint run/final.pt: cannot use the checkpoint: UnpicklingError")
    mismatch = RuntimeError("Error(s) in loading state_dict for Transformer:\n\tsize mismatch for w: [2] vs [3].\n\tmore")
    assert expected_error_message(mismatch, decode) == (
        "--checkpoint run/final.pt: cannot use the checkpoint: RuntimeError: Error(s) in loading "
        "state_dict for Transformer: size mismatch for w: [2] vs [3]."
    )
    train = _args("train", out_dir="results/tiny/base")
    assert expected_error_message(EOFError(""), train).startswith("checkpoints in results/tiny/base/checkpoints:")
    # Anything else is a bug: it keeps its traceback.
    assert expected_error_message(RuntimeError("CUDA error: an illegal memory access"), decode) is None
    assert expected_error_message(EOFError("Ran out of input"), _args("tables")) is None
    assert expected_error_message(KeyError("x"), decode) is None
