"""The chunked projection + label-smoothed loss equals the unfused formula, and training with it
equals training with the unfused formula."""

import numpy as np
import pytest
import torch
import torch._dynamo
import torch.nn.functional as F
from torch._dynamo.utils import counters

from reproduce.special_tokens import PAD
from reproduce.training.batching import collate
from reproduce.training.loss import label_smoothed_loss
from reproduce.training.projected_loss import projected_label_smoothed_loss, rows_per_chunk
from reproduce.training.optimizer import learning_rate
from reproduce.training.assembly import build_trainer
from reproduce.training.trainer import Trainer
from tests.test_training import _key_bias_masks
from tests.training_fixtures import TINY, random_corpus, small_variant

BATCH, LENGTH, WIDTH, VOCAB = 3, 7, 5, 13


def _case(seed: int):
    """Random float64 states ``[3, 7, 5]``, weight ``[13, 5]`` and targets with padding (N = 14)."""
    generator = torch.Generator().manual_seed(seed)
    states = torch.randn(BATCH, LENGTH, WIDTH, dtype=torch.float64, generator=generator,
                         requires_grad=True)
    weight = torch.randn(VOCAB, WIDTH, dtype=torch.float64, generator=generator, requires_grad=True)
    targets = torch.randint(1, VOCAB, (BATCH, LENGTH), generator=generator)
    targets[0, 5:] = PAD
    targets[2, 2:] = PAD
    return states, weight, targets


@pytest.mark.parametrize("epsilon", [0.0, 0.1])
@pytest.mark.parametrize("chunk_rows", [1, 3, 4, 7, 14, 100])  # N = 14: dividing it or not
def test_loss_and_gradients_equal_the_unfused_formula(epsilon, chunk_rows):
    states, weight, targets = _case(seed=chunk_rows)
    expected, expected_count = label_smoothed_loss(F.linear(states, weight), targets, epsilon)
    expected_states, expected_weight = torch.autograd.grad(expected, (states, weight))
    real = targets.ne(PAD)  # the loss takes the target tokens alone, as the trainer passes them
    loss, count = projected_label_smoothed_loss(states[real], weight, targets[real], epsilon,
                                                chunk_rows)
    grad_states, grad_weight = torch.autograd.grad(loss, (states, weight))
    assert count == expected_count == 14
    assert loss.dtype == torch.float64
    assert torch.allclose(loss, expected, rtol=0, atol=1e-12)
    assert torch.allclose(grad_states, expected_states, rtol=0, atol=1e-12)
    assert torch.allclose(grad_weight, expected_weight, rtol=0, atol=1e-12)
    assert not grad_states[targets.eq(PAD)].any()  # padded positions are not projected at all


@pytest.mark.parametrize("chunk_rows", [1, 4, 14])
@pytest.mark.parametrize(("announced", "brought"), [(0.37, 0.37), (0.5, 1.0), (2.0**-7, 0.0)])
def test_gradients_computed_with_the_loss_equal_the_formulas_for_the_gradient_brought(
        chunk_rows, announced, brought):
    """``gradient_scale``: the gradients come from the forward pass's logits, for the gradient
    the caller announced; the backward pass brings another or the same, and they are right for
    it (the unfused formula's, times the gradient brought); the loss is unchanged."""
    states, weight, targets = _case(seed=chunk_rows)
    expected, _ = label_smoothed_loss(F.linear(states, weight), targets, 0.1)
    expected_states, expected_weight = torch.autograd.grad(expected * brought, (states, weight))
    real = targets.ne(PAD)
    loss, _ = projected_label_smoothed_loss(states[real], weight, targets[real], 0.1, chunk_rows,
                                            gradient_scale=torch.tensor(announced,
                                                                        dtype=torch.float64))
    grad_states, grad_weight = torch.autograd.grad(loss * brought, (states, weight))
    assert torch.allclose(loss, expected, rtol=0, atol=1e-12)
    assert torch.allclose(grad_states, expected_states, rtol=0, atol=1e-12)
    assert torch.allclose(grad_weight, expected_weight, rtol=0, atol=1e-12)


def test_gradients_computed_with_the_loss_keep_no_logits_and_pass_gradcheck():
    states, weight, targets = _case(seed=0)
    real = targets.ne(PAD)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t,
                                                  lambda t: t):
        projected_label_smoothed_loss(states[real], weight, targets[real], 0.1, 4,
                                      gradient_scale=torch.tensor(1.0, dtype=torch.float64))
    assert sum(saved) <= weight.numel() + states.numel()
    assert torch.autograd.gradcheck(
        lambda s, w: projected_label_smoothed_loss(
            s[real], w, targets[real], 0.1, chunk_rows=4,
            gradient_scale=torch.tensor(0.25, dtype=torch.float64))[0], (states, weight))


def test_the_loss_gradient_the_trainer_announces_is_the_one_backward_brings():
    """OptimizerUpdate.loss_gradient(factor) is, bit for bit, the gradient that backward of
    ``loss * factor`` brings to the loss, with loss scaling (S = 2^16) and without."""
    from reproduce.training.precision import OptimizerUpdate

    for scaling in (False, True):
        parameter = torch.nn.Parameter(torch.ones(()))
        update = OptimizerUpdate(torch.optim.SGD([parameter], lr=0.1), "cpu", scaling, None)
        for factor in (1 / 3, 8 / 24_192, 0.7):
            loss = parameter * 3.0
            loss.retain_grad()
            update.backward(loss * factor)
            assert torch.equal(loss.grad, update.loss_gradient(factor, torch.device("cpu")))
            parameter.grad = None


@pytest.mark.slow
def test_the_compiled_chunks_compute_the_same_loss_and_gradients_through_one_graph_each():
    """``compiled`` (the trainer's torch.compile) traces each chunk function once, whatever the
    chunk's rows: N = 14 in chunks of 4 leaves a last chunk of 2, and a second call has other N."""
    torch._dynamo.reset()
    counters.clear()
    for seed, rows in ((2, 4), (3, 5)):
        states, weight, targets = _case(seed=seed)
        real = targets.ne(PAD)
        losses, gradients = [], []
        announced = torch.tensor(1.0, dtype=torch.float64)
        for compiled, early in ((False, None), (True, None), (True, announced)):
            loss, _ = projected_label_smoothed_loss(states[real], weight, targets[real], 0.1,
                                                    rows, compiled=compiled, gradient_scale=early)
            losses.append(loss)
            gradients.append(torch.autograd.grad(loss, (states, weight)))
        for loss, (grad_states, grad_weight) in zip(losses[1:], gradients[1:], strict=True):
            assert torch.allclose(loss, losses[0], rtol=0, atol=1e-12)
            assert torch.allclose(grad_states, gradients[0][0], rtol=0, atol=1e-12)
            assert torch.allclose(grad_weight, gradients[0][1], rtol=0, atol=1e-12)
    # the forward's chunk terms, the backward's gradient, and both from one product
    assert counters["stats"]["unique_graphs"] == 3


def test_traced_with_a_compiled_pass_the_loss_with_its_gradients_is_one_opaque_operator():
    """With the gradient announced, the loss is one operator to torch.compile: its chunks stay a
    loop that runs one chunk after another (traced into the pass's graph, Inductor fused every
    chunk's element-wise work together and held all their logits at once), and a graph made of
    it computes the loss and the gradients of the eager loop."""
    graphs = []

    def keep_graph(graph, example_inputs):
        graphs.append(graph)
        return graph.forward

    states, weight, targets = _case(seed=5)
    real = targets.flatten().ne(PAD).nonzero().squeeze(1)  # as a pass's target_index
    announced = torch.tensor(0.5, dtype=torch.float64)

    def pass_loss(states, weight):
        return projected_label_smoothed_loss(states.flatten(0, 1)[real].sin(), weight,
                                             targets.flatten()[real], 0.1, 4,
                                             gradient_scale=announced)[0]

    loss = torch.compile(pass_loss, backend=keep_graph, fullgraph=True)(states, weight)
    calls = [node.target for node in graphs[0].graph.nodes if node.op == "call_function"]
    assert torch.ops.reproduce.projected_loss_and_gradients.default in calls
    assert torch.ops.aten.mm.default not in calls and torch.matmul not in calls
    expected = pass_loss(states, weight)
    assert torch.allclose(loss, expected, rtol=0, atol=1e-12)
    for gradient, reference in zip(torch.autograd.grad(loss, (states, weight)),
                                   torch.autograd.grad(expected, (states, weight)), strict=True):
        assert torch.allclose(gradient, reference, rtol=0, atol=1e-12)


def test_the_smoothed_loss_of_one_row_by_hand():
    """V = 4, eps = 0.2: q = (PAD 0, reference 0.8, 0.1, 0.1); logits z = states @ W^T."""
    states = torch.tensor([[[1.0, 0.0], [0.0, 0.0]]], dtype=torch.float64)
    weight = torch.tensor([[5.0, 0.0], [0.0, 1.0], [2.0, 0.0], [-1.0, 3.0]], dtype=torch.float64)
    targets = torch.tensor([[2, PAD]])
    z = [5.0, 0.0, 2.0, -1.0]
    log_normaliser = np.log(sum(np.exp(z)))
    by_hand = -(0.8 * (z[2] - log_normaliser) + 0.1 * (z[1] - log_normaliser)
                + 0.1 * (z[3] - log_normaliser))
    real = targets.ne(PAD)
    loss, count = projected_label_smoothed_loss(states[real], weight, targets[real], 0.2,
                                                chunk_rows=1)
    assert count == 1 and abs(loss.item() - by_hand) < 1e-12


def test_gradcheck():
    states, weight, targets = _case(seed=0)
    real = targets.ne(PAD)
    assert torch.autograd.gradcheck(
        lambda s, w: projected_label_smoothed_loss(s[real], w, targets[real], 0.1,
                                                   chunk_rows=4)[0],
        (states, weight))


def test_no_logits_are_kept_for_the_backward_pass():
    """Autograd keeps the weight, the states and a few numbers per position between forward and
    backward: not one row of logits (500 numbers)."""
    states, weight, targets = _case(seed=1)
    weight = torch.randn(500, WIDTH, dtype=torch.float64, requires_grad=True)
    targets = targets.clamp(max=499)
    saved = []

    def keep(tensor):
        saved.append(tensor.numel())
        return tensor

    real = targets.ne(PAD)
    tokens, real_targets = states[real], targets[real]
    with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
        loss, count = projected_label_smoothed_loss(tokens, weight, real_targets, 0.1,
                                                    chunk_rows=4)
    assert count == 14 and saved
    assert sum(saved) <= weight.numel() + states.numel() + 3 * BATCH * LENGTH
    loss.backward()


def test_a_chunk_holds_a_bounded_amount_of_logits():
    assert rows_per_chunk(37000) == 1813  # 256 MiB of fp32 logits
    assert rows_per_chunk(10**9) == 1


def bf16_autocast_errors(device: str, batch: int, width: int, vocab: int) -> dict:
    """Relative errors of the chunked loss under bf16 autocast (on ``device``) against the
    unfused formula in fp32 and against the unfused formula under the same autocast; states
    ``[batch, 64, width]`` ~ N(0, 1), weight ~ N(0, 1 / width) (logits ~ N(0, 1)), 25% padding."""
    generator = torch.Generator().manual_seed(0)
    states = torch.randn(batch, 64, width, generator=generator).to(device)
    weight = (torch.randn(vocab, width, generator=generator) * width**-0.5).to(device)
    targets = torch.randint(4, vocab, (batch, 64), generator=generator)
    targets[:, 48:] = PAD
    targets = targets.to(device)

    def run(fused: bool, autocast: bool):
        s, w = states.clone().requires_grad_(), weight.clone().requires_grad_()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=autocast):
            if fused:
                real = targets.ne(PAD)
                loss, _ = projected_label_smoothed_loss(s[real], w, targets[real], 0.1,
                                                        chunk_rows=3 * 64 + 5)
            else:
                loss, _ = label_smoothed_loss(F.linear(s, w), targets, 0.1)
        loss.backward()
        assert loss.dtype == s.grad.dtype == w.grad.dtype == torch.float32
        return loss.detach(), s.grad, w.grad

    def relative(a, b):  # loss, states' gradient, weight's gradient
        return [float((x - y).norm() / y.norm()) for x, y in zip(a, b, strict=True)]

    fused = run(fused=True, autocast=True)
    return {"fp32": relative(fused, run(fused=False, autocast=False)),
            "autocast": relative(fused, run(fused=False, autocast=True))}


def test_bf16_autocast_rounds_the_logits_as_the_unfused_path_does():
    """CPU autocast here (tests/test_gpu.py does the same on CUDA at base sizes). The logits and
    the states' gradient go through the same bf16 roundings as the unfused path's; the weight's
    gradient is rounded to bf16 per chunk instead of once (its error is bf16's, 2^-9)."""
    errors = bf16_autocast_errors("cpu", batch=8, width=32, vocab=300)
    loss, states, weight = errors["autocast"]
    assert loss < 1e-6 and states < 1e-6 and weight < 1e-2
    loss, states, weight = errors["fp32"]
    assert loss < 1e-3 and states < 1e-2 and weight < 1e-2
    assert states > 1e-4  # bf16 products, not fp32 ones


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpora")
    return random_corpus(folder / "train", 200, seed=3), random_corpus(folder / "dev", 20, seed=4)


def _unfused_step(trainer: Trainer, optimizer: torch.optim.Adam, step: int) -> None:
    """One optimizer step by the old formula: the whole step's pairs in one batch, full logits,
    :func:`label_smoothed_loss`, summed loss divided by the step's target tokens; ``optimizer``
    is the test's own Adam over ``trainer.model``."""
    model = trainer.model
    optimizer.zero_grad()
    batch = collate(trainer.train_corpus, np.concatenate(trainer.stream.next_step()))
    loss, tokens = label_smoothed_loss(model(batch.source, batch.target_input), batch.target_output,
                                       model.config.label_smoothing)
    (loss / tokens).backward()
    t = trainer.training
    for group in optimizer.param_groups:
        group["lr"] = learning_rate(step, model.config.d_model, t.warmup_steps, t.lr_scale)
    optimizer.step()


# Section 5.3's Adam (beta1 0.9, beta2 0.98, epsilon 1e-9) and eps_ls 0.1 (section 5.4), then
# row D's eps_ls 0 with other Adam settings: the trainer must take each from the settings (the
# reference builds its Adam from the case's numbers, not from the trainer's code).
PAPER_ADAM = {"adam_beta1": 0.9, "adam_beta2": 0.98, "adam_eps": 1e-9}
OTHER_ADAM = {"adam_beta1": 0.5, "adam_beta2": 0.6, "adam_eps": 1e-3}


@pytest.mark.parametrize("architecture, label_smoothing, adam_settings", [
    ("transformer", 0.1, PAPER_ADAM), ("rnn", 0.1, PAPER_ADAM),
    ("transformer", 0.0, OTHER_ADAM)])
def test_the_trainer_equals_steps_with_the_unfused_loss(corpora, tmp_path, architecture,
                                                        label_smoothing, adam_settings):
    variant = small_variant(steps=3, dropout=0.0, **adam_settings)
    variant = variant.model_copy(update={"model": variant.model.model_copy(
        update={"architecture": architecture, "label_smoothing": label_smoothing})})
    fused = build_trainer(variant, TINY, *corpora, tmp_path / "fused")
    unfused = build_trainer(variant, TINY, *corpora, tmp_path / "unfused")  # same weights, data
    reference = torch.optim.Adam(
        unfused.model.parameters(), lr=0.0, eps=adam_settings["adam_eps"],
        betas=(adam_settings["adam_beta1"], adam_settings["adam_beta2"]))
    fused.run(stop_after_steps=1)
    _unfused_step(unfused, reference, 1)
    for (name, parameter), reference_parameter in zip(fused.model.named_parameters(),
                                                      unfused.model.parameters(), strict=True):
        assert torch.allclose(parameter.grad, reference_parameter.grad, rtol=1e-4,
                              atol=1e-7), name
    fused.run()
    for step in (2, 3):
        _unfused_step(unfused, reference, step)
    a, b = fused.model.state_dict(), unfused.model.state_dict()
    key_bias = _key_bias_masks(variant.model, a) if architecture == "transformer" else {}
    for name, tensor in a.items():
        mask = key_bias.get(name, torch.zeros_like(tensor, dtype=torch.bool))
        assert torch.allclose(tensor[~mask], b[name][~mask], atol=1e-6), name
