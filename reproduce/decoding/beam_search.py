"""Beam search (section 6.1): beam size 4, length penalty alpha = 0.6, maximum output length =
input length + 50, terminating early when possible.

Hypotheses are ranked by ``log p(Y | X) / lp(Y)`` with GNMT's length penalty
``lp(Y) = ((5 + |Y|) / 6) ** alpha`` (Wu et al., 2016), where ``|Y|`` counts the generated
tokens including the closing EOS. Each step extends the live hypotheses by every token and takes
the ``2 * beam_size`` best candidates: those among the first ``beam_size`` that end with EOS join
the ``beam_size`` best finished hypotheses, and the ``beam_size`` best that do not end stay alive
(as fairseq does; with a beam of 1 this is exactly greedy decoding).

Early termination per sentence is exact: a live hypothesis with log-probability ``s <= 0`` can at
best reach ``s / lp(L_max)`` (log-probabilities only decrease, and ``lp`` grows with length for
alpha >= 0), so a sentence stops as soon as its best finished score is at least that bound.

All sentences of a batch are decoded together: the loop runs over time steps, never over
sentences. The encoder runs once, and so do the encoder-decoder keys and values; those of the
prefix are cached (:class:`DecoderCache`). A sentence that is done leaves the batch, so the
remaining steps compute only for the sentences still searching.
"""

from __future__ import annotations

import torch
from torch import Tensor

from reproduce.model.encoder_decoder import DecoderCache, TranslationModel
from reproduce.special_tokens import BOS, EOS, PAD

NEGATIVE_INFINITY = float("-inf")


def length_penalty(length: Tensor | float, alpha: float) -> Tensor | float:
    """GNMT's lp(Y) = ((5 + |Y|) / 6) ** alpha."""
    return ((5.0 + length) / 6.0) ** alpha


def _max_output_lengths(source: Tensor, max_length_offset: int,
                        position_limit: int | None) -> Tensor:
    """Per sentence: real source tokens (its EOS included) + offset = most tokens incl. EOS, and
    no more than the decoder has positions for (its input is BOS and all but the last token)."""
    lengths = source.ne(PAD).sum(dim=1) + max_length_offset
    return lengths if position_limit is None else lengths.clamp(max=position_limit)


def _next_token_log_probs(
    model: TranslationModel, last_tokens: Tensor, encoded, cache: DecoderCache, step: int,
    max_lengths: Tensor,
) -> Tensor:
    """log p(next token) ``[rows, V]``: PAD and BOS never generated, EOS forced at max length."""
    logits = model.decode(last_tokens.unsqueeze(1), encoded, cache)[:, -1].float()
    log_probs = torch.log_softmax(logits, dim=-1)
    log_probs[:, PAD] = NEGATIVE_INFINITY
    log_probs[:, BOS] = NEGATIVE_INFINITY
    at_limit = max_lengths.le(step)
    if at_limit.any():
        eos_column = log_probs[:, EOS].clone()
        log_probs[at_limit] = NEGATIVE_INFINITY
        log_probs[at_limit, EOS] = eos_column[at_limit]
    return log_probs


class _Search:
    """The state of a batch's search, row-aligned with the sentences still searching."""

    def __init__(self, model: TranslationModel, source: Tensor, beam: int, alpha: float,
                 max_length_offset: int, position_limit: int | None = None):
        batch, device = source.size(0), source.device
        self.beam, self.alpha = beam, alpha
        self.sentences = torch.arange(batch, device=device)  # original index of each row
        encoded = model.encode(source)
        self.encoded = encoded.select(torch.arange(batch, device=device).repeat_interleave(beam))
        self.max_lengths = _max_output_lengths(source, max_length_offset, position_limit)  # [B]
        self.lp_at_limit = length_penalty(self.max_lengths.float(), alpha)  # [B]
        # Live hypotheses: only beam 0 starts alive, so the first step expands a single prefix.
        self.alive_scores = torch.full((batch, beam), NEGATIVE_INFINITY, device=device)
        self.alive_scores[:, 0] = 0.0
        self.alive_tokens = torch.full((batch, beam, 1), BOS, dtype=torch.long, device=device)
        self.finished_scores = torch.full((batch, beam), NEGATIVE_INFINITY, device=device)
        self.finished_tokens = torch.full((batch, beam, 1), PAD, dtype=torch.long, device=device)
        self.cache = DecoderCache()

    @property
    def size(self) -> int:
        return self.sentences.size(0)

    def advance(self, model: TranslationModel, step: int) -> Tensor:
        """One time step for every row; returns which sentences are done after it."""
        batch, beam, device = self.size, self.beam, self.sentences.device
        log_probs = _next_token_log_probs(
            model, self.alive_tokens[:, :, -1].reshape(-1), self.encoded, self.cache, step,
            self.max_lengths.repeat_interleave(beam),
        )
        vocab = log_probs.size(-1)
        candidates = (self.alive_scores.unsqueeze(-1) + log_probs.view(batch, beam, vocab))
        candidates = candidates.view(batch, beam * vocab)
        top_scores, top_indices = candidates.topk(min(2 * beam, beam * vocab), dim=1)  # [B, 2K]
        origins, tokens = top_indices // vocab, top_indices % vocab
        extended = torch.cat(
            [self.alive_tokens.gather(1, origins.unsqueeze(-1).expand(-1, -1, step)),
             tokens.unsqueeze(-1)], dim=-1,
        )  # [B, 2K, step+1]
        eos = tokens.eq(EOS)
        rank = torch.arange(top_scores.size(1), device=device).expand_as(top_scores)
        ends = eos & rank.lt(beam) & top_scores.gt(NEGATIVE_INFINITY)

        # Finished: merge the new EOS hypotheses (length-normalised) into the best K so far.
        normalised = torch.where(ends, top_scores / length_penalty(float(step), self.alpha),
                                 torch.full_like(top_scores, NEGATIVE_INFINITY))
        padded_finished = torch.cat(
            [self.finished_tokens, torch.full_like(self.finished_tokens[:, :, :1], PAD).expand(
                -1, -1, step + 1 - self.finished_tokens.size(2))], dim=-1,
        )
        pool_scores = torch.cat([self.finished_scores, normalised], dim=1)  # [B, 3K]
        pool_tokens = torch.cat([padded_finished, extended], dim=1)
        self.finished_scores, best = pool_scores.topk(beam, dim=1)
        self.finished_tokens = pool_tokens.gather(1, best.unsqueeze(-1).expand(-1, -1, step + 1))

        # Alive: the best K candidates that did not end (stable: rank order among them kept).
        keep = (eos.long() * top_scores.size(1) + rank).argsort(dim=1)[:, :beam]
        self.alive_scores = top_scores.gather(1, keep).masked_fill(eos.gather(1, keep),
                                                                   NEGATIVE_INFINITY)
        self.alive_tokens = extended.gather(1, keep.unsqueeze(-1).expand(-1, -1, step + 1))
        row_offsets = (torch.arange(batch, device=device) * beam).unsqueeze(1)
        self.cache.reorder((origins.gather(1, keep) + row_offsets).reshape(-1))

        # Early termination: no live hypothesis can beat the best finished one any more.
        bound = self.alive_scores.max(dim=1).values / self.lp_at_limit
        return self.finished_scores[:, 0].ge(bound) | self.max_lengths.le(step)

    def keep(self, rows: Tensor) -> None:
        """Go on with sentences ``rows`` only (the others are done)."""
        beam_rows = (rows.unsqueeze(1) * self.beam
                     + torch.arange(self.beam, device=rows.device)).reshape(-1)
        self.sentences = self.sentences[rows]
        self.encoded = self.encoded.select(beam_rows)
        self.cache.reorder(beam_rows)
        for name in ("max_lengths", "lp_at_limit", "alive_scores", "alive_tokens",
                     "finished_scores", "finished_tokens"):
            setattr(self, name, getattr(self, name)[rows])


@torch.inference_mode()
def beam_search(
    model: TranslationModel,
    source: Tensor,  # [B, S], right-padded, each sentence ending with EOS
    beam_size: int = 4,
    alpha: float = 0.6,
    max_length_offset: int = 50,
) -> list[list[int]]:
    """The best hypothesis of each sentence, as token ids without BOS and EOS."""
    model.eval()
    search = _Search(model, source, beam_size, alpha, max_length_offset,
                     model.config.position_limit)
    best: list[list[int]] = [[] for _ in range(source.size(0))]
    for step in range(1, int(search.max_lengths.max()) + 1):
        done = search.advance(model, step)
        if bool(done.any()):
            for sentence, tokens in zip(search.sentences[done].tolist(),
                                        search.finished_tokens[done, 0, 1:].tolist(),  # drop BOS
                                        strict=True):
                best[sentence] = [token for token in tokens if token not in (EOS, PAD)]
            if bool(done.all()):
                break
            search.keep(torch.nonzero(~done).squeeze(1))
    return best
