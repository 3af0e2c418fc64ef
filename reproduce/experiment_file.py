"""Reading an experiment file (``configs/<dataset>.yaml``) into the schema of
:mod:`reproduce.config`, and YAML configuration files in general, with errors that name the file,
the line and the key.
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from reproduce.config import Experiment, describe_validation_error
from reproduce.files import UndecodableTextError, read_text
from reproduce.errors import ConfigError


class _ConfigLoader(yaml.SafeLoader):
    """PyYAML's safe loader, less two ways it silently changes what a file says.

    A key given twice in one mapping is an error (PyYAML keeps the last: a second ``model:``
    section would drop the first unseen), and a float written with an exponent but no dot or no
    exponent sign (``1e-9``, ``1.0e5``) is a float, as in YAML 1.2 and JSON (PyYAML's YAML 1.1
    reads it as a string, which a strict float field would refuse).
    """

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict:
        if isinstance(node, yaml.MappingNode):
            self._refuse_duplicate_keys(node)
        return super().construct_mapping(node, deep=deep)

    def _refuse_duplicate_keys(self, node: yaml.MappingNode) -> None:
        """Keys merged in by ``<<`` may be overridden; keys written in the mapping may not."""
        first_lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, Hashable):
                continue  # PyYAML reports an unhashable key itself
            line = key_node.start_mark.line + 1
            if key in first_lines:
                raise yaml.constructor.ConstructorError(
                    problem=f"key {key!r} given twice, at lines {first_lines[key]} and {line} "
                            "(give it once)",
                    problem_mark=key_node.start_mark)
            first_lines[key] = line


_ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def read_yaml(path: str | Path) -> Any:
    """The content of a YAML configuration file, read with :class:`_ConfigLoader`; a file that
    cannot be read, is not UTF-8 or is not valid YAML is a one-line :class:`ConfigError` naming
    the file and the line."""
    path = Path(path)
    try:
        text = read_text(path)
    except OSError as error:
        raise ConfigError(f"{path}: cannot read configuration file ({error.strerror})") from None
    except UndecodableTextError as error:
        raise ConfigError(str(error)) from None
    try:
        return yaml.load(text, Loader=_ConfigLoader)
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}{_yaml_position(error)}: not valid YAML: "
                          f"{_yaml_problem(error)}") from None


def _yaml_position(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    return f" line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""


def _yaml_problem(error: yaml.YAMLError) -> str:
    """PyYAML's problem on one line (its ``str`` spans several, quoting the offending line)."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem:
        context = f"{error.context}: " if error.context else ""
        return f"{context}{error.problem}"
    return " ".join(str(error).split())


def load_experiment(path: str | Path) -> Experiment:
    """Read and validate an experiment file; errors name the file and the offending key.

    Validation is strict (pydantic's strict mode): a YAML ``true`` or a quoted ``"6"`` where a
    number belongs is refused rather than read as 1 or 6; a float field still takes an integer.
    Strictness is asked for here, where file content enters, rather than on :class:`Strict`:
    :class:`~reproduce.training.slurm_request.SlurmRequest` shares that base and parses
    ``name=value`` strings, which must stay convertible.
    """
    path = Path(path)
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of keys at the top level")
    try:
        return Experiment.model_validate(raw, strict=True)
    except ValidationError as error:
        raise ConfigError(f"{path}: {describe_validation_error(error)}") from None
