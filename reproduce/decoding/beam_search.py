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
sentences. The encoder runs once, and so do the encoder-decoder keys and values, held once a
sentence for the ``beam_size`` hypotheses that query them together; the keys and values of the
prefix are cached per hypothesis (:class:`DecoderCache`). A sentence that is done leaves the
batch, so the remaining steps compute only for the sentences still searching.

Which sentences are done is read on the host only every ``check_every`` steps: a read waits for
the device to finish every step queued before it, so reading after each step keeps a GPU idle
while the host launches the next one. In between, a sentence found done stays in the batch with
its finished hypotheses frozen as they were when it finished (early termination being exact, no
later hypothesis could outrank its best but by a tie in floating point), so that its translation
is the same whenever it is read; its rows still compute until the next read, which costs a CPU
time for nothing. The per-step work has no host read of its own.

With ``cuda_graphs`` a step's graph holds only as long as the batch's rows do, and recording one
costs more than an eager step: the batch then sheds its done sentences only once they are at
least half its rows (their translations taken when first read), so that a batch of B sentences
records at most log2(B) + 1 graphs for its row counts, for at most twice the rows still
searching. The decoder's keys and values sit in buffers of the batch's most positions, of which
a step reads and reorders a window that grows as the outputs do
(:data:`reproduce.model.key_values.READ_WINDOW_STRIDE` positions at a time, a graph for each
window too): reading every buffered position at every step made that self-attention the largest
share of a GPU's time in a search.
"""

from __future__ import annotations

import torch
from torch import Tensor

from reproduce.decoding.step_graphs import StepGraphs
from reproduce.errors import ConfigError
from reproduce.model.encoder_decoder import DecoderCache, TranslationModel
from reproduce.model.key_values import StaticPositions
from reproduce.special_tokens import BOS, EOS, PAD

NEGATIVE_INFINITY = float("-inf")
CUDA_GRAPHS_NEED_A_TRANSFORMER = (
    "decoding.cuda_graphs runs the Transformer's decoder on static shapes; the recurrent "
    "baseline's states are replaced at every step: set it to false for architecture rnn")


def length_penalty(length: Tensor | float, alpha: float) -> Tensor | float:
    """GNMT's lp(Y) = ((5 + |Y|) / 6) ** alpha."""
    return ((5.0 + length) / 6.0) ** alpha


def _max_output_lengths(source: Tensor, max_length_offset: int,
                        position_limit: int | None) -> Tensor:
    """Per sentence: real source tokens (its EOS included) + offset = most tokens incl. EOS, and
    no more than the decoder has positions for (its input is BOS and all but the last token)."""
    lengths = source.ne(PAD).sum(dim=1) + max_length_offset
    return lengths if position_limit is None else lengths.clamp(max=position_limit)


def _next_token_log_probs(logits: Tensor, step: int | Tensor, max_lengths: Tensor) -> Tensor:
    """log p(next token) ``[rows, V]`` from the step's ``logits``: PAD and BOS never generated,
    EOS forced at max length."""
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    log_probs[:, PAD] = NEGATIVE_INFINITY
    log_probs[:, BOS] = NEGATIVE_INFINITY
    # built on the device: a Python value written into a CUDA tensor is a host copy, which a
    # CUDA graph's capture refuses
    not_eos = torch.arange(log_probs.size(-1), device=log_probs.device).ne(EOS)
    # masked without asking whether any row is at its limit: that question is a host read
    return log_probs.masked_fill_(max_lengths.le(step).unsqueeze(1) & not_eos, NEGATIVE_INFINITY)


class _Search:
    """The state of a batch's search, row-aligned with the sentences still searching. Its
    tensors keep their shapes from step to step and are updated in place (the hypotheses' tokens
    in buffers of every position they may reach, the step counted on the device), so that a step
    can be replayed as a CUDA graph (:mod:`reproduce.decoding.step_graphs`)."""

    def __init__(self, model: TranslationModel, source: Tensor, beam: int, alpha: float,
                 max_length_offset: int, position_limit: int | None = None,
                 freezes: bool = False, cuda_graphs: bool = False):
        batch, device = source.size(0), source.device
        self.model, self.beam, self.alpha, self.freezes = model, beam, alpha, freezes
        self.sentences = list(range(batch))  # original index of each row, on the host
        self.taken = [False] * batch  # rows whose translation is taken (done, not yet shed)
        self.done = torch.zeros(batch, dtype=torch.bool, device=device)
        self.encoded = model.encode(source)  # once a sentence, for all its hypotheses
        self.max_lengths = _max_output_lengths(source, max_length_offset, position_limit)  # [B]
        self.lp_at_limit = length_penalty(self.max_lengths.float(), alpha)  # [B]
        self.last_step = int(self.max_lengths.max())
        width = 1 + self.last_step  # BOS, then a token a step
        # Live hypotheses: only beam 0 starts alive, so the first step expands a single prefix.
        self.alive_scores = torch.full((batch, beam), NEGATIVE_INFINITY, device=device)
        self.alive_scores[:, 0] = 0.0
        self.alive_tokens = torch.full((batch, beam, width), PAD, dtype=torch.long, device=device)
        self.alive_tokens[:, :, 0] = BOS
        self.finished_scores = torch.full((batch, beam), NEGATIVE_INFINITY, device=device)
        self.finished_tokens = torch.full((batch, beam, width), PAD, dtype=torch.long,
                                          device=device)
        self.step = torch.zeros((), dtype=torch.long, device=device)  # steps taken
        # cuda_graphs: static shapes, keys and values in buffers of the batch's most positions
        self.cache = (DecoderCache(static=StaticPositions(
            self.last_step, torch.zeros((), dtype=torch.long, device=device)))
            if cuda_graphs else DecoderCache())
        self.graphs = StepGraphs(capture=cuda_graphs)
        self.steps = 0  # steps taken, counted on the host too

    @property
    def rows(self) -> int:
        return len(self.sentences)

    @property
    def searching(self) -> int:
        """Sentences whose translation is not taken yet."""
        return self.taken.count(False)

    def advance(self) -> None:
        """One time step for every row; ``done`` then says which sentences are done. A sentence
        done before this step (``freezes``: not yet read) keeps its finished hypotheses. On
        static shapes, the step's self-attention reads only a window that holds the positions
        written (BOS and one a step), which the step's shape names beside the rows."""
        self.steps += 1
        window = None if self.cache.static is None else self.cache.static.reach(self.steps)
        self.graphs(self._advance, (self.rows, window), self.done.device)

    def _advance(self) -> None:
        batch, beam, width = self.alive_tokens.shape
        self.step += 1
        last_tokens = self.alive_tokens.gather(2, (self.step - 1).expand(batch, beam, 1))
        logits = self.model.decode(last_tokens.view(-1, 1), self.encoded, self.cache)[:, -1]
        log_probs = _next_token_log_probs(logits, self.step,
                                          self.max_lengths.repeat_interleave(beam))
        vocab = log_probs.size(-1)
        candidates = (self.alive_scores.unsqueeze(-1) + log_probs.view(batch, beam, vocab))
        candidates = candidates.view(batch, beam * vocab)
        top_scores, top_indices = candidates.topk(min(2 * beam, beam * vocab), dim=1)  # [B, 2K]
        origins, tokens = top_indices // vocab, top_indices % vocab
        extended = self.alive_tokens.gather(1, origins.unsqueeze(-1).expand(-1, -1, width))
        extended.scatter_(2, self.step.expand(*tokens.shape, 1), tokens.unsqueeze(-1))
        eos = tokens.eq(EOS)
        rank = torch.arange(top_scores.size(1), device=eos.device).expand_as(top_scores)
        ends = eos & rank.lt(beam) & top_scores.gt(NEGATIVE_INFINITY)

        # Finished: merge the new EOS hypotheses (length-normalised) into the best K so far.
        # lp in float64, then float32: as a Python number's division would round it.
        lp = length_penalty(self.step.double(), self.alpha).to(top_scores.dtype)
        normalised = torch.where(ends, top_scores / lp, NEGATIVE_INFINITY)
        pool_scores = torch.cat([self.finished_scores, normalised], dim=1)  # [B, 3K]
        pool_tokens = torch.cat([self.finished_tokens, extended], dim=1)
        finished_scores, best = pool_scores.topk(beam, dim=1)
        finished_tokens = pool_tokens.gather(1, best.unsqueeze(-1).expand(-1, -1, width))
        if self.freezes:
            frozen = self.done.unsqueeze(1)
            finished_scores = torch.where(frozen, self.finished_scores, finished_scores)
            finished_tokens = torch.where(frozen.unsqueeze(2), self.finished_tokens,
                                          finished_tokens)
        self.finished_scores.copy_(finished_scores)
        self.finished_tokens.copy_(finished_tokens)

        # Alive: the best K candidates that did not end (stable: rank order among them kept).
        keep = (eos.long() * top_scores.size(1) + rank).argsort(dim=1)[:, :beam]
        self.alive_scores.copy_(top_scores.gather(1, keep).masked_fill(eos.gather(1, keep),
                                                                       NEGATIVE_INFINITY))
        self.alive_tokens.copy_(extended.gather(1, keep.unsqueeze(-1).expand(-1, -1, width)))
        row_offsets = (torch.arange(batch, device=keep.device) * beam).unsqueeze(1)
        self.cache.reorder((origins.gather(1, keep) + row_offsets).reshape(-1))

        # Early termination: no live hypothesis can beat the best finished one any more.
        bound = self.alive_scores.max(dim=1).values / self.lp_at_limit
        self.done |= self.finished_scores[:, 0].ge(bound) | self.max_lengths.le(self.step)

    def take_done(self) -> dict[int, list[int]]:
        """The best hypothesis (token ids, BOS dropped) of each sentence done since the last
        call, by its original index; the batch sheds the done ones (with ``cuda_graphs``, once
        they are half its rows). One host read, two when a sentence is done."""
        flags = self.done.tolist()
        rows = [row for row, done in enumerate(flags) if done and not self.taken[row]]
        if not rows:
            return {}
        hypotheses = self.finished_tokens[torch.tensor(rows, device=self.done.device), 0,
                                          1:].tolist()
        taken = {self.sentences[row]: tokens for row, tokens in zip(rows, hypotheses, strict=True)}
        for row in rows:
            self.taken[row] = True
        searching = [row for row, done in enumerate(self.taken) if not done]
        # with graphs, once they are half the rows (the module's docstring)
        if searching and (not self.graphs.capture or 2 * len(searching) <= self.rows):
            self.keep(searching)
        return taken

    def keep(self, kept: list[int]) -> None:
        """Go on with the sentences of rows ``kept`` only (the others are done)."""
        rows = torch.tensor(kept, dtype=torch.long, device=self.done.device)
        beam_rows = (rows.unsqueeze(1) * self.beam
                     + torch.arange(self.beam, device=rows.device)).reshape(-1)
        self.sentences = [self.sentences[row] for row in kept]
        self.taken = [False] * len(kept)
        self.encoded = self.encoded.select(rows)
        self.cache.reorder(beam_rows, sentences=rows)
        for name in ("done", "max_lengths", "lp_at_limit", "alive_scores", "alive_tokens",
                     "finished_scores", "finished_tokens"):
            setattr(self, name, getattr(self, name)[rows])


@torch.inference_mode()
def beam_search(
    model: TranslationModel,
    source: Tensor,  # [B, S], right-padded, each sentence ending with EOS
    beam_size: int = 4,
    alpha: float = 0.6,
    max_length_offset: int = 50,
    check_every: int = 1,
    cuda_graphs: bool = False,
) -> list[list[int]]:
    """The best hypothesis of each sentence, as token ids without BOS and EOS; which sentences
    are done is read every ``check_every`` steps (and at the last), and with ``cuda_graphs`` the
    decoder keeps its keys and values in buffers of fixed size, and a GPU replays each step as a
    CUDA graph (:mod:`reproduce.decoding.step_graphs`): the same translations whatever the two."""
    if cuda_graphs and model.config.architecture != "transformer":
        raise ConfigError(CUDA_GRAPHS_NEED_A_TRANSFORMER)
    model.eval()
    search = _Search(model, source, beam_size, alpha, max_length_offset,
                     model.config.position_limit, freezes=check_every > 1,
                     cuda_graphs=cuda_graphs)
    best: list[list[int]] = [[] for _ in range(source.size(0))]
    last = search.last_step
    for step in range(1, last + 1):
        search.advance()
        if step % check_every and step < last:
            continue
        for sentence, tokens in search.take_done().items():
            best[sentence] = [token for token in tokens if token not in (EOS, PAD)]
        if not search.searching:
            break
    return best
