"""What a run computes in (``training.precision``), and the optimizer update that goes with it.

* ``fp32``: everything in float32.
* ``bf16``: the forward and backward passes under ``torch.autocast`` to bfloat16 (matrix
  products in bf16; weights, Adam's moments and the loss's softmax in fp32). bf16 has fp32's
  exponent range, so its gradients need no scaling.
* ``fp16``: autocast to float16 with dynamic loss scaling (Micikevicius et al. 2018, "Mixed
  Precision Training"; Ott et al. 2018, "Scaling Neural Machine Translation", fairseq's
  ``--fp16``), for GPUs without bf16 units, such as the paper's P100s or V100s, where fp32 is
  several times slower. fp16 flushes magnitudes below 2^-24 to zero, which many gradient entries
  of a per-token mean loss are, so the loss is multiplied by a scale S before the backward pass
  and the gradient divided by S before the update. Where the scaled gradient overflows (an inf
  or nan anywhere), the update is skipped and S halved; after 2,000 updates in a row without
  one, S doubles (and may overflow again: about one skipped update per 2,000 once S settles).
* ``auto``: bf16 where the GPU has bf16 units (compute capability 8.0 on: A100, H100), fp16
  elsewhere. bf16 that torch would only emulate (a V100) does not count.

A CPU computes in fp32 whatever is asked: most CPUs have no half-precision matrix units, so
bf16 or fp16 would not be faster there, only less precise.
The precision used is what checkpoints, ``summary.json`` and the log record.

A skipped update is not a step. ``step`` counts the updates applied, so eq. 3's learning rate
(``d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)``, :mod:`reproduce.training.optimizer`)
is that of the update it is applied to, ``training.steps`` updates are applied whatever the
precision, and Adam's own count (its bias correction) does not advance either; fairseq counts
``num_updates`` the same way. The micro-batches of a skipped update are not trained on again
(fairseq drops them too): an overflow in their forward pass would recur at any scale.

The scale multiplies the loss the trainer back-propagates, ``loss * world / target_tokens``,
and DistributedDataParallel's all-reduce (during the last backward pass) averages the scaled
gradients: every rank then holds S times the step's mean per-token gradient, finds the same
overflow and skips the same updates, with no communication of its own. In the fused
projected loss (:mod:`reproduce.training.projected_loss`) S arrives as the incoming gradient,
which its backward multiplies into ``softmax(z) - q`` in fp32 before rounding to fp16, so the
chunks' gradients are scaled before they are rounded, as the unfused path's are.

Updates that overflow whatever S (S below :data:`MIN_LOSS_SCALE`) stop the run with
:class:`LossScaleError`: the loss has diverged, and skipping forever would only burn GPU time.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor

from reproduce.errors import CheckpointError, ReproduceError

log = logging.getLogger(__name__)

# fairseq's --min-loss-scale: below it, the gradient overflows whatever the scale.
MIN_LOSS_SCALE = 1e-4

_AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class LossScaleError(ReproduceError):
    """fp16 updates overflow whatever the loss scale: training diverged."""


def has_bf16_units(device: torch.device) -> bool:
    """Whether ``device`` is a GPU that computes bf16 natively: NVIDIA's from Ampere (compute
    capability 8.0) on. ``torch.cuda.is_bf16_supported()`` also says yes where bf16 is only
    emulated (a V100), and its ``including_emulation`` switch is newer than the oldest torch
    this package supports."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 8


def resolve_precision(requested: str, device_type: str, bf16_units: bool) -> str:
    """What ``training.precision: requested`` computes in on a device of ``device_type``: fp32
    on a CPU, bf16 or fp16 for ``auto`` on a GPU by ``bf16_units``, else as requested."""
    if device_type != "cuda":
        return "fp32"
    if requested == "auto":
        return "bf16" if bf16_units else "fp16"
    return requested


def can_compute_in(precision: str, device_type: str, bf16_units: bool) -> bool:
    """Whether a run that started in ``precision`` can go on in it on this device."""
    if precision == "fp32":
        return True
    return device_type == "cuda" and (precision == "fp16" or bf16_units)


def run_precision(requested: str, device: torch.device, started_in: str | None,
                  checkpoint: Path | None, restart_hint: str, warn: bool) -> str:
    """What a run computes in: ``training.precision: requested`` resolved for ``device``, or, for
    a run resumed from ``checkpoint`` that started in ``started_in``, that precision. ``auto``
    resolves by the GPU, which a requeued job may find changed: a run that started in fp16 goes on
    in fp16 on a bf16-capable GPU, one that started in bf16 is refused on a GPU without bf16
    units rather than continued in fp16 (one run does not mix two arithmetics); so is a GPU run
    resumed on a CPU. ``warn``: log what is worth a warning (rank 0)."""
    bf16_units = has_bf16_units(device)
    fresh = resolve_precision(requested, device.type, bf16_units)
    if fresh == "bf16" and not bf16_units and warn:
        log.warning("training.precision: bf16 on %s, which has no bf16 units: torch emulates "
                    "it, slowly (auto would train in fp16)", device_name(device))
    if started_in is None or started_in == fresh:
        return fresh
    if not can_compute_in(started_in, device.type, bf16_units):
        raise CheckpointError(
            f"{checkpoint}: the run trains in {started_in} (training.precision: {requested}) and "
            f"{device_name(device)} cannot; resume it where it can, so that one run does not mix "
            f"two arithmetics, or {restart_hint}")
    if warn:
        log.warning("%s: the run goes on in %s, the precision it started in (training."
                    "precision: %s would pick %s here)", checkpoint, started_in, requested, fresh)
    return started_in


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The dtype autocast computes in for ``precision``; None: no autocast (fp32)."""
    return _AUTOCAST_DTYPES.get(precision)


class Update(NamedTuple):
    """What :meth:`OptimizerUpdate.apply` did: ``applied`` (False: an fp16 overflow, skipped),
    the true gradient's L2 norm before clipping, and 1.0 where the optimizer skipped the update
    for a non-finite gradient, this step's or an earlier one's (fp32, bf16), all but ``applied``
    on the device."""

    applied: bool
    norm: Tensor
    not_finite: Tensor


class OptimizerUpdate:
    """The update of one step from its accumulated gradient: loss scaling (fp16), optional
    clipping of the true gradient, the optimizer's step, and the scale's adjustment.

    Scaling is torch's :class:`torch.amp.GradScaler`, fairseq's dynamic scaling as PyTorch keeps
    it: unscaling and the inf/nan check run as one fused kernel per device, and with the fused
    Adam of GPUs the check and the skip stay on the device. A scaler of our own would repeat
    that code and nothing here needs more from it. Without loss scaling (fp32, bf16) the scaler
    is disabled and passes every call straight through.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, device_type: str, loss_scaling: bool,
                 clip_norm: float | None, growth_interval: int = 2000):
        self.optimizer = optimizer
        self.parameters = [p for group in optimizer.param_groups for p in group["params"]]
        self.clip_norm = clip_norm
        self.scaler = torch.amp.GradScaler(device_type, growth_interval=growth_interval,
                                           enabled=loss_scaling)
        self.loss_scale = self.scaler.get_scale()  # S on the host, refreshed after each update
        self.diverged: Tensor | None = None  # 1.0 once a gradient was not finite (fp32, bf16)

    def loss_gradient(self, factor: float, device: torch.device) -> Tensor:
        """The gradient that :meth:`backward` of ``loss * factor`` brings to ``loss``: factor
        times S, as a device scalar computed as autograd computes it (no synchronisation)."""
        return self.scaler.scale(torch.ones((), device=device)) * factor

    def backward(self, loss: Tensor) -> None:
        """Back-propagate ``loss`` (times S under fp16); gradients accumulate as usual."""
        self.scaler.scale(loss).backward()

    def apply(self) -> "Update":
        """Update the parameters from their gradients, unless the gradient is not finite.

        Under loss scaling the scaler finds an overflow and skips the update (``applied`` False,
        read on the host). Otherwise the gradient's norm tells, and the optimizer skips a
        non-finite update on the device (``not_finite``, as GradScaler's ``found_inf`` makes
        fused Adam do at scale 1): nothing here waits for the device. It skips every later
        update too: the host learns of a non-finite gradient a step late (the trainer reads a
        step's totals once the next one is queued) and stops the run then, with the weights of
        the last finite step.
        """
        self.scaler.unscale_(self.optimizer)  # clip and measure the gradient, not S times it
        grads = [p.grad for p in self.parameters if p.grad is not None]
        if self.clip_norm is None:
            norm = torch.nn.utils.get_total_norm(grads)
        else:
            norm = torch.nn.utils.clip_grad_norm_(self.parameters, self.clip_norm)
        not_finite = torch.zeros((), dtype=torch.float32, device=norm.device)
        if not self.scaler.is_enabled():
            not_finite = (~torch.isfinite(norm)).float()
            if self.diverged is not None:
                not_finite = torch.maximum(not_finite, self.diverged)
            self.diverged = not_finite
            if not self.optimizer.defaults.get("fused"):  # an unfused optimizer asks the host
                if not_finite.item():
                    return Update(True, norm, not_finite)
            else:
                self.optimizer.found_inf = not_finite
        self.scaler.step(self.optimizer)  # skips the optimizer's step where it found inf or nan
        self.scaler.update()
        return Update(self._applied(), norm, not_finite)

    def _applied(self) -> bool:
        """The scaler lowers S exactly when it skipped the update (and never else), so comparing
        S before and after tells the host; reading S is one synchronisation, where the trainer
        reads the step's loss anyway. Raises :class:`LossScaleError` below the smallest S."""
        if not self.scaler.is_enabled():
            return True
        previous, self.loss_scale = self.loss_scale, self.scaler.get_scale()
        if self.loss_scale >= previous:
            return True
        if self.loss_scale < MIN_LOSS_SCALE:
            raise LossScaleError(
                f"fp16 loss scale fell to {self.loss_scale:.3g}, below {MIN_LOSS_SCALE:g}: the "
                f"gradient overflows (inf/nan) whatever the scale, so training diverged; lower "
                f"training.lr_scale, or train in bf16 or fp32")
        return False

    def state_dict(self) -> dict:
        """The scaler's S, growth count and factors, as plain numbers (weights_only-loadable);
        empty without loss scaling."""
        return self.scaler.state_dict()

    def load_state_dict(self, state: dict) -> None:
        if self.scaler.is_enabled():
            self.scaler.load_state_dict(state)
            self.loss_scale = self.scaler.get_scale()


