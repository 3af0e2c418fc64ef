"""The training pass as one module call, for DistributedDataParallel, torch.compile and CUDA
graphs to wrap: a model's teacher-forced decoder states at the target tokens
(:class:`TeacherForcedStates`), then the pre-softmax projection fused with the label-smoothed
loss, whose gradients it computes along (:class:`TeacherForcedLoss`;
:mod:`reproduce.training.projected_loss`). The tokens' flat positions come from the collate step
(host-side, so the compiled graph has no data-dependent ``nonzero``;
:mod:`reproduce.model.token_layout`), and so do the tokens' dropout keys
(:mod:`reproduce.model.dropout`).

The loss belongs to the wrapped call so that a compiled pass fuses its element-wise work and a
captured pass holds its kernels too. The shared embedding matrix is used twice in it (lookup and
projection); DistributedDataParallel's gradient hooks fire on each parameter's gradient
accumulator, which autograd runs once per backward pass with every use's contribution summed.

Every pass has sizes of its own (sentences, widths, token counts). Compiled, the call is traced
once with those sizes symbolic (:func:`mark_pass_sizes_dynamic`): torch.compile would otherwise
first specialise on the first pass's sizes and compile everything again at the second pass.
"""

from __future__ import annotations

from torch import Tensor, nn

from reproduce.model.encoder_decoder import TranslationModel
from reproduce.model.token_layout import TokenLayout
from reproduce.training.projected_loss import projected_label_smoothed_loss, rows_per_chunk


class TeacherForcedStates(nn.Module):
    """``forward(source [B, S], target_input [B, T], source_index [M], target_index [N],
    source_noise [M], target_noise [N])`` -> decoder states at the N target tokens
    ``[N, d_model]``."""

    def __init__(self, model: TranslationModel, varlen_attention: bool = False):
        super().__init__()
        self.model = model
        self.varlen_attention = varlen_attention  # reproduce.model.packed_attention

    def forward(self, source: Tensor, target_input: Tensor, source_index: Tensor,
                target_index: Tensor, source_noise: Tensor | None = None,
                target_noise: Tensor | None = None) -> Tensor:
        varlen = self.varlen_attention
        encoded = self.model.encode(source,
                                    TokenLayout.of(source, source_index, source_noise, varlen))
        return self.model.target_token_states(
            target_input, encoded,
            TokenLayout.of(target_input, target_index, target_noise, varlen))


class TeacherForcedLoss(nn.Module):
    """``forward(source, target_input, source_index, target_index, source_noise, target_noise,
    target_output [B, T], target_weight [N] | None, loss_gradient)`` -> the pass's summed
    label-smoothed loss (a 0-d tensor), its gradients computed with it for the
    ``loss_gradient`` that the backward pass will bring
    (:func:`reproduce.training.projected_loss.projected_label_smoothed_loss`).

    The loss's rows are cut into a number of chunks fixed for the run: those that keep a chunk of
    ``max_tokens`` rows (a full pass) within the loss's memory bound. A compiled pass's token
    count is then free to change without a new graph."""

    def __init__(self, model: TranslationModel, label_smoothing: float, max_tokens: int,
                 varlen_attention: bool = False):
        super().__init__()
        self.states = TeacherForcedStates(model, varlen_attention)
        self.label_smoothing = label_smoothing
        self.chunks = -(-max_tokens // rows_per_chunk(model.embedding.num_embeddings))

    def forward(self, source: Tensor, target_input: Tensor, source_index: Tensor,
                target_index: Tensor, source_noise: Tensor | None, target_noise: Tensor | None,
                target_output: Tensor, target_weight: Tensor | None,
                loss_gradient: Tensor) -> Tensor:
        states = self.states(source, target_input, source_index, target_index, source_noise,
                             target_noise)  # [N, d] at the target tokens
        targets = target_output.reshape(-1).index_select(0, target_index)  # [N]
        loss, _ = projected_label_smoothed_loss(
            states, self.states.model.embedding.weight, targets, self.label_smoothing,
            chunks=self.chunks, token_weight=target_weight, gradient_scale=loss_gradient)
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
