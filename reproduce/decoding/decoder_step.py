"""One decoder step of beam search, ``model.decode`` of one new position per hypothesis: run
eagerly, or replayed as a CUDA graph.

On a GPU a step of a base model is ~130 small kernels whose launches, not their work, set the
pace. Recorded once as a CUDA graph, a step is one launch. A graph replays fixed shapes at fixed
addresses, so the captured step runs on a static cache (:class:`StaticKeyValues`: keys and values
in buffers of the batch's most positions, the next position read from the device) and reads its
input tokens from one tensor. A graph holds for as long as the batch's rows do: when sentences
leave, the next step runs eagerly on the new rows (which also warms up whatever a first call
initialises), and the one after records a new graph. Without CUDA, the static cache is used
eagerly: the same shapes and the same translations, for testing the path on a CPU (slower than
the growing cache, since attention reads every buffered position).
"""

from __future__ import annotations

import torch
from torch import Tensor

from reproduce.model.encoder_decoder import DecoderCache, EncodedSource, TranslationModel


class DecoderStep:
    """The logits ``[rows, V]`` of the next token after ``tokens`` ``[rows]``."""

    def __init__(self, model: TranslationModel, capture: bool):
        self.model, self.capture = model, capture
        self.graph: torch.cuda.CUDAGraph | None = None
        self.rows = -1  # the row count of the last step (a graph's, once recorded)
        self.tokens: Tensor | None = None  # the graph's input
        self.logits: Tensor | None = None  # the graph's output
        self.pool: tuple[int, int] | None = None  # the graphs' memory
        self.stream: torch.cuda.Stream | None = None  # where they are recorded

    def __call__(self, tokens: Tensor, encoded: EncodedSource, cache: DecoderCache) -> Tensor:
        rows = tokens.size(0)
        if not (self.capture and tokens.is_cuda) or rows != self.rows:
            self.graph, self.rows = None, rows  # new rows: eagerly, which warms them up
            return self._decode(tokens, encoded, cache)
        if self.graph is None:
            self._record(tokens, encoded, cache)  # records without running the step
        self.tokens.copy_(tokens)
        self.graph.replay()
        cache.length += 1  # the host's count; the device's position advanced in the graph
        return self.logits

    def _decode(self, tokens: Tensor, encoded: EncodedSource, cache: DecoderCache) -> Tensor:
        return self.model.decode(tokens.unsqueeze(1), encoded, cache)[:, -1]

    def _record(self, tokens: Tensor, encoded: EncodedSource, cache: DecoderCache) -> None:
        """Records the step without running it, on a side stream (the default stream cannot
        record). Not through ``torch.cuda.graph``, which synchronises and empties the allocator's
        cache at every recording, and a search records one graph per set of rows."""
        self.tokens, self.graph = tokens.clone(), torch.cuda.CUDAGraph()
        if self.pool is None:  # one memory pool for the search's graphs: one replays at a time
            self.pool, self.stream = torch.cuda.graph_pool_handle(), torch.cuda.Stream()
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            self.graph.capture_begin(pool=self.pool)
            try:
                self.logits = self._decode(self.tokens, encoded, cache)
            finally:
                self.graph.capture_end()
        torch.cuda.current_stream().wait_stream(self.stream)
        cache.length -= 1  # recording ran the host's side of the step once; replays count
