"""Label-smoothed cross-entropy (section 5.4, eps_ls = 0.1) and plain negative log-likelihood.

The smoothed target distribution puts ``1 - eps`` on the reference token and spreads ``eps``
uniformly over the ``V - 2`` other tokens that are not padding; padding gets nothing, so the
distribution sums to 1 over real tokens. Padded target positions contribute no loss. Losses are
*summed* over tokens and returned with the token count, so that gradient accumulation and data
parallelism divide by the exact number of target tokens in an optimizer step.
"""

from __future__ import annotations

import torch
from torch import Tensor

from reproduce.special_tokens import PAD


def label_smoothed_loss(logits: Tensor, targets: Tensor, epsilon: float) -> tuple[Tensor, int]:
    """Summed ``-sum_k q(k) log p(k)`` over non-padding targets, and their count.

    logits ``[B, T, V]``, targets ``[B, T]`` (PAD where there is nothing to predict). The
    log-softmax runs in at least fp32 (bf16 logits are upcast, float64 ones kept).
    """
    vocab_size = logits.size(-1)
    upcast = logits.to(torch.promote_types(logits.dtype, torch.float32))
    log_probs = torch.log_softmax(upcast, dim=-1).view(-1, vocab_size)  # [N, V]
    targets = targets.reshape(-1)
    real = targets.ne(PAD)
    reference = log_probs.gather(1, targets.unsqueeze(1)).squeeze(1)  # [N]
    if epsilon == 0.0:
        per_token = -reference
    else:
        others = log_probs.sum(dim=1) - reference - log_probs[:, PAD]
        per_token = -(1.0 - epsilon) * reference - epsilon / (vocab_size - 2) * others
    return per_token.masked_fill(~real, 0.0).sum(), int(real.sum())


def negative_log_likelihood(logits: Tensor, targets: Tensor) -> tuple[Tensor, int]:
    """Summed NLL of the non-padding targets (no smoothing: perplexity = exp(sum / count))."""
    return label_smoothed_loss(logits, targets, 0.0)
