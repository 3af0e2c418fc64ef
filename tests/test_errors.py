"""One error contract: every ``raise`` in the package raises a :class:`ReproduceError`, re-raises
a caught error, or is on a short list of internal raises, each with its reason.

The command line reports a ReproduceError as one line and lets anything else through with its
traceback (a bug). A new ``raise ValueError(...)`` for bad input would therefore show a user a
traceback, or, worse, tempt someone to catch ValueError in ``main`` again; this test stops it
where it is written. The package is read with :mod:`ast`, not imported: fast, and it sees every
raise, including those in code the other tests do not reach.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from reproduce.cli import expected_error_message, main
from reproduce.errors import (CheckpointError, ConfigError, DataError, MissingInputError,
                              ReproduceError, UsageError)

PACKAGE = Path(__file__).resolve().parents[1] / "reproduce"

# (module, function, exception) -> why raising it there is not an expected error of the user's.
INTERNAL_RAISES = {
    ("reproduce/commands/arguments.py", "positive_int", "argparse.ArgumentTypeError"):
        "argparse reports it as the usage error of the option",
    ("reproduce/commands/arguments.py", "integers", "argparse.ArgumentTypeError"):
        "argparse reports it as the usage error of the option",
    ("reproduce/commands/arguments.py", "existing_file", "argparse.ArgumentTypeError"):
        "argparse reports it as the usage error of the option",
    ("reproduce/commands/arguments.py", "existing_dir", "argparse.ArgumentTypeError"):
        "argparse reports it as the usage error of the option",
    ("reproduce/commands/arguments.py", "checkpoint_file", "argparse.ArgumentTypeError"):
        "argparse reports it as the usage error of the option",
    ("reproduce/commands/arguments.py", "positive_seconds", "argparse.ArgumentTypeError"):
        "argparse reports it as the usage error of the option",
    ("reproduce/commands/arguments.py", "output_file", "argparse.ArgumentTypeError"):
        "argparse reports it as the usage error of the option",
    ("reproduce/commands/arguments.py", "seed_number", "argparse.ArgumentTypeError"):
        "argparse reports it as the usage error of the option",
    ("reproduce/config.py", "TrainingPlan._one_seed_or_distinct_seeds", "ValueError"):
        "pydantic makes it the field's validation error, a ConfigError naming training.seed",
    ("reproduce/config.py", "DecodingConfig._steps_or_auto", "ValueError"):
        "pydantic makes it the field's validation error, a ConfigError naming "
        "decoding.check_every",
    ("reproduce/experiment_file.py", "_ConfigLoader._refuse_duplicate_keys",
     "yaml.constructor.ConstructorError"):
        "PyYAML's own error, turned into a ConfigError naming the line by read_yaml",
    ("reproduce/data/download.py", "_fetch_with_retries", "AssertionError"):
        "unreachable: the retry loop returns or raises a DownloadError",
    ("reproduce/model/recurrent_attention.py", "GlobalAttention.scores", "NotImplementedError"):
        "abstract method of the recurrent attention variants",
    ("reproduce/parsing/linearize.py", "delinearize", "ValueError"):
        "a caller's bug: scoring refuses an empty source line before it delinearizes",
    ("reproduce/training/optimizer.py", "learning_rate", "ValueError"):
        "a caller's bug: the trainer counts steps from 1",
    ("reproduce/training/launch.py", "_exit_interrupted", "SystemExit"):
        "ends a trainer stopped by a signal with the shell's exit status for it",
    ("reproduce/training/launch.py", "launch_training", "RuntimeError"):
        "a submitted job failed; the job's own error is chained and keeps its traceback",
    ("reproduce/training/launch.py", "launch_training", "refusal"):
        "the TrainingJobRefused (a ReproduceError) read back from the failed job's refusal file",
}


@dataclass(frozen=True)
class Raise:
    module: str
    function: str
    line: int
    exception: str | None  # None: a bare ``raise`` or a re-raise of a caught error


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        owner = _name(node.value)
        return f"{owner}.{node.attr}" if owner else None
    return None


class _Walker(ast.NodeVisitor):
    def __init__(self, module: str):
        self.module, self.scope, self.caught = module, [], [set()]
        self.raises: list[Raise] = []
        self.classes: dict[str, list[str]] = {}
        self.factories: dict[str, str] = {}  # function -> the exception class it returns

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.classes[node.name] = [name.rsplit(".", 1)[-1]
                                   for base in node.bases if (name := _name(base))]
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.returns is not None and (returned := _name(node.returns)):
            self.factories[node.name] = returned
        self.scope.append(node.name)
        self.caught.append(set())
        self.generic_visit(node)
        self.caught.pop()
        self.scope.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self.caught[-1].add(node.name)
        self.generic_visit(node)

    def visit_Raise(self, node: ast.Raise) -> None:
        function = ".".join(self.scope) or "<module>"
        exc = node.exc
        if isinstance(exc, ast.Call):
            exception = _name(exc.func)
        elif isinstance(exc, ast.Name) and exc.id in self.caught[-1]:
            exception = None
        else:
            exception = _name(exc) if exc is not None else None
        self.raises.append(Raise(self.module, function, node.lineno, exception))
        self.generic_visit(node)


def _walk_package() -> tuple[list[Raise], dict[str, list[str]], dict[tuple[str, str], str]]:
    raises, classes, factories = [], {}, {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE.parent).as_posix()
        walker = _Walker(module)
        walker.visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        raises += walker.raises
        for name, bases in walker.classes.items():
            assert name not in classes or not name.endswith("Error"), f"{module}: {name} twice"
            classes[name] = bases
        factories |= {(module, name): returned for name, returned in walker.factories.items()}
    return raises, classes, factories


def _is_expected(name: str, classes: dict[str, list[str]]) -> bool:
    """Whether the package's class ``name`` derives from ReproduceError."""
    bases = classes.get(name, [])
    return name == "ReproduceError" or any(_is_expected(base, classes) for base in bases)


def _is_private_control_flow(raised: Raise, classes: dict[str, list[str]]) -> bool:
    """A ``_Private`` exception class of the package: signals within a module, caught there."""
    return raised.exception.startswith("_") and raised.exception in classes


def test_every_raise_is_an_expected_error_a_re_raise_or_a_known_internal_one():
    raises, classes, factories = _walk_package()
    unexplained = []
    for raised in raises:
        if raised.exception is None:
            continue
        exception = factories.get((raised.module, raised.exception), raised.exception)
        if _is_expected(exception.rsplit(".", 1)[-1], classes):
            continue
        if _is_private_control_flow(raised, classes):
            continue
        if (raised.module, raised.function, exception) not in INTERNAL_RAISES:
            where = f"{raised.module}:{raised.line} in {raised.function}"
            unexplained.append(f"{where}: raise {exception}")
    assert unexplained == [], (
        "raise a ReproduceError subclass (reproduce/errors.py) for what a user can fix; list an "
        "internal raise in INTERNAL_RAISES with its reason"
    )


def test_the_internal_raises_listed_still_exist():
    raises, _, factories = _walk_package()
    found = {(r.module, r.function, factories.get((r.module, r.exception or ""), r.exception))
             for r in raises}
    assert set(INTERNAL_RAISES) - found == set()


def test_the_walker_sees_a_bare_value_error(tmp_path):
    """The check itself: a raise of ValueError in a function is reported, a ReproduceError's
    subclass and a re-raise are not."""
    walker = _Walker("reproduce/example.py")
    walker.visit(ast.parse(
        "class LocalError(DataError):\n    pass\n"
        "def f(x):\n"
        "    try:\n        pass\n    except OSError as error:\n        raise error\n"
        "    if x:\n        raise LocalError('x')\n"
        "    raise ValueError(f'bad {x}')\n"))
    assert [(r.function, r.exception) for r in walker.raises] == [("f", None), ("f", "LocalError"),
                                                                     ("f", "ValueError")]
    classes = walker.classes | {"DataError": ["ReproduceError"]}
    assert _is_expected("LocalError", classes) and not _is_expected("ValueError", classes)


@pytest.mark.parametrize("kind, also", [(ConfigError, ValueError), (UsageError, ValueError),
                                        (DataError, ValueError), (CheckpointError, ValueError),
                                        (MissingInputError, FileNotFoundError)])
def test_each_kind_is_an_expected_error_and_still_what_callers_catch(kind, also):
    error = kind("some.yaml: model.x: unknown key")
    assert isinstance(error, ReproduceError) and isinstance(error, also)
    assert expected_error_message(error) == "some.yaml: model.x: unknown key"


@pytest.mark.parametrize("bug", [ValueError("invalid literal for int()"),
                                 RuntimeError("Error(s) in loading state_dict: size mismatch"),
                                 EOFError("Ran out of input"), KeyError("model"),
                                 OSError("no file named")])
def test_anything_else_is_a_bug_that_keeps_its_traceback(bug):
    assert expected_error_message(bug) is None


def _failing_tiny_corpus(monkeypatch, error: Exception) -> None:
    def fail(out):
        raise error

    monkeypatch.setattr("reproduce.data.tiny_corpus.write_tiny_corpus_archive", fail)


def test_main_reports_an_expected_error_in_one_line(monkeypatch, capsys, tmp_path):
    _failing_tiny_corpus(monkeypatch, DataError("corpus.txt line 3: not UTF-8"))
    with pytest.raises(SystemExit) as exit:
        main(["make-tiny-corpus", "--out", str(tmp_path / "t.tgz")])
    assert exit.value.code == "reproduce make-tiny-corpus: error: corpus.txt line 3: not UTF-8"


def test_main_lets_a_value_error_through_with_its_traceback(monkeypatch, tmp_path):
    _failing_tiny_corpus(monkeypatch, ValueError("math domain error"))
    with pytest.raises(ValueError, match="math domain error"):
        main(["make-tiny-corpus", "--out", str(tmp_path / "t.tgz")])
