"""Faults refused before training or stopped at once, each with one line: a folder where a
checkpoint belongs, a loss gone non-finite, SIGHUP, too few checkpoints to average."""

import json
from pathlib import Path
import shutil
import signal
import subprocess

import pytest
import torch
import yaml

from reproduce.config import ConfigError
from reproduce.experiment_file import load_experiment
from reproduce.training.checkpoints import CheckpointError, list_checkpoints, load_checkpoint
from reproduce.training.launch import launch_training
from reproduce.training.assembly import build_trainer
from reproduce.training.run_records import StepOutcome
from reproduce.training.trainer import NonFiniteLossError, check_finite
from tests.test_faults import ENVIRONMENT, _run_status, _trainer_process, _wait_for
from tests.training_fixtures import TINY, ROOT, corpus_pair, small_variant, write_encoded
from tests.training_fixtures import one_torch_thread  # noqa: F401 (autouse: one torch thread)

DIVERGING = 1e10  # training.lr_scale: the loss is nan from step 2 on


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    return corpus_pair(tmp_path_factory.mktemp("corpora"), 200)


# -- a folder where a checkpoint belongs ---------------------------------------------------------
@pytest.mark.parametrize("name", ["step_00000006.pt", "step_00000004.pt.sha256"])
def test_a_folder_where_a_checkpoint_belongs_is_refused_before_training(corpora, tmp_path, name):
    folder = tmp_path / "run"
    build_trainer(small_variant(steps=9), TINY, *corpora, folder).run(stop_after_steps=4)
    path = folder / "checkpoints" / name
    path.unlink(missing_ok=True)
    path.mkdir()
    with pytest.raises(CheckpointError) as raised:
        build_trainer(small_variant(steps=9), TINY, *corpora, folder)
    assert str(raised.value) == (f"{path}: a folder where training writes a checkpoint file; "
                                 f"move it out of {folder / 'checkpoints'}")


# -- a non-finite loss ---------------------------------------------------------------------------
def test_a_non_finite_loss_stops_training_at_its_step_unsaved(corpora, tmp_path):
    trainer = build_trainer(small_variant(steps=9, lr_scale=DIVERGING), TINY, *corpora, tmp_path)
    with pytest.raises(NonFiniteLossError) as raised:
        trainer.run()
    assert str(raised.value).startswith("step 2: the training loss is nan (fp32): training "
                                        "diverged, and this step was not saved; lower")
    # Its gradient is nan too: the update was not applied, the weights are step 1's.
    assert trainer.step == 1 and list_checkpoints(tmp_path / "checkpoints") == []
    assert all(parameter.isfinite().all() for parameter in trainer.model.parameters())
    assert not (tmp_path / "train/final.pt").exists()


def test_an_update_of_a_finite_loss_but_non_finite_gradient_is_never_applied(corpora, tmp_path):
    """bf16 and fp32 have no loss scaler to find it: the gradient's norm does, and the
    optimizer skips the update on the device. The run stops at that step, its weights and
    Adam's moments those of the step before."""
    trainer = build_trainer(small_variant(steps=9), TINY, *corpora, tmp_path)
    trainer.run(stop_after_steps=2)
    before = {name: tensor.clone() for name, tensor in trainer.model.state_dict().items()}
    moments = [state["exp_avg"].clone() for state in trainer.optimizer.state.values()]
    weight = trainer.model.embedding.weight
    weight.register_hook(lambda grad: torch.full_like(grad, float("inf")))
    with pytest.raises(NonFiniteLossError) as raised:
        trainer.run()
    assert str(raised.value).startswith("step 3: the gradient is not finite (norm inf) (fp32): "
                                        "training diverged, and this step was not saved")
    assert trainer.step == 2
    for name, tensor in trainer.model.state_dict().items():
        assert torch.equal(tensor, before[name]), name
    for state, moment in zip(trainer.optimizer.state.values(), moments, strict=True):
        assert torch.equal(state["exp_avg"], moment) and int(state["step"]) == 2


@pytest.mark.parametrize(("loss", "gradient_finite", "stops"), [
    (2.5, True, False), (float("nan"), True, True), (float("inf"), False, True),
    (2.5, False, True)])
def test_either_a_non_finite_loss_or_gradient_stops_the_run(loss, gradient_finite, stops):
    """Each alone is divergence. Without the stop, the trainer would retry a step whose
    gradient stays non-finite, forever: the run above would only end at pytest's timeout."""
    outcome = StepOutcome(True, loss, 10, 12, 1000, 0, 0, 1.0,
                          torch.tensor(2.0 if gradient_finite else float("inf")),
                          gradient_finite, False)
    if stops:
        with pytest.raises(NonFiniteLossError, match=r"^step 7: .*\(bf16\): training diverged"):
            check_finite(outcome, 7, "bf16")
    else:
        check_finite(outcome, 7, "bf16")


def test_a_non_finite_loss_ends_the_mlflow_run_failed(corpora, tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    experiment = load_experiment(ROOT / "configs/tiny.yaml")
    with pytest.raises(NonFiniteLossError, match=r"^step 2: "):
        launch_training(experiment, small_variant(steps=9, lr_scale=DIVERGING), *corpora,
                        tmp_path, tmp_path)
    assert _run_status(tmp_path) == "FAILED"


# -- SIGHUP --------------------------------------------------------------------------------------
def test_sighup_saves_a_checkpoint_and_ends_the_mlflow_run_killed(corpora, tmp_path):
    """The terminal or ssh session of a trainer run by hand closes."""
    folder = tmp_path / "variant"
    process = subprocess.Popen(_trainer_process(corpora, folder, 400, launch=True),
                               env=ENVIRONMENT, stderr=subprocess.PIPE, text=True)
    _wait_for(lambda: list_checkpoints(folder / "checkpoints"), "a first checkpoint")
    process.send_signal(signal.SIGHUP)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGHUP, stderr[-2000:]
    stopped = load_checkpoint(list_checkpoints(folder / "checkpoints")[-1])["step"]
    assert f"training stopped at step {stopped} (received SIGHUP)" in stderr
    assert _run_status(folder) == "KILLED"


# -- too few checkpoints to average --------------------------------------------------------------
def _tiny_with(tmp_path, **training) -> str:
    raw = yaml.safe_load((ROOT / "configs/tiny.yaml").read_text())
    checkpoints = training.pop("checkpoints")
    raw["training"].update(training)
    raw["training"]["checkpoints"].update(checkpoints)
    path = tmp_path / "few.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize("steps, every_steps, every_minutes, saved", [
    (10, 8, 10, 2),  # step 8 and the final step; wall-clock saves are not counted
    (16, 8, 0, 2),  # on the grid, but two saves
    (32, 8, 0, 4),  # one save short of average_last: the bound itself is refused
])
def test_too_few_checkpoints_to_average_are_refused_naming_the_keys(
        tmp_path, steps, every_steps, every_minutes, saved):
    path = _tiny_with(tmp_path, steps=steps, average_last=5, checkpoints={
        "every_steps": every_steps, "every_minutes": every_minutes, "keep_last": 5})
    with pytest.raises(ConfigError) as raised:
        load_experiment(path)
    message = str(raised.value)
    assert message.startswith(
        f"{path}: training: average_last (5) is more than the {saved} checkpoints that steps "
        f"({steps}) and checkpoints.every_steps ({every_steps}) are sure to save")
    assert "\n" not in message


def test_exactly_enough_checkpoints_to_average_are_accepted(tmp_path):
    path = _tiny_with(tmp_path, steps=33, average_last=5, checkpoints={
        "every_steps": 8, "every_minutes": 10, "keep_last": 5})  # 8, 16, 24, 32 and 33
    assert load_experiment(path).training.average_last == 5


# -- a checkpoint of other data --------------------------------------------------------------------
def test_resuming_on_a_split_of_another_vocabulary_is_one_line_naming_both(corpora, tmp_path):
    build_trainer(small_variant(steps=9), TINY, *corpora, tmp_path / "run").run(stop_after_steps=3)
    other = tmp_path / "other"
    write_encoded(other, 33, [([5, 6, 7], [8, 9]), ([10, 11], [12, 13, 14])] * 200)
    with pytest.raises(CheckpointError) as raised:
        build_trainer(small_variant(steps=9), TINY, other, corpora[1], tmp_path / "run")
    checkpoint = list_checkpoints(tmp_path / "run/checkpoints")[-1]
    assert str(raised.value).startswith(
        f"{other}: 33 pieces, but {checkpoint} was trained with a vocabulary of 40; to start "
        f"over, run `reproduce train` again with --restart")


def test_resuming_on_pieces_of_another_sentencepiece_model_is_one_line(corpora, tmp_path):
    def encoded_with(spm_sha256: str) -> Path:
        train = tmp_path / spm_sha256[:2]
        shutil.copytree(corpora[0], train)
        meta = json.loads((train / "meta.json").read_text())
        (train / "meta.json").write_text(json.dumps(meta | {"spm_model_sha256": spm_sha256}))
        return train

    first, other = encoded_with("cd" * 32), encoded_with("ab" * 32)
    build_trainer(small_variant(steps=9), TINY, first, corpora[1], tmp_path / "run").run(
        stop_after_steps=3)
    with pytest.raises(CheckpointError, match=rf"^{other}: made with another sentencepiece "
                       rf"model \(sha256 abababababab\.\.\.\) than {tmp_path}/run/checkpoints/"
                       rf"step_\d+\.pt was trained with \(cdcdcdcdcdcd\.\.\.\); to start over"):
        build_trainer(small_variant(steps=9), TINY, other, corpora[1], tmp_path / "run")


# -- a split the model cannot take ---------------------------------------------------------------
def test_a_split_whose_every_pair_is_too_long_names_its_folder_the_cause_and_the_setting(
        corpora, tmp_path):
    long = tmp_path / "long"
    write_encoded(long, 40, [(list(range(4, 34)), list(range(4, 24)))] * 50)
    with pytest.raises(ConfigError) as raised:
        build_trainer(small_variant(steps=9, max_source_tokens=16), TINY, long, corpora[1],
                      tmp_path)
    assert str(raised.value) == (
        f"{long}: none of its 50 pairs fits the model: 50 are longer than "
        f"training.max_source_tokens = 16 positions per side, the longest 31 with EOS")
