"""Batches by token count (section 5.1: "sentence pairs were batched together by approximate
sequence length"), and the stream of micro-batches that makes up each optimizer step.

Pairs are sorted by (target, source) length and packed greedily into micro-batches whose padded
size stays within ``max_tokens`` on each side; the packing is fixed, and each epoch visits the
micro-batches in a new seeded order. An optimizer step takes consecutive micro-batches from this
global stream until they hold ``tokens_per_step`` target tokens; with ``W`` ranks, rank ``r``
computes micro-batches ``r, r+W, ...`` of the step. The step's micro-batches therefore do not
depend on the number of GPUs, and 1 GPU accumulating reproduces 8 GPUs' schedule.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch

from reproduce.data.encoded import EncodedCorpus
from reproduce.special_tokens import BOS, EOS, PAD

log = logging.getLogger(__name__)


@dataclass
class Batch:
    source: torch.Tensor  # [B, S]: ids + EOS, right-padded
    target_input: torch.Tensor  # [B, T]: BOS + ids
    target_output: torch.Tensor  # [B, T]: ids + EOS
    source_tokens: int  # real tokens (EOS included)
    target_tokens: int

    def to(self, device: torch.device) -> "Batch":
        return Batch(self.source.to(device, non_blocking=True),
                     self.target_input.to(device, non_blocking=True),
                     self.target_output.to(device, non_blocking=True),
                     self.source_tokens, self.target_tokens)


def pack_batches(
    source_lengths: np.ndarray, target_lengths: np.ndarray, max_tokens: int, max_source_tokens: int
) -> list[np.ndarray]:
    """Index arrays of micro-batches; lengths include the EOS (and BOS) the batcher adds."""
    source_sizes, target_sizes = source_lengths + 1, target_lengths + 1
    usable = (source_sizes <= max_source_tokens) & (target_sizes <= max_source_tokens)
    usable &= (source_sizes <= max_tokens) & (target_sizes <= max_tokens)
    usable &= (source_lengths > 0) & (target_lengths > 0)
    dropped = int((~usable).sum())
    if dropped:
        log.info("skipping %d pairs longer than max_source_tokens/max_tokens or empty", dropped)
    indices = np.flatnonzero(usable)
    indices = indices[np.lexsort((source_sizes[indices], target_sizes[indices]))]
    batches, start, longest_source, longest_target = [], 0, 0, 0
    for position, index in enumerate(indices):
        longest_source = max(longest_source, source_sizes[index])
        longest_target = max(longest_target, target_sizes[index])
        count = position - start + 1
        if count > 1 and max(longest_source, longest_target) * count > max_tokens:
            batches.append(indices[start:position])
            start = position
            longest_source, longest_target = source_sizes[index], target_sizes[index]
    if start < len(indices):
        batches.append(indices[start:])
    return batches


def collate(corpus: EncodedCorpus, indices: np.ndarray, pin_memory: bool = False) -> Batch:
    sources = [corpus.source(int(i)) for i in indices]
    targets = [corpus.target(int(i)) for i in indices]
    source_width = max(len(s) for s in sources) + 1
    target_width = max(len(t) for t in targets) + 1
    source = torch.full((len(indices), source_width), PAD, dtype=torch.long)
    target_input = torch.full((len(indices), target_width), PAD, dtype=torch.long)
    target_output = torch.full((len(indices), target_width), PAD, dtype=torch.long)
    for row, (s, t) in enumerate(zip(sources, targets)):
        source[row, : len(s)] = torch.from_numpy(s)
        source[row, len(s)] = EOS
        target_input[row, 0] = BOS
        target_input[row, 1 : len(t) + 1] = torch.from_numpy(t)
        target_output[row, : len(t)] = torch.from_numpy(t)
        target_output[row, len(t)] = EOS
    if pin_memory:  # lets .to(cuda, non_blocking=True) overlap the copy with compute
        source, target_input, target_output = source.pin_memory(), target_input.pin_memory(), target_output.pin_memory()
    return Batch(source, target_input, target_output,
                 sum(len(s) + 1 for s in sources), sum(len(t) + 1 for t in targets))


def padding_waste(batches: list[np.ndarray], corpus: EncodedCorpus) -> float:
    """Fraction of the padded tensors' cells (both sides) that hold padding."""
    real = cells = 0
    for indices in batches:
        source, target = corpus.source_lengths[indices] + 1, corpus.target_lengths[indices] + 1
        real += int(source.sum() + target.sum())
        cells += len(indices) * int(source.max() + target.max())
    return 1.0 - real / cells if cells else 0.0


@dataclass
class StreamPosition:
    epoch: int = 0
    index: int = 0  # next micro-batch within the epoch's order


class MicroBatchStream:
    """Endless, seeded, resumable stream of micro-batches grouped into optimizer steps."""

    def __init__(self, corpus: EncodedCorpus, max_tokens: int, max_source_tokens: int,
                 tokens_per_step: int, seed: int, position: StreamPosition | None = None):
        self.corpus = corpus
        self.batches = pack_batches(corpus.source_lengths, corpus.target_lengths, max_tokens, max_source_tokens)
        if not self.batches:
            raise ValueError("no training pair fits within the configured token limits")
        self.target_tokens = np.array([int(corpus.target_lengths[b].sum()) + len(b) for b in self.batches])
        self.tokens_per_step = tokens_per_step
        self.seed = seed
        self.position = position or StreamPosition()
        self._order = self._epoch_order(self.position.epoch)

    def seek(self, position: StreamPosition) -> None:
        """Continue from ``position`` (a resumed run)."""
        self.position = StreamPosition(position.epoch, position.index)
        self._order = self._epoch_order(position.epoch)

    def _epoch_order(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.batches))

    def next_step(self) -> list[np.ndarray]:
        """The micro-batches (index arrays) of the next optimizer step, for all ranks together."""
        group, tokens = [], 0
        while tokens < self.tokens_per_step:
            if self.position.index == len(self._order):
                self.position = StreamPosition(self.position.epoch + 1, 0)
                self._order = self._epoch_order(self.position.epoch)
            batch = self._order[self.position.index]
            self.position.index += 1
            group.append(self.batches[batch])
            tokens += int(self.target_tokens[batch])
        return group


def evaluation_batches(corpus: EncodedCorpus, max_tokens: int) -> list[np.ndarray]:
    """Every pair exactly once, packed by length, in a fixed order (dev loss, perplexity)."""
    longest = int(max(corpus.source_lengths.max(), corpus.target_lengths.max())) + 1
    return pack_batches(corpus.source_lengths, corpus.target_lengths, max(max_tokens, longest), longest)
