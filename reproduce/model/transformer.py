"""The encoder-decoder Transformer (section 3, Figure 1).

One embedding matrix is shared by the source embedding, the target embedding and the pre-softmax
projection (section 3.4); embeddings are multiplied by sqrt(d_model), positions are added and
dropout is applied to the sum (section 5.4), with noise keyed by the tokens
(:mod:`reproduce.model.dropout`). Initialisation (not stated in the paper): the shared
embedding ~ N(0, d_model^-0.5) as in tensor2tensor, Xavier-uniform linear weights, zero biases.

Every layer computes on the batch's tokens only, ``[N, d_model]``
(:mod:`reproduce.model.token_layout`); incremental decoding's new positions, one per hypothesis
and step, are a layout without padding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch import Tensor, nn

from reproduce.config import ModelConfig
from reproduce.model.dropout import TokenDropout, number_sites
from reproduce.model.encoder_decoder import DecoderCache, EncoderDecoder
from reproduce.model.key_values import SourceState
from reproduce.model.layers import DecoderLayer, EncoderLayer
from reproduce.model.positional import LearnedPositions, SinusoidalPositions
from reproduce.model.token_layout import TokenLayout


@dataclass
class EncoderOutput:
    """The encoder's output at the source tokens, and where they are in the source batch."""

    tokens: Tensor  # [M, d_model]
    layout: TokenLayout  # of the [B, S] source batch

    @property
    def memory(self) -> Tensor:  # [B, S, d_model], zeros at padding
        return self.layout.pad(self.tokens)

    def select(self, indices: Tensor) -> "EncoderOutput":
        """Rows ``indices`` (e.g. each sentence repeated beam_size times)."""
        layout = self.layout.select(indices)
        return EncoderOutput(layout.unpad(self.memory.index_select(0, indices)), layout)


class Transformer(EncoderDecoder):
    def __init__(self, config: ModelConfig, vocab_size: int):
        super().__init__()
        self.config = config
        self.vocab_size = vocab_size
        self.embedding = nn.Embedding(vocab_size, config.d_model)
        nn.init.normal_(self.embedding.weight, mean=0.0, std=config.d_model**-0.5)
        if config.positional == "learned":
            self.positions = LearnedPositions(config.d_model, config.max_positions)
        else:
            self.positions = SinusoidalPositions(config.d_model)
        self.embedding_dropout = TokenDropout(config.dropout, config.d_model)
        self.encoder = nn.ModuleList(EncoderLayer(config) for _ in range(config.layers))
        self.decoder = nn.ModuleList(DecoderLayer(config) for _ in range(config.layers))
        number_sites(self)

    def _embed(self, tokens: Tensor, layout: TokenLayout, offset: int | Tensor = 0,
               end: int | None = None) -> Tensor:
        """Scaled embeddings plus positions (from ``offset``, each below ``end``: offset + T
        unless given) of ``tokens`` ``[B, T]``: ``[N, d]`` at the layout's tokens."""
        end = offset + tokens.size(1) if end is None else end
        positions = self.positions(layout.positions() + offset, end)  # [N, d]
        scaled = self.embedding(layout.unpad(tokens)) * math.sqrt(self.config.d_model)
        return self.embedding_dropout(scaled + positions, layout.noise)

    def encode(self, source: Tensor, layout: TokenLayout | None = None) -> EncoderOutput:
        """``source`` ``[B, S]``, right-padded; ``layout`` its :class:`TokenLayout` if known."""
        layout = layout if layout is not None else TokenLayout.of(source)
        x = self._embed(source, layout)
        for layer in self.encoder:
            x = layer(x, layout)
        return EncoderOutput(x, layout)

    def decoder_states(
        self, target_input: Tensor, encoded: EncoderOutput, cache: DecoderCache | None = None
    ) -> Tensor:
        """The decoder stack's output ``[B, T, d_model]``, before the pre-softmax projection
        (zeros at padding)."""
        if cache is None:
            layout = TokenLayout.of(target_input)
            return layout.pad(self.target_token_states(target_input, encoded, layout))
        if not cache.layers:
            cache.layers = [{"self": cache.self_attention_keys(), "cross": SourceState()}
                            for _ in self.decoder]
        layout = TokenLayout.dense(*target_input.shape, device=target_input.device)
        x = self._embed(target_input, layout, *cache.new_positions(target_input.size(1)))
        for layer, layer_cache in zip(self.decoder, cache.layers, strict=True):
            x = layer(x, layout, encoded.tokens, encoded.layout, layer_cache)
        cache.advance(target_input.size(1))
        return layout.pad(x)

    def target_token_states(self, target_input: Tensor, encoded: EncoderOutput,
                            layout: TokenLayout) -> Tensor:
        """The decoder stack's output at the tokens of ``layout`` ``[N, d_model]``, all target
        positions at once (teacher forcing)."""
        x = self._embed(target_input, layout)
        for layer in self.decoder:
            x = layer(x, layout, encoded.tokens, encoded.layout)
        return x
