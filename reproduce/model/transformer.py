"""The encoder-decoder Transformer (section 3, Figure 1).

One embedding matrix is shared by the source embedding, the target embedding and the pre-softmax
projection (section 3.4); embeddings are multiplied by sqrt(d_model), positions are added and
dropout is applied to the sum (section 5.4). Initialisation (not stated in the paper): the shared
embedding ~ N(0, d_model^-0.5) as in tensor2tensor, Xavier-uniform linear weights, zero biases.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from reproduce.config import ModelConfig
from reproduce.model.layers import DecoderLayer, EncoderLayer
from reproduce.model.positional import LearnedPositions, SinusoidalPositions
from reproduce.special_tokens import PAD


@dataclass
class EncoderOutput:
    memory: Tensor  # [B, S, d_model]
    padding: Tensor  # [B, S], True at PAD

    def select(self, indices: Tensor) -> "EncoderOutput":
        """Rows ``indices`` (e.g. each sentence repeated beam_size times)."""
        return EncoderOutput(self.memory.index_select(0, indices), self.padding.index_select(0, indices))


@dataclass
class DecoderCache:
    """Keys and values of the decoded prefix, per decoder layer (incremental decoding)."""

    layers: list[dict] = field(default_factory=list)
    length: int = 0  # positions decoded so far

    def reorder(self, indices: Tensor) -> None:
        """Keep rows ``indices`` of every cached tensor (beam search's surviving hypotheses)."""
        for layer in self.layers:
            for attention in layer.values():
                for name, tensor in attention.items():
                    attention[name] = tensor.index_select(0, indices)


class Transformer(nn.Module):
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
        self.embedding_dropout = nn.Dropout(config.dropout)
        self.encoder = nn.ModuleList(EncoderLayer(config) for _ in range(config.layers))
        self.decoder = nn.ModuleList(DecoderLayer(config) for _ in range(config.layers))

    def num_parameters(self) -> int:
        return sum(parameter.numel() for parameter in self.parameters())

    def _embed(self, tokens: Tensor, offset: int = 0) -> Tensor:  # [B, T] -> [B, T, d]
        scaled = self.embedding(tokens) * math.sqrt(self.config.d_model)
        return self.embedding_dropout(scaled + self.positions(tokens.size(1), offset))

    def encode(self, source: Tensor) -> EncoderOutput:  # source [B, S]
        padding = source.eq(PAD)
        x = self._embed(source)
        for layer in self.encoder:
            x = layer(x, padding)
        return EncoderOutput(x, padding)

    def decode(
        self, target_input: Tensor, encoded: EncoderOutput, cache: DecoderCache | None = None
    ) -> Tensor:
        """Logits ``[B, T, V]`` for ``target_input`` ``[B, T]``.

        With a ``cache``, ``target_input`` holds only the positions after the cached prefix.
        """
        return self.project(self.decoder_states(target_input, encoded, cache))

    def decoder_states(
        self, target_input: Tensor, encoded: EncoderOutput, cache: DecoderCache | None = None
    ) -> Tensor:
        """The decoder stack's output ``[B, T, d_model]``, before the pre-softmax projection."""
        offset = 0 if cache is None else cache.length
        if cache is not None and not cache.layers:
            cache.layers = [{} for _ in self.decoder]
        x = self._embed(target_input, offset)
        for index, layer in enumerate(self.decoder):
            layer_cache = None if cache is None else cache.layers[index]
            x = layer(x, encoded.memory, encoded.padding, layer_cache)
        if cache is not None:
            cache.length += target_input.size(1)
        return x

    def project(self, states: Tensor) -> Tensor:
        """Pre-softmax linear projection with the shared embedding matrix (section 3.4)."""
        return F.linear(states, self.embedding.weight)

    def forward(self, source: Tensor, target_input: Tensor) -> Tensor:
        return self.decode(target_input, self.encode(source))
