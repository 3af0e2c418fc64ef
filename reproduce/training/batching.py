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
its share into as few forward passes as hold at most ``max_tokens_per_device`` real tokens per
side, its pairs sorted by length (:func:`device_passes`): each token's dropout noise is its own
(:mod:`reproduce.model.dropout`), so how a step is cut into passes changes nothing but float
summation order. Real tokens, not padded positions, bound a pass because the model's matrices
compute on the tokens alone (:mod:`reproduce.model.token_layout`): padding costs attention only.
Tensor widths are rounded up to a multiple of ``pad_to_multiple``.

With ``training.pass_buckets`` a pass's shape is one of a few (:func:`pass_shape`): its sentence
count and width round up to a power of two and its token count to a multiple of
``max_tokens_per_device / TOKEN_QUANTA``, filled with dummy rows and dummy tokens that carry no
loss and no gradient (:func:`collate`), so that a GPU can capture each shape's forward and
backward once (CUDA graphs need static shapes). For attention over packed tokens the buckets are
packed: a fixed width, rows from a floor, and the dummy tokens in rows of their own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
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
    source_noise: torch.Tensor | None = None  # [M] int32
    target_noise: torch.Tensor | None = None  # [N] int32
    # A bucketed pass's (pass_shape): 1.0 at the pairs' target tokens, 0.0 at dummy ones
    target_weight: torch.Tensor | None = None  # [N] float32

    def map(self, function: Callable[[torch.Tensor], torch.Tensor]) -> "Batch":
        """The batch of ``function`` of each of its tensors."""
        return Batch(*(None if tensor is None else function(tensor)
                       for tensor in vars(self).values()))

    def to(self, device: torch.device) -> "Batch":
        return self.map(lambda tensor: tensor.to(device, non_blocking=True))


def target_tokens(target_output: torch.Tensor, target_index: torch.Tensor) -> torch.Tensor:
    """``[N]``: the ids of ``target_output`` ``[B, T]`` at the flat positions ``target_index``: a
    pass's reference tokens (ids + EOS) at its target positions, without padding."""
    return target_output.reshape(-1).index_select(0, target_index)


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


def device_passes(pairs: np.ndarray, corpus: EncodedCorpus, max_tokens: int) -> list[np.ndarray]:
    """The forward passes of a rank's pairs (its micro-batches of a step, together): the pairs
    by length, a pass growing while it holds at most ``max_tokens`` real tokens (EOS and BOS
    included) on each side; one pass where they all fit.

    Sorting by length keeps the padding of a step cut into several passes small; it costs
    little anyway: the model's matrices compute on the tokens alone
    (:mod:`reproduce.model.token_layout`), and only attention's products see the padded batch.
    """
    source_sizes = corpus.source_lengths[pairs] + 1
    target_sizes = corpus.target_lengths[pairs] + 1
    order = np.lexsort((source_sizes, target_sizes))
    passes, start, source_total, target_total = [], 0, 0, 0
    for position, pair in enumerate(order):
        s, t = int(source_sizes[pair]), int(target_sizes[pair])
        if position > start and (source_total + s > max_tokens or target_total + t > max_tokens):
            passes.append(pairs[order[start:position]])
            start, source_total, target_total = position, 0, 0
        source_total, target_total = source_total + s, target_total + t
    passes.append(pairs[order[start:]])
    return passes


# A bucketed pass's token count is a multiple of max_tokens_per_device / TOKEN_QUANTA.
TOKEN_QUANTA = 32


# A packed bucketed pass has at least max_tokens_per_device / PACKED_TOKENS_PER_ROW rows.
PACKED_TOKENS_PER_ROW = 16


@dataclass(frozen=True)
class PassShape:
    """The sizes of a bucketed pass on each side: ``rows`` sentences (its pairs, then dummy
    rows), ``width`` positions, ``tokens`` computed tokens (its pairs', then dummy tokens);
    ``packed``: for attention over packed tokens (:func:`pass_shape`)."""

    rows: int
    width: int
    tokens: int
    packed: bool = False


def pass_shape(source_sizes: np.ndarray, target_sizes: np.ndarray, max_tokens: int,
               multiple: int, packed_width: int | None = None) -> PassShape:
    """The bucket of a pass whose pairs have these sizes (EOS and BOS included): sentences and
    width (the wider side's, for both) rounded up to a power of two (the width to a multiple of
    ``multiple`` too), tokens (the side with more, for both) to a multiple of
    ``max_tokens / TOKEN_QUANTA``, with rows added where the padding cannot hold the dummy
    tokens. Each size takes few values, so passes take few shapes; the tokens, which the
    matrices compute, take the finest steps.

    ``packed_width`` (attention over packed tokens, ``training.attention`` varlen or flex): the
    rows and width size nothing but the pass's id tensors and sentence offsets, so the width is
    always ``packed_width`` (the longest pair training takes) and the rows at least ``max_tokens
    / PACKED_TOKENS_PER_ROW``; only the tokens vary. With no key mask, dummy tokens must stay out
    of the pairs' rows: they fill the last dummy rows, each a sentence of its own on both sides
    (:func:`collate`), with room made for them and the tokens raised a quantum where one side
    has too few dummy tokens to give each such row one."""
    pairs = len(source_sizes)
    quantum = -(-max_tokens // TOKEN_QUANTA)
    real = (int(source_sizes.sum()), int(target_sizes.sum()))
    tokens = round_up(max(real), quantum)
    if packed_width is None:
        rows = _power_of_two(pairs)
        width = round_up(_power_of_two(int(max(source_sizes.max(), target_sizes.max()))),
                         multiple)
        while tokens > rows * width - (rows - pairs):  # a dummy row's first position is not free
            rows *= 2
        return PassShape(rows, width, tokens)
    width = round_up(packed_width, multiple)
    rows = max(_power_of_two(pairs), _power_of_two(max_tokens // PACKED_TOKENS_PER_ROW))
    while tokens - max(real) < packed_dummy_rows(tokens, real, width):
        tokens += quantum
    while packed_dummy_rows(tokens, real, width) > rows - pairs:
        rows *= 2
    return PassShape(rows, width, tokens, packed=True)


def packed_dummy_rows(tokens: int, real: tuple[int, int], width: int) -> int:
    """The dummy rows that hold a packed pass's dummy tokens: as many as the fuller side's
    ``tokens - min(real)`` need (a dummy row's first position is not a token)."""
    return -(-(tokens - min(real)) // (width - 1))


def _power_of_two(size: int) -> int:
    return 1 << max(size - 1, 0).bit_length()


def collate(corpus: EncodedCorpus, indices: np.ndarray, pin_memory: bool = False,
            multiple: int = 1, step_key: int | None = None,
            shape: PassShape | None = None) -> Batch:
    """Padded tensors of the pairs ``indices``; widths rounded up to a multiple of ``multiple``;
    with a ``step_key`` (:func:`reproduce.model.dropout.step_key`), the tokens' dropout keys.

    With a ``shape`` (:func:`pass_shape`), the tensors have its sizes: after the pairs come
    dummy rows, each an empty pair (EOS; BOS) whose one position is not a token, so that no
    row of attention is without a key; dummy tokens fill the last free positions, as PAD, which
    attention's masks hide from every real token (keys at PAD, and positions after a target
    sentence's end, which the causal mask hides); ``target_weight`` is 0 at them, and the loss
    weighs them by it: they change neither the loss nor any gradient.

    Built with whole-batch array operations, no loop over sentences: a step's thousand pairs are
    collated in a background thread while the device computes, and a Python loop there would hold
    the interpreter's lock that the training loop needs to launch its kernels."""
    indices = np.asarray(indices, dtype=np.int64)
    sources, source_lengths = corpus.concatenated("source", indices)
    targets, target_lengths = corpus.concatenated("target", indices)
    source_sizes, target_sizes = source_lengths + 1, target_lengths + 1  # + EOS; + BOS
    if shape is None:
        source_width = round_up(int(source_sizes.max()), multiple)
        target_width = round_up(int(target_sizes.max()), multiple)
    else:  # dummy rows: empty sentences
        source_width = target_width = shape.width
        empty = np.zeros(shape.rows - len(indices), dtype=source_lengths.dtype)
        source_lengths = np.concatenate([source_lengths, empty])
        target_lengths = np.concatenate([target_lengths, empty])
    tensors = [_padded(sources, source_lengths, source_width, after=EOS),
               _padded(targets, target_lengths, target_width, before=BOS),
               _padded(targets, target_lengths, target_width, after=EOS)]
    positions = [_token_positions(source_sizes, source_width),
                 _token_positions(target_sizes, target_width)]
    keys = [None, None]
    if step_key is not None:
        keys = [token_keys(step_key, indices, sizes, side)
                for side, sizes in enumerate((source_sizes, target_sizes))]
    weight = None
    if shape is not None:
        if shape.packed:
            rows = packed_dummy_rows(shape.tokens, tuple(len(side) for side in positions),
                                     shape.width)
            placed = [_with_packed_dummy_tokens(side, shape, rows) for side in positions]
        else:
            placed = [_with_dummy_tokens(side, shape, len(indices)) for side in positions]
        positions = [side for side, _ in placed]
        keys = [None if side is None else _placed(side, is_real)
                for side, (_, is_real) in zip(keys, placed, strict=True)]
        weight = torch.from_numpy(placed[1][1].astype(np.float32))
    noise = [None if side is None else torch.from_numpy(side) for side in keys]
    batch = Batch(*tensors, *(torch.from_numpy(side) for side in positions), *noise, weight)
    # pinned, .to(cuda, non_blocking=True) overlaps the copy with compute
    return batch.map(torch.Tensor.pin_memory) if pin_memory else batch


def _with_dummy_tokens(real: np.ndarray, shape: PassShape,
                       pairs: int) -> tuple[np.ndarray, np.ndarray]:
    """A side's token positions in a bucketed pass, ascending: its pairs' (``real``) and as many
    dummy tokens as make ``shape.tokens``, in the last positions that are neither theirs nor a
    dummy row's first; and which of them are the pairs'."""
    free = np.ones(shape.rows * shape.width, dtype=bool)
    free[real] = False
    free[np.arange(pairs, shape.rows) * shape.width] = False
    candidates = np.flatnonzero(free)
    positions = np.concatenate([real, candidates[len(candidates) - (shape.tokens - len(real)):]])
    order = np.argsort(positions, kind="stable")
    return positions[order], order < len(real)


def _with_packed_dummy_tokens(real: np.ndarray, shape: PassShape,
                              rows: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_with_dummy_tokens` for a packed pass: the dummy tokens spread evenly over the
    pass's last ``rows`` rows (:func:`packed_dummy_rows`, the same rows on both sides), from
    each row's second position on; so each of those rows holds dummy tokens on both sides
    (:func:`pass_shape` gives each side enough), and every other row a pair's tokens or none."""
    if rows == 0:  # the pairs fill the pass on both sides
        return real, np.ones(len(real), dtype=bool)
    dummies = shape.tokens - len(real)
    per_row = np.full(rows, dummies // rows) + (np.arange(rows) < dummies % rows)
    first = (shape.rows - rows) * shape.width + 1  # the second position of the first such row
    starts = first + np.arange(rows) * shape.width
    positions = np.repeat(starts, per_row) + (np.arange(dummies) - np.repeat(
        np.cumsum(per_row) - per_row, per_row))
    return np.concatenate([real, positions]), np.arange(shape.tokens) < len(real)


def _placed(values: np.ndarray, is_real: np.ndarray) -> np.ndarray:
    """``values`` (one per real token) at the real tokens of a bucketed pass, 0 at dummy ones."""
    placed = np.zeros(len(is_real), dtype=values.dtype)
    placed[is_real] = values
    return placed


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


def _token_positions(sizes: np.ndarray, width: int) -> np.ndarray:
    """Flat positions ``row * width + t`` of the first ``sizes[row]`` positions of each row."""
    starts = np.repeat(np.arange(len(sizes)) * width - np.concatenate([[0], np.cumsum(sizes)[:-1]]),
                       sizes)
    return starts + np.arange(int(sizes.sum()))


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
