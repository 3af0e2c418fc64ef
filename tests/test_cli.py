"""The command line (issue 12): --version, uniform flags, a help string on every option, and the
one-line error mapping of main()."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import pickle
from pathlib import Path

import pytest
import torch

from reproduce.cli import _parser, expected_error_message, main
from reproduce.commands.arguments import positive_int, seed_number
from reproduce.commands.report import layer_numbers, line_numbers
from reproduce.config import ConfigError
from reproduce.errors import CheckpointError

ROOT = Path(__file__).resolve().parents[1]


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


def test_seed_zero_is_a_seed():
    """``training.seed`` may list 0 (an integer >= 0): ``--seed 0`` names it, and is not refused
    as if it were left out."""
    assert seed_number("0") == 0
    with pytest.raises(argparse.ArgumentTypeError, match="an integer >= 0, got -1"):
        seed_number("-1")


def test_line_numbers_count_from_0_and_layers_from_1():
    """--sentences 0 is the first line and --layers 1 the first layer: both are taken, the
    number below each is refused."""
    assert line_numbers("0,2") == [0, 2]
    assert layer_numbers("1,6") == [1, 6]
    with pytest.raises(argparse.ArgumentTypeError, match="0-based line numbers"):
        line_numbers("0,-1")
    with pytest.raises(argparse.ArgumentTypeError, match="1-based layer numbers"):
        layer_numbers("0")


@pytest.fixture
def launched(tmp_path, monkeypatch) -> list[dict]:
    """What ``reproduce train`` hands the launcher, which is not run; the command's torch
    threads set back afterwards."""
    calls: list[dict] = []
    monkeypatch.setattr("reproduce.training.launch.launch_training",
                        lambda **options: calls.append(options))
    for split in ("train", "dev", "test"):
        (tmp_path / split).mkdir()
    threads = torch.get_num_threads()
    yield calls
    torch.set_num_threads(threads)


def _train(tmp_path: Path, *options: str) -> None:
    main(["train", "--experiment", str(ROOT / "configs/tiny.yaml"), "--variant", "base",
          "--train-data", str(tmp_path / "train"), "--dev-data", str(tmp_path / "dev"),
          "--out-dir", str(tmp_path / "out"), "--results", str(tmp_path / "results"), *options])


def test_train_hands_every_option_to_the_launcher(tmp_path, launched):
    """No option of ``train`` is dropped on its way: the seed chosen, the splits each in its
    place, the launcher, its tasks and threads, and --restart."""
    _train(tmp_path, "--seed", "2", "--launcher", "local", "--tasks", "3", "--threads", "2",
           "--restart", "--slurm", "slurm_partition=gpu", "--test-data", str(tmp_path / "test"))
    [options] = launched
    variant = options.pop("variant")
    assert (variant.name, variant.training.seed) == ("base", 2)
    assert options.pop("slurm").slurm_partition == "gpu"
    assert options.pop("experiment").name == "tiny"
    assert options == {"train_dir": tmp_path / "train", "dev_dir": tmp_path / "dev",
                       "test_dir": tmp_path / "test", "output_dir": tmp_path / "out",
                       "results_dir": tmp_path / "results", "launcher": "local", "tasks": 3,
                       "threads": 2, "restart": True}


def test_train_without_options_trains_the_first_seed_inline_without_restarting(tmp_path,
                                                                               launched):
    """The defaults the pipeline relies on: the variant's first seed (``training.seed: [1, 2]``),
    in this process, one task, one thread, resuming rather than restarting."""
    _train(tmp_path)
    [options] = launched
    assert options["variant"].training.seed == 1
    assert (options["launcher"], options["tasks"], options["threads"], options["restart"],
            options["test_dir"]) == ("inline", 1, 1, False, None)


def test_summarize_writes_the_dev_and_test_scores_each_under_its_split(tmp_path):
    """The summary the tables read: dev scores under ``dev``, test under ``test``, and the
    training's seed, 0 included."""
    (tmp_path / "dev.json").write_text(json.dumps({"split": "dev", "sacrebleu": 20.5}))
    (tmp_path / "test.json").write_text(json.dumps({"split": "test", "sacrebleu": 19.0}))
    main(["summarize", "--dataset", "tiny", "--variant", "base", "--seed", "0", "--dev",
          str(tmp_path / "dev.json"), "--test", str(tmp_path / "test.json"), "--out",
          str(tmp_path / "summary.json")])
    assert json.loads((tmp_path / "summary.json").read_text()) == {
        "dataset": "tiny", "variant": "base", "seed": 0,
        "dev": {"split": "dev", "sacrebleu": 20.5}, "test": {"split": "test", "sacrebleu": 19.0}}
