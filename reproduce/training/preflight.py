"""Checks that a training run cannot succeed, made before it starts: before a Slurm job is
submitted or a tracking run is opened, so that the answer is one line, not a traceback an hour in.

- An encoded split without a sentence pair (a prepared file emptied by cleaning, say).
- A model whose parameters, gradients and Adam's two moments alone exceed the memory the run may
  use: the sure part of training's memory. Activations come on top and are not estimated, so a
  model that passes may still run out of memory; one that fails this check cannot fit.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from reproduce.config import ModelConfig
from reproduce.data.encoded import EncodedCorpus
from reproduce.errors import ConfigError, DataError
from reproduce.model.parameter_count import analytic_parameter_count

log = logging.getLogger(__name__)

# fp32 weights, gradients and Adam's first and second moments: 4 numbers of 4 bytes each. Mixed
# precision keeps fp32 master weights and moments too, so this is the floor for every precision.
BYTES_PER_PARAMETER = 4 * 4
CGROUP_MEMORY = Path("/sys/fs/cgroup")
PROC_MEMINFO = Path("/proc/meminfo")


def check_not_empty(directory: Path, split: str) -> EncodedCorpus:
    """The encoded corpus in ``directory``, refused when it holds no pair."""
    corpus = EncodedCorpus.open(directory)
    if len(corpus) == 0:
        raise DataError(
            f"{directory}: the encoded {split} split holds no sentence pair; check the prepared "
            f"{split} files it was encoded from (cleaning may have removed every line)"
        )
    return corpus


def training_state_bytes(config: ModelConfig, vocab_size: int) -> int:
    """Bytes of weights, gradients and Adam's moments of ``config`` (activations excluded)."""
    return BYTES_PER_PARAMETER * analytic_parameter_count(config, vocab_size)


def _read_number(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # cgroup v2 writes "max" for no limit


def _meminfo_available() -> int | None:
    try:
        lines = PROC_MEMINFO.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return None


def available_host_bytes() -> int | None:
    """Memory this process may still use: the machine's available memory, or less where a cgroup
    (a Slurm job's allocation) limits it; None where neither can be read."""
    candidates = [_meminfo_available()]
    limit = _read_number(CGROUP_MEMORY / "memory.max")
    used = _read_number(CGROUP_MEMORY / "memory.current")
    if limit is not None and used is not None:
        candidates.append(max(0, limit - used))
    known = [value for value in candidates if value is not None]
    return min(known) if known else None


def available_bytes(device: torch.device) -> int | None:
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free
    return available_host_bytes()


def check_fits(config: ModelConfig, vocab_size: int, device: torch.device, variant: str) -> None:
    """Refuse a model whose fixed training state exceeds what ``device`` has free."""
    needed = training_state_bytes(config, vocab_size)
    available = available_bytes(device)
    if available is None:
        log.info("free memory of %s unknown: the model-size check is skipped", device)
        return
    if needed > available:
        gib = 2**30
        raise ConfigError(
            f"variant {variant}: model (d_model={config.d_model}, d_ff={config.d_ff}, "
            f"layers={config.layers}, vocabulary {vocab_size}) needs {needed / gib:.1f} GiB for "
            f"its weights, gradients and Adam's moments alone, but {device} has "
            f"{available / gib:.1f} GiB free; make the model smaller or run where there is more "
            "memory"
        )
