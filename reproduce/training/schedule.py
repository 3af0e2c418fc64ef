"""The learning-rate schedule of section 5.3, eq. 3:

    lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)

linear warm-up for ``warmup_steps`` steps, then decay with the inverse square root of the step
(steps count from 1). ``scale`` multiplies the whole curve (1.0 in the paper).
"""


def learning_rate(step: int, d_model: int, warmup_steps: int, scale: float = 1.0) -> float:
    if step < 1:
        raise ValueError(f"steps count from 1, got {step}")
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)
