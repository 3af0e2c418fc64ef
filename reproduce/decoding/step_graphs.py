"""A step of beam search run eagerly, or replayed as a CUDA graph.

On a GPU a step of a base model is a few hundred small kernels (the decoder's ~20 a layer, the
search's topk, gathers and reorders), and their launches, not their work, set the pace. Recorded
once as a CUDA graph, a step is one launch. A graph replays fixed shapes at fixed addresses, so a
step it records reads and updates its state in place: the decoder's keys and values in buffers of
the batch's most positions (:class:`reproduce.model.key_values.StaticKeyValues`), the search's
hypotheses in token buffers as wide, and the step counted on the device. A graph holds for as
long as the step's shape does (the batch's rows, and the window of positions its attention
reads): at a new shape the step runs eagerly once (which also initialises whatever a first call
on new rows does), and the one after records a new graph.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import torch


class StepGraphs:
    """Runs a step (a function that reads and updates tensors in place) eagerly, or, with
    ``capture`` and on CUDA, records it once per shape and replays that."""

    def __init__(self, capture: bool):
        self.capture = capture
        self.graph: torch.cuda.CUDAGraph | None = None
        self.shape: Hashable = None  # the shape of the last step (its graph's, once recorded)
        self.pool: tuple[int, int] | None = None  # the graphs' memory: one replays at a time
        self.stream: torch.cuda.Stream | None = None  # where they are recorded
        # Every graph recorded into the pool, kept while the search lasts: the allocator frees a
        # pool when its last graph goes, and refuses a later recording into a freed pool.
        self.recorded: list[torch.cuda.CUDAGraph] = []

    def __call__(self, step: Callable[[], None], shape: Hashable, device: torch.device) -> None:
        """Runs ``step``, whose tensors' shapes ``shape`` names (anything that compares equal
        exactly when they are the same)."""
        if not (self.capture and device.type == "cuda") or shape != self.shape:
            self.graph, self.shape = None, shape
            step()
            return
        if self.graph is None:
            self._record(step)  # records without running it
        self.graph.replay()

    def _record(self, step: Callable[[], None]) -> None:
        """Records on a side stream (the default stream cannot record); not through
        ``torch.cuda.graph``, which synchronises and empties the allocator's cache at every
        recording, where a search records one graph per set of rows."""
        self.graph = torch.cuda.CUDAGraph()
        self.recorded.append(self.graph)
        if self.pool is None:
            self.pool, self.stream = torch.cuda.graph_pool_handle(), torch.cuda.Stream()
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            self.graph.capture_begin(pool=self.pool)
            try:
                step()
            finally:
                self.graph.capture_end()
        torch.cuda.current_stream().wait_stream(self.stream)
