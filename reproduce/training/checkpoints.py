"""Training checkpoints: durable, verified, loaded without running code; the last ``keep_last`` on
the save grid kept.

A checkpoint holds the model, the optimizer, the step, the data stream's position, the RNG
states, the counters of the run so far, what is needed to rebuild the model (``model_config``,
``vocab_size``) and the settings it was trained with (``settings``, ``fingerprint``:
:func:`reproduce.provenance.trained_settings`). Everything in it is a tensor or a plain value, so
:func:`load_checkpoint` reads it with ``torch.load(weights_only=True)``: a file that would build
any other object (and so could run code) is refused.

Writing (:func:`save_checkpoint`): the payload goes to ``<name>.tmp``, is fsynced, renamed over
``<name>``, and the folder is fsynced; then the sha256 of the payload is written, the same way,
to the sidecar ``<name>.sha256`` (``sha256sum -c`` reads it). The sidecar is the marker written
last: a checkpoint without one, or whose bytes do not match it (truncated, zeroed, empty), is not
a checkpoint, and :func:`latest_good_checkpoint` skips it with a warning for the previous one.
Older checkpoints are deleted only after the new one and its sidecar are on disk.

*The save grid*: checkpoints of the steps that are multiples of ``every_steps``, and of the final
step ``training.steps``, are written whatever happens to the run, so they are the ones averaged
(:mod:`reproduce.averaging`) and counted by ``keep_last``. A stop request or a wall-clock save
(``every_minutes``) writes one at whatever step the run reached: off the grid, it serves resuming
only, and is removed once a newer checkpoint is on disk. Were it kept and averaged, the averaged
model would depend on when a job was preempted or how fast the GPU was. At the end of training
:func:`write_manifest` lists the kept grid checkpoints (``train/checkpoints.json``): the
pipeline's declared record of what ``average`` reads.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import pickle
import re
import shutil
import tempfile
import time
from pathlib import Path

import torch

from reproduce.errors import CheckpointError  # callers import it from here too
from reproduce.files import fsync_directory, replaced_whole

log = logging.getLogger(__name__)

_NAME = re.compile(r"^step_(\d{8})\.pt$")
# A checkpoint, its marker and the temporary files they are written through.
_WRITTEN_NAME = re.compile(r"^step_\d{8}\.pt(\.sha256)?(\.tmp)?$")
_SHA256 = re.compile(rb"[0-9a-f]{64}")  # as hashlib's hexdigest writes it into a sidecar


def checkpoint_path(directory: Path, step: int) -> Path:
    return directory / f"step_{step:08d}.pt"


def sidecar_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def recorded_digest(path: Path) -> str | None:
    """The sha256 that ``path``'s sidecar records, or None where it is missing, unreadable or
    holds no sha256. Read as bytes: a sidecar is as untrusted as its checkpoint and may hold
    anything."""
    try:
        fields = sidecar_path(path).read_bytes().split()
    except OSError:
        return None
    return fields[0].decode() if fields and _SHA256.fullmatch(fields[0]) else None


def checkpoint_step(path: Path) -> int:
    match = _NAME.match(path.name)
    if match is None:
        raise CheckpointError(f"{path}: not a checkpoint name (step_<8 digits>.pt)")
    return int(match.group(1))


def on_grid(step: int, every_steps: int, final_step: int | None = None) -> bool:
    """Whether ``step``'s checkpoint is saved by every run of these settings, interrupted or not."""
    return step % every_steps == 0 or step == final_step


def list_checkpoints(directory: Path) -> list[Path]:
    """Checkpoints in ``directory`` by increasing step (verified or not)."""
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := _NAME.match(p.name))]
    return [path for _, path in sorted(found)]


# -- writing ---------------------------------------------------------------------------------------
def _write_durably(path: Path, write) -> None:
    """``write(stream)`` into ``<path>.tmp``, fsync, rename over ``path``, fsync the folder
    (:func:`reproduce.files.replaced_whole`). On failure the ``.tmp`` is removed and a one-line
    :class:`CheckpointError` names ``path``."""
    try:
        with replaced_whole(path, "wb") as stream:
            write(stream)
    except (OSError, RuntimeError) as error:  # torch reports a full disk as a RuntimeError
        reason = (error.strerror if isinstance(error, OSError) and error.strerror
                  else str(error).splitlines()[0])
        raise CheckpointError(f"{path}: cannot write ({reason}); check the folder is writable and "
                              "has room") from None


def save_checkpoint(state: dict, path: Path) -> None:
    """Write ``state`` durably to ``path``, then its sha256 to the sidecar (the marker, last)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise CheckpointError(
            f"{path.parent}: cannot create the folder ({error.strerror})") from None
    sidecar_path(path).unlink(missing_ok=True)  # a stale marker must never vouch for new bytes
    _write_durably(path, lambda stream: torch.save(state, stream))
    with path.open("rb") as stream:
        digest = hashlib.file_digest(stream, "sha256").hexdigest()
    line = f"{digest}  {path.name}\n".encode()
    _write_durably(sidecar_path(path), lambda stream: stream.write(line))


def remove_checkpoint(path: Path) -> None:
    sidecar_path(path).unlink(missing_ok=True)  # the marker first: a half-removed one is unverified
    path.unlink(missing_ok=True)


# -- reading ---------------------------------------------------------------------------------------
def load_checkpoint(path: Path) -> dict:
    """The state in ``path``, on the CPU, after checking its sha256 sidecar; never runs code."""
    path = Path(path)
    try:
        payload = path.read_bytes()
        expected = sidecar_path(path).read_bytes().split()[:1]
    except FileNotFoundError as error:
        missing = ("it" if error.filename == str(path)
                   else f"its checksum file {sidecar_path(path).name}")
        raise CheckpointError(f"{path}: not a complete checkpoint ({missing} is missing)") from None
    except OSError as error:
        raise CheckpointError(f"{path}: cannot read ({error.strerror})") from None
    if expected != [hashlib.sha256(payload).hexdigest().encode()]:
        raise CheckpointError(
            f"{path}: damaged ({len(payload)} bytes whose sha256 does not match "
            f"{sidecar_path(path).name})"
        )
    try:
        state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise CheckpointError(
            f"{path}: refused: it holds objects other than tensors and plain values, which could "
            f"run code when loaded"
        ) from None
    except (RuntimeError, EOFError, ValueError) as error:
        raise CheckpointError(
            f"{path}: not a readable checkpoint ({str(error).splitlines()[0]})") from None
    if not isinstance(state, dict) or "model" not in state:
        raise CheckpointError(f"{path}: not a checkpoint of this package (no 'model' entry)")
    return state


def refuse_non_files(directory: Path) -> None:
    """Refuse a folder (or anything but a file) under a name that training writes or deletes in
    ``directory``: resuming would skip it as damaged, retrain up to its step and then fail to
    write over it, on every rerun."""
    entries = sorted(directory.iterdir()) if directory.is_dir() else []
    for path in entries:
        if _WRITTEN_NAME.match(path.name) and path.exists() and not path.is_file():
            kind = "a folder" if path.is_dir() else "not a regular file"
            raise CheckpointError(f"{path}: {kind} where training writes a checkpoint file; "
                                  f"move it out of {directory}")


def latest_good_checkpoint(directory: Path) -> tuple[Path, dict] | None:
    """The newest checkpoint of ``directory`` that verifies; damaged newer ones are skipped with a
    warning. None when there is none at all; an error when there are some but none verifies, or
    when a checkpoint's name holds no file (:func:`refuse_non_files`)."""
    refuse_non_files(directory)
    candidates = list_checkpoints(directory)
    for path in reversed(candidates):
        try:
            return path, load_checkpoint(path)
        except CheckpointError as error:
            log.warning("skipping checkpoint %s", error)
    if candidates:
        raise CheckpointError(
            f"{directory}: none of its {len(candidates)} checkpoints verifies; start over with "
            f"`reproduce train ... --restart` (moves them aside)"
        )
    return None


# -- before training -------------------------------------------------------------------------------
def check_room(directory: Path, checkpoint_bytes: int, checkpoints: int) -> None:
    """Fail before training when ``directory`` is not writable or cannot hold ``checkpoints``
    more checkpoints of about ``checkpoint_bytes`` each; nothing is left behind."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".probe-"):
            pass
    except OSError as error:
        raise CheckpointError(f"{directory}: not writable ({error.strerror})") from None
    free = shutil.disk_usage(directory).free
    needed = checkpoint_bytes * checkpoints
    if free < needed:
        raise CheckpointError(
            f"{directory}: {free / 2**20:.0f} MiB free, but {checkpoints} checkpoints of about "
            f"{checkpoint_bytes / 2**20:.1f} MiB need {needed / 2**20:.0f} MiB; free space or use "
            "another folder"
        )


class CheckpointSchedule:
    """Saves on a step interval (the grid) and on a wall-clock interval (the paper: every 10
    minutes; off the grid, for resuming only). ``final_step`` (``training.steps``) is on the
    grid."""

    def __init__(self, directory: Path, every_steps: int, every_minutes: float, keep_last: int,
                 final_step: int | None = None):
        self.directory = directory
        self.every_steps = every_steps
        self.every_seconds = every_minutes * 60
        self.keep_last = keep_last
        self.final_step = final_step
        self.last_save = time.monotonic()

    def on_grid(self, step: int) -> bool:
        return on_grid(step, self.every_steps, self.final_step)

    def grid_checkpoints(self) -> list[Path]:
        """The checkpoints on the grid, by increasing step."""
        return [path for path in list_checkpoints(self.directory)
                if self.on_grid(checkpoint_step(path))]

    def due(self, step: int) -> bool:
        if step % self.every_steps == 0:
            return True
        return self.every_seconds > 0 and time.monotonic() - self.last_save >= self.every_seconds

    def save(self, state: dict, step: int) -> Path:
        path = checkpoint_path(self.directory, step)
        save_checkpoint(state, path)
        self.last_save = time.monotonic()
        self._prune(step)
        log.info("saved %s%s", path,
                 "" if self.on_grid(step) else " (off the save grid: for resuming only)")
        return path

    def _prune(self, newest: int) -> None:
        """Keep the last ``keep_last`` grid checkpoints; off-grid ones only while none is newer."""
        for old in self.grid_checkpoints()[: -self.keep_last]:
            remove_checkpoint(old)
        for path in list_checkpoints(self.directory):
            step = checkpoint_step(path)
            if step < newest and not self.on_grid(step):
                remove_checkpoint(path)


MANIFEST_VERSION = 1


def write_manifest(path: Path, schedule: CheckpointSchedule) -> dict:
    """List the grid checkpoints kept in ``schedule.directory`` into ``path`` (JSON, written
    durably): file names relative to ``path``'s folder, steps and the sha256 of their sidecars
    (None for a checkpoint whose sidecar is missing: averaging then refuses it by name)."""
    entries = []
    for checkpoint in schedule.grid_checkpoints():
        entries.append({"file": checkpoint.name, "step": checkpoint_step(checkpoint),
                        "sha256": recorded_digest(checkpoint)})
    manifest = {
        "version": MANIFEST_VERSION,
        "checkpoint_dir": os.path.relpath(schedule.directory, path.parent),
        "every_steps": schedule.every_steps,
        "final_step": schedule.final_step,
        "checkpoints": entries,
    }
    text = (json.dumps(manifest, indent=2) + "\n").encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_durably(path, lambda stream: stream.write(text))
    return manifest


def set_aside(variant_dir: Path) -> Path | None:
    """Move a variant's ``checkpoints/`` and ``train/`` into ``replaced-<UTC time>/`` beside them
    (a fresh start that deletes nothing); the new folder, or None when there was nothing to move."""
    present = [variant_dir / name for name in ("checkpoints", "train")
               if (variant_dir / name).exists()]
    if not present:
        return None
    destination = variant_dir / time.strftime("replaced-%Y%m%dT%H%M%SZ", time.gmtime())
    destination.mkdir()
    for folder in present:
        folder.rename(destination / folder.name)
    fsync_directory(variant_dir)
    log.warning("moved %s aside into %s", ", ".join(folder.name for folder in present), destination)
    return destination
