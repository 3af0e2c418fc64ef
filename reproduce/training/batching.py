"""Batches by token count (section 5.1: "sentence pairs were batched together by approximate
sequence length"; "each training batch contained a set of sentence pairs containing approximately
25000 source tokens and 25000 target tokens"), and the stream of optimizer steps.

A step is a fixed partition of the data into ``micro_batches_per_step`` micro-batches (the paper:
8 GPUs, ~3.1k tokens each). Pairs are sorted by (target, source) length and packed greedily into
micro-batches of about ``tokens_per_step / micro_batches_per_step`` real tokens on each side: a
pair joins while it overshoots the budget on neither side by more than half its own length, so
steps land on ``tokens_per_step`` on average instead of above it. Each epoch visits the
micro-batches in a new seeded order, and a step takes the next ``micro_batches_per_step`` of them.
With ``W`` ranks (``W`` divides the count), rank ``r`` computes micro-batches ``r, r+W, ...``:
the step does not depend on the number of GPUs, and no rank is ever without data. A rank fuses
its share into as few forward passes as fit ``max_tokens_per_device`` padded tokens per side,
its pairs sorted by length (:func:`device_passes`): each token's dropout noise is its own
(:mod:`reproduce.model.dropout`), so how a step is cut into passes changes nothing but float
summation order. Tensor widths are rounded up to a multiple of ``pad_to_multiple``, which bounds
the number of distinct shapes the GPU kernels see.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch

from reproduce.data.encoded import EncodedCorpus
from reproduce.errors import ConfigError
from reproduce.model.dropout import token_keys
from reproduce.special_tokens import BOS, EOS, PAD

log = logging.getLogger(__name__)


@dataclass
class Batch:
    source: torch.Tensor  # [B, S]: ids + EOS, right-padded
    target_input: torch.Tensor  # [B, T]: BOS + ids
    target_output: torch.Tensor  # [B, T]: ids + EOS
    source_index: torch.Tensor  # [M]: flat positions b * S + s of the source tokens
    target_index: torch.Tensor  # [N]: flat positions b * T + t of the target tokens
    # The tokens' dropout keys (training; reproduce.model.dropout), or None
    source_noise: torch.Tensor | None = None  # [M] int64
    target_noise: torch.Tensor | None = None  # [N] int64

    def to(self, device: torch.device) -> "Batch":
        return Batch(*(None if tensor is None else tensor.to(device, non_blocking=True)
                       for tensor in (self.source, self.target_input, self.target_output,
                                      self.source_index, self.target_index, self.source_noise,
                                      self.target_noise)))

    def target_tokens(self) -> torch.Tensor:
        """``[N]``: the reference tokens (ids + EOS) at the target positions, without padding."""
        return self.target_output.reshape(-1).index_select(0, self.target_index)


def round_up(width: int | np.ndarray, multiple: int):
    return -(-width // multiple) * multiple


def _usable_pairs(source_sizes: np.ndarray, target_sizes: np.ndarray, longest: int) -> np.ndarray:
    """Indices of non-empty pairs within ``longest`` positions per side, by (target, source)
    size."""
    usable = ((source_sizes <= longest) & (target_sizes <= longest)
              & (source_sizes > 1) & (target_sizes > 1))
    dropped = int((~usable).sum())
    if dropped:
        log.info("skipping %d pairs longer than %d positions or empty", dropped, longest)
    indices = np.flatnonzero(usable)
    return indices[np.lexsort((source_sizes[indices], target_sizes[indices]))]


def pack_batches(
    source_lengths: np.ndarray, target_lengths: np.ndarray, max_tokens: int, max_source_tokens: int
) -> list[np.ndarray]:
    """Micro-batches whose padded size stays within ``max_tokens`` per side (evaluation).

    Lengths are without the EOS (and BOS) that the batcher adds.
    """
    source_sizes, target_sizes = source_lengths + 1, target_lengths + 1
    batches, start, longest_source, longest_target = [], 0, 0, 0
    indices = _usable_pairs(source_sizes, target_sizes, min(max_tokens, max_source_tokens))
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


def pack_micro_batches(
    source_lengths: np.ndarray, target_lengths: np.ndarray, budget: float, max_source_tokens: int
) -> list[np.ndarray]:
    """Micro-batches of about ``budget`` real tokens on each side (training).

    A pair joins the current micro-batch while, on each side, the total overshoots ``budget`` by
    at most half the pair's own size (rounding to the nearest, so the mean lands on the budget).
    How the device computes them is not their concern (:func:`device_passes`), so the steps of
    a run do not depend on the device's memory.
    """
    source_sizes, target_sizes = source_lengths + 1, target_lengths + 1
    indices = _usable_pairs(source_sizes, target_sizes, max_source_tokens)
    batches, start, source_total, target_total = [], 0, 0, 0
    for position, index in enumerate(indices):
        s, t = int(source_sizes[index]), int(target_sizes[index])
        fits = 2 * source_total + s <= 2 * budget and 2 * target_total + t <= 2 * budget
        if position > start and not fits:
            batches.append(indices[start:position])
            start, source_total, target_total = position, 0, 0
        source_total, target_total = source_total + s, target_total + t
    if start < len(indices):
        batches.append(indices[start:])
    return batches


def device_passes(
    pairs: np.ndarray, corpus: EncodedCorpus, max_padded: int, multiple: int = 1
) -> list[np.ndarray]:
    """The forward passes of a rank's pairs (its micro-batches of a step, together): the pairs
    by length, a pass growing while its padded tensors fit ``max_padded`` tokens per side
    (widths rounded up to ``multiple``); one pass where they all fit.

    Sorting by length makes the passes' padding small; it costs little anyway: the model's
    matrices compute on the tokens alone (:mod:`reproduce.model.token_layout`), and only
    attention's products see the padded batch.
    """
    source_sizes = corpus.source_lengths[pairs] + 1
    target_sizes = corpus.target_lengths[pairs] + 1
    order = np.lexsort((source_sizes, target_sizes))
    passes, start, widest_source, widest_target = [], 0, 0, 0
    for position, pair in enumerate(order):
        s, t = int(source_sizes[pair]), int(target_sizes[pair])
        rows = position - start + 1
        widest = max(round_up(max(widest_source, s), multiple),
                     round_up(max(widest_target, t), multiple))
        if rows > 1 and widest * rows > max_padded:
            passes.append(pairs[order[start:position]])
            start, widest_source, widest_target = position, 0, 0
        widest_source, widest_target = max(widest_source, s), max(widest_target, t)
    passes.append(pairs[order[start:]])
    return passes


def collate(corpus: EncodedCorpus, indices: np.ndarray, pin_memory: bool = False,
            multiple: int = 1, step_key: int | None = None) -> Batch:
    """Padded tensors of the pairs ``indices``; widths rounded up to a multiple of ``multiple``;
    with a ``step_key`` (:func:`reproduce.model.dropout.step_key`), the tokens' dropout keys.

    Built with whole-batch array operations, no loop over sentences: a step's thousand pairs are
    collated in a background thread while the device computes, and a Python loop there would hold
    the interpreter's lock that the training loop needs to launch its kernels."""
    indices = np.asarray(indices, dtype=np.int64)
    sources, source_lengths = corpus.concatenated("source", indices)
    targets, target_lengths = corpus.concatenated("target", indices)
    source_sizes, target_sizes = source_lengths + 1, target_lengths + 1  # + EOS; + BOS
    source_width = round_up(int(source_sizes.max()), multiple)
    target_width = round_up(int(target_sizes.max()), multiple)
    tensors = [_padded(sources, source_lengths, source_width, after=EOS),
               _padded(targets, target_lengths, target_width, before=BOS),
               _padded(targets, target_lengths, target_width, after=EOS),
               _token_positions(source_sizes, source_width),
               _token_positions(target_sizes, target_width)]
    if step_key is not None:
        tensors += [torch.from_numpy(token_keys(step_key, indices, sizes, side))
                    for side, sizes in enumerate((source_sizes, target_sizes))]
    if pin_memory:  # lets .to(cuda, non_blocking=True) overlap the copy with compute
        tensors = [tensor.pin_memory() for tensor in tensors]
    return Batch(*tensors)


def _padded(tokens: np.ndarray, lengths: np.ndarray, width: int, before: int | None = None,
            after: int | None = None) -> torch.Tensor:
    """``[B, width]``: row ``b`` holds ``before`` (if any), sentence ``b``'s ``lengths[b]``
    tokens (``tokens`` holds them one sentence after the other), ``after`` (if any), then PAD."""
    rows = np.arange(len(lengths)) * width + (before is not None)  # where each sentence starts
    ends = np.cumsum(lengths)
    batch = np.full(len(lengths) * width, PAD, dtype=np.int64)
    batch[np.repeat(rows - (ends - lengths), lengths) + np.arange(lengths.sum())] = tokens
    if before is not None:
        batch[rows - 1] = before
    if after is not None:
        batch[rows + lengths] = after
    return torch.from_numpy(batch.reshape(len(lengths), width))


def _token_positions(sizes: np.ndarray, width: int) -> torch.Tensor:
    """Flat positions ``row * width + t`` of the first ``sizes[row]`` positions of each row."""
    starts = np.repeat(np.arange(len(sizes)) * width - np.concatenate([[0], np.cumsum(sizes)[:-1]]),
                       sizes)
    return torch.from_numpy(starts + np.arange(int(sizes.sum())))


def _too_little_data(corpus: EncodedCorpus, filled: int, budget: float, wanted: int,
                     max_source_tokens: int) -> str:
    """Why the training split cannot fill one step, naming the split's folder: every pair too
    long for the model (the limit and the setting that sets it), or too few pairs."""
    sizes = np.maximum(corpus.source_lengths, corpus.target_lengths) + 1  # + EOS
    too_long = int((sizes > max_source_tokens).sum())
    if filled == 0 and too_long:
        rest = "" if too_long == len(sizes) else "; the rest are empty"
        return (f"{corpus.directory}: none of its {len(sizes)} pairs fits the model: {too_long} "
                f"are longer than training.max_source_tokens = {max_source_tokens} positions "
                f"per side, the longest {int(sizes.max())} with EOS{rest}")
    return (f"{corpus.directory}: the training data fills {filled} micro-batches of "
            f"~{budget:.0f} tokens, fewer than the training.micro_batches_per_step "
            f"({wanted}) of one step")


@dataclass
class StreamPosition:
    epoch: int = 0
    index: int = 0  # next micro-batch within the epoch's order


class MicroBatchStream:
    """Endless, seeded, resumable stream of optimizer steps, each ``micro_batches_per_step``
    micro-batches of about ``tokens_per_step / micro_batches_per_step`` tokens per side."""

    def __init__(self, corpus: EncodedCorpus, tokens_per_step: int, micro_batches_per_step: int,
                 max_source_tokens: int, seed: int, position: StreamPosition | None = None):
        self.corpus = corpus
        self.micro_batches_per_step = micro_batches_per_step
        budget = tokens_per_step / micro_batches_per_step
        self.batches = pack_micro_batches(corpus.source_lengths, corpus.target_lengths, budget,
                                          max_source_tokens)
        if len(self.batches) < micro_batches_per_step:
            raise ConfigError(_too_little_data(corpus, len(self.batches), budget,
                                               micro_batches_per_step, max_source_tokens))
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
        group = []
        while len(group) < self.micro_batches_per_step:
            if self.position.index == len(self._order):
                self.position = StreamPosition(self.position.epoch + 1, 0)
                self._order = self._epoch_order(self.position.epoch)
            group.append(self.batches[self._order[self.position.index]])
            self.position.index += 1
        return group


def evaluation_batches(corpus: EncodedCorpus, max_tokens: int) -> list[np.ndarray]:
    """Every pair exactly once, packed by length, in a fixed order (dev loss, perplexity)."""
    longest = int(max(corpus.source_lengths.max(), corpus.target_lengths.max())) + 1
    return pack_batches(corpus.source_lengths, corpus.target_lengths, max(max_tokens, longest),
                        longest)
