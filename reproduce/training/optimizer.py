"""The optimizer of section 5.3: Adam with beta1 = 0.9, beta2 = 0.98 and epsilon = 1e-9, its
learning rate varied over training by eq. 3:

    lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)

linear warm-up for ``warmup_steps`` steps, then decay with the inverse square root of the step
(steps count from 1). ``scale`` multiplies the whole curve (1.0 in the paper).
"""

from __future__ import annotations

import torch

from reproduce.config import TrainingConfig


def learning_rate(step: int, d_model: int, warmup_steps: int, scale: float = 1.0) -> float:
    if step < 1:
        raise ValueError(f"steps count from 1, got {step}")
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def adam(model: torch.nn.Module, training: TrainingConfig) -> torch.optim.Adam:
    """Adam over the model's parameters with the settings' beta and epsilon; its learning rate
    is set before each step (:func:`learning_rate`). Fused: one kernel for all parameters, and
    on a GPU a skipped update (a non-finite gradient) stays on the device."""
    return torch.optim.Adam(model.parameters(), lr=0.0,
                            betas=(training.adam_beta1, training.adam_beta2),
                            eps=training.adam_eps, fused=True)


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
