"""The pass runner (reproduce.training.pass_runner) is built from the settings: which attention,
whether compiled, whether each pass shape's graph is captured."""

from contextlib import nullcontext
from types import SimpleNamespace

import pytest
import torch

from reproduce.model.architectures import build_model
from reproduce.training.pass_runner import PassRunner
from reproduce.training.trainer import Trainer
from tests.training_fixtures import small_variant


def _runner(device: str, monkeypatch, **training) -> tuple[PassRunner, list[dict]]:
    """A runner for ``device`` (built only: compiling is lazy, so a CUDA runner can be built
    without a GPU), and the keyword arguments torch.compile was called with."""
    calls = []
    monkeypatch.setattr(torch, "compile", lambda model, **kwargs: calls.append(kwargs) or model)
    variant = small_variant(steps=2, **training)
    model = build_model(variant.model, 50)
    return PassRunner(model, variant.training, 0.1, torch.device(device), "bf16"), calls


@pytest.mark.parametrize(("device", "training", "compiled", "mode", "packed"), [
    ("cpu", {}, False, None, None),
    ("cuda", {}, True, None, "varlen"),
    ("cuda", {"pass_buckets": True}, True, None, None),
    ("cuda", {"pass_buckets": True, "cuda_graphs": True}, True, "reduce-overhead", None),
    ("cpu", {"pass_buckets": True, "cuda_graphs": True, "compile": True}, True, None, None),
    ("cuda", {"attention": "padded", "compile": False}, False, None, None),
    ("cuda", {"attention": "varlen", "pass_buckets": True}, True, None, "varlen"),
    ("cuda", {"attention": "flex", "pass_buckets": True}, True, None, "flex"),
    ("cpu", {"attention": "flex", "pass_buckets": True}, False, None, "flex"),
])
def test_the_runner_compiles_captures_and_packs_as_the_settings_and_device_say(
        monkeypatch, device, training, compiled, mode, packed):
    """``auto`` compiles on GPUs and runs varlen attention there (padded with pass_buckets until
    a GPU has run packed buckets; asked for, varlen or flex runs with them); ``cuda_graphs``
    captures on GPUs only. Compiled, sizes are symbols, except under flex (a graph for each
    bucket shape)."""
    runner, calls = _runner(device, monkeypatch, **training)
    assert runner.compiled is compiled and runner.packed == packed
    dynamic = False if packed == "flex" else None
    assert runner.loss_inside is training.get("cuda_graphs", False)  # captured with the pass
    assert runner.graphs is (mode == "reduce-overhead")
    assert calls == ([{"mode": mode, "dynamic": dynamic}] if compiled else [])


@pytest.mark.parametrize(("graphs", "passes", "handed_over"), [
    (False, 1, True), (False, 3, True), (True, 1, True), (True, 2, False)])
def test_a_step_hands_its_gradients_over_unless_it_replays_several_captured_passes(
        graphs, passes, handed_over):
    """A step starts without gradient buffers (its first backward's gradients become the
    parameters' own, no kernel), except where several captured passes replay: each replay
    overwrites the graphs' outputs, the previous pass's gradients among them, and the last
    step's handed-over ones too, so the passes add into new zeroed buffers."""
    parameter = torch.nn.Parameter(torch.ones(3))
    handed = parameter.grad = torch.full((3,), 2.0)  # as a replay's output would be
    trainer = SimpleNamespace(passes=SimpleNamespace(graphs=graphs),
                              optimizer=torch.optim.SGD([parameter], lr=1.0))
    Trainer._fresh_gradients(trainer, passes)
    if handed_over:
        assert parameter.grad is None
    else:
        assert parameter.grad is not handed and torch.equal(parameter.grad, torch.zeros(3))
        assert torch.equal(handed, torch.full((3,), 2.0))  # never written into


def test_only_the_last_pass_of_a_step_all_reduces_its_gradients_across_ranks():
    """Several ranks: passes before a step's last keep their gradients on the rank (DDP's
    ``no_sync``), so that the step's gradient is all-reduced once, summed over all its passes;
    one rank has nothing to hold back."""
    held = object()
    parallel = SimpleNamespace(no_sync=lambda: held)
    runner = SimpleNamespace(parallel=parallel)
    assert PassRunner.gradients_held(runner, last=False) is held
    assert isinstance(PassRunner.gradients_held(runner, last=True), nullcontext)
    alone = SimpleNamespace(parallel=None)
    assert isinstance(PassRunner.gradients_held(alone, last=False), nullcontext)


def test_under_flex_a_passs_sizes_are_not_marked_as_symbols(monkeypatch):
    """FlexAttention's pass is compiled for each bucket shape: its sizes are not marked dynamic
    (under symbolic sizes torch 2.6 computed wrong attention); other compiled passes' are."""
    from reproduce.training import pass_runner

    marked = []
    monkeypatch.setattr(pass_runner, "mark_pass_sizes_dynamic", lambda *inputs: marked.append(1))
    for attention, expected in (("flex", []), ("varlen", [1])):
        runner, _ = _runner("cpu", monkeypatch, attention=attention, pass_buckets=True,
                            compile=True)
        batch = SimpleNamespace(source=None, target_input=None, source_index=None,
                                target_index=None, source_noise=None, target_noise=None)
        runner.forward = lambda *inputs: torch.zeros(1, 4)
        runner.teacher_forced.loss_of = lambda *arguments: torch.zeros(())
        marked.clear()
        runner.loss(SimpleNamespace(**vars(batch), target_output=None, target_weight=None),
                    torch.ones(()))
        assert marked == expected, attention
