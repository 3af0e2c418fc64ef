"""Where the tokens of a right-padded batch are, so that the layers compute on tokens only.

A batch ``[B, T]`` of right-padded sentences holds ``N <= B * T`` tokens. Everything in a
Transformer layer but scaled dot-product attention works position by position: the embeddings,
the Q/K/V and output projections, the feed-forward networks, the residual connections and layer
normalisation (sections 3.1-3.5). Those run on the ``N`` tokens alone, ``[N, d_model]``, so that
padding costs them nothing (FasterTransformer's and ByteTransformer's "padding removal"). Only
attention needs the batch back: its projections are scattered into ``[B, T, ...]`` (zeros at
padding, which the key mask hides) and its output is gathered again before ``W^O``.

The token positions ``index`` are flat offsets ``b * T + t`` in ascending order. The trainer's
collate builds them on the host, from the lengths it already knows; without them they are found
from the padding mask (``nonzero``, one device synchronisation). In training a layout also
carries each token's dropout key ``noise`` ``[N]`` (:mod:`reproduce.model.dropout`), and the
kernel that attention over its tokens asks for (``packed``: ``"varlen"`` or ``"flex"``, or None for
the padded batch; :mod:`reproduce.model.packed_attention`), whose masks it keeps for the pass's
other layers (``masks``).
"""

from __future__ import annotations

from functools import cached_property

import torch
from torch import Tensor

from reproduce.special_tokens import PAD


class TokenLayout:
    """The tokens of a ``[B, T]`` batch: its padding mask and the tokens' flat positions."""

    def __init__(self, padding: Tensor, index: Tensor | None = None, noise: Tensor | None = None,
                 packed: str | None = None, is_dense: bool = False):
        self.padding = padding  # [B, T], True at PAD
        self.noise = noise  # [N] int32: the tokens' dropout keys (training), or None
        self.packed = packed  # the kernel attention over these tokens asks for, if any
        self.masks: dict = {}  # attention's masks over these tokens, built by its first layer
        self.is_dense = is_dense  # no padding at all (:meth:`dense`)
        if index is not None:
            self.index = index  # [N] (otherwise computed on first use)

    @classmethod
    def dense(cls, batch: int, length: int, device: torch.device | str) -> "TokenLayout":
        """A ``[batch, length]`` batch without padding (incremental decoding's new positions):
        its tokens are the batch, flattened, so padding and unpadding are reshapes."""
        return cls(torch.zeros(batch, length, dtype=torch.bool, device=device),
                   torch.arange(batch * length, device=device), is_dense=True)

    @classmethod
    def of(cls, tokens: Tensor, index: Tensor | None = None, noise: Tensor | None = None,
           packed: str | None = None) -> "TokenLayout":
        """The layout of right-padded token ids ``[B, T]`` (``index`` if known already)."""
        return cls(tokens.eq(PAD), index, noise, packed)

    @cached_property
    def index(self) -> Tensor:  # [N]: b * T + t of every token, ascending
        return self.padding.logical_not().reshape(-1).nonzero().squeeze(1)

    @property
    def length(self) -> int:
        return self.padding.size(1)

    def cumulative_lengths(self) -> Tensor:
        """``[B + 1]`` int32: where each row's tokens begin among the ``N`` (and ``N`` last), as
        varlen attention takes them (``cu_seqlens``): the count of token positions before each
        row's first, read from ``index`` (so that a bucketed pass's dummy tokens, which are PAD
        ids, count in the row that holds them); on the device, no sync."""
        batch, length = self.padding.shape
        row_starts = torch.arange(batch + 1, device=self.index.device) * length
        return torch.searchsorted(self.index, row_starts, out_int32=True)

    def positions(self) -> Tensor:
        """``[N]``: each token's position within its sentence (0 for the first)."""
        return self.index % self.length

    def unpad(self, batch: Tensor) -> Tensor:
        """``[B, T, ...]`` -> ``[N, ...]``: the values at the tokens."""
        if self.is_dense:
            return batch.reshape(-1, *batch.shape[2:])
        return batch.reshape(-1, *batch.shape[2:]).index_select(0, self.index)

    def pad(self, tokens: Tensor) -> Tensor:
        """``[N, ...]`` -> ``[B, T, ...]``: the tokens' values in place, zeros at padding."""
        batch, length = self.padding.shape
        if self.is_dense:
            return tokens.view(batch, length, *tokens.shape[1:])
        flat = tokens.new_zeros(batch * length, *tokens.shape[1:])
        flat.index_copy_(0, self.index, tokens)  # in place: its out-of-place twin copies the zeros
        return flat.view(batch, length, *tokens.shape[1:])

    def batch_noise(self) -> Tensor | None:
        """``[B, T]``: the tokens' dropout keys in place (0 at padding), or None."""
        return None if self.noise is None else self.pad(self.noise)

    def select(self, rows: Tensor) -> "TokenLayout":
        """The layout of the batch's rows ``rows`` (beam search repeats and drops sentences)."""
        return TokenLayout(self.padding.index_select(0, rows))
