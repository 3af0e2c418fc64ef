"""Checkpoint averaging (section 6.1) on small handmade checkpoints: the mean is of the right
checkpoints, in the right dtype, and a checkpoint that does not fit the others is refused by name
rather than averaged into a wrong model."""

import json

import pytest
import torch

from reproduce.averaging import average_checkpoints, average_manifest
from reproduce.training.checkpoints import (
    CheckpointError,
    CheckpointSchedule,
    load_checkpoint,
    save_checkpoint,
    write_manifest,
)


def _save(path, step, model):
    save_checkpoint({"model": model, "step": step, "fingerprint": "run"}, path)
    return path


def _grid_run(folder, values=None):
    """Checkpoints of steps 3, 6, 9 whose tensor ``w`` holds ``values[step]``, and the manifest
    training writes for them."""
    values = values or {3: 3.0, 6: 6.0, 9: 12.0}
    schedule = CheckpointSchedule(folder / "checkpoints", 3, 0, keep_last=3, final_step=9)
    for step, value in values.items():
        schedule.save(
            {"model": {"w": torch.full((2,), value)}, "step": step, "fingerprint": "run"}, step
        )
    manifest = folder / "train/checkpoints.json"
    write_manifest(manifest, schedule)
    return schedule, manifest


def test_half_precision_tensors_are_averaged_and_stay_half_precision(tmp_path):
    """The mean is taken in float64 and cast back to each tensor's own dtype: a float16 or bfloat16
    model averages to a model of the same dtype, which loads into the same model."""
    paths = [
        _save(
            tmp_path / f"step_0000000{step}.pt",
            step,
            {
                "h": torch.full((2,), value, dtype=torch.float16),
                "b": torch.full((2,), value, dtype=torch.bfloat16),
            },
        )
        for step, value in ((1, 1.0), (2, 2.5))
    ]
    averaged = average_checkpoints(paths)["model"]
    assert averaged["h"].dtype == torch.float16 and averaged["b"].dtype == torch.bfloat16
    assert averaged["h"].tolist() == averaged["b"].tolist() == [1.75, 1.75]


def test_an_integer_tensor_that_differs_between_checkpoints_is_refused(tmp_path):
    """An integer tensor (a count, an index) has no mean: equal in every checkpoint it is carried
    over, different it is an error rather than the first checkpoint's value passed off as the
    average."""
    first = _save(tmp_path / "step_00000001.pt", 1, {"count": torch.tensor(3)})
    equal = _save(tmp_path / "step_00000002.pt", 2, {"count": torch.tensor(3)})
    other = _save(tmp_path / "step_00000003.pt", 3, {"count": torch.tensor(4)})
    assert torch.equal(average_checkpoints([first, equal])["model"]["count"], torch.tensor(3))
    with pytest.raises(
        CheckpointError,
        match=r"integer tensor 'count' differs between .*"
        r"step_00000001\.pt and the others",
    ):
        average_checkpoints([first, equal, other])


def test_a_checkpoint_missing_a_tensor_of_the_first_is_refused_naming_both(tmp_path):
    """A later checkpoint lacking one of the first's tensors is another model: refused naming the
    tensor and both files, not a bare KeyError mid-average."""
    first = _save(tmp_path / "step_00000001.pt", 1, {"w": torch.ones(2), "b": torch.ones(2)})
    later = _save(tmp_path / "step_00000002.pt", 2, {"w": torch.ones(2)})
    with pytest.raises(
        CheckpointError,
        match=r"step_00000002\.pt: cannot use the checkpoint: "
        r"tensor 'b' is in only one of it and .*"
        r"step_00000001\.pt",
    ):
        average_checkpoints([first, later])


def test_a_checkpoint_whose_tensor_has_another_shape_is_refused_not_broadcast(tmp_path):
    """Shapes (2, 2) and (2,) would broadcast into a (2, 2) 'mean' without any error from torch:
    the checkpoint of another model is refused naming the tensor, both shapes and both files."""
    first = _save(tmp_path / "step_00000001.pt", 1, {"w": torch.ones(2, 2)})
    later = _save(tmp_path / "step_00000002.pt", 2, {"w": torch.ones(2)})
    with pytest.raises(
        CheckpointError,
        match=r"step_00000002\.pt: cannot use the checkpoint: "
        r"tensor 'w' has shape \[2\], but \[2, 2\] in .*"
        r"step_00000001\.pt",
    ):
        average_checkpoints([first, later])


def test_without_last_the_manifest_average_is_of_every_listed_checkpoint(tmp_path):
    """`reproduce average --manifest` without --last averages all the checkpoints training
    listed: steps 3, 6, 9 holding 3, 6, 12 average to 7."""
    _, manifest = _grid_run(tmp_path)
    state = average_manifest(manifest, None, tmp_path / "averaged.pt")
    assert state["averaged_steps"] == [3, 6, 9] and state["step"] == 9
    assert load_checkpoint(tmp_path / "averaged.pt")["model"]["w"].tolist() == [7.0, 7.0]


def test_the_last_k_of_a_manifest_are_the_highest_steps_whatever_the_listing_order(tmp_path):
    """The last k are taken by step, not by their place in the file: a manifest listing its
    checkpoints newest first still averages steps 6 and 9 (6 and 12: mean 9)."""
    _, manifest = _grid_run(tmp_path)
    payload = json.loads(manifest.read_text())
    payload["checkpoints"].reverse()
    manifest.write_text(json.dumps(payload))
    state = average_manifest(manifest, 2, tmp_path / "averaged.pt")
    assert state["averaged_steps"] == [6, 9]
    assert state["model"]["w"].tolist() == [9.0, 9.0]


def test_a_listed_checkpoint_holding_another_step_is_refused(tmp_path):
    """A file listed as step 6 whose bytes match the list but whose state is of step 7 (copied
    over it, the list then rewritten) is refused: the average would not be of the listed steps."""
    schedule, manifest = _grid_run(tmp_path)
    save_checkpoint(
        {"model": {"w": torch.full((2,), 7.0)}, "step": 7, "fingerprint": "run"},
        tmp_path / "checkpoints/step_00000006.pt",
    )
    write_manifest(manifest, schedule)
    with pytest.raises(
        CheckpointError,
        match=r"lists steps \[6, 9\], the checkpoints hold steps "
        r"\[7, 9\]",
    ):
        average_manifest(manifest, 2, tmp_path / "averaged.pt")
    assert not (tmp_path / "averaged.pt").exists()


def test_a_manifest_listing_nothing_or_missing_its_list_is_refused_naming_it(tmp_path):
    """A manifest written by a training that kept no grid checkpoint, or a JSON file that is not a
    manifest at all, is one error naming it, not an IndexError or KeyError from inside."""
    manifest = tmp_path / "train/checkpoints.json"
    manifest.parent.mkdir()
    manifest.write_text(json.dumps({"checkpoint_dir": "..", "checkpoints": []}))
    with pytest.raises(CheckpointError, match=r"checkpoints\.json: lists no checkpoints"):
        average_manifest(manifest, None, tmp_path / "averaged.pt")
    manifest.write_text(json.dumps({"checkpoint_dir": ".."}))
    with pytest.raises(
        CheckpointError,
        match=r"checkpoints\.json: not a checkpoint manifest written by training \(KeyError",
    ):
        average_manifest(manifest, None, tmp_path / "averaged.pt")
    assert not (tmp_path / "averaged.pt").exists()
