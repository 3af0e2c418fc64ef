"""The training forward pass: a model's teacher-forced decoder states at the target tokens,
before the pre-softmax projection, as one module call for DistributedDataParallel and
torch.compile to wrap. The tokens' flat positions come from the collate step (host-side, so the
compiled graph has no data-dependent ``nonzero``; :mod:`reproduce.model.token_layout`), and so
do the tokens' dropout keys (:mod:`reproduce.model.dropout`).

The projection and the loss run outside it, fused
(:mod:`reproduce.training.projected_loss`), with the model's shared embedding matrix. That use
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


def mark_pass_sizes_dynamic(*tensors: Tensor | None) -> None:
    """Mark every size of a pass's inputs (``[B, S]``, ``[B, T]``, ``[M]``, ``[N]``) as one that
    changes from pass to pass, before the compiled call first sees them (sizes 0 and 1 stay
    specialised: torch.compile always specialises those)."""
    from torch._dynamo import maybe_mark_dynamic  # compiled passes only: eager never loads it

    for tensor in tensors:
        if tensor is not None:
            for dimension in range(tensor.dim()):
                maybe_mark_dynamic(tensor, dimension)
