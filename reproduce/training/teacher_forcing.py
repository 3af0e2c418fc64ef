"""The training forward pass: a model's teacher-forced decoder states, before the pre-softmax
projection, as one module call for DistributedDataParallel and torch.compile to wrap.

The projection and the loss run outside it, fused
(:mod:`reproduce.training.projected_loss`), with the model's shared embedding matrix. That use
of a parameter outside the wrapped call still reaches DistributedDataParallel's gradient hooks:
they fire on each parameter's gradient accumulator, which autograd runs once per backward pass
with every use's contribution summed (the embedding lookup's and the projection's alike).
"""

from __future__ import annotations

from torch import Tensor, nn

from reproduce.model.architectures import Seq2Seq


class TeacherForcedStates(nn.Module):
    """``forward(source [B, S], target_input [B, T])`` -> decoder states ``[B, T, d_model]``."""

    def __init__(self, model: Seq2Seq):
        super().__init__()
        self.model = model

    def forward(self, source: Tensor, target_input: Tensor) -> Tensor:
        return self.model.decoder_states(target_input, self.model.encode(source))
