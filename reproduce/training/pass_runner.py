"""How a training pass is computed: the teacher-forced forward pass (section 3) and the fused
projection and label-smoothed loss (sections 3.4 and 5.4), whose gradients come with it.

The runner is built from the settings once: attention over packed tokens or over the padded
batch (``training.attention``), DistributedDataParallel where there are several ranks,
``torch.compile`` where ``training.compile`` says, and CUDA graphs of each pass shape where
``training.cuda_graphs`` does, the loss then inside the compiled call so that a graph holds it
too; the trainer hands it one collated pass at a time. A compiled pass takes its sizes as
symbols, one graph for every size, except under FlexAttention: there it is compiled once for
each of the few bucket shapes (FlexAttention under symbolic sizes computed wrong attention on
torch 2.6, tests/test_packed_attention.py). It holds no
state of the run: checkpoints save the plain model it wraps.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch

from reproduce.config import TrainingConfig
from reproduce.model.encoder_decoder import TranslationModel
from reproduce.training import distributed
from reproduce.training.batching import Batch
from reproduce.training.precision import autocast_dtype
from reproduce.training.teacher_forcing import TeacherForcedLoss, mark_pass_sizes_dynamic


def packed_kernel(attention: str, on_gpu: bool, pass_buckets: bool) -> str | None:
    """The kernel attention over a pass's packed tokens asks for (``training.attention``), or
    None for the padded batch."""
    if attention == "auto":
        return "varlen" if on_gpu and not pass_buckets else None
    return None if attention == "padded" else attention


class PassRunner:
    """``loss(batch, loss_gradient)``: the summed label-smoothed loss of one pass's target tokens
    and, for the gradient its backward will bring (``loss_gradient``), its gradients."""

    def __init__(self, model: TranslationModel, training: TrainingConfig, label_smoothing: float,
                 device: torch.device, precision: str):
        self.autocast = autocast_dtype(precision)
        self.device_type = device.type
        on_gpu = device.type == "cuda"
        self.packed = packed_kernel(training.attention, on_gpu, training.pass_buckets)
        self.compiled = training.compile is True or (training.compile == "auto" and on_gpu)
        self.loss_inside = training.cuda_graphs  # the loss joins the compiled (captured) call
        self.teacher_forced = TeacherForcedLoss(model, label_smoothing, self.packed,
                                                self.compiled)
        teacher_forced = self.teacher_forced if self.loss_inside else self.teacher_forced.states
        self.parallel = distributed.data_parallel(teacher_forced)
        wrapped = self.parallel or teacher_forced
        self.graphs = self.compiled and training.cuda_graphs and on_gpu
        mode = "reduce-overhead" if self.graphs else None  # a CUDA graph per pass shape
        self.symbolic_sizes = self.packed != "flex"
        self.forward = (torch.compile(wrapped, mode=mode, dynamic=None if self.symbolic_sizes
                                      else False) if self.compiled else wrapped)

    def gradients_held(self, last: bool) -> AbstractContextManager:
        """Where several ranks run: a pass before the step's last keeps its gradients on this
        rank (DDP's ``no_sync``); the last one's are all-reduced during its backward."""
        return nullcontext() if last or self.parallel is None else self.parallel.no_sync()

    def loss(self, batch: Batch, loss_gradient: torch.Tensor) -> torch.Tensor:
        inputs = (batch.source, batch.target_input, batch.source_index, batch.target_index,
                  batch.source_noise, batch.target_noise)
        if self.loss_inside:
            inputs += (batch.target_output, batch.target_weight)
        if self.compiled and self.symbolic_sizes:
            mark_pass_sizes_dynamic(*inputs)
        if self.graphs:  # the previous pass's graph outputs are no longer read
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast(self.device_type, dtype=self.autocast,
                            enabled=self.autocast is not None):
            if self.loss_inside:
                return self.forward(*inputs, loss_gradient)
            states = self.forward(*inputs)  # [N, d] at the target tokens
            return self.teacher_forced.loss_of(states, batch.target_output, batch.target_index,
                                               batch.target_weight, loss_gradient)
