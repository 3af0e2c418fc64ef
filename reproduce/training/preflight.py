"""Checks that a training run cannot succeed, made before it starts: before a Slurm job is
submitted or a tracking run is opened, so that the answer is one line, not a traceback an hour in.

- An encoded split without a sentence pair (a prepared file emptied by cleaning, say).
- A dev or test line that evaluation, which decodes both splits after training, would refuse
  as too long to decode.
- A model whose parameters, gradients and Adam's two moments alone exceed the memory the run may
  use: the sure part of training's memory. Activations come on top and are not estimated, so a
  model that passes may still run out of memory; one that fails this check cannot fit.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from reproduce.config import ModelConfig, ResolvedVariant
from reproduce.data.encoded import EncodedCorpus
from reproduce.decoding.translate import check_source_lengths
from reproduce.errors import ConfigError, DataError
from reproduce.model.parameter_count import analytic_parameter_count

log = logging.getLogger(__name__)

# fp32 weights, gradients and Adam's first and second moments: 4 numbers of 4 bytes each. Mixed
# precision keeps fp32 master weights and moments too, so this is the floor for every precision.
BYTES_PER_PARAMETER = 4 * 4
CGROUP_MEMORY = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")
PROC_MEMINFO = Path("/proc/meminfo")
# Where each cgroup version keeps a group's memory limit and use, below its mount.
_CGROUP_V2 = ("memory.max", "memory.current")
_CGROUP_V1 = ("memory.limit_in_bytes", "memory.usage_in_bytes")


def check_not_empty(directory: Path, split: str) -> EncodedCorpus:
    """The encoded corpus in ``directory``, refused when it holds no pair."""
    corpus = EncodedCorpus.open(directory)
    if len(corpus) == 0:
        raise DataError(
            f"{directory}: the encoded {split} split holds no sentence pair; check the prepared "
            f"{split} files it was encoded from (cleaning may have removed every line)"
        )
    return corpus


def check_decodable(corpus: EncodedCorpus, directory: Path, split: str,
                    variant: ResolvedVariant) -> None:
    """Refuse a dev or test line longer than decoding takes (:func:`check_source_lengths`):
    evaluation decodes both splits with the trained model, and would refuse it only after
    training."""
    check_source_lengths(corpus.source_lengths + 1, variant.decoding.max_source_pieces,  # + EOS
                         variant.model.position_limit,
                         f"{directory} (the encoded {split} split, decoded after training)")


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


def _memory_cgroups() -> list[tuple[Path, Path, tuple[str, str]]]:
    """(mount, folder, its limit and use files) of each memory cgroup of this process, from
    /proc/self/cgroup: cgroup v2's (``0::``) and v1's memory controller's (mounted at
    ``memory/``). A Slurm job's cgroup is the process's own, not the mount's root (the root is
    one only inside a cgroup namespace, as in a container). Without the file, v2's root."""
    try:
        lines = PROC_CGROUP.read_text().splitlines()
    except OSError:
        lines = ["0::/"]
    groups = []
    for line in lines:
        fields = line.split(":", 2)  # hierarchy, controllers, path
        if len(fields) != 3:
            continue
        _, controllers, path = fields
        if not controllers:
            mount, files = CGROUP_MEMORY, _CGROUP_V2
        elif "memory" in controllers.split(","):
            mount, files = CGROUP_MEMORY / "memory", _CGROUP_V1
        else:
            continue
        groups.append((mount, mount / path.lstrip("/"), files))
    return groups


def _cgroup_room() -> list[int]:
    """What each memory cgroup from this process's own up to its mount's root leaves free: a
    limit set higher up binds too (a group without one reads as no limit or a huge one)."""
    room = []
    for mount, folder, (limit_file, use_file) in _memory_cgroups():
        for level in (folder, *folder.parents):
            if not level.is_relative_to(mount):
                break
            limit, used = _read_number(level / limit_file), _read_number(level / use_file)
            if limit is not None and used is not None:
                room.append(max(0, limit - used))
    return room


def available_host_bytes() -> int | None:
    """Memory this process may still use: the machine's available memory, or less where a cgroup
    (a Slurm job's allocation) limits it; None where neither can be read."""
    known = [value for value in (_meminfo_available(), *_cgroup_room()) if value is not None]
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
