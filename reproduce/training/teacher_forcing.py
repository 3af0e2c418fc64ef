"""The training forward pass: a model's teacher-forced decoder states at the target tokens,
before the pre-softmax projection, as one module call for DistributedDataParallel and
torch.compile to wrap. The tokens' flat positions come from the collate step (host-side, so the
compiled graph has no data-dependent ``nonzero``; :mod:`reproduce.model.token_layout`), and so
do the tokens' dropout keys (:mod:`reproduce.model.dropout`).

The projection and the loss, fused (:mod:`reproduce.training.projected_loss`), use the model's
shared embedding matrix. They run outside the wrapped call, or, where passes are captured as CUDA
graphs, inside it (:class:`TeacherForcedLoss`), so that a graph holds their kernels too. A use
of a parameter outside the wrapped call still reaches DistributedDataParallel's gradient hooks:
they fire on each parameter's gradient accumulator, which autograd runs once per backward pass
with every use's contribution summed (the embedding lookup's and the projection's alike).

Every pass has sizes of its own (sentences, widths, token counts). Compiled, the call is traced
once with those sizes symbolic (:func:`mark_pass_sizes_dynamic`): torch.compile would otherwise
first specialise on the first pass's sizes and compile everything again at the second pass.
"""

from __future__ import annotations

from torch import Tensor, nn

from reproduce.model.encoder_decoder import TranslationModel
from reproduce.model.token_layout import TokenLayout
from reproduce.training.batching import target_tokens
from reproduce.training.projected_loss import projected_label_smoothed_loss


class TeacherForcedStates(nn.Module):
    """``forward(source [B, S], target_input [B, T], source_index [M], target_index [N],
    source_noise [M], target_noise [N])`` -> decoder states at the N target tokens
    ``[N, d_model]``."""

    def __init__(self, model: TranslationModel, packed_attention: str | None = None):
        super().__init__()
        self.model = model
        self.packed_attention = packed_attention  # reproduce.model.packed_attention's kernel

    def forward(self, source: Tensor, target_input: Tensor, source_index: Tensor,
                target_index: Tensor, source_noise: Tensor | None = None,
                target_noise: Tensor | None = None) -> Tensor:
        packed = self.packed_attention
        encoded = self.model.encode(source,
                                    TokenLayout.of(source, source_index, source_noise, packed))
        return self.model.target_token_states(
            target_input, encoded,
            TokenLayout.of(target_input, target_index, target_noise, packed))


class TeacherForcedLoss(nn.Module):
    """``forward(source, target_input, source_index, target_index, source_noise, target_noise,
    target_output [B, T], target_weight [N] | None, loss_gradient)`` -> the pass's summed
    label-smoothed loss (a 0-d tensor), its gradients computed with it for the
    ``loss_gradient`` that the backward pass will bring
    (:func:`reproduce.training.projected_loss.projected_label_smoothed_loss`, whose chunks
    torch.compile leaves as they are; ``compiled_chunks``: each chunk's element-wise work
    compiled on its own)."""

    def __init__(self, model: TranslationModel, label_smoothing: float,
                 packed_attention: str | None = None, compiled_chunks: bool = False):
        super().__init__()
        self.states = TeacherForcedStates(model, packed_attention)
        self.label_smoothing, self.compiled_chunks = label_smoothing, compiled_chunks

    def forward(self, source: Tensor, target_input: Tensor, source_index: Tensor,
                target_index: Tensor, source_noise: Tensor | None, target_noise: Tensor | None,
                target_output: Tensor, target_weight: Tensor | None,
                loss_gradient: Tensor) -> Tensor:
        states = self.states(source, target_input, source_index, target_index, source_noise,
                             target_noise)  # [N, d] at the target tokens
        return self.loss_of(states, target_output, target_index, target_weight, loss_gradient)

    def loss_of(self, states: Tensor, target_output: Tensor, target_index: Tensor,
                target_weight: Tensor | None, loss_gradient: Tensor) -> Tensor:
        """The loss of decoder states ``[N, d]`` at the target tokens (those of ``states``,
        where they were computed apart: a pass whose loss runs outside the wrapped call)."""
        loss, _ = projected_label_smoothed_loss(
            states, self.states.model.embedding.weight,
            target_tokens(target_output, target_index), self.label_smoothing,
            compiled=self.compiled_chunks, token_weight=target_weight,
            gradient_scale=loss_gradient)
        return loss


def mark_pass_sizes_dynamic(*tensors: Tensor | None) -> None:
    """Mark every size of a pass's inputs (``[B, S]``, ``[B, T]``, ``[M]``, ``[N]``) as one that
    changes from pass to pass, before the compiled call first sees them (sizes 0 and 1 stay
    specialised: torch.compile always specialises those)."""
    from torch._dynamo import maybe_mark_dynamic  # compiled passes only: eager never loads it

    for tensor in tensors:
        if tensor is not None:
            for dimension in range(tensor.dim()):
                maybe_mark_dynamic(tensor, dimension)
