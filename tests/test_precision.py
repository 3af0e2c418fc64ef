"""Precision and the optimizer update: fp16 loss scaling (skipped overflows, growth, exact
resume), clipping of the true gradient, and which precision a run computes in.

The trainer's fp16 path runs here on the CPU (torch autocasts CPUs to float16 and its
GradScaler scales on CPUs too), with ``resolve_precision`` made to answer fp16, as a GPU
without bf16 units would; tests/test_gpu.py runs it on CUDA.
"""

import copy
import json
import math

import pytest
import torch

import reproduce.training.precision as precision_module
from reproduce.training.checkpoints import list_checkpoints, load_checkpoint, save_checkpoint
from reproduce.training.precision import (LossScaleError, OptimizerUpdate, can_compute_in,
                                          resolve_precision)
from reproduce.training.optimizer import learning_rate
from reproduce.errors import CheckpointError
from reproduce.training.assembly import build_trainer
from reproduce.training.trainer import Trainer
from tests.test_training import _final
from tests.training_fixtures import TINY, random_corpus, small_variant


# -- which precision ------------------------------------------------------------------------------
@pytest.mark.parametrize(("requested", "device_type", "bf16_units", "expected"), [
    ("auto", "cuda", True, "bf16"),  # A100, H100
    ("auto", "cuda", False, "fp16"),  # V100, P100
    ("fp16", "cuda", True, "fp16"),
    ("bf16", "cuda", False, "bf16"),  # asked for explicitly: torch emulates it
    ("fp32", "cuda", True, "fp32"),
    ("auto", "cpu", False, "fp32"),  # a CPU computes in fp32 whatever is asked
    ("fp16", "cpu", False, "fp32"),
    ("bf16", "cpu", False, "fp32"),
])
def test_precision_resolves_by_the_device(requested, device_type, bf16_units, expected):
    assert resolve_precision(requested, device_type, bf16_units) == expected


@pytest.mark.parametrize(("precision", "device_type", "bf16_units", "expected"), [
    ("fp32", "cpu", False, True),
    ("fp16", "cpu", False, False),
    ("fp16", "cuda", True, True),  # a run started on a V100 goes on on an A100
    ("bf16", "cuda", False, False),  # ...but not the other way round
    ("bf16", "cuda", True, True),
])
def test_which_device_can_go_on_with_a_run(precision, device_type, bf16_units, expected):
    assert can_compute_in(precision, device_type, bf16_units) == expected


# -- the update, by hand ------------------------------------------------------------------------
def _linear(loss_scaling: bool, growth_interval: int = 2000):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    return model, OptimizerUpdate(optimizer, "cpu", loss_scaling, None, growth_interval)


def _backward(model, update, poison: float | None = None) -> None:
    update.optimizer.zero_grad()
    update.backward(model(torch.ones(4, 3)).pow(2).sum())
    if poison is not None:
        model.weight.grad[0, 1] = poison


@pytest.mark.parametrize("poison", [math.inf, -math.inf, math.nan])
def test_an_overflowing_update_is_skipped_and_halves_the_scale(poison):
    model, update = _linear(loss_scaling=True)
    _backward(model, update)
    assert update.apply().applied  # Adam has moments now
    weights = copy.deepcopy(model.state_dict())
    adam = copy.deepcopy(update.optimizer.state_dict()["state"])
    scale = update.loss_scale
    _backward(model, update, poison)
    applied = update.apply().applied
    assert not applied and update.loss_scale == scale / 2
    assert all(torch.equal(weights[name], tensor) for name, tensor in model.state_dict().items())
    after = update.optimizer.state_dict()["state"]
    assert all(torch.equal(adam[index][key], after[index][key])
               for index in adam for key in ("step", "exp_avg", "exp_avg_sq"))


def test_the_scale_doubles_after_growth_interval_good_updates():
    model, update = _linear(loss_scaling=True, growth_interval=3)
    start = update.loss_scale
    scales = []
    for poison in (None, None, None, None, math.inf, None, None, None):
        _backward(model, update, poison)
        update.apply()
        scales.append(update.loss_scale)
    # Three good updates double S; an overflow halves it and starts the count again.
    assert scales == [start, start, 2 * start, 2 * start, start, start, start, 2 * start]


def test_updates_that_overflow_at_any_scale_stop_the_run():
    model, update = _linear(loss_scaling=True)
    update.load_state_dict(update.state_dict() | {"scale": 2.0**-13})
    _backward(model, update, math.nan)
    with pytest.raises(LossScaleError, match=r"scale fell to 6.1e-05, below 0.0001: .*diverged"):
        update.apply()


def test_the_scalers_state_is_plain_numbers_loadable_without_code(tmp_path):
    model, update = _linear(loss_scaling=True, growth_interval=3)
    for poison in (None, math.inf, None):
        _backward(model, update, poison)
        update.apply()
    save_checkpoint({"model": model.state_dict(), "loss_scaler": update.state_dict()},
                    tmp_path / "c.pt")
    state = load_checkpoint(tmp_path / "c.pt")["loss_scaler"]  # torch.load(weights_only=True)
    assert state == {"scale": 32768.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                     "growth_interval": 3, "_growth_tracker": 1}
    _, restored = _linear(loss_scaling=True)
    restored.load_state_dict(state)
    assert restored.state_dict() == update.state_dict() and restored.loss_scale == 32768.0
    assert _linear(loss_scaling=False)[1].state_dict() == {}  # fp32 and bf16 have no scaler


@pytest.mark.parametrize("loss_scaling", [False, True])
def test_clipping_rescales_the_true_gradient_to_clip_norm(loss_scaling):
    """A gradient of norm 10 clipped at 5, under a loss scale of 2^16 or none: plain SGD with
    lr 1 moves the weights by exactly the clipped gradient."""
    weights = torch.nn.Parameter(torch.zeros(2))
    update = OptimizerUpdate(torch.optim.SGD([weights], lr=1.0), "cpu", loss_scaling, clip_norm=5.0)
    update.backward((weights * torch.tensor([6.0, 8.0])).sum())  # gradient (6, 8)
    applied, norm, _ = update.apply()
    assert applied and norm.item() == 10.0  # the norm before clipping, of the unscaled gradient
    assert torch.allclose(weights.detach(), torch.tensor([-3.0, -4.0]), rtol=1e-6, atol=0)
    assert torch.linalg.vector_norm(weights.grad).item() == pytest.approx(5.0, rel=1e-6)


@pytest.mark.parametrize("loss_scaling", [False, True])
def test_a_gradient_under_clip_norm_is_left_as_it_is(loss_scaling):
    weights = torch.nn.Parameter(torch.zeros(2))
    update = OptimizerUpdate(torch.optim.SGD([weights], lr=1.0), "cpu", loss_scaling, clip_norm=5.0)
    update.backward((weights * torch.tensor([0.6, 0.8])).sum())
    assert update.apply().applied
    assert torch.equal(weights.detach(), -torch.tensor([0.6, 0.8]))


def test_without_loss_scaling_a_non_finite_gradient_skips_that_update_and_every_later_one():
    """fp32: a NaN gradient's update is skipped, and so is every later one, finite or not (the
    host learns of the NaN a step late and stops the run with the weights of the last finite
    step): plain SGD with lr 1 leaves the weights where the first finite step put them."""
    weights = torch.nn.Parameter(torch.zeros(2))
    update = OptimizerUpdate(torch.optim.SGD([weights], lr=1.0), "cpu", False, clip_norm=None)
    for gradient, not_finite in (([1.0, 2.0], 0.0), ([math.nan, 1.0], 1.0), ([3.0, 4.0], 1.0)):
        update.optimizer.zero_grad()
        update.backward((weights * torch.tensor(gradient)).sum())
        assert update.apply().not_finite.item() == not_finite
    assert torch.equal(weights.detach(), torch.tensor([-1.0, -2.0]))


# -- the trainer in fp16 ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpora")
    return random_corpus(folder / "train", 400, seed=1), random_corpus(folder / "dev", 40, seed=2)


def _fp16(requested: str, device_type: str, bf16_units: bool) -> str:
    """What ``resolve_precision`` answers on a GPU without bf16 units for ``auto``."""
    return "fp16"


@pytest.fixture
def fp16_on_the_cpu(monkeypatch):
    monkeypatch.setattr(precision_module, "resolve_precision", _fp16)


def _starting_at_scale(trainer: Trainer, scale: float) -> Trainer:
    """A fresh trainer whose loss scale starts at ``scale`` (2^24 overflows at once here)."""
    update = trainer.optimizer_update
    update.load_state_dict(update.state_dict() | {"scale": scale})
    return trainer


def _metrics(folder):
    return [json.loads(line) for line in (folder / "train/metrics.jsonl").read_text().splitlines()]


def _curves(folder):
    """The metrics but the throughput, which differs between runs."""
    return [{key: value for key, value in row.items() if "second" not in key and key != "mfu"}
            for row in _metrics(folder)]


def test_skipped_fp16_updates_are_not_steps(corpora, tmp_path, fp16_on_the_cpu):
    variant = small_variant(steps=4, dropout=0.0)
    trainer = _starting_at_scale(build_trainer(variant, TINY, *corpora, tmp_path), 2.0**24)
    summary = trainer.run()
    assert summary["precision"] == "fp16" and summary["steps"] == 4
    assert summary["skipped_steps"] > 0 and trainer.optimizer_update.loss_scale < 2.0**24
    adam = trainer.optimizer.state_dict()["state"]
    assert all(state["step"].item() == 4 for state in adam.values())  # Adam counts updates too
    logged = [row for row in _metrics(tmp_path) if "lr" in row]
    t = variant.training
    assert [row["lr"] for row in logged] == [
        learning_rate(step, variant.model.d_model, t.warmup_steps, t.lr_scale) for step in (2, 4)]
    assert all(row["loss_scale"] == trainer.optimizer_update.loss_scale for row in logged)


def test_resuming_fp16_with_its_loss_scaler_equals_an_uninterrupted_run_bitwise(
        corpora, tmp_path, fp16_on_the_cpu):
    """The scale starts high, so that the first steps overflow and the scaler's state at the
    interruption is none of its defaults; the resumed run must go on from it."""
    variant = small_variant(steps=8, dropout=0.1)
    _starting_at_scale(build_trainer(variant, TINY, *corpora, tmp_path / "straight"), 2.0**24).run()
    _starting_at_scale(build_trainer(variant, TINY, *corpora, tmp_path / "resumed"),
                       2.0**24).run(stop_after_steps=4)
    resumed = build_trainer(variant, TINY, *corpora, tmp_path / "resumed")
    assert resumed.precision == "fp16" and resumed.optimizer_update.loss_scale < 2.0**24
    resumed.run()
    straight, again = _final(tmp_path / "straight"), _final(tmp_path / "resumed")
    assert all(torch.equal(tensor, again["model"][name])
               for name, tensor in straight["model"].items())
    names = [path.name for path in list_checkpoints(tmp_path / "straight/checkpoints")]
    assert set(names) <= {path.name for path in list_checkpoints(tmp_path / "resumed/checkpoints")}
    for name in names:
        a = load_checkpoint(tmp_path / "straight/checkpoints" / name)
        b = load_checkpoint(tmp_path / "resumed/checkpoints" / name)
        assert a["precision"] == b["precision"] == "fp16"
        assert a["loss_scaler"] == b["loss_scaler"], name
        assert a["totals"]["skipped_steps"] == b["totals"]["skipped_steps"] > 0
        assert all(torch.equal(a["optimizer"]["state"][k]["exp_avg_sq"], moments["exp_avg_sq"])
                   for k, moments in b["optimizer"]["state"].items())
    assert _curves(tmp_path / "resumed") == _curves(tmp_path / "straight")


def test_an_fp16_run_is_not_resumed_where_it_would_go_on_in_fp32(corpora, tmp_path, monkeypatch):
    variant = small_variant(steps=6, dropout=0.0, precision="fp16")
    with monkeypatch.context() as patch:
        patch.setattr(precision_module, "resolve_precision", _fp16)
        build_trainer(variant, TINY, *corpora, tmp_path).run(stop_after_steps=3)
    with pytest.raises(CheckpointError, match=r"step_00000003.pt: the run trains in fp16 "
                       r"\(training.precision: fp16\) and cpu cannot; .*--restart"):
        build_trainer(variant, TINY, *corpora, tmp_path)


def test_a_resumed_run_keeps_the_precision_it_started_in(corpora, tmp_path, monkeypatch):
    """``auto`` on a CPU trained in fp32; where it would now pick fp16 (a requeue onto a
    GPU), the run goes on in fp32, and equals a run that never moved."""
    variant = small_variant(steps=6, dropout=0.1, precision="auto")
    build_trainer(variant, TINY, *corpora, tmp_path / "straight").run()
    build_trainer(variant, TINY, *corpora, tmp_path / "moved").run(stop_after_steps=3)
    monkeypatch.setattr(precision_module, "resolve_precision", _fp16)
    moved = build_trainer(variant, TINY, *corpora, tmp_path / "moved")
    assert moved.precision == "fp32" and moved.optimizer_update.state_dict() == {}
    summary = moved.run()
    assert summary["precision"] == "fp32"
    a, b = _final(tmp_path / "straight")["model"], _final(tmp_path / "moved")["model"]
    assert all(torch.equal(tensor, b[name]) for name, tensor in a.items())


def test_the_logged_gradient_norm_is_the_one_before_clipping(corpora, tmp_path):
    norms = {}
    for clip_norm in (None, 1e-3):
        variant = small_variant(steps=1, dropout=0.0, clip_norm=clip_norm, log_every_steps=1)
        build_trainer(variant, TINY, *corpora, tmp_path / str(clip_norm)).run()
        norms[clip_norm] = _metrics(tmp_path / str(clip_norm))[0]["grad_norm"]
    assert norms[1e-3] == norms[None] > 1e-3


@pytest.mark.parametrize(("capability", "expected"), [((7, 0), False), ((7, 5), False),
                                                      ((8, 0), True), ((9, 0), True)])
def test_bf16_units_start_at_compute_capability_8_0(monkeypatch, capability, expected):
    """Ampere (8.0: A100) and later compute bf16 natively; a V100 (7.0) or T4 (7.5) does not,
    so ``auto`` trains in fp16 there; a CPU has none."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert precision_module.has_bf16_units(torch.device("cuda")) is expected
    assert precision_module.has_bf16_units(torch.device("cpu")) is False


def test_a_steps_gradient_is_clipped_to_clip_norm_before_its_update(corpora, tmp_path):
    """``training.clip_norm`` reaches the update: the gradient the optimizer stepped on has
    norm clip_norm (torch divides by norm + 1e-6), where the step's own norm is far above it."""
    variant = small_variant(steps=1, dropout=0.0, clip_norm=1e-3)
    trainer = build_trainer(variant, TINY, *corpora, tmp_path)
    trainer.run()
    gradients = [p.grad for p in trainer.model.parameters() if p.grad is not None]
    assert torch.nn.utils.get_total_norm(gradients).item() == pytest.approx(1e-3, rel=1e-3)
