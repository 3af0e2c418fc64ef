"""The pre-softmax projection (section 3.4) fused with the label-smoothed loss (section 5.4),
computed in chunks of rows so that no ``[N, V]`` logits tensor outlives a chunk.

The loss is :func:`reproduce.training.loss.label_smoothed_loss` applied to
``F.linear(states, weight)``, summed over the target tokens it is given: the caller passes the
tokens alone, ``[N, d]`` and ``[N]``, never padding (the trainer's token layout), so that no
boolean mask gives the graph a shape that only the device's data knows (a host synchronisation,
and a graph break for ``torch.compile``).

Per row, with logits ``z``, ``lse = logsumexp(z)`` and the smoothed distribution ``q``
(``1 - eps`` on the reference, ``eps / (V - 2)`` on every other non-PAD token, 0 on PAD;
``sum q = 1``), the loss ``-sum_k q_k log p_k`` is ``lse - sum_k q_k z_k`` and its
gradient with respect to ``z`` is ``softmax(z) - q``, times the gradient the loss receives.
Training knows that gradient before the forward pass (its loss factor times the loss scale), so
each chunk's logits give the loss and, at once, ``d states = d z @ W`` and ``d W += d z^T @
states``: three products a chunk, as Liger-Kernel's fused linear cross-entropy does; the backward
pass only rescales them should it bring another gradient. Without it (``gradient_scale`` None)
the forward pass keeps only ``lse`` per row and the backward pass recomputes each chunk's logits
(four products; Wijmans et al. 2024, "Cut Your Losses in Large-Vocabulary Language Models").

Precision follows what autocast does to the unfused path: where autocast is enabled for the
states' device, the projection runs in autocast's dtype (``F.linear`` is on its lower-precision
list), so a chunk's logits are rounded to bf16 exactly as the unfused logits are, then upcast to
fp32 for logsumexp and the loss (as ``label_smoothed_loss`` upcasts). The backward products run
in the same dtype; the weight's gradient is accumulated over chunks in fp32 (autocast's unfused
backward rounds the whole product to bf16 once; this rounds each chunk's share instead).
Without autocast everything runs in the inputs' dtype, at least fp32 (float64 stays float64).

Eager, a chunk's element-wise work (the upcast, log-sum-exp and expected logit; in the backward
pass, softmax minus q) is a dozen kernels that each read and write the chunk's fp32 logits: on an
H200 the loss took 30.8 ms of a base step's 106.6 ms of device time, its products included.
``compiled`` (the trainer's ``training.compile``) runs a chunk's product and element-wise work
through ``torch.compile``, which fuses the latter into a few kernels that read the product's
output once; the chunk's row count is symbolic, so that the last, shorter chunk reuses the same
kernels.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from reproduce.special_tokens import PAD

# One chunk's fp32 logits: ~1,800 rows of a 37,000-token vocabulary.
CHUNK_LOGITS_BYTES = 256 * 2**20


def rows_per_chunk(vocab_size: int) -> int:
    """Rows whose fp32 logits fit in :data:`CHUNK_LOGITS_BYTES`."""
    return max(1, CHUNK_LOGITS_BYTES // (4 * vocab_size))


def projected_label_smoothed_loss(states: Tensor, weight: Tensor, targets: Tensor, epsilon: float,
                                  chunk_rows: int | None = None, compiled: bool = False,
                                  token_weight: Tensor | None = None,
                                  gradient_scale: Tensor | None = None) -> tuple[Tensor, int]:
    """Summed label-smoothed loss of ``F.linear(states, weight)`` and the number of targets, as
    :func:`reproduce.training.loss.label_smoothed_loss` returns them for unpadded targets.

    states ``[N, d]``, weight ``[V, d]`` (the shared embedding), targets ``[N]``: target tokens
    only (a PAD target would be scored as a token). ``compiled``: each chunk's element-wise work
    through ``torch.compile``. ``token_weight`` ``[N]``: each row's loss times it (a bucketed
    pass's dummy tokens: 0, so that neither the loss nor a gradient sees them); the count is
    of the rows given.

    ``gradient_scale`` (a scalar tensor): the gradient the backward pass will bring to the loss,
    where the caller knows it in advance (the trainer: its loss factor times the loss scale).
    The forward pass then computes the gradients of states and weight along with the loss,
    from the same logits: three products of ``[N, d] x [d, V]`` instead of four, and one pass
    over the chunks instead of two. The backward pass multiplies them by the gradient it brings
    over ``gradient_scale`` (exactly 1 when it is the one announced), so they stay right if it
    is not.
    """
    rows = chunk_rows if chunk_rows is not None else rows_per_chunk(weight.size(0))
    dtype = _projection_dtype(states, weight)
    differentiated = torch.is_grad_enabled() and (states.requires_grad or weight.requires_grad)
    if gradient_scale is not None and differentiated:
        loss = _loss_and_gradients(states, weight, targets, token_weight, epsilon, rows, dtype,
                                   compiled, gradient_scale)[0]
    else:
        loss = _ChunkedProjectedLoss.apply(states, weight, targets, token_weight, epsilon, rows,
                                           dtype, compiled)
    return loss, targets.numel()


def _projection_dtype(states: Tensor, weight: Tensor) -> torch.dtype:
    """The dtype ``F.linear(states, weight)`` computes in here (autocast's, where it is on)."""
    device = states.device.type
    castable = {torch.float32, torch.float16, torch.bfloat16}
    if torch.is_autocast_enabled(device) and {states.dtype, weight.dtype} <= castable:
        return torch.get_autocast_dtype(device)
    return torch.promote_types(states.dtype, weight.dtype)


def _chunk_losses(states: Tensor, weight: Tensor, targets: Tensor, token_weight: Tensor | None,
                  epsilon: float, chunk_rows: int, dtype: torch.dtype, compiled: bool,
                  scale: Tensor | None) -> tuple[Tensor, Tensor, "_Gradients | None"]:
    """The forward pass over the chunks: the summed (weighted) loss, each row's log-normaliser
    ``[N]`` and, for a gradient ``scale`` announced, the gradients of states and weight. Casts
    are explicit (to ``dtype`` for the products), autocast stays out."""
    with torch.autocast(states.device.type, enabled=False):
        accumulate = torch.promote_types(dtype, torch.float32)
        projection = weight.to(dtype)
        smoothing = _Smoothing(epsilon, weight.size(0))
        if scale is not None:
            scale = scale.to(accumulate)
            terms = _compiled(_chunk_terms_and_gradient) if compiled else \
                _chunk_terms_and_gradient
            gradients = _Gradients(states, weight, (True, True))
        else:
            terms = _compiled(_chunk_terms) if compiled else _chunk_terms
            gradients = None
        total = torch.zeros((), dtype=accumulate, device=states.device)
        log_normalisers = torch.empty(states.size(0), dtype=accumulate,
                                      device=states.device)  # [N]
        for rows in _chunks(states.size(0), chunk_rows):
            chunk = _rows_dynamic(compiled, states[rows], targets[rows])
            if gradients is not None:
                log_normalisers[rows], expected, grad_logits = terms(
                    *chunk, projection, smoothing, accumulate,
                    _row_scale(scale, token_weight, rows, compiled))  # [c], [c], [c, V]
                gradients.add(grad_logits, rows, states, projection)
            else:
                log_normalisers[rows], expected = terms(
                    *chunk, projection, smoothing, accumulate)  # [c], [c]
            losses = log_normalisers[rows] - expected
            if token_weight is not None:
                losses = losses * token_weight[rows]
            total += losses.sum()
    return total, log_normalisers, gradients


@torch.library.custom_op("reproduce::projected_loss_and_gradients", mutates_args=())
def _loss_and_gradients(states: Tensor, weight: Tensor, targets: Tensor,
                        token_weight: Tensor | None, epsilon: float, chunk_rows: int,
                        dtype: torch.dtype, compiled: bool,
                        gradient_scale: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The loss with its gradients for ``gradient_scale`` (``[N, d]``, and ``[V, d]`` in fp32 at
    least), as one operator that torch.compile treats as opaque: traced with a compiled pass,
    its chunks still run one after another (fused into one graph, Inductor ran every chunk's
    element-wise work together and held every chunk's logits at once), and a CUDA graph
    recorded around the pass still holds their kernels."""
    total, _, gradients = _chunk_losses(states, weight, targets, token_weight, epsilon,
                                        chunk_rows, dtype, compiled, gradient_scale)
    return total, gradients.states, gradients.weight


@_loss_and_gradients.register_fake
def _(states, weight, targets, token_weight, epsilon, chunk_rows, dtype, compiled,
      gradient_scale):
    accumulate = torch.promote_types(dtype, torch.float32)
    return (states.new_empty((), dtype=accumulate), torch.empty_like(states),
            weight.new_empty(weight.shape, dtype=torch.promote_types(weight.dtype,
                                                                     torch.float32)))


def _keep_gradients(ctx, inputs, output) -> None:
    ctx.save_for_backward(output[1], output[2], inputs[-1])
    ctx.weight_dtype = inputs[1].dtype


def _announced_gradients_times_brought(ctx, grad_loss: Tensor, *_):
    """The gradients computed in the forward pass, times the gradient the backward pass brings
    over the one announced (exactly 1 when they are the same)."""
    states, weight, announced = ctx.saved_tensors
    factor = grad_loss.to(weight.dtype) / announced.to(weight.dtype)
    return (states * factor.to(states.dtype), (weight * factor).to(ctx.weight_dtype),
            None, None, None, None, None, None, None)


_loss_and_gradients.register_autograd(_announced_gradients_times_brought,
                                      setup_context=_keep_gradients)


class _ChunkedProjectedLoss(torch.autograd.Function):
    """The loss, its gradients computed in the backward pass from each chunk's logits again."""

    @staticmethod
    def forward(ctx, states: Tensor, weight: Tensor, targets: Tensor, token_weight: Tensor | None,
                epsilon: float, chunk_rows: int, dtype: torch.dtype, compiled: bool) -> Tensor:
        total, log_normalisers, _ = _chunk_losses(states, weight, targets, token_weight,
                                                  epsilon, chunk_rows, dtype, compiled, None)
        ctx.save_for_backward(states, weight, targets, log_normalisers, token_weight)
        ctx.epsilon, ctx.chunk_rows, ctx.dtype = epsilon, chunk_rows, dtype
        ctx.compiled = compiled
        return total

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_loss: Tensor):
        states, weight, targets, log_normalisers, token_weight = ctx.saved_tensors
        with torch.autocast(states.device.type, enabled=False):
            projection = weight.to(ctx.dtype)
            smoothing = _Smoothing(ctx.epsilon, weight.size(0))
            gradient_of = _compiled(_logit_gradient) if ctx.compiled else _logit_gradient
            scale = grad_loss.to(log_normalisers.dtype)
            gradients = _Gradients(states, weight, ctx.needs_input_grad[:2])
            for rows in _chunks(states.size(0), ctx.chunk_rows):
                grad_logits = gradient_of(
                    *_rows_dynamic(ctx.compiled, states[rows], log_normalisers[rows],
                                   targets[rows]),
                    projection, smoothing,
                    _row_scale(scale, token_weight, rows, ctx.compiled))  # [c, V]
                gradients.add(grad_logits, rows, states, projection)
        return (*gradients.result(), None, None, None, None, None, None)


class _Gradients:
    """The gradients of states ``[N, d]`` and weight ``[V, d]`` (those asked for), summed chunk by
    chunk from the logits' gradients: ``d states = d z @ W``, ``d W += d z^T @ states``; the
    weight's in fp32 at least."""

    def __init__(self, states: Tensor, weight: Tensor, wanted: tuple[bool, bool]):
        self.states_dtype, self.weight_dtype = states.dtype, weight.dtype
        self.states = torch.empty_like(states) if wanted[0] else None  # [N, d]
        self.weight = (torch.zeros(weight.shape,
                                   dtype=torch.promote_types(weight.dtype, torch.float32),
                                   device=weight.device) if wanted[1] else None)  # [V, d]

    def add(self, grad_logits: Tensor, rows: slice, states: Tensor, projection: Tensor) -> None:
        if self.states is not None:
            self.states[rows] = (grad_logits @ projection).to(self.states_dtype)
        if self.weight is not None:
            self.weight += grad_logits.T @ states[rows].to(projection.dtype)

    def result(self) -> tuple[Tensor | None, Tensor | None]:
        """The two gradients (None where not asked for), the weight's in its own dtype."""
        weight = None if self.weight is None else self.weight.to(self.weight_dtype)
        return self.states, weight


def _row_scale(scale: Tensor, token_weight: Tensor | None, rows: slice,
               compiled: bool) -> Tensor:
    """The gradient's factor for a chunk's rows: ``scale``, or ``[c, 1]`` with each row's weight."""
    if token_weight is None:
        return scale
    return _rows_dynamic(compiled, (scale * token_weight[rows].to(scale.dtype)).unsqueeze(1))[0]


def _chunk_terms(states: Tensor, targets: Tensor, projection: Tensor, smoothing: "_Smoothing",
                 accumulate: torch.dtype) -> tuple[Tensor, Tensor]:
    """A chunk's log-normalisers and expected logits ``sum_k q_k z_k``, ``[c]`` each, from its
    states ``[c, d]``: logits ``[c, V]`` in the projection's dtype, upcast to ``accumulate``."""
    logits = _logits(states, projection).to(accumulate)
    expected = smoothing.expected_logit(logits, targets)
    return _log_sum_exp_(logits), expected


def _chunk_terms_and_gradient(states: Tensor, targets: Tensor, projection: Tensor,
                              smoothing: "_Smoothing", accumulate: torch.dtype,
                              scale: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`_chunk_terms` and :func:`_logit_gradient` from one product: a chunk's
    log-normalisers and expected logits ``[c]``, and ``(softmax(z) - q) * scale`` ``[c, V]`` in
    the projection's dtype."""
    logits = _logits(states, projection).to(accumulate)
    expected = smoothing.expected_logit(logits, targets)
    largest = logits.amax(dim=1, keepdim=True)  # [c, 1]
    exponentials = logits.sub_(largest).exp_()  # in place of the logits: one [c, V] buffer
    sums = exponentials.sum(dim=1)
    log_normalisers = sums.log() + largest.squeeze(1)
    gradient = smoothing.minus_target(exponentials.div_(sums.unsqueeze(1)), targets)
    return log_normalisers, expected, gradient.mul_(scale).to(projection.dtype)


def _logit_gradient(states: Tensor, log_normalisers: Tensor, targets: Tensor,
                    projection: Tensor, smoothing: "_Smoothing", scale: Tensor) -> Tensor:
    """``(softmax(z) - q) * scale`` of a chunk ``[c, V]`` (its logits recomputed from its states
    ``[c, d]``; ``scale`` a scalar or ``[c, 1]``), computed in the log-normalisers' dtype and
    returned in the projection's."""
    logits = _logits(states, projection).to(log_normalisers.dtype)
    gradient = smoothing.softmax_minus_target(logits, log_normalisers, targets)
    return gradient.mul_(scale).to(projection.dtype)


@functools.cache
def _compiled(function):
    """``function`` through ``torch.compile``, once per process."""
    return torch.compile(function)


def _rows_dynamic(compiled: bool, *tensors: Tensor) -> tuple[Tensor, ...]:
    """The tensors of a chunk, their first size (the chunk's rows) marked, for a ``compiled``
    chunk function, as one that changes: it is traced once for any number of rows. Inside an
    enclosing compiled region (the loss traced with the forward) that trace owns the sizes, and
    marking them there is an error. Eager, nothing is marked, and torch._dynamo (a second of
    imports) is never loaded."""
    if compiled and not torch.compiler.is_compiling():
        from torch._dynamo import maybe_mark_dynamic

        for tensor in tensors:
            maybe_mark_dynamic(tensor, 0)
    return tensors


class _Smoothing:
    """The smoothed target distribution q of section 5.4, applied to a chunk of logits."""

    def __init__(self, epsilon: float, vocab_size: int):
        self.reference = 1.0 - epsilon  # q at the reference token
        self.other = epsilon / (vocab_size - 2)  # q at each other token but PAD

    def expected_logit(self, logits: Tensor, targets: Tensor) -> Tensor:
        """``sum_k q_k z_k`` per row: logits ``[c, V]``, targets ``[c]`` -> ``[c]``."""
        reference = logits.gather(1, targets.unsqueeze(1)).squeeze(1)
        if self.other == 0.0:
            return reference
        others = logits.sum(dim=1) - reference - logits[:, PAD]
        return self.reference * reference + self.other * others

    def softmax_minus_target(self, logits: Tensor, log_normalisers: Tensor,
                             targets: Tensor) -> Tensor:
        """``softmax(z) - q``, the loss's gradient with respect to the logits, ``[c, V]``."""
        return self.minus_target(logits.sub_(log_normalisers.unsqueeze(1)).exp_(), targets)

    def minus_target(self, probabilities: Tensor, targets: Tensor) -> Tensor:
        """``p - q`` in place of the probabilities ``p`` ``[c, V]``."""
        gradient = probabilities
        gradient -= self.other
        gradient[:, PAD] += self.other
        rows = torch.arange(targets.numel(), device=targets.device)
        gradient[rows, targets] -= self.reference - self.other
        return gradient


def _chunks(count: int, size: int) -> list[slice]:
    return [slice(start, min(start + size, count)) for start in range(0, count, size)]


def _log_sum_exp_(logits: Tensor) -> Tensor:
    """``logsumexp`` of each row ``[c, V]`` -> ``[c]``, overwriting ``logits`` (so that a chunk
    needs one ``[c, V]`` buffer, not two)."""
    largest = logits.amax(dim=1, keepdim=True)  # [c, 1]
    return logits.sub_(largest).exp_().sum(dim=1).log_() + largest.squeeze(1)


def _logits(states: Tensor, projection: Tensor) -> Tensor:
    """One chunk's logits ``[c, V]``, computed and returned in the projection's dtype."""
    return states.to(projection.dtype) @ projection.T
