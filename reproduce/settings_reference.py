"""The settings reference, read from the schema: every field of an experiment file (and of
training's Slurm request) with its type, bounds, default and description, as the pydantic models
of :mod:`reproduce.config` declare them. ``reproduce settings [SECTION]`` prints it, and
docs/configuration.md holds it in Markdown between :data:`BEGIN` and :data:`END`, so that neither
can say other than what validation does (``tests/test_settings_reference.py`` fails when the
document drifts; ``python -m reproduce.settings_reference`` rewrites it).
"""

from __future__ import annotations

import json
import sys
import textwrap
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from reproduce.config import (BpeConfig, DataConfig, DecodingConfig, Experiment, ModelConfig,
                              ScoringConfig, TablesConfig, TrainingPlan, Variant)
from reproduce.errors import DataError, UsageError
from reproduce.training.slurm_request import SlurmRequest

DOCUMENT = Path("docs/configuration.md")
BEGIN = ("<!-- settings reference: generated from the schema by "
         "`python -m reproduce.settings_reference`; edit the fields' descriptions, not this -->")
END = "<!-- end of the settings reference -->"
WIDTH = 100  # the columns ``reproduce settings`` wraps its text to


@dataclass(frozen=True)
class Section:
    """What ``reproduce settings NAME`` prints: a model at ``key`` of its file (``""``: the top
    level), with the models nested in it."""

    name: str
    key: str
    model: type[BaseModel]
    summary: str


def _part(name: str, model: type[BaseModel]) -> Section:
    """A section of the experiment file, summed up by its field's description there."""
    return Section(name, name, model, Experiment.model_fields[name].description)


SECTIONS = (
    Section("experiment", "", Experiment,
            "The top level of an experiment file (`configs/<dataset>.yaml`): one dataset and its "
            "variants."),
    _part("data", DataConfig),
    _part("bpe", BpeConfig),
    _part("model", ModelConfig),
    _part("training", TrainingPlan),
    _part("decoding", DecodingConfig),
    Section("variants", "variants.<name>", Variant,
            Experiment.model_fields["variants"].description),
    _part("tables", TablesConfig),
    _part("scoring", ScoringConfig),
    Section("slurm", "", SlurmRequest,
            "Training's Slurm request, in the profile (`slurm/config.yaml`): its set-resources: "
            "train, over its default-resources."),
)


@dataclass(frozen=True)
class Setting:
    key: str
    kind: str  # the type, with its bounds
    default: str
    description: str


@dataclass
class Block:
    """One model's fields, under every key it sits at (``data.train[]``, ``data.dev[]``...)."""

    keys: list[str]
    summary: str
    model: type[BaseModel]
    settings: list[Setting] = field(default_factory=list)


def section(name: str) -> Section:
    """The section called ``name``; an unknown one is a usage error listing the known."""
    for candidate in SECTIONS:
        if candidate.name == name:
            return candidate
    raise UsageError(f"unknown section {name!r}; known: "
                     f"{', '.join(candidate.name for candidate in SECTIONS)}")


def blocks(of: Section) -> list[Block]:
    """The section's model and each model nested in it (once, however many fields hold it), in
    the order of their fields. The experiment's top level stops at its sections, which are
    sections of their own."""
    found: dict[type[BaseModel], Block] = {}

    def visit(model: type[BaseModel], key: str, summary: str) -> None:
        if model in found:  # several fields hold it (data.train, dev, test): theirs describe it
            found[model].keys.append(key)
            found[model].summary = ""
            return
        block = found[model] = Block([key], summary, model)
        top_level = model is Experiment
        for name, info in model.model_fields.items():
            nested, place = _nested(info.annotation, _joined(key, name))
            command = f"reproduce settings {name}" if top_level and nested else None
            block.settings.append(_setting(_joined(key, name), info, command))
            if nested is not None and not top_level:
                visit(nested, place, info.description or "")

    visit(of.model, of.key, of.summary)
    return list(found.values())


def _joined(key: str, name: str) -> str:
    return f"{key}.{name}" if key else name


def _nested(annotation: Any, key: str) -> tuple[type[BaseModel] | None, str]:
    """The model a field holds, alone, as list items or as mapping values, and the key of one of
    them (``data.train[]``, ``variants.<name>``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, key
    origin, arguments = get_origin(annotation), get_args(annotation)
    if origin is list:
        inner, _ = _nested(arguments[0], key)
        return inner, f"{key}[]"
    if origin is dict:
        inner, _ = _nested(arguments[1], key)
        return inner, f"{key}.<name>"
    return None, key


SECTION_DEFAULT = "its fields' defaults"


def _setting(key: str, info: FieldInfo, command: str | None) -> Setting:
    """The field at ``key``; a section it holds is described below it, or by ``command``."""
    kind = ", ".join(filter(None, [_type(info.annotation), _bounds(info.metadata)]))
    if command is not None:
        kind += f", see {command}"
    if info.is_required():
        default = "required"
    elif isinstance(info.default, BaseModel):
        default = SECTION_DEFAULT
    else:
        default = _value(info.get_default(call_default_factory=True))
    return Setting(key, kind, default, info.description or "")


def _type(annotation: Any) -> str:
    """A field's type in words and YAML values: ``int or null``, ``"bpe" | "unigram"``."""
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    if annotation is Any:
        return "any"
    if isinstance(annotation, type):
        return {"str": "string", "int": "integer", "float": "number",
                "bool": "boolean"}.get(annotation.__name__, annotation.__name__)
    origin, arguments = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        bounds = _bounds([item for extra in annotation.__metadata__ for item in _items(extra)])
        return f"{_type(arguments[0])} {bounds}".strip()
    if origin is Literal:
        return " | ".join(_value(choice) for choice in arguments)
    if origin in (Union, types.UnionType):
        return " or ".join(_type(option) for option in arguments)
    if origin is list:
        inner = _type(arguments[0])
        return f"list of {inner}s" if inner == "section" else f"list of {inner}"
    if origin is dict:
        return f"mapping of {_type(arguments[0])} to {_type(arguments[1])}"
    return str(annotation)


def _items(extra: Any) -> list[Any]:
    """The constraints of one ``Annotated`` extra: a ``Field(...)``'s, or the extra itself."""
    return extra.metadata if isinstance(extra, FieldInfo) else [extra]


_BOUNDS = (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))


def _bounds(metadata: list[Any]) -> str:
    """A field's constraints in words: ``> 0``, ``at least 1``, ``matching `^[a-z]+$```. They are
    read by the attribute names pydantic gives them (``Field(gt=0)`` is annotated_types'
    ``Gt(gt=0)``)."""
    words = []
    for item in metadata:
        words += [f"{symbol} {_number(getattr(item, attribute))}" for attribute, symbol in _BOUNDS
                  if getattr(item, attribute, None) is not None]
        if getattr(item, "min_length", None) is not None:
            words.append(f"at least {item.min_length}")
        if getattr(item, "pattern", None) is not None:
            words.append(f"matching `{item.pattern}`")
    return ", ".join(words)


def _number(value: float) -> str:
    """``2^32`` for the large powers of two that bound seeds, the number itself otherwise."""
    if isinstance(value, int) and value >= 2**16 and value.bit_count() == 1:
        return f"2^{value.bit_length() - 1}"
    return _value(value)


def _value(value: Any) -> str:
    """A value as it is written in YAML (in JSON's flow style, which YAML reads)."""
    return json.dumps(value)


# ------------------------------------------------------------------------------------------------
# Renderings
# ------------------------------------------------------------------------------------------------
def _default(setting: Setting) -> str:
    if setting.default in ("required", SECTION_DEFAULT):
        return setting.default
    return f"default {setting.default}"


def text(of: Section) -> str:
    """The section as ``reproduce settings NAME`` prints it: each setting's key, type, bounds
    and default on one line, its description wrapped below."""
    lines = [f"{of.name}: {of.summary}"]
    for block in blocks(of):
        if block.model is not of.model:
            keys = ", ".join(block.keys)
            lines += ["", f"{keys}: {block.summary}" if block.summary else f"{keys}:"]
        for setting in block.settings:
            lines += ["", f"  {setting.key}  ({setting.kind}; {_default(setting)})"]
            lines += textwrap.wrap(setting.description, WIDTH, initial_indent=" " * 6,
                                   subsequent_indent=" " * 6, break_long_words=False,
                                   break_on_hyphens=False)
    return "\n".join(lines) + "\n"


def listing() -> str:
    """The sections and what each holds, as ``reproduce settings`` prints them."""
    indent = max(len(candidate.name) for candidate in SECTIONS) + 2
    return "".join(textwrap.fill(f"{candidate.name:<{indent}}{candidate.summary}", WIDTH,
                                 subsequent_indent=" " * indent, break_on_hyphens=False) + "\n"
                   for candidate in SECTIONS)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown() -> str:
    """Every section as Markdown tables, for docs/configuration.md."""
    lines = []
    for of in SECTIONS:
        lines += [f"### {of.name}", "", of.summary, ""]
        for block in blocks(of):
            if block.model is not of.model:
                keys = _cell(", ".join(f"`{key}`" for key in block.keys))
                lines += [f"**{keys}**: {block.summary}" if block.summary else f"**{keys}**", ""]
            lines += ["| Key | Type | Default | Description |", "|---|---|---|---|"]
            lines += [f"| `{setting.key}` | {_cell(setting.kind)} | {_cell(setting.default)} | "
                      f"{_cell(setting.description)} |" for setting in block.settings]
            lines.append("")
    return "\n".join(lines)


def with_reference(document: str, path: Path) -> str:
    """``document`` (read from ``path``) with the reference between its markers regenerated from
    the schema, and the rest kept."""
    start, end = document.find(BEGIN), document.find(END)
    if start < 0 or end < start:
        raise DataError(f"{path}: no settings reference between the lines {BEGIN!r} and {END!r}")
    return f"{document[:start + len(BEGIN)]}\n\n{markdown()}\n{document[end:]}"


def regenerate(path: Path = DOCUMENT) -> None:
    """Rewrite the reference in ``path`` from the schema."""
    path.write_text(with_reference(path.read_text(encoding="utf-8"), path), encoding="utf-8")


if __name__ == "__main__":
    regenerate(Path(sys.argv[1]) if len(sys.argv) > 1 else DOCUMENT)
