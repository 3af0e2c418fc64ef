"""Eq. 3's learning rate and section 5.4's label smoothing against hand computations."""

import math

import pytest
import torch
from torch import Tensor

from reproduce.special_tokens import PAD
from reproduce.training.loss import label_smoothed_loss, negative_log_likelihood
from reproduce.training.optimizer import learning_rate


def smoothed_target_distribution(targets: Tensor, vocab_size: int, epsilon: float) -> Tensor:
    """The distribution :func:`label_smoothed_loss` compares against, ``[N, V]``, written out."""
    distribution = torch.full((targets.numel(), vocab_size), epsilon / (vocab_size - 2))
    distribution[:, PAD] = 0.0
    distribution.scatter_(1, targets.reshape(-1, 1), 1.0 - epsilon)
    return distribution


@pytest.mark.parametrize("step, expected", [
    (1, 512**-0.5 * 1 * 4000**-1.5),
    (2000, 512**-0.5 * 2000 * 4000**-1.5),
    (4000, 512**-0.5 * 4000**-0.5),
    (16000, 512**-0.5 * 16000**-0.5),
    (100000, 512**-0.5 * 100000**-0.5),
])
def test_learning_rate_equals_eq_3(step, expected):
    assert learning_rate(step, 512, 4000) == pytest.approx(expected, rel=1e-12)


def test_learning_rate_peaks_at_the_end_of_warmup():
    rates = [learning_rate(step, 512, 4000) for step in range(1, 20000)]
    assert max(range(len(rates)), key=rates.__getitem__) + 1 == 4000
    assert learning_rate(4000, 512, 4000) == pytest.approx(7.0e-4, rel=0.01)


def test_the_smoothed_distribution_sums_to_one_and_spares_padding():
    targets = torch.tensor([5, 1, 7])
    distribution = smoothed_target_distribution(targets, vocab_size=10, epsilon=0.1)
    assert torch.allclose(distribution.sum(dim=1), torch.ones(3))
    assert torch.all(distribution[:, PAD] == 0)
    assert distribution[0, 5] == pytest.approx(0.9) and distribution[0, 3] == pytest.approx(0.1 / 8)


def test_label_smoothed_loss_equals_a_hand_computation():
    torch.manual_seed(0)
    logits = torch.randn(1, 3, 6)
    targets = torch.tensor([[4, 2, PAD]])
    loss, tokens = label_smoothed_loss(logits, targets, epsilon=0.2)
    expected = 0.0
    for position, target in enumerate([4, 2]):
        log_probs = torch.log_softmax(logits[0, position], dim=-1).tolist()
        for k in range(6):
            weight = 0.8 if k == target else (0.0 if k == PAD else 0.2 / 4)
            expected -= weight * log_probs[k]
    assert tokens == 2
    assert loss.item() == pytest.approx(expected, rel=1e-6)


def test_padding_positions_contribute_nothing():
    torch.manual_seed(1)
    logits = torch.randn(2, 4, 9)
    targets = torch.tensor([[3, 4, PAD, PAD], [5, 6, 7, 8]])
    changed = logits.clone()
    changed[0, 2:] = torch.randn(2, 9) * 10
    assert torch.equal(label_smoothed_loss(logits, targets, 0.1)[0],
                       label_smoothed_loss(changed, targets, 0.1)[0])


def test_nll_is_the_unsmoothed_cross_entropy():
    torch.manual_seed(2)
    logits = torch.randn(1, 2, 5)
    targets = torch.tensor([[3, 4]])
    loss, tokens = negative_log_likelihood(logits, targets)
    expected = torch.nn.functional.cross_entropy(logits[0], targets[0], reduction="sum")
    assert tokens == 2 and loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert math.isfinite(loss.item())


@pytest.mark.parametrize("step", [1, 2000, 4000, 16000])
def test_lr_scale_multiplies_the_whole_curve_of_eq_3(step):
    """``training.lr_scale`` is a factor on eq. 3 at every step, in warm-up and decay alike."""
    paper = 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
    assert learning_rate(step, 512, 4000, scale=2.5) == pytest.approx(2.5 * paper, rel=1e-12)


def test_steps_count_from_one_so_a_step_0_is_refused():
    """Eq. 3 at step 0 would divide by zero: the first update is step 1."""
    with pytest.raises(ValueError, match="steps count from 1, got 0"):
        learning_rate(0, 512, 4000)
