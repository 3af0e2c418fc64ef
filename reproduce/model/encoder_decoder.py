"""What the Transformer and the recurrent baseline share: one embedding matrix for the source,
the target and the pre-softmax projection (section 3.4), and logits as that projection of the
decoder's states.

Subclasses define ``embedding`` (``nn.Embedding``), ``encode(source, layout=None)``,
``decoder_states(target_input, encoded, cache=None)`` and ``target_token_states``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch.nn.functional as F
from torch import Tensor, nn

if TYPE_CHECKING:
    from reproduce.model.transformer import DecoderCache


class EncoderDecoder(nn.Module):
    def num_parameters(self) -> int:
        return sum(parameter.numel() for parameter in self.parameters())

    def decode(self, target_input: Tensor, encoded, cache: DecoderCache | None = None) -> Tensor:
        """Logits ``[B, T, V]`` for ``target_input`` ``[B, T]``.

        With a ``cache``, ``target_input`` holds only the positions after the cached prefix.
        """
        return self.project(self.decoder_states(target_input, encoded, cache))

    def project(self, states: Tensor) -> Tensor:
        """Pre-softmax linear projection with the shared embedding matrix (section 3.4)."""
        return F.linear(states, self.embedding.weight)

    def forward(self, source: Tensor, target_input: Tensor) -> Tensor:
        return self.decode(target_input, self.encode(source))
