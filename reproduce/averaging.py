"""Checkpoint averaging (section 6.1): the parameters of the last 5 (base) or 20 (big)
checkpoints, written at fixed intervals, are averaged into the model used for Table 2.

Only checkpoints of one run are averaged: they must record the same training settings
(fingerprint); the average carries that fingerprint on, so that decoding can check it."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from reproduce.errors import CheckpointError, UsageError
from reproduce.training.checkpoints import list_checkpoints, load_checkpoint, save_checkpoint

log = logging.getLogger(__name__)


def average_checkpoints(paths: list[Path]) -> dict:
    """The element-wise mean of the models in ``paths`` (in float64, cast back to each dtype)."""
    states = [load_checkpoint(path) for path in paths]
    for path, state in zip(paths[1:], states[1:]):
        if state.get("fingerprint") != states[0].get("fingerprint"):
            raise CheckpointError(
                f"{path}: trained with other settings (fingerprint {state.get('fingerprint')}) than "
                f"{paths[0]} ({states[0].get('fingerprint')}); only checkpoints of one run are averaged"
            )
    models = [state["model"] for state in states]
    for path, model in zip(paths[1:], models[1:]):
        _check_same_tensors(path, model, paths[0], models[0])
    averaged = {}
    for name, first in models[0].items():
        tensors = [model[name] for model in models]
        if first.is_floating_point():
            averaged[name] = (sum(t.double() for t in tensors) / len(tensors)).to(first.dtype)
        elif all(torch.equal(first, t) for t in tensors):
            averaged[name] = first.clone()
        else:
            raise CheckpointError(f"integer tensor {name!r} differs between {paths[0]} and the others")
    identity = {key: states[-1][key] for key in ("model_config", "vocab_size", "settings", "fingerprint",
                                                    "spm_model_sha256")
                if key in states[-1]}
    return {"model": averaged, **identity, "step": states[-1]["step"],
            "averaged_steps": [state["step"] for state in states]}


def _check_same_tensors(path: Path, model: dict, first_path: Path, first: dict) -> None:
    """Refuse, naming both files, a model whose tensors differ in name or shape from the first's
    (a checkpoint of another model), before torch fails on them mid-average."""
    names = model.keys() ^ first.keys()
    if names:
        raise CheckpointError(f"{path}: cannot use the checkpoint: tensor {sorted(names)[0]!r} is in "
                              f"only one of it and {first_path}; only checkpoints of one run are averaged")
    for name, tensor in model.items():
        if tensor.shape != first[name].shape:
            raise CheckpointError(
                f"{path}: cannot use the checkpoint: tensor {name!r} has shape {list(tensor.shape)}, "
                f"but {list(first[name].shape)} in {first_path}; only checkpoints of one run are averaged")


def average_last(checkpoint_dir: Path, k: int, output: Path) -> dict:
    """Average the last ``k`` checkpoints of ``checkpoint_dir`` into ``output``."""
    if k < 1:
        raise UsageError(f"average_last: --last must be at least 1, got {k}")
    available = list_checkpoints(checkpoint_dir)
    if len(available) < k:
        raise CheckpointError(
            f"{checkpoint_dir}: {len(available)} checkpoints, but average_last asks for {k}; "
            f"raise checkpoints.keep_last or save more often (checkpoints.every_steps)"
        )
    state = average_checkpoints(available[-k:])
    save_checkpoint(state, output)
    log.info("averaged steps %s into %s", state["averaged_steps"], output)
    return state
