"""The recurrent baseline of Table 2: an LSTM encoder-decoder with global attention.

Luong, Pham and Manning (2015), "Effective Approaches to Attention-based Neural Machine
Translation" (section 3, Figure 2), with a bidirectional encoder as in Bahdanau, Cho and Bengio
(2015, section 3.2):

* encoder: ``layers`` bidirectional LSTM layers of d_model/2 units per direction over the source
  embeddings, run on packed sequences so that padding never changes a sentence's states; its top
  layer's outputs (both directions concatenated) are the memory h_s ``[B, S, d_model]``;
* bridge: layer l of the decoder starts from layer l's final forward and backward states of the
  encoder, concatenated (hidden and cell alike), as Luong et al. start the decoder from the
  encoder's last state;
* decoder: ``layers`` LSTM layers of d_model units over the target embeddings; global attention
  (:mod:`reproduce.model.recurrent_attention`) of the top state h_t over h_s gives c_t, and the
  attentional state is h~_t = tanh(W_c [c_t; h_t]) (Luong eq. 5);
* logits: h~_t times the embedding matrix, shared by source, target and output as in our
  Transformer (section 3.4 of Vaswani et al.; the BPE vocabulary is shared), and treated as
  there: initialised N(0, d_model^-0.5), multiplied by sqrt(d_model) on input.

No input feeding (Luong section 3.3, h~_{t-1} fed to the next step's input): without it, h_t
does not depend on the attention, so teacher-forced training runs the decoder LSTM over the whole
target at once (cuDNN's fused kernel) and attention is one batched product, as in the
Transformer. Luong et al. report input feeding worth about 1 BLEU.

Dropout (Zaremba et al. 2014, on non-recurrent connections, as Luong et al.): on the embeddings,
between stacked LSTM layers, and on h~_t before the output projection. Initialisation: every
parameter but the shared embedding uniform in [-0.1, 0.1] (Luong section 4.1). Luong's range
for the embedding too, unscaled, feeds the LSTMs inputs ~17x smaller (std 0.06, not 1); on the
tiny corpus (d_model 64, 300 steps) that left the dev loss at 2.73 where the Transformer-style
embedding reaches 0.34.

The interface is :class:`reproduce.model.transformer.Transformer`'s: ``encode``,
``decoder_states`` (incremental with a :class:`DecoderCache`, which holds the decoder LSTM's
hidden and cell states batch-first so that beam search's ``reorder`` selects hypotheses on
dim 0), ``target_token_states`` (training), and from
:class:`reproduce.model.encoder_decoder.EncoderDecoder` ``decode``, ``project``, ``forward`` and
``num_parameters``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from reproduce.config import ModelConfig
from reproduce.model.encoder_decoder import DecoderCache, EncoderDecoder
from reproduce.model.recurrent_attention import global_attention
from reproduce.model.token_layout import TokenLayout

INITIAL_RANGE = 0.1  # Luong et al. 2015, section 4.1: uniform in [-0.1, 0.1]


@dataclass
class RecurrentEncoderOutput:
    """The memory h_s and its padding, plus what the decoder needs from the encoder."""

    memory: Tensor  # [B, S, d_model], zeros at PAD
    padding: Tensor  # [B, S], True at PAD
    keys: Tensor  # [B, S, d_model] the attention's encoder-side product W h_s
    hidden: Tensor  # [B, layers, d_model] the bridge: the decoder's initial hidden states
    cell: Tensor  # [B, layers, d_model] ... and cell states

    def select(self, indices: Tensor) -> "RecurrentEncoderOutput":
        """Rows ``indices`` (e.g. each sentence repeated beam_size times)."""
        return RecurrentEncoderOutput(*(tensor.index_select(0, indices) for tensor in (
            self.memory, self.padding, self.keys, self.hidden, self.cell)))


def _directions_concatenated(final: Tensor) -> Tensor:
    """``[layers * 2, B, d/2]`` (nn.LSTM's h_n or c_n, layer-major) -> ``[B, layers, d]``."""
    layers_times_two, batch, units = final.shape
    by_layer = final.view(layers_times_two // 2, 2, batch, units)
    return by_layer.permute(2, 0, 1, 3).reshape(batch, layers_times_two // 2, 2 * units)


class RecurrentSeq2Seq(EncoderDecoder):
    def __init__(self, config: ModelConfig, vocab_size: int):
        super().__init__()
        self.config = config
        self.vocab_size = vocab_size
        d, layers = config.d_model, config.layers
        between_layers = config.dropout if layers > 1 else 0.0  # nn.LSTM drops between layers only
        self.embedding = nn.Embedding(vocab_size, d)
        self.dropout = nn.Dropout(config.dropout)
        self.encoder = nn.LSTM(d, d // 2, layers, batch_first=True, bidirectional=True,
                               dropout=between_layers)
        self.decoder = nn.LSTM(d, d, layers, batch_first=True, dropout=between_layers)
        self.attention = global_attention(config.rnn_attention, d)
        self.combine = nn.Linear(2 * d, d, bias=False)  # W_c of h~_t = tanh(W_c [c_t; h_t])
        for parameter in self.parameters():
            nn.init.uniform_(parameter, -INITIAL_RANGE, INITIAL_RANGE)
        nn.init.normal_(self.embedding.weight, mean=0.0, std=d**-0.5)

    def _embed(self, tokens: Tensor) -> Tensor:  # [B, T] -> [B, T, d]
        return self.dropout(self.embedding(tokens) * math.sqrt(self.config.d_model))

    def encode(self, source: Tensor, layout: TokenLayout | None = None) -> RecurrentEncoderOutput:
        """``source`` ``[B, S]``, right-padded; ``layout`` its :class:`TokenLayout` if known."""
        padding = (layout if layout is not None else TokenLayout.of(source)).padding
        lengths = padding.logical_not().sum(dim=1).clamp(min=1).cpu()
        packed = pack_padded_sequence(self._embed(source), lengths,
                                      batch_first=True, enforce_sorted=False)
        outputs, (hidden, cell) = self.encoder(packed)
        memory, _ = pad_packed_sequence(outputs, batch_first=True,
                                        total_length=source.size(1))  # [B, S, d], zeros at PAD
        return RecurrentEncoderOutput(memory, padding, self.attention.keys(memory),
                                      _directions_concatenated(hidden),
                                      _directions_concatenated(cell))

    def decoder_states(
        self, target_input: Tensor, encoded: RecurrentEncoderOutput,
        cache: DecoderCache | None = None
    ) -> Tensor:
        """The attentional states h~_t ``[B, T, d_model]``, before the output projection."""
        if cache is not None and cache.layers:
            state = cache.layers[0]["lstm"]
            hidden, cell = state["hidden"], state["cell"]
        else:
            hidden, cell = encoded.hidden, encoded.cell  # [B, layers, d]
        outputs, (hidden, cell) = self.decoder(
            self._embed(target_input),
            (hidden.transpose(0, 1).contiguous(), cell.transpose(0, 1).contiguous()),
        )  # outputs [B, T, d]; hidden, cell [layers, B, d]
        if cache is not None:
            cache.layers = [{"lstm": {"hidden": hidden.transpose(0, 1),
                                      "cell": cell.transpose(0, 1)}}]
            cache.length += target_input.size(1)
        context = self.attention(outputs, encoded.memory, encoded.keys, encoded.padding)
        return self.dropout(torch.tanh(self.combine(torch.cat([context, outputs], dim=-1))))

    def target_token_states(self, target_input: Tensor, encoded: RecurrentEncoderOutput,
                            layout: TokenLayout) -> Tensor:
        """The attentional states at the tokens of ``layout`` ``[N, d_model]`` (teacher forcing;
        the LSTM runs over the padded batch, the attention products are per position)."""
        return layout.unpad(self.decoder_states(target_input, encoded))
