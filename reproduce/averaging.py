"""Checkpoint averaging (section 6.1): the parameters of the last 5 (base) or 20 (big)
checkpoints, written at fixed intervals, are averaged into the model used for Table 2.

Only checkpoints of one run are averaged (:func:`reproduce.provenance.same_run`); the average
carries their identity on (:class:`reproduce.provenance.ModelIdentity`), so that decoding can
check it.

The pipeline averages what training listed in its manifest (``train/checkpoints.json``,
:func:`average_manifest`): the checkpoints on the save grid, which every run of the same settings
writes, however often it was stopped and resumed; a checkpoint written by a stop request or a
wall-clock save is left out, so the average equals an uninterrupted run's bit for bit. The
manifest is a declared output of training, so Snakemake sees what ``average`` reads."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch

from reproduce.errors import CheckpointError, UsageError
from reproduce.provenance import recorded_identity, same_run
from reproduce.training.checkpoints import (checkpoint_step, list_checkpoints, load_checkpoint,
                                            on_grid, recorded_digest, save_checkpoint)

log = logging.getLogger(__name__)


def average_checkpoints(paths: list[Path]) -> dict:
    """The element-wise mean of the models in ``paths`` (in float64, cast back to each dtype)."""
    states = [load_checkpoint(path) for path in paths]
    for path, state in zip(paths[1:], states[1:], strict=True):
        if not same_run(state, states[0]):
            raise CheckpointError(
                f"{path}: trained with other settings (fingerprint {state.get('fingerprint')}) "
                f"than {paths[0]} ({states[0].get('fingerprint')}); only checkpoints of one run "
                "are averaged"
            )
    models = [state["model"] for state in states]
    for path, model in zip(paths[1:], models[1:], strict=True):
        _check_same_tensors(path, model, paths[0], models[0])
    averaged = {}
    for name, first in models[0].items():
        tensors = [model[name] for model in models]
        if first.is_floating_point():
            averaged[name] = (sum(t.double() for t in tensors) / len(tensors)).to(first.dtype)
        elif all(torch.equal(first, t) for t in tensors):
            averaged[name] = first.clone()
        else:
            raise CheckpointError(f"integer tensor {name!r} differs between {paths[0]} and the "
                                  "others")
    return {"model": averaged, **recorded_identity(states[-1]), "step": states[-1]["step"],
            "averaged_steps": [state["step"] for state in states]}


def _check_same_tensors(path: Path, model: dict, first_path: Path, first: dict) -> None:
    """Refuse, naming both files, a model whose tensors differ in name or shape from the first's
    (a checkpoint of another model), before torch fails on them mid-average."""
    names = model.keys() ^ first.keys()
    if names:
        raise CheckpointError(f"{path}: cannot use the checkpoint: tensor {sorted(names)[0]!r} is "
                              f"in only one of it and {first_path}; only checkpoints of one run "
                              "are averaged")
    for name, tensor in model.items():
        if tensor.shape != first[name].shape:
            raise CheckpointError(
                f"{path}: cannot use the checkpoint: tensor {name!r} has shape "
                f"{list(tensor.shape)}, but {list(first[name].shape)} in {first_path}; only "
                "checkpoints of one run are averaged")


def _check_last(k: int | None) -> None:
    if k is not None and k < 1:
        raise UsageError(f"average_last: --last must be at least 1, got {k}")


def _save_average(paths: list[Path], output: Path) -> dict:
    state = average_checkpoints(paths)
    save_checkpoint(state, output)
    log.info("averaged steps %s into %s", state["averaged_steps"], output)
    return state


def average_last(checkpoint_dir: Path, k: int, output: Path,
                 every_steps: int | None = None) -> dict:
    """Average the last ``k`` checkpoints of ``checkpoint_dir`` on the ``every_steps`` grid into
    ``output``. Without ``every_steps`` the last ``k`` files are taken, and refused when the
    folder's last ``max(k, 3)`` steps are not evenly spaced: one was written off the grid (by a
    stop request or a wall-clock save) and the average would depend on when that happened. Three
    steps at least, because one spacing alone cannot show that the newest is off the grid."""
    _check_last(k)
    available = list_checkpoints(checkpoint_dir)
    if every_steps is not None:
        available = [path for path in available if on_grid(checkpoint_step(path), every_steps)]
    if len(available) < k:
        grid = "" if every_steps is None else f" on the every_steps={every_steps} grid"
        raise CheckpointError(
            f"{checkpoint_dir}: {len(available)} checkpoints{grid}, but average_last asks for {k}; "
            f"raise checkpoints.keep_last or save more often (checkpoints.every_steps)"
        )
    steps = [checkpoint_step(path) for path in available[-max(k, 3):]]
    if every_steps is None and len({b - a for a, b in zip(steps, steps[1:], strict=False)}) > 1:
        raise CheckpointError(
            f"{checkpoint_dir}: the last checkpoints, steps {steps}, are not evenly spaced (a "
            f"stop request or a wall-clock save wrote one off the save grid); average what "
            f"training listed (--manifest <variant>/train/checkpoints.json) or name the grid "
            f"(--every-steps)"
        )
    return _save_average(available[-k:], output)


def manifest_checkpoints(manifest: Path) -> list[tuple[Path, int, str | None]]:
    """(path, step, sha256) of each checkpoint a training manifest lists, by increasing step."""
    try:
        payload = json.loads(manifest.read_text())
        folder = manifest.parent / payload["checkpoint_dir"]
        listed = [(folder / entry["file"], int(entry["step"]), entry["sha256"])
                  for entry in payload["checkpoints"]]
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
        raise CheckpointError(f"{manifest}: not a checkpoint manifest written by training "
                              f"({type(error).__name__}: {error})") from None
    return sorted(listed, key=lambda entry: entry[1])


def average_manifest(manifest: Path, k: int | None, output: Path) -> dict:
    """Average the last ``k`` checkpoints that ``manifest`` lists (all of them without ``k``)
    into ``output``; a listed checkpoint that is gone, or whose bytes are not the ones training
    listed, is refused by name rather than replaced by another."""
    _check_last(k)
    listed = manifest_checkpoints(manifest)
    if k is not None and len(listed) < k:
        raise CheckpointError(
            f"{manifest}: lists {len(listed)} checkpoints, but average_last asks for {k}; "
            f"raise checkpoints.keep_last or save more often (checkpoints.every_steps)"
        )
    chosen = listed if k is None else listed[-k:]
    if not chosen:
        raise CheckpointError(f"{manifest}: lists no checkpoints")
    for path, step, digest in chosen:
        if digest is None or recorded_digest(path) != digest:
            raise CheckpointError(
                f"{path}: not the step {step} checkpoint that {manifest} lists (missing, or "
                f"changed since training wrote the list); train again to rewrite both"
            )
    state = average_checkpoints([path for path, _, _ in chosen])
    if state["averaged_steps"] != [step for _, step, _ in chosen]:
        raise CheckpointError(f"{manifest}: lists steps {[step for _, step, _ in chosen]}, the "
                              f"checkpoints hold steps {state['averaged_steps']}")
    save_checkpoint(state, output)
    log.info("averaged steps %s (listed in %s) into %s", state["averaged_steps"], manifest, output)
    return state
