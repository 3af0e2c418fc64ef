"""Exact FLOP counts of the Transformer (and of the recurrent baseline, :class:`RecurrentFlops`),
for throughput and model FLOPs utilisation (MFU).

Not 6 x parameters x all tokens: a source token passes only through the encoder (and the
decoder's encoder-decoder key/value projections), a target token only through the decoder and the
pre-softmax projection (section 3.4), and attention's products (eq. 1) grow with the lengths.
A multiply-add counts 2 FLOPs. Per pair, with s source positions (EOS included) and t target
positions (BOS included), h heads, N layers:

* encoder, per source token and layer: the fused Q/K/V projection, W^O and the two FFN matrices;
  attention: Q K^T and the weighted sum over V, 2 s^2 h (d_k + d_v) per layer;
* decoder, per target token and layer: self-attention Q/K/V and W^O, the cross-attention query and
  W^O, the FFN; per *source* token and layer: the cross-attention keys and values;
  attention: causal self-attention over t(t+1)/2 query-key pairs (only those are useful work),
  2 t(t+1)/2 h (d_k + d_v), and cross-attention 2 t s h (d_k + d_v);
* output projection: 2 d_model V per target token.

Embedding look-ups, biases, softmax, layer normalisation and dropout are element-wise and left
out. Training counts 3x the forward pass (the backward pass costs twice the forward's matrix
products); recomputation, if any, is not counted (model FLOPs, not hardware FLOPs). Beam search
(:meth:`TransformerFlops.beam_search`) counts the encoder once a sentence and each live
hypothesis one position a step, as incremental decoding computes them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reproduce.config import ModelConfig
from reproduce.gpu_peak_rates import peak_rate

TRAINING_MULTIPLIER = 3  # forward + backward (2x forward)


def peak_flops(device_name: str) -> float | None:
    """The dense bf16 tensor-core peak of a GPU named ``device_name`` (MFU's denominator), or
    None where unknown or without bf16 units (CPUs, V100, P100)."""
    rate = peak_rate(device_name, "bf16")
    return None if rate is None else rate.flops_per_second


class _LengthDependentFlops:
    """A model's FLOPs over pairs of given real lengths: per source token, per target token, and
    the attention's products over pairs of positions, which subclasses define."""

    def forward(self, source_positions: np.ndarray, target_positions: np.ndarray) -> int:
        """FLOPs of one forward pass over pairs with these real lengths (no padding counted)."""
        return (self.per_source_token() * int(np.sum(source_positions))
                + self.per_target_token() * int(np.sum(target_positions))
                + self.attention(source_positions, target_positions))

    def training(self, source_positions: np.ndarray, target_positions: np.ndarray) -> int:
        """FLOPs of one training pass (forward and backward)."""
        return TRAINING_MULTIPLIER * self.forward(source_positions, target_positions)


@dataclass(frozen=True)
class TransformerFlops(_LengthDependentFlops):
    """Forward-pass FLOPs of one model, as a function of its pairs' lengths."""

    config: ModelConfig
    vocab_size: int

    @property
    def _attention_width(self) -> int:
        # h (d_k + d_v): QK^T and the sum over V, per pair of positions
        c = self.config
        return c.heads * (c.d_k + c.d_v)

    def per_source_token(self) -> int:
        """Encoder layers, plus the decoder's cross-attention keys and values, per source token."""
        c = self.config
        self_attention = c.d_model * c.heads * (2 * c.d_k + c.d_v) + c.heads * c.d_v * c.d_model
        encoder_layer = self_attention + 2 * c.d_model * c.d_ff
        cross_keys_values = c.d_model * c.heads * (c.d_k + c.d_v)
        return 2 * c.layers * (encoder_layer + cross_keys_values)

    def per_target_token(self) -> int:
        """Decoder layers (without cross keys/values) and the output projection, per target
        token."""
        c = self.config
        self_attention = c.d_model * c.heads * (2 * c.d_k + c.d_v) + c.heads * c.d_v * c.d_model
        cross_query_output = c.d_model * c.heads * c.d_k + c.heads * c.d_v * c.d_model
        decoder_layer = self_attention + cross_query_output + 2 * c.d_model * c.d_ff
        return 2 * (c.layers * decoder_layer + c.d_model * self.vocab_size)

    def attention(self, source_positions: np.ndarray, target_positions: np.ndarray) -> int:
        """Q K^T and the weighted sums over V, summed over pairs and layers."""
        s = np.asarray(source_positions, dtype=np.int64)
        t = np.asarray(target_positions, dtype=np.int64)
        pairs_of_positions = s * s + t * (t + 1) // 2 + t * s  # encoder, causal decoder, cross
        return int(2 * self.config.layers * self._attention_width * pairs_of_positions.sum())

    def beam_search(self, source_positions: np.ndarray, steps: np.ndarray, beam: int) -> int:
        """Model FLOPs of beam search over sentences with these source positions (EOS included)
        whose searches each ran ``steps`` decoder steps with ``beam`` hypotheses, one of them
        live at the first step (the others start at -inf): the encoder once a sentence (with
        the decoder's cross-attention keys and values, held once for its hypotheses), then per
        live hypothesis and step the decoder and the output projection at one position,
        self-attention over the positions so far and cross-attention over the source. Rows
        that compute for nothing (the first step's dead hypotheses, a done sentence not yet
        shed) are not counted."""
        s = np.asarray(source_positions, dtype=np.int64)
        t = np.asarray(steps, dtype=np.int64)
        positions = beam * t - (beam - 1)  # hypotheses' positions: one at the first step
        # keys its query meets at step j: j positions of its own hypothesis, s of the source
        keys = beam * (t * (t + 1) // 2 + t * s) - (beam - 1) * (1 + s)
        pairs_of_positions = s * s + keys  # and the encoder's
        return int(self.per_source_token() * s.sum() + self.per_target_token() * positions.sum()
                   + 2 * self.config.layers * self._attention_width * pairs_of_positions.sum())


@dataclass(frozen=True)
class RecurrentFlops(_LengthDependentFlops):
    """Forward-pass FLOPs of the recurrent baseline (:mod:`reproduce.model.recurrent`), with the
    same conventions: matrix products only (a multiply-add = 2), gate non-linearities, biases,
    softmax and dropout left out, padding not counted (the encoder runs packed sequences).
    With d = d_model, H = d/2 units per encoder direction, N layers per stack:

    * per source token: each encoder layer's two directions, 2 x 4H (d + H) each (the four gates'
      input and recurrent matrices; every layer's input is d wide), and the attention's
      encoder-side product W h_s, d^2;
    * per target token: each decoder layer, 2 x 4d (d + d); additive attention's query W_1 h_t,
      d^2; the combination W_c [c_t; h_t], 2d^2; the output projection, d V;
    * per (target, source) pair: the score (h_t . W h_s, or v_a . tanh(...)), d, and the
      context's weighted sum, d.
    """

    config: ModelConfig
    vocab_size: int

    @staticmethod
    def _lstm_layer(inputs: int, units: int) -> int:
        """One LSTM layer and direction, per token: W_i x + W_h h for the four gates."""
        return 2 * 4 * units * (inputs + units)

    def per_source_token(self) -> int:
        d = self.config.d_model
        encoder = self.config.layers * 2 * self._lstm_layer(d, d // 2)
        return encoder + 2 * d * d

    def per_target_token(self) -> int:
        d = self.config.d_model
        decoder = self.config.layers * self._lstm_layer(d, d)
        query = 2 * d * d if self.config.rnn_attention == "additive" else 0
        return decoder + query + 2 * 2 * d * d + 2 * d * self.vocab_size

    def attention(self, source_positions: np.ndarray, target_positions: np.ndarray) -> int:
        """Scores and context vectors over every (target, source) pair of every sentence."""
        s = np.asarray(source_positions, dtype=np.int64)
        t = np.asarray(target_positions, dtype=np.int64)
        return int(2 * 2 * self.config.d_model * (t * s).sum())


def model_flops(config: ModelConfig, vocab_size: int) -> TransformerFlops | RecurrentFlops:
    """The FLOP count of ``config.architecture``."""
    counter = RecurrentFlops if config.architecture == "rnn" else TransformerFlops
    return counter(config, vocab_size)
