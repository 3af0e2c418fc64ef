"""Global attention of the recurrent baseline: every decoder state attends to every encoder state.

Luong, Pham and Manning (2015), "Effective Approaches to Attention-based Neural Machine
Translation", section 3.1 (global attention): a score per (target, source) pair, a softmax over
the source positions (padding masked out), and the context vector c_t = sum_s a_t(s) h_s.
Two scores:

* multiplicative, Luong's "general": score(h_t, h_s) = h_t^T W_a h_s;
* additive, Bahdanau, Cho and Bengio (2015), section 3.1 / appendix A.1.2:
  score(h_t, h_s) = v_a^T tanh(W_1 h_t + W_2 h_s), with an alignment width of d_model (Luong's
  "concat" score v_a^T tanh(W_a [h_t; h_s]) written with W_a split in two). As in Luong's global
  model, the query is the current decoder state h_t, not Bahdanau's previous state.

The encoder-side product (W_a h_s, or W_2 h_s) is computed once per sentence, by :meth:`keys`,
and kept in the encoder output, so that a decoding step only pays for its own query. No biases,
as in both papers' equations.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class GlobalAttention(nn.Module):
    """Scores, masked softmax and context vector; subclasses define the score."""

    def __init__(self, d_model: int):
        super().__init__()
        self.key_projection = nn.Linear(d_model, d_model, bias=False)  # W_a (or W_2) h_s

    def keys(self, memory: Tensor) -> Tensor:  # [B, S, d] -> [B, S, d]
        return self.key_projection(memory)

    def scores(self, queries: Tensor, keys: Tensor) -> Tensor:  # [B, T, d], [B, S, d] -> [B, T, S]
        raise NotImplementedError

    def weights(self, queries: Tensor, keys: Tensor, padding: Tensor) -> Tensor:
        """a_t(s): softmax over the real source positions, ``[B, T, S]``."""
        scores = self.scores(queries, keys).masked_fill(padding.unsqueeze(1), float("-inf"))
        return torch.softmax(scores, dim=-1)

    def forward(self, queries: Tensor, memory: Tensor, keys: Tensor, padding: Tensor) -> Tensor:
        """Context vectors c_t ``[R, T, d]`` for decoder states ``queries`` ``[R, T, d]``: R is
        B, or a whole number of rows per source sentence, sentence by sentence (beam search's
        hypotheses), which query the sentence's memory together."""
        rows, length, _ = queries.shape
        grouped = queries.reshape(memory.size(0), -1, queries.size(-1))  # [B, G*T, d]
        return (self.weights(grouped, keys, padding) @ memory).view(rows, length, -1)


class MultiplicativeAttention(GlobalAttention):
    """Luong's "general" score h_t^T (W_a h_s)."""

    def scores(self, queries: Tensor, keys: Tensor) -> Tensor:
        return queries @ keys.transpose(1, 2)


class AdditiveAttention(GlobalAttention):
    """Bahdanau's score v_a^T tanh(W_1 h_t + W_2 h_s); holds a ``[B, T, S, d]`` tensor."""

    def __init__(self, d_model: int):
        super().__init__(d_model)
        self.query_projection = nn.Linear(d_model, d_model, bias=False)  # W_1
        self.vector = nn.Linear(d_model, 1, bias=False)  # v_a

    def scores(self, queries: Tensor, keys: Tensor) -> Tensor:
        hidden = torch.tanh(self.query_projection(queries).unsqueeze(2) + keys.unsqueeze(1))
        return self.vector(hidden).squeeze(-1)


def global_attention(kind: str, d_model: int) -> GlobalAttention:
    """The score named by ``model.rnn_attention``."""
    return {"multiplicative": MultiplicativeAttention, "additive": AdditiveAttention}[kind](d_model)
