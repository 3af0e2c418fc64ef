"""Training checkpoints on small handmade files: what :func:`load_checkpoint` refuses, what
resuming refuses to look at, and what the manifest lists for averaging."""

import os

import pytest
import torch

from reproduce.averaging import average_manifest
from reproduce.training.checkpoints import (
    CheckpointError,
    CheckpointSchedule,
    latest_good_checkpoint,
    load_checkpoint,
    refuse_non_files,
    save_checkpoint,
    sidecar_path,
    write_manifest,
)


def test_a_verified_file_without_a_model_entry_is_not_a_checkpoint(tmp_path):
    """A weights-only file whose sidecar matches but holds no ``model`` (another program's
    tensors, an optimizer state alone) is refused by name when loaded, not handed on to fail
    later as a KeyError inside averaging or resuming."""
    path = tmp_path / "step_00000003.pt"
    save_checkpoint({"optimizer": {}, "step": 3}, path)
    with pytest.raises(
        CheckpointError,
        match=r"step_00000003\.pt: not a checkpoint of this "
        r"package \(no 'model' entry\)",
    ):
        load_checkpoint(path)


def test_a_fifo_under_a_checkpoint_name_is_refused_before_anything_reads_it(tmp_path):
    """Resuming reads every checkpoint name in the folder; a named pipe there would block that
    read forever. Anything but a regular file under a name training writes is refused."""
    os.mkfifo(tmp_path / "step_00000006.pt")
    with pytest.raises(
        CheckpointError,
        match=r"step_00000006\.pt: not a regular file where "
        r"training writes a checkpoint file",
    ):
        refuse_non_files(tmp_path)


def test_the_manifest_lists_the_grid_checkpoints_only(tmp_path):
    """A checkpoint saved off the grid (a stop request, a wall-clock save) serves resuming only:
    even while it is the newest on disk, the manifest that averaging reads leaves it out."""
    schedule = CheckpointSchedule(
        tmp_path / "checkpoints", every_steps=3, every_minutes=0, keep_last=3, final_step=12
    )
    for step in (3, 6, 7):
        schedule.save({"model": {"w": torch.zeros(1)}, "step": step}, step)
    manifest = write_manifest(tmp_path / "train/checkpoints.json", schedule)
    assert [entry["step"] for entry in manifest["checkpoints"]] == [3, 6]


def test_a_missing_checkpoint_or_checksum_file_is_named_for_what_it_is(tmp_path):
    """Which of the two files is gone decides the remedy (a run killed before its marker was
    written, or a checkpoint deleted): the error says which."""
    path = tmp_path / "step_00000003.pt"
    save_checkpoint({"model": {}, "step": 3}, path)
    sidecar_path(path).unlink()
    with pytest.raises(
        CheckpointError,
        match=r"step_00000003\.pt: not a complete checkpoint \(its checksum file "
        r"step_00000003\.pt\.sha256 is missing\)",
    ):
        load_checkpoint(path)
    with pytest.raises(
        CheckpointError, match=r"step_00000006\.pt: not a complete checkpoint \(it is missing\)"
    ):
        load_checkpoint(tmp_path / "step_00000006.pt")


def test_a_sidecar_of_any_bytes_marks_its_checkpoint_damaged_and_resuming_goes_back(tmp_path):
    """A sidecar is as untrusted as its checkpoint: one holding bytes that are not text (a torn
    write, a disk error) makes that checkpoint damaged, so resuming warns and takes the one
    before, and the manifest lists it without a digest, which averaging refuses by name."""
    schedule = CheckpointSchedule(
        tmp_path / "checkpoints", every_steps=3, every_minutes=0, keep_last=3, final_step=12
    )
    for step in (3, 6):
        schedule.save({"model": {"w": torch.full((1,), float(step))}, "step": step}, step)
    newest = tmp_path / "checkpoints/step_00000006.pt"
    sidecar_path(newest).write_bytes(b"\xff\xfe\n")
    with pytest.raises(CheckpointError, match=r"step_00000006\.pt: damaged"):
        load_checkpoint(newest)
    path, state = latest_good_checkpoint(tmp_path / "checkpoints")
    assert (path.name, state["step"]) == ("step_00000003.pt", 3)
    manifest = write_manifest(tmp_path / "train/checkpoints.json", schedule)
    assert [entry["sha256"] is None for entry in manifest["checkpoints"]] == [False, True]
    with pytest.raises(CheckpointError, match=r"step_00000006\.pt: not the step 6 checkpoint"):
        average_manifest(tmp_path / "train/checkpoints.json", None, tmp_path / "averaged.pt")
