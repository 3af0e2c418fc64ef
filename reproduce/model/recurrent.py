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
between stacked LSTM layers, and on h~_t before the output projection, each its own site with
noise keyed by the tokens (:mod:`reproduce.model.dropout`; hence a stack of one-layer LSTMs, as
nn.LSTM's own dropout between layers draws from torch's generator). Initialisation: every
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
from reproduce.model.dropout import TokenDropout, number_sites
from reproduce.model.encoder_decoder import DecoderCache, EncoderDecoder
from reproduce.model.key_values import CachedTensors
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


class StackedLSTM(nn.Module):
    """``layers`` one-layer LSTMs, batch-first, with token-keyed dropout between them; inputs
    ``[B, T, input_size]`` packed per layer by ``lengths`` where given (padding never changes a
    sentence's states). Returns the top layer's outputs and every layer's final states,
    layer-major as nn.LSTM's ``h_n`` and ``c_n``."""

    def __init__(self, input_size: int, hidden_size: int, layers: int, dropout: float,
                 bidirectional: bool = False):
        super().__init__()
        width = hidden_size * (2 if bidirectional else 1)
        self.layers = nn.ModuleList(
            nn.LSTM(input_size if layer == 0 else width, hidden_size, batch_first=True,
                    bidirectional=bidirectional)
            for layer in range(layers))
        self.between = nn.ModuleList(TokenDropout(dropout, width) for _ in range(layers - 1))

    def forward(self, x: Tensor, lengths: Tensor | None = None,
                state: tuple[Tensor, Tensor] | None = None,
                noise: Tensor | None = None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """x ``[B, T, input]``; ``state`` ``([layers * directions, B, hidden])`` twice; ``noise``
        the tokens' dropout keys ``[B, T]``."""
        hidden, cell = [], []
        directions = 2 if self.layers[0].bidirectional else 1
        for number, lstm in enumerate(self.layers):
            if number > 0:
                x = self.between[number - 1](x, noise)
            initial = None
            if state is not None:
                rows = slice(number * directions, (number + 1) * directions)
                initial = (state[0][rows].contiguous(), state[1][rows].contiguous())
            x, (h, c) = self._run(lstm, x, lengths, initial)
            hidden.append(h)
            cell.append(c)
        return x, (torch.cat(hidden), torch.cat(cell))

    @staticmethod
    def _run(lstm: nn.LSTM, x: Tensor, lengths: Tensor | None,
             initial: tuple[Tensor, Tensor] | None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        if lengths is None:
            return lstm(x, initial)
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        outputs, final = lstm(packed, initial)
        unpacked, _ = pad_packed_sequence(outputs, batch_first=True, total_length=x.size(1))
        return unpacked, final  # [B, T, width], zeros at PAD


class RecurrentSeq2Seq(EncoderDecoder):
    def __init__(self, config: ModelConfig, vocab_size: int):
        super().__init__()
        self.config = config
        self.vocab_size = vocab_size
        d, layers = config.d_model, config.layers
        self.embedding = nn.Embedding(vocab_size, d)
        self.embedding_dropout = TokenDropout(config.dropout, d)
        self.encoder = StackedLSTM(d, d // 2, layers, config.dropout, bidirectional=True)
        self.decoder = StackedLSTM(d, d, layers, config.dropout)
        self.attention = global_attention(config.rnn_attention, d)
        self.combine = nn.Linear(2 * d, d, bias=False)  # W_c of h~_t = tanh(W_c [c_t; h_t])
        self.output_dropout = TokenDropout(config.dropout, d)
        for parameter in self.parameters():
            nn.init.uniform_(parameter, -INITIAL_RANGE, INITIAL_RANGE)
        nn.init.normal_(self.embedding.weight, mean=0.0, std=d**-0.5)
        number_sites(self)

    def _embed(self, tokens: Tensor, noise: Tensor | None) -> Tensor:  # [B, T] -> [B, T, d]
        scaled = self.embedding(tokens) * math.sqrt(self.config.d_model)
        return self.embedding_dropout(scaled, noise)

    def encode(self, source: Tensor, layout: TokenLayout | None = None) -> RecurrentEncoderOutput:
        """``source`` ``[B, S]``, right-padded; ``layout`` its :class:`TokenLayout` if known."""
        layout = layout if layout is not None else TokenLayout.of(source)
        lengths = layout.padding.logical_not().sum(dim=1).clamp(min=1).cpu()
        noise = layout.batch_noise()  # [B, S]
        memory, (hidden, cell) = self.encoder(self._embed(source, noise), lengths,
                                              noise=noise)  # [B, S, d], zeros at PAD
        padding = layout.padding
        return RecurrentEncoderOutput(memory, padding, self.attention.keys(memory),
                                      _directions_concatenated(hidden),
                                      _directions_concatenated(cell))

    def decoder_states(
        self, target_input: Tensor, encoded: RecurrentEncoderOutput,
        cache: DecoderCache | None = None, noise: Tensor | None = None
    ) -> Tensor:
        """The attentional states h~_t ``[B, T, d_model]``, before the output projection;
        ``noise``: the target tokens' dropout keys ``[B, T]`` (training)."""
        if cache is not None and cache.layers:
            state = cache.layers[0]["lstm"]
            hidden, cell = state["hidden"], state["cell"]
        else:  # the bridge's states [B, layers, d], for each of a sentence's rows
            per_sentence = target_input.size(0) // encoded.hidden.size(0)
            hidden = encoded.hidden.repeat_interleave(per_sentence, dim=0)
            cell = encoded.cell.repeat_interleave(per_sentence, dim=0)
        outputs, (hidden, cell) = self.decoder(
            self._embed(target_input, noise), None,
            (hidden.transpose(0, 1), cell.transpose(0, 1)), noise,
        )  # outputs [B, T, d]; hidden, cell [layers, B, d]
        if cache is not None:
            cache.layers = [{"lstm": CachedTensors(hidden=hidden.transpose(0, 1),
                                                   cell=cell.transpose(0, 1))}]
            cache.advance(target_input.size(1))
        context = self.attention(outputs, encoded.memory, encoded.keys, encoded.padding)
        attentional = torch.tanh(self.combine(torch.cat([context, outputs], dim=-1)))
        return self.output_dropout(attentional, noise)

    def target_token_states(self, target_input: Tensor, encoded: RecurrentEncoderOutput,
                            layout: TokenLayout) -> Tensor:
        """The attentional states at the tokens of ``layout`` ``[N, d_model]`` (teacher forcing;
        the LSTM runs over the padded batch, the attention products are per position)."""
        return layout.unpad(self.decoder_states(target_input, encoded,
                                                noise=layout.batch_noise()))
