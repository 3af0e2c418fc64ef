"""Checkpoint averaging (section 6.1): the parameters of the last 5 (base) or 20 (big)
checkpoints, written at fixed intervals, are averaged into the model used for Table 2."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from reproduce.training.checkpoints import list_checkpoints, save_atomically

log = logging.getLogger(__name__)


def average_checkpoints(paths: list[Path]) -> dict:
    """The element-wise mean of the models in ``paths`` (in float64, cast back to each dtype)."""
    states = [torch.load(path, map_location="cpu", weights_only=False) for path in paths]
    models = [state["model"] for state in states]
    averaged = {}
    for name, first in models[0].items():
        tensors = [model[name] for model in models]
        if first.is_floating_point():
            averaged[name] = (sum(t.double() for t in tensors) / len(tensors)).to(first.dtype)
        elif all(torch.equal(first, t) for t in tensors):
            averaged[name] = first.clone()
        else:
            raise ValueError(f"integer tensor {name!r} differs between {paths[0]} and the others")
    return {"model": averaged, "model_config": states[-1]["model_config"],
            "vocab_size": states[-1]["vocab_size"], "step": states[-1]["step"],
            "averaged_steps": [state["step"] for state in states]}


def average_last(checkpoint_dir: Path, k: int, output: Path) -> dict:
    """Average the last ``k`` checkpoints of ``checkpoint_dir`` into ``output``."""
    available = list_checkpoints(checkpoint_dir)
    if len(available) < k:
        raise ValueError(
            f"{checkpoint_dir}: {len(available)} checkpoints, but average_last asks for {k}; "
            f"raise checkpoints.keep_last or save more often (checkpoints.every_steps)"
        )
    state = average_checkpoints(available[-k:])
    save_atomically(state, output)
    log.info("averaged steps %s into %s", state["averaged_steps"], output)
    return state
