"""Training checkpoints: written atomically, the last ``keep_last`` kept, the latest resumed.

A checkpoint holds the model, the optimizer, the step, the data stream's position, the RNG
states, the counters of the run so far, and what is needed to rebuild the model
(``model_config``, ``vocab_size``). Older checkpoints are deleted only after the new one is
safely on disk.
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import torch

log = logging.getLogger(__name__)

_NAME = re.compile(r"^step_(\d{8})\.pt$")


def checkpoint_path(directory: Path, step: int) -> Path:
    return directory / f"step_{step:08d}.pt"


def list_checkpoints(directory: Path) -> list[Path]:
    """Checkpoints in ``directory`` by increasing step."""
    if not directory.exists():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := _NAME.match(p.name))]
    return [path for _, path in sorted(found)]


def save_atomically(state: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    torch.save(state, temporary)
    temporary.replace(path)


class CheckpointSchedule:
    """Saves on a step interval and on a wall-clock interval (the paper: every 10 minutes)."""

    def __init__(self, directory: Path, every_steps: int, every_minutes: float, keep_last: int):
        self.directory = directory
        self.every_steps = every_steps
        self.every_seconds = every_minutes * 60
        self.keep_last = keep_last
        self.last_save = time.monotonic()

    def due(self, step: int) -> bool:
        if step % self.every_steps == 0:
            return True
        return self.every_seconds > 0 and time.monotonic() - self.last_save >= self.every_seconds

    def save(self, state: dict, step: int) -> Path:
        path = checkpoint_path(self.directory, step)
        save_atomically(state, path)
        self.last_save = time.monotonic()
        for old in list_checkpoints(self.directory)[: -self.keep_last]:
            old.unlink()
        log.info("saved %s", path)
        return path
