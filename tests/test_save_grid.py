"""Averaging takes checkpoints on the save grid only: a run stopped (SIGTERM) off the grid inside
the last averaging window, and saving by the wall clock at every step, averages to the same model,
bit for bit, as an uninterrupted run."""

import json
import os
import signal

import pytest
import torch

from reproduce.averaging import average_last, average_manifest
from reproduce.cli import main
from reproduce.training.checkpoints import (CheckpointError, CheckpointSchedule, checkpoint_step,
                                            list_checkpoints, load_checkpoint, save_checkpoint,
                                            write_manifest)
from reproduce.training.interruption import Interruption
from reproduce.training.assembly import build_trainer
from tests.training_fixtures import TINY, corpus_pair, small_variant
from tests.training_fixtures import one_torch_thread  # noqa: F401 (autouse: one torch thread)

STEPS, EVERY, K = 12, 3, 3  # the grid 3, 6, 9, 12; the last 3 (6, 9, 12) averaged
STOP_AT = 8  # off the grid, inside the averaging window


def _steps(folder):
    return [checkpoint_step(path) for path in list_checkpoints(folder)]


def _state(step):
    return {"model": {"w": torch.full((2,), float(step))}, "step": step, "fingerprint": "run"}


def test_off_grid_checkpoints_serve_resuming_only(tmp_path):
    schedule = CheckpointSchedule(tmp_path, every_steps=3, every_minutes=0, keep_last=2,
                                  final_step=14)
    kept = {}
    for step in (3, 5, 6, 7, 8, 9, 12, 13, 14):
        schedule.save(_state(step), step)
        kept[step] = _steps(tmp_path)
    assert kept[5] == [3, 5]  # the newest, off the grid: what a resumed run starts from
    assert kept[6] == [3, 6]  # a newer one is on disk: 5 goes
    assert kept[8] == [3, 6, 8]  # off-grid ones are not counted against keep_last
    assert kept[9] == [6, 9]
    assert kept[13] == [9, 12, 13]
    assert kept[14] == [12, 14]  # the final step is on the grid
    manifest = write_manifest(tmp_path / "train/checkpoints.json", schedule)
    assert [(entry["file"], entry["step"]) for entry in manifest["checkpoints"]] == [
        ("step_00000012.pt", 12), ("step_00000014.pt", 14)]
    assert manifest["checkpoint_dir"] == ".."


@pytest.mark.parametrize("k", [1, 2, 3])
def test_a_folder_average_refuses_unevenly_spaced_checkpoints_without_the_grid(tmp_path, k):
    """Step 8 was saved off the grid by a stop request: any average that takes it, even of the
    last one or two checkpoints, whose one spacing looks even, is refused without the grid."""
    for step in (3, 6, 8):
        save_checkpoint(_state(step), tmp_path / f"step_{step:08d}.pt")
    with pytest.raises(CheckpointError, match=r"steps \[3, 6, 8\], are not evenly spaced"):
        average_last(tmp_path, k, tmp_path / "averaged.pt")
    assert not (tmp_path / "averaged.pt").exists()
    state = average_last(tmp_path, 2, tmp_path / "averaged.pt", every_steps=3)
    assert state["averaged_steps"] == [3, 6]


def test_a_changed_or_missing_listed_checkpoint_is_refused_by_name(tmp_path):
    schedule = CheckpointSchedule(tmp_path / "checkpoints", 3, 0, keep_last=3, final_step=9)
    for step in (3, 6, 9):
        schedule.save(_state(step), step)
    manifest = tmp_path / "train/checkpoints.json"
    write_manifest(manifest, schedule)
    assert average_manifest(manifest, 2, tmp_path / "a.pt")["averaged_steps"] == [6, 9]
    save_checkpoint(_state(6) | {"model": {"w": torch.zeros(2)}},
                    tmp_path / "checkpoints/step_00000006.pt")
    with pytest.raises(CheckpointError,
                       match=r"step_00000006.pt: not the step 6 checkpoint that .*lists"):
        average_manifest(manifest, 2, tmp_path / "a.pt")
    with pytest.raises(ValueError, match=r"lists 3 checkpoints, but average_last asks for 4"):
        average_manifest(manifest, 4, tmp_path / "a.pt")


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    return corpus_pair(tmp_path_factory.mktemp("corpora"), 400)


def _variant(every_minutes=0.0):
    checkpoints = {"every_steps": EVERY, "every_minutes": every_minutes, "keep_last": K}
    variant = small_variant(steps=STEPS, average_last=K)
    return variant.model_copy(update={"training": variant.training.model_copy(update={
        "checkpoints": variant.training.checkpoints.model_copy(update=checkpoints)})})


def _average_through_the_cli(folder):
    out = folder / "averaged.pt"
    main(["average", "--manifest", str(folder / "train/checkpoints.json"), "--last", str(K),
          "--out", str(out)])
    return load_checkpoint(out)


def test_a_run_stopped_off_the_grid_averages_to_the_uninterrupted_model(corpora, tmp_path):
    straight = tmp_path / "straight"
    build_trainer(_variant(), TINY, *corpora, straight).run()

    # Saved by the wall clock after every step, and sent SIGTERM at step 8.
    stopped = tmp_path / "stopped"
    interruption = Interruption()

    def stop_at(metrics, step):
        if step == STOP_AT and interruption.reason is None:
            os.kill(os.getpid(), signal.SIGTERM)

    with interruption.watching((signal.SIGTERM,), parents=False):
        trainer = build_trainer(_variant(every_minutes=1e-9), TINY, *corpora, stopped,
                                on_metrics=stop_at, interruption=interruption)
        assert trainer.run() is None
    assert interruption.reason == "received SIGTERM" and trainer.step == STOP_AT
    assert _steps(stopped / "checkpoints") == [3, 6, 8]  # 8 only to resume from
    build_trainer(_variant(every_minutes=1e-9), TINY, *corpora, stopped).run()

    assert _steps(stopped / "checkpoints") == _steps(straight / "checkpoints") == [6, 9, 12]
    listed = json.loads((stopped / "train/checkpoints.json").read_text())["checkpoints"]
    assert [entry["step"] for entry in listed] == [6, 9, 12]
    averaged, reference = _average_through_the_cli(stopped), _average_through_the_cli(straight)
    assert averaged["averaged_steps"] == reference["averaged_steps"] == [6, 9, 12]
    assert averaged["model"].keys() == reference["model"].keys()
    for name, tensor in reference["model"].items():
        assert torch.equal(averaged["model"][name], tensor), name
