"""Encoder and decoder layers (section 3.1), each sub-layer wrapped as in section 5.4:

    LayerNorm(x + Dropout(Sublayer(x)))      (post-layer-norm residual connection)

``x`` is ``[N, d_model]``, the tokens of a :class:`TokenLayout` (padding is never computed), in
training, encoding and incremental decoding alike.
"""

from __future__ import annotations

from torch import Tensor, nn

from reproduce.config import ModelConfig
from reproduce.model.attention import CrossAttention, SelfAttention
from reproduce.model.dropout import TokenDropout
from reproduce.model.feed_forward import PositionwiseFeedForward
from reproduce.model.key_values import CachedTensors
from reproduce.model.token_layout import TokenLayout


class Residual(nn.Module):
    """Dropout on a sub-layer's output, residual add, then layer normalisation; the dropout noise
    is keyed by the layout's tokens (:mod:`reproduce.model.dropout`)."""

    def __init__(self, d_model: int, dropout: float):
        super().__init__()
        self.dropout = TokenDropout(dropout, d_model)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, x: Tensor, sublayer_output: Tensor, layout: TokenLayout) -> Tensor:
        return self.norm(x + self.dropout(sublayer_output, layout.noise))


class EncoderLayer(nn.Module):
    """Self-attention, then the position-wise feed-forward network."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        c = config
        self.attention = SelfAttention(c.d_model, c.heads, c.d_k, c.d_v, c.attention_dropout,
                                       c.attention_radius)
        self.attention_residual = Residual(c.d_model, c.dropout)
        self.feed_forward = PositionwiseFeedForward(c.d_model, c.d_ff)
        self.feed_forward_residual = Residual(c.d_model, c.dropout)

    def forward(self, x: Tensor, layout: TokenLayout) -> Tensor:  # x [N, d] at the layout's tokens
        x = self.attention_residual(x, self.attention(x, layout), layout)
        return self.feed_forward_residual(x, self.feed_forward(x), layout)


class DecoderLayer(nn.Module):
    """Masked self-attention, encoder-decoder attention, then the feed-forward network."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        c = config
        self.self_attention = SelfAttention(c.d_model, c.heads, c.d_k, c.d_v,
                                            c.attention_dropout, c.attention_radius)
        self.self_attention_residual = Residual(c.d_model, c.dropout)
        self.cross_attention = CrossAttention(c.d_model, c.heads, c.d_k, c.d_v, c.attention_dropout)
        self.cross_attention_residual = Residual(c.d_model, c.dropout)
        self.feed_forward = PositionwiseFeedForward(c.d_model, c.d_ff)
        self.feed_forward_residual = Residual(c.d_model, c.dropout)

    def forward(
        self,
        x: Tensor,  # [N, d] at the layout's tokens
        layout: TokenLayout,
        memory: Tensor,  # [M, d]: the encoder's output at the source tokens
        memory_layout: TokenLayout,
        cache: dict[str, CachedTensors] | None = None,  # "self" and "cross" (incremental)
    ) -> Tensor:
        self_cache = None if cache is None else cache["self"]
        cross_cache = None if cache is None else cache["cross"]
        x = self.self_attention_residual(
            x, self.self_attention(x, layout, causal=True, cache=self_cache), layout
        )
        x = self.cross_attention_residual(
            x, self.cross_attention(x, layout, memory, memory_layout, cache=cross_cache), layout
        )
        return self.feed_forward_residual(x, self.feed_forward(x), layout)
