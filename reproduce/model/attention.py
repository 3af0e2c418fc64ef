"""Multi-head scaled dot-product attention (section 3.2, eq. 1 and the MultiHead formula).

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V
    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)

``d_k`` and ``d_v`` are free (Table 3 rows A and B change them apart from d_model / h). The
projections of all heads are fused into one matrix multiplication: Q, K and V together for
self-attention, K and V together for encoder-decoder attention. The attention product itself is
:mod:`reproduce.model.packed_attention`'s (varlen flash over packed tokens, or SDPA on a padded
batch with its kernels chosen there).

Inputs and outputs are always ``[N, d_model]``, the tokens of a :class:`TokenLayout`: projections
skip padding, and the attention product runs on the packed tokens where the layout's ``packed``
names a kernel, else on the padded batch. Incremental decoding is the same form, its new positions a
layout without padding (:meth:`TokenLayout.dense`), their keys and values appended to a cache.

Two additions beyond the base model:

* **restricted self-attention** (section 4, Table 1's last row): with ``radius`` r, position i
  attends only to positions j with |i - j| <= r (and j <= i in the decoder), a band mask;
* **inspection** (Figures 3-5): the fused kernel returns no weights, so ``attention_weights``
  recomputes softmax(Q K^T / sqrt(d_k)) from the module's own projections and masks, off the
  training path (training never calls it).

Attention dropout (tensor2tensor's, on the weights; 0 in the paper's models, 0.1 in our parsing
configs) cannot use SDPA's own: its noise follows the kernel's generator, not the tokens
(:mod:`reproduce.model.dropout`). Where it is on in training, the weights are computed
explicitly, dropped with keys of (query token, head, key position), and applied to V.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import sdpa_kernel

from reproduce.model.dropout import AttentionDropout
from reproduce.model.key_values import KeyValues, StaticKeyValues
from reproduce.model.packed_attention import PADDED_KERNELS, attend_packed
from reproduce.model.token_layout import TokenLayout


def _xavier_blocks(weight: Tensor, sizes: list[int]) -> None:
    """Xavier-uniform initialisation of each projection inside a fused weight, as if separate."""
    for block in torch.split(weight.data, sizes, dim=0):
        nn.init.xavier_uniform_(block)


def band_mask(queries: int, keys: int, radius: int, causal: bool, offset: int | Tensor = 0,
              device: torch.device | None = None) -> Tensor:
    """``[queries, keys]``, True where query position ``offset + i`` may attend key position j:
    |offset + i - j| <= radius, and j <= offset + i when ``causal`` (``offset`` may be a 0-d
    tensor on ``device``)."""
    query_positions = (torch.arange(queries, device=device) + offset)[:, None]
    distance = query_positions - torch.arange(keys, device=device)[None, :]
    allowed = distance.abs() <= radius
    return allowed & (distance >= 0) if causal else allowed


class _HeadsAttention(nn.Module):
    """Shared part: split heads, attend, merge heads, output projection W^O."""

    radius: int | None = None  # restricted self-attention's band (SelfAttention)

    def __init__(self, d_model: int, heads: int, d_k: int, d_v: int, dropout: float):
        super().__init__()
        self.heads, self.d_k, self.d_v = heads, d_k, d_v
        self.dropout = AttentionDropout(dropout)
        self.output = nn.Linear(heads * d_v, d_model)
        nn.init.xavier_uniform_(self.output.weight)
        nn.init.zeros_(self.output.bias)

    def _split(self, x: Tensor, size: int) -> Tensor:  # [B, T, h*size] -> [B, h, T, size]
        batch, length, _ = x.shape
        return x.view(batch, length, self.heads, size).transpose(1, 2)

    def _packs(self, layout: TokenLayout) -> bool:
        """Whether a whole-sequence pass over ``layout`` runs on packed tokens (its ``packed``
        names a kernel), rather than on the padded batch: not where attention dropout or a band
        needs the weights or masks of the padded form."""
        return layout.packed is not None and not self.dropout.active() and self.radius is None

    def _packed_heads(self, projected: Tensor, size: int) -> Tensor:  # [N, h*size] -> [N, h, size]
        return projected.view(projected.size(0), self.heads, size)

    def _output_packed(self, context: Tensor) -> Tensor:  # [N, h, d_v] -> [N, d_model]
        return self.output(context.reshape(context.size(0), self.heads * self.d_v))

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool,
                layout: TokenLayout) -> Tensor:
        """Attention of all heads, merged and projected by W^O: ``[N, d_model]`` at the query
        layout's tokens."""
        # q [B, h, Tq, d_k], k [B, h, Tk, d_k], v [B, h, Tk, d_v]; mask True = may attend
        if self.dropout.active():
            context = self.dropout(self._weights(q, k, mask, causal), layout.batch_noise()) @ v
        else:
            with sdpa_kernel(PADDED_KERNELS):
                context = F.scaled_dot_product_attention(
                    q, k, v, attn_mask=mask, is_causal=causal)  # [B, h, Tq, d_v]
        merged = context.transpose(1, 2).reshape(*layout.padding.shape, self.heads * self.d_v)
        return self.output(layout.unpad(merged))  # merged [B, Tq, h*d_v] as the layout's batch

    def _weights(self, q: Tensor, k: Tensor, mask: Tensor | None, causal: bool) -> Tensor:
        """softmax(Q K^T / sqrt(d_k)) under the same masks as ``_attend``: ``[B, h, Tq, Tk]``."""
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        if causal:
            earlier = band_mask(q.size(2), k.size(2), k.size(2), causal=True, device=q.device)
            mask = earlier if mask is None else mask & earlier
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return scores.softmax(dim=-1)


class SelfAttention(_HeadsAttention):
    """Queries, keys and values from the same sequence; optionally causal (decoder, section 3.2.3)
    and restricted to a neighbourhood of ``radius`` positions (section 4; None = unrestricted)."""

    def __init__(self, d_model: int, heads: int, d_k: int, d_v: int, dropout: float,
                 radius: int | None = None):
        super().__init__(d_model, heads, d_k, d_v, dropout)
        self.radius = radius
        self.sizes = [heads * d_k, heads * d_k, heads * d_v]
        self.qkv = nn.Linear(d_model, sum(self.sizes))
        _xavier_blocks(self.qkv.weight, self.sizes)
        nn.init.zeros_(self.qkv.bias)

    def forward(
        self,
        x: Tensor,  # [N, d_model] at the layout's tokens
        layout: TokenLayout,
        causal: bool = False,
        cache: KeyValues | StaticKeyValues | None = None,
    ) -> Tensor:
        """Keys at padding are masked, except under ``causal``: right padding follows every real
        query there, so the causal mask hides it already (and leaves SDPA its flash kernel).
        With a ``cache`` (incremental decoding, causal), ``x`` holds the new positions only."""
        if cache is None and self._packs(layout):
            q, k, v = self.qkv(x).split(self.sizes, dim=-1)  # [N, h*d] each
            context = attend_packed(self._packed_heads(q, self.d_k),
                                    self._packed_heads(k, self.d_k),
                                    self._packed_heads(v, self.d_v), layout, layout, causal,
                                    layout.packed)
            return self._output_packed(context)
        q, k, v = self._heads(x, layout)
        if cache is None:
            return self._attend(q, k, v, *self._whole_sequence_masks(layout, causal, q.size(2)),
                                layout)
        # Incremental decoding (a dense layout of the new positions): they attend to every
        # cached one and to themselves.
        keys, values, offset = cache.append(k, v)
        mask = self._decoding_mask(q.size(2), keys.size(2), offset)
        return self._attend(q, keys, values, mask, causal=False, layout=layout)

    def _decoding_mask(self, queries: int, keys: int, offset: int | Tensor) -> Tensor | None:
        """Which of ``keys`` cached positions the new ones (from ``offset``) may attend: the
        earlier ones and themselves, within the band; None where that is every key (one new
        position right after the others, no band)."""
        one_after = queries == 1 and isinstance(offset, int) and keys == offset + 1
        if self.radius is None and one_after:
            return None
        radius = keys if self.radius is None else self.radius
        return band_mask(queries, keys, radius, causal=True, offset=offset,
                         device=self.qkv.weight.device)

    def _heads(self, x: Tensor, layout: TokenLayout) -> tuple[Tensor, Tensor, Tensor]:
        """Q, K and V of every head: ``[B, h, T, d_k]`` twice and ``[B, h, T, d_v]``."""
        q, k, v = layout.pad(self.qkv(x)).split(self.sizes, dim=-1)
        return self._split(q, self.d_k), self._split(k, self.d_k), self._split(v, self.d_v)

    def _whole_sequence_masks(self, layout: TokenLayout, causal: bool,
                              length: int) -> tuple[Tensor | None, bool]:
        """The mask and causal flag of a pass over whole sequences (no cache): keys at padding
        masked unless ``causal`` (or there are none), plus the band of restricted self-attention."""
        key_padding = None if causal or layout.is_dense else layout.padding
        mask = None if key_padding is None else ~key_padding[:, None, None, :]
        return self._restrict(mask, causal, length, key_padding)

    def _restrict(self, mask: Tensor | None, causal: bool, length: int,
                  key_padding: Tensor | None) -> tuple[Tensor | None, bool]:
        """Adds the band of restricted self-attention to ``mask`` (the causal part included,
        as SDPA takes either an explicit mask or ``is_causal``); unchanged without a radius.

        A padding position may be further than the radius from every real token. So that its
        (unused) row is never fully masked (a NaN row in the recomputed softmax, and not every
        SDPA kernel returns zeros there), padding queries may attend padding keys in their band."""
        if self.radius is None:
            return mask, causal
        band = band_mask(length, length, self.radius, causal, device=self.qkv.weight.device)
        if key_padding is not None:
            return band & (~key_padding[:, None, None, :] | key_padding[:, None, :, None]), False
        return (band if mask is None else mask & band), False

    def attention_weights(self, x: Tensor, layout: TokenLayout, causal: bool = False) -> Tensor:
        """The weights ``forward`` applies to V, ``[B, h, T, T]`` (inspection only)."""
        q, k, _ = self._heads(x, layout)
        return self._weights(q, k, *self._whole_sequence_masks(layout, causal, q.size(2)))


class CrossAttention(_HeadsAttention):
    """Encoder-decoder attention: queries from the decoder, keys and values from the encoder."""

    def __init__(self, d_model: int, heads: int, d_k: int, d_v: int, dropout: float):
        super().__init__(d_model, heads, d_k, d_v, dropout)
        self.query = nn.Linear(d_model, heads * d_k)
        self.kv_sizes = [heads * d_k, heads * d_v]
        self.kv = nn.Linear(d_model, sum(self.kv_sizes))
        nn.init.xavier_uniform_(self.query.weight)
        _xavier_blocks(self.kv.weight, self.kv_sizes)
        nn.init.zeros_(self.query.bias)
        nn.init.zeros_(self.kv.bias)

    def forward(
        self,
        x: Tensor,  # [N, d_model] at the layout's tokens
        layout: TokenLayout,
        memory: Tensor,  # [M, d_model]: the encoder's output at the source tokens
        memory_layout: TokenLayout,  # where those M tokens are in the [B, S] source batch
        cache: dict[str, Tensor] | None = None,
    ) -> Tensor:
        """``layout``'s rows are the source's, or (incremental decoding) a whole number of rows
        per source sentence, sentence by sentence."""
        if cache is None and self._packs(layout):
            k, v = self.kv(memory).split(self.kv_sizes, dim=-1)  # [M, h*d] each
            context = attend_packed(self._packed_heads(self.query(x), self.d_k),
                                    self._packed_heads(k, self.d_k),
                                    self._packed_heads(v, self.d_v), layout, memory_layout, False,
                                    layout.packed)
            return self._output_packed(context)
        if cache is not None and "keys" in cache:
            k, v = cache["keys"], cache["values"]  # computed once per sentence
        else:
            k, v = self._memory_heads(memory, memory_layout)
            if cache is not None:
                cache["keys"], cache["values"] = k, v
        # Rows of x may be several per source sentence, sentence by sentence (beam search's
        # hypotheses): a sentence's rows query its keys together, which are held once.
        queries = layout.pad(self.query(x))  # [R, Tq, h*d_k], R = G x B
        q = self._split(queries.view(k.size(0), -1, queries.size(-1)), self.d_k)  # [B, h, G*Tq, .]
        return self._attend(q, k, v, ~memory_layout.padding[:, None, None, :], False, layout)

    def _memory_heads(self, memory: Tensor, memory_layout: TokenLayout) -> tuple[Tensor, Tensor]:
        """K ``[B, h, S, d_k]`` and V ``[B, h, S, d_v]`` of the source tokens, zeros at padding."""
        k, v = memory_layout.pad(self.kv(memory)).split(self.kv_sizes, dim=-1)
        return self._split(k, self.d_k), self._split(v, self.d_v)

    def attention_weights(self, x: Tensor, layout: TokenLayout, memory: Tensor,
                          memory_layout: TokenLayout) -> Tensor:
        """The weights ``forward`` applies to V, ``[B, h, T, S]`` (inspection only)."""
        q = self._split(layout.pad(self.query(x)), self.d_k)
        k, _ = self._memory_heads(memory, memory_layout)
        return self._weights(q, k, ~memory_layout.padding[:, None, None, :], causal=False)
