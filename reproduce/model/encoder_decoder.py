"""What a translation model is, to the code that trains it, searches with it and scores it; and
what the Transformer and the recurrent baseline share.

:class:`TranslationModel` is that interface, written as a :class:`typing.Protocol` so that
training, beam search, perplexity and translation name it without importing either model (and
the models import this module, never the other way round). :class:`DecoderCache` is the state
incremental decoding carries between steps, whichever model fills it.

:class:`EncoderDecoder` is the shared base: one embedding matrix for the source, the target and
the pre-softmax projection (section 3.4), and logits as that projection of the decoder's states.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Self

import torch.nn.functional as F
from torch import Tensor, nn

from reproduce.config import ModelConfig
from reproduce.model.key_values import (CachedTensors, KeyValues, SourceState, StaticKeyValues,
                                        StaticPositions)
from reproduce.model.token_layout import TokenLayout


@dataclass
class DecoderCache:
    """The decoded prefix's state per decoder layer (incremental decoding): the keys and values
    of the Transformer's attentions, or the recurrent decoder's LSTM states; each layer's entry
    maps a part's name to its tensors (:mod:`reproduce.model.key_values`).

    With ``static`` positions, a Transformer keeps its keys and values in buffers of their
    capacity and counts the positions decoded on the device (static shapes, for a step replayed
    as a CUDA graph, which would replay a count on the host as recorded)."""

    layers: list[dict[str, CachedTensors]] = field(default_factory=list)
    length: int = 0  # positions decoded so far, counted on the host without static positions
    static: StaticPositions | None = None

    def self_attention_keys(self) -> KeyValues | StaticKeyValues:
        """An empty store for one self-attention's keys and values, of this cache's kind."""
        return KeyValues() if self.static is None else StaticKeyValues(self.static)

    @property
    def decoded(self) -> int | Tensor:
        """Positions decoded so far: counted on the host, or on the device if static."""
        return self.length if self.static is None else self.static.written

    def new_positions(self, new: int) -> tuple[int | Tensor, int]:
        """Where ``new`` positions after the decoded ones start, and a bound that every
        position stays below."""
        return self.decoded, self.length + new if self.static is None else self.static.capacity

    def advance(self, new: int) -> None:
        """Counts ``new`` positions decoded (on the device if static: a replayed step advances
        it)."""
        if self.static is None:
            self.length += new
        else:
            self.static.written += new

    def reorder(self, hypotheses: Tensor, sentences: Tensor | None = None) -> None:
        """Keep rows ``hypotheses`` of the hypotheses' state (beam search's survivors, or those
        of the sentences still searching) and, when sentences leave, rows ``sentences`` of the
        state computed from the source alone (:class:`SourceState`, held once a sentence; None:
        the hypotheses moved within their sentences)."""
        for layer in self.layers:
            for part in layer.values():
                if not isinstance(part, SourceState):
                    part.reorder(hypotheses)
                elif sentences is not None:
                    part.reorder(sentences)


class EncodedSource(Protocol):
    """A model's encoding of a source batch, opaque to everyone but the model's decoder."""

    def select(self, indices: Tensor) -> Self:
        """Rows ``indices`` (e.g. each sentence repeated beam_size times)."""
        ...


class TranslationModel(Protocol):
    """What training, evaluation, beam search and translation use of a model."""

    config: ModelConfig
    vocab_size: int
    embedding: nn.Embedding  # shared by source, target and the pre-softmax projection

    def encode(self, source: Tensor, layout: TokenLayout | None = None) -> EncodedSource:
        """The encoding of ``source`` ``[B, S]`` (padded with PAD)."""
        ...

    def decoder_states(self, target_input: Tensor, encoded: EncodedSource,
                       cache: DecoderCache | None = None) -> Tensor:
        """The decoder's output ``[B, T, d_model]`` before the projection; with a ``cache``,
        ``target_input`` holds only the positions after the cached prefix."""
        ...

    def target_token_states(self, target_input: Tensor, encoded: EncodedSource,
                            layout: TokenLayout) -> Tensor:
        """The decoder's output at the tokens of ``layout`` ``[N, d_model]`` (teacher forcing)."""
        ...

    def decode(self, target_input: Tensor, encoded: EncodedSource,
               cache: DecoderCache | None = None) -> Tensor:
        """Logits ``[B, T, V]``."""
        ...

    def project(self, states: Tensor) -> Tensor:
        """Pre-softmax logits of decoder states."""
        ...

    def num_parameters(self) -> int: ...

    def eval(self) -> Self: ...


class EncoderDecoder(nn.Module):
    """The part of :class:`TranslationModel` both models share; a subclass defines
    ``config``, ``vocab_size``, ``embedding``, ``encode``, ``decoder_states`` and
    ``target_token_states``."""

    def num_parameters(self) -> int:
        return sum(parameter.numel() for parameter in self.parameters())

    def decode(self, target_input: Tensor, encoded: EncodedSource,
               cache: DecoderCache | None = None) -> Tensor:
        """Logits ``[B, T, V]`` for ``target_input`` ``[B, T]``.

        With a ``cache``, ``target_input`` holds only the positions after the cached prefix.
        """
        return self.project(self.decoder_states(target_input, encoded, cache))

    def project(self, states: Tensor) -> Tensor:
        """Pre-softmax linear projection with the shared embedding matrix (section 3.4)."""
        return F.linear(states, self.embedding.weight)

    def forward(self, source: Tensor, target_input: Tensor) -> Tensor:
        return self.decode(target_input, self.encode(source))
