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
  same memory at every step, as a replayed CUDA graph needs.
"""

from __future__ import annotations

import torch
from torch import Tensor


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


class StaticKeyValues(CachedTensors):
    """A self-attention's keys and values in ``[B, h, capacity, d]`` buffers; the step's one new
    position is written at ``position`` (a 0-d tensor on the device, which the decoder advances).
    Positions after it hold stale values, which the causal mask hides."""

    def __init__(self, capacity: int, position: Tensor):
        super().__init__()
        self.capacity, self.position = capacity, position

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        if "keys" not in self:
            rows, heads, _, _ = k.shape
            self["keys"] = k.new_zeros(rows, heads, self.capacity, k.size(3))
            self["values"] = v.new_zeros(rows, heads, self.capacity, v.size(3))
        self["keys"].index_copy_(2, self.position.view(1), k)  # k [B, h, 1, d]
        self["values"].index_copy_(2, self.position.view(1), v)
        return self["keys"], self["values"], self.position

    def reorder(self, indices: Tensor) -> None:
        """Keep rows ``indices``: in place while the row count stays (a captured step reads these
        buffers), in new buffers when sentences leave."""
        if indices.numel() != self["keys"].size(0):
            super().reorder(indices)
            return
        for tensor in self.values():
            tensor.copy_(tensor.index_select(0, indices))
