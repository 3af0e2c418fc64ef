"""Settings that explain themselves: every field of the schema carries its description, and
``reproduce settings`` and docs/configuration.md's reference are generated from it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from reproduce import settings_reference
from reproduce.config import CheckpointConfig, Strict, TrainingPlan
from reproduce.errors import DataError

ROOT = Path(__file__).resolve().parents[1]


def _settings_models() -> list[type[BaseModel]]:
    """Every model of settings: the subclasses of :class:`Strict`, however deep (the reference's
    import brings in those outside reproduce.config, the Slurm request's)."""
    found, waiting = [], [Strict]
    while waiting:
        for model in waiting.pop().__subclasses__():
            found.append(model)
            waiting.append(model)
    return found


def _reproduce(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reproduce", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def _words(text: str) -> str:
    return " ".join(text.split())


def test_every_field_of_every_settings_model_has_a_description():
    models = _settings_models()
    assert {"Experiment", "TrainingPlan", "Source", "SlurmRequest"} <= {m.__name__ for m in models}
    missing = [f"{model.__module__}.{model.__name__}.{name}" for model in models
               for name, info in model.model_fields.items()
               if not (info.description or "").strip()]
    assert missing == []


def test_every_settings_model_is_in_a_section():
    """A new model of an experiment file's settings shows up in ``reproduce settings``; the
    resolved variant and the training of one seed are the file's models resolved, not written."""
    shown = {block.model for of in settings_reference.SECTIONS
             for block in settings_reference.blocks(of)}
    assert {model.__name__ for model in _settings_models() if model not in shown} == {
        "ResolvedVariant", "TrainingConfig"}


def test_the_documents_reference_is_the_schemas():
    path = ROOT / settings_reference.DOCUMENT
    document = path.read_text(encoding="utf-8")
    assert document == settings_reference.with_reference(document, path), (
        f"{settings_reference.DOCUMENT}'s settings reference differs from the schema "
        "(reproduce/config.py); regenerate it: python -m reproduce.settings_reference")


def test_regenerating_replaces_the_reference_and_keeps_the_rest(tmp_path):
    path = tmp_path / "configuration.md"
    path.write_text(f"# Before\n\n{settings_reference.BEGIN}\nstale table\n"
                    f"{settings_reference.END}\n\nAfter.\n", encoding="utf-8")
    settings_reference.regenerate(path)
    document = path.read_text(encoding="utf-8")
    assert "stale table" not in document
    assert document.startswith(f"# Before\n\n{settings_reference.BEGIN}\n")
    assert document.endswith(f"{settings_reference.END}\n\nAfter.\n")
    assert "| `training.steps` |" in document
    settings_reference.regenerate(path)
    assert path.read_text(encoding="utf-8") == document


def test_a_document_without_the_markers_is_named(tmp_path):
    path = tmp_path / "configuration.md"
    path.write_text("# No reference here\n", encoding="utf-8")
    with pytest.raises(DataError, match="configuration.md: no settings reference"):
        settings_reference.regenerate(path)


def _expected_default(info) -> str:
    if info.is_required():
        return "required"
    if isinstance(info.default, BaseModel):
        return "its fields' defaults"
    return f"default {json.dumps(info.default)}"


def test_settings_training_prints_every_training_field_with_its_default_and_description():
    result = _reproduce("settings", "training")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for prefix, model in (("training", TrainingPlan),
                          ("training.checkpoints", CheckpointConfig)):
        for name, info in model.model_fields.items():
            key = f"{prefix}.{name}"
            heading = next((line for line in lines if line.startswith(f"  {key}  (")), None)
            assert heading is not None, f"{key} not printed"
            assert heading.endswith(f"; {_expected_default(info)})"), heading
            start = lines.index(heading) + 1
            described = []
            while start < len(lines) and lines[start].startswith("      "):
                described.append(lines[start])
                start += 1
            assert _words(" ".join(described)) == _words(info.description), key


def test_settings_training_shows_the_bounds():
    result = _reproduce("settings", "training")
    assert "  training.adam_beta1  (number, >= 0, < 1; default 0.9)" in result.stdout
    assert "  training.steps  (integer, > 0; required)" in result.stdout
    assert ('  training.precision  ("fp32" | "bf16" | "fp16" | "auto"; default "fp32")'
            in result.stdout)


def test_settings_without_a_section_lists_the_sections():
    result = _reproduce("settings")
    assert result.returncode == 0, result.stderr
    listed = [line.split()[0] for line in result.stdout.splitlines()
              if line and not line.startswith(" ")]
    assert listed[:len(settings_reference.SECTIONS)] == [
        of.name for of in settings_reference.SECTIONS]
    assert {"experiment", "data", "model", "training", "decoding", "slurm"} <= set(listed)


def test_an_unknown_section_is_one_line_naming_the_known_ones():
    result = _reproduce("settings", "trainig")
    assert result.returncode != 0
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("reproduce settings: error: unknown section 'trainig'; "
                                    "known: experiment, data, bpe, model, training")


def test_the_slurm_option_of_train_names_every_resource_of_the_request():
    from reproduce.training.slurm_request import SlurmRequest

    result = _reproduce("train", "--help")
    assert result.returncode == 0, result.stderr
    assert _words(", ".join(SlurmRequest.model_fields)) in _words(result.stdout)
    assert "reproduce settings slurm" in _words(result.stdout)


def _properties(schema: dict, key: str = "") -> list[tuple[str, dict]]:
    """Every property of a JSON schema, however deep, with its dotted key."""
    found = []
    for name, value in schema.get("properties", {}).items():
        found += [(f"{key}{name}", value), *_properties(value, f"{key}{name}.")]
    return found


def test_every_key_of_the_pipeline_config_has_a_description():
    """The pipeline config is validated by a JSON schema, which keeps its descriptions as data
    too."""
    schema = yaml.safe_load((ROOT / "workflow/schemas/pipeline.schema.yaml").read_text())
    keys = _properties(schema)
    assert {"experiments", "training.launcher"} <= {key for key, _ in keys}
    assert [key for key, value in keys if not str(value.get("description", "")).strip()] == []
