"""The tensors incremental decoding keeps between steps, by kind, each knowing how beam search
reorders its rows.

* :class:`CachedTensors`: per-hypothesis state (the recurrent decoder's LSTM states);
* :class:`SourceState`: computed from the source sentence alone (the encoder-decoder
  attention's keys and values), held once a sentence for all its hypotheses, so that a reorder
  of hypotheses within their sentences leaves it as it is;
* :class:`KeyValues`: a self-attention's keys and values of the decoded prefix, ``[B, h, T, d]``,
  grown by one position a step;
* :class:`StaticKeyValues`: the same in buffers of a fixed number of positions, written at a
  position held on the device, so that a decoder step has the same shapes and reads and writes the
  same memory at every step, as a replayed CUDA graph needs. A step reads and reorders only a
  window of the first positions (:class:`StaticPositions`), which covers those written: in a
  buffer sized for the batch's longest output, the rest is work for nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

READ_WINDOW_STRIDE = 32  # a static window grows by this many positions (a new graph each time)


class CachedTensors(dict[str, Tensor]):
    """Named tensors whose first dimension is the hypotheses' rows."""

    def reorder(self, indices: Tensor) -> None:
        """Keep rows ``indices`` (new tensors)."""
        for name, tensor in self.items():
            self[name] = tensor.index_select(0, indices)


class SourceState(CachedTensors):
    """Tensors computed from the source alone, shared by a sentence's hypotheses."""


class KeyValues(CachedTensors):
    """A self-attention's keys and values ``[B, h, T, d]`` of the ``T`` positions decoded."""

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, int]:
        """Keys and values with the new positions' ``k``, ``v`` ``[B, h, new, d]`` appended, and
        the position of the first new one."""
        offset = self["keys"].size(2) if "keys" in self else 0
        if offset:
            k, v = torch.cat([self["keys"], k], dim=2), torch.cat([self["values"], v], dim=2)
        self["keys"], self["values"] = k, v
        return k, v, offset


@dataclass
class StaticPositions:
    """Where a decoder's static buffers stand, shared by its self-attentions: ``capacity``
    positions each, ``written`` so far, and the ``window`` of first positions that a step reads
    (all of them unless narrowed).

    ``written`` is a 0-d long tensor on the device, which the decoder advances: a replayed step
    advances it, where a count on the host would replay its recorded value. ``window`` is an int
    on the host, part of a step's shapes: a caller that counts its steps narrows it before each
    (:meth:`reach`), so that one graph replays for many steps."""

    capacity: int
    written: Tensor
    window: int | None = None  # None: the capacity

    def __post_init__(self):
        if self.window is None:
            self.window = self.capacity

    def reach(self, positions: int) -> int:
        """Makes the window the first ``positions`` (at least those written once the next step
        has written its own), rounded up to a multiple of :data:`READ_WINDOW_STRIDE`, at most
        the capacity; returns it."""
        self.window = min(self.capacity, -(-positions // READ_WINDOW_STRIDE) * READ_WINDOW_STRIDE)
        return self.window


class StaticKeyValues(CachedTensors):
    """A self-attention's keys and values in ``[B, h, capacity, d]`` buffers; the step's one new
    position is written at ``positions.written``, and the step reads the window's positions.
    Positions in the window after the written ones hold stale values, which the causal mask
    hides."""

    def __init__(self, positions: StaticPositions):
        super().__init__()
        self.positions = positions

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The window's keys and values ``[B, h, window, d]``, the step's ``k``, ``v``
        ``[B, h, 1, d]`` written in them, and the position they are written at."""
        written, window = self.positions.written, self.positions.window
        if "keys" not in self:
            rows, heads, _, _ = k.shape
            self["keys"] = k.new_zeros(rows, heads, self.positions.capacity, k.size(3))
            self["values"] = v.new_zeros(rows, heads, self.positions.capacity, v.size(3))
        self["keys"].index_copy_(2, written.view(1), k)
        self["values"].index_copy_(2, written.view(1), v)
        return self["keys"][:, :, :window], self["values"][:, :, :window], written

    def reorder(self, indices: Tensor) -> None:
        """Keep rows ``indices``: in place while the row count stays (a captured step reads these
        buffers), and there only the window, which holds every position written; in new buffers
        when sentences leave."""
        if indices.numel() != self["keys"].size(0):
            super().reorder(indices)
            return
        for tensor in self.values():
            window = tensor[:, :, : self.positions.window]
            window.copy_(window.index_select(0, indices))
