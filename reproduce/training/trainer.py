"""The training loop of one variant (section 5): Adam(0.9, 0.98, 1e-9) with eq. 3's learning
rate, label smoothing, optimizer steps of about ``tokens_per_step`` tokens per side over all ranks.

Each step's gradient is the sum of per-token losses over the step's micro-batches divided by the
number of target tokens in the step, whatever the number of ranks: every rank back-propagates its
share's summed losses divided by that global count, and DistributedDataParallel sums the
gradients across ranks in buckets while the backward pass runs (it averages, so each rank's loss
is scaled by the world size; powers of two make that exact). A rank fuses its share of a step
into as few forward/backward passes as ``max_tokens_per_device`` allows
(:func:`reproduce.training.batching.device_passes`): dropout noise is a function of (seed, step,
pair, side, position, site, feature) (:mod:`reproduce.model.dropout`), so neither the number of
ranks nor the cut into passes changes the model, and a resumed run replays exactly the noise an
uninterrupted run would have drawn. Nothing in a step waits for the device: shapes come from
the host's collate, never from the data on the device, and the step's totals (loss, padding,
passes, a non-finite gradient) are read once the next step is queued (:class:`QueuedStep`), or
at once where the step logs, evaluates, saves or ends the run; where there are several ranks, a
stop request travels with them (:meth:`Trainer._stopping`). ``training.pass_buckets`` gives
the passes few shapes (:func:`reproduce.training.batching.pass_shape`). Every step's exact FLOPs
(:mod:`reproduce.model.flops`) are counted from its pairs' lengths, for throughput and MFU.
A pass itself (forward, loss and its gradients; eager or compiled, attention packed or padded)
is :class:`reproduce.training.pass_runner.PassRunner`'s.

The loop is handed its parts built, a resumed run's state loaded
(:mod:`reproduce.training.assembly`, which reads the corpora and the checkpoint): raising
``training.steps`` continues a run, changing anything else is refused. A stop request
(:class:`reproduce.training.interruption.Interruption`: SIGTERM, SIGHUP, Slurm's pre-timeout
signal, the parent's death) ends the run after the current step (with several ranks, after the
step that follows the one whose totals bring it, two later at most), with a checkpoint of that
step; off the save grid, that checkpoint serves resuming only
(:mod:`reproduce.training.checkpoints`), so the checkpoints averaged, listed in
``train/checkpoints.json`` at the end, are those of an uninterrupted run.

``training.precision`` picks the arithmetic (:mod:`reproduce.training.precision`: fp32, bf16,
fp16 with dynamic loss scaling, or auto); a run keeps the precision it started in, which its
checkpoints record with the loss scaler's state, so that a resumed fp16 run goes on exactly. An
fp16 update that overflows is skipped and not counted as a step (the scaler tells the host at
once: fp16 steps wait for the device). In fp32 and bf16 an update whose gradient is not finite is
never applied (the optimizer skips it, and every later one, on the device), and that step, or a
step whose loss is not finite, stops the run (:class:`NonFiniteLossError`) before anything of it
is saved: a step that saves reads its own totals first.
``training.clip_norm`` clips the true (unscaled) gradient of a step. Every ``log_every_steps``
steps the log says how far the run is, how fast and how long it has left
(:mod:`reproduce.training.progress`). What the run writes besides checkpoints, and hands to
MLflow, is :mod:`reproduce.training.run_records`'s.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from tqdm import tqdm

from reproduce.config import ResolvedVariant
from reproduce.data.encoded import EncodedCorpus
from reproduce.errors import ReproduceError
from reproduce.model.dropout import step_key
from reproduce.model.encoder_decoder import TranslationModel
from reproduce.model.flops import model_flops
from reproduce.provenance import ModelIdentity
from reproduce.training import distributed, rng_state
from reproduce.training.batching import (MicroBatchStream, PassShape, StreamPosition, collate,
                                         device_passes, pass_shape)
from reproduce.training.checkpoints import CheckpointSchedule, check_room
from reproduce.training.evaluation import corpus_negative_log_likelihood
from reproduce.training.interruption import Interruption
from reproduce.training.optimizer import learning_rate, set_learning_rate
from reproduce.training.pass_runner import PassRunner
from reproduce.training.precision import OptimizerUpdate
from reproduce.training.progress import ThroughputWindow, progress_line
from reproduce.training.run_records import RunRecords, RunTotals, StepOutcome, peak_flops_of

log = logging.getLogger(__name__)


class NonFiniteLossError(ReproduceError, FloatingPointError):
    """An applied step's loss is inf or nan: training diverged (a learning rate too high).

    Its update has already made the weights non-finite, so every later step would be nan too:
    the run stops at once, before that step is checkpointed, rather than train nans to the end.
    The check reads the loss that each step brings to the host anyway (no synchronisation of
    its own). In fp16 a non-finite loss makes the scaled gradient non-finite too, so the loss
    scaler skips the update, as fairseq's does, and the run stops when the scale falls below
    its minimum (:class:`reproduce.training.precision.LossScaleError`, fairseq's
    FloatingPointError "Minimum loss scale reached"): skipped updates are the scaler's to
    judge, applied ones this check's, in every precision.
    """


class Trainer:
    """The loop over one run's steps, handed its parts built
    (:func:`reproduce.training.assembly.build_trainer`): it reads no file until :meth:`run`."""

    def __init__(self, variant: ResolvedVariant, dataset: str, identity: ModelIdentity,
                 precision: str, *, stream: MicroBatchStream, dev_corpus: EncodedCorpus,
                 model: TranslationModel, passes: PassRunner, optimizer_update: OptimizerUpdate,
                 schedule: CheckpointSchedule, records: RunRecords, interruption: Interruption):
        """``identity``: what the checkpoints record of the model (settings, pieces);
        ``precision``: the run's arithmetic, resolved; ``passes`` computes a pass of ``model``."""
        self.variant, self.dataset, self.identity = variant, dataset, identity
        self.config, self.training, self.precision = variant.model, variant.training, precision
        self.stream, self.train_corpus, self.dev_corpus = stream, stream.corpus, dev_corpus
        self.model, self.passes = model, passes
        model.train()  # dropout on; evaluating puts it back as it found it
        self.optimizer_update, self.optimizer = optimizer_update, optimizer_update.optimizer
        self.schedule, self.records, self.interruption = schedule, records, interruption
        self.rank, self.world = distributed.rank(), distributed.world_size()
        self.device = distributed.device()
        self.flops = model_flops(self.config, self.train_corpus.vocab_size)
        # Batches of a step are assembled in a background thread while the device computes.
        self.loader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="collate")
        self.step = 0
        self.stop_after: int | None = None  # with several ranks: the step they all stop after
        self.totals = RunTotals()

    # -- state ----------------------------------------------------------------------------------
    def state(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "precision": self.precision,
            "loss_scaler": self.optimizer_update.state_dict(),
            "step": self.step,
            "stream_position": vars(self.stream.position).copy(),
            **self.totals.state(),
            "rng": rng_state.capture(),
            **self.identity.record(),
        }

    def load_state(self, state: dict) -> None:
        """Go on from a checkpoint's :meth:`state`, loaded on the CPU (the RNG states must stay
        CPU tensors): parameters and moments are copied onto the model's device."""
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.optimizer_update.load_state_dict(state["loss_scaler"])
        self.step = state["step"]
        self.stream.seek(StreamPosition(**state["stream_position"]))
        self.totals.load(state)
        rng_state.restore(state["rng"])

    # -- loop -----------------------------------------------------------------------------------
    def _step_sizes(self, group: list) -> tuple[int, int, int]:
        """Real source and target tokens (EOS included) and training FLOPs of a whole step."""
        indices = np.concatenate(group)
        source = self.train_corpus.source_lengths[indices] + 1
        target = self.train_corpus.target_lengths[indices] + 1
        return int(source.sum()), int(target.sum()), self.flops.training(source, target)

    def _train_step(self) -> "QueuedStep":
        """One optimizer step on the stream's next micro-batches, queued on the device without
        waiting for it (skipped on an fp16 overflow: then ``self.step`` stays, and the next
        attempt takes the next micro-batches). Its totals come later: :meth:`QueuedStep.outcome`.
        """
        group = self.stream.next_step()
        source_tokens, target_tokens, flops = self._step_sizes(group)
        attempted = self.step + 1
        batches = self._collate_passes(group, step_key(self.training.seed, attempted))
        self._fresh_gradients(len(batches))
        # loss, padded positions, pass tokens, passes, ranks asked to stop: summed on the
        # device (and over the ranks), read after the step
        totals = torch.zeros(5, dtype=torch.float64, device=self.device)
        factor = self.world / target_tokens  # each pass's loss: a share of the step's mean
        loss_gradient = self.optimizer_update.loss_gradient(factor, self.device)
        padded = tokens = 0  # the passes' sizes, known on the host: added to totals once
        for number, pending in enumerate(batches):
            batch = pending.result().to(self.device)
            padded += batch.source.numel() + batch.target_output.numel()
            tokens += batch.source_index.numel() + batch.target_index.numel()
            last = number == len(batches) - 1  # gradients are all-reduced during its backward
            with self.passes.gradients_held(last):
                loss = self.passes.loss(batch, loss_gradient)
                self.optimizer_update.backward(loss * factor)  # x S in fp16
            totals[0] += loss.detach()
        totals[1] += padded
        totals[2] += tokens
        totals[3] += len(batches)
        if self.world > 1 and self.interruption.pending() is not None:  # see _stopping
            totals[4] += 1
        distributed.all_reduce_sum(totals)
        set_learning_rate(self.optimizer, learning_rate(
            attempted, self.config.d_model, self.training.warmup_steps,
            self.training.lr_scale))  # eq. 3
        update = self.optimizer_update.apply()
        if update.applied:  # a non-finite gradient's update is skipped on the device, and stops
            self.step = attempted  # the run when its totals are read (run)
        readings = torch.cat([totals, update.not_finite.to(totals.dtype).view(1)])
        return QueuedStep(attempted, update.applied, source_tokens, target_tokens, flops,
                          self.world, readings, update.norm)

    def _fresh_gradients(self, passes: int) -> None:
        """Gradients set to none before a step of ``passes`` passes, so that its first pass's
        backward hands its gradients over as they are (no kernel a parameter to add them to
        zeros) and later passes add to them. Not where several captured passes replay: a
        replay's outputs live in the graphs' memory, which the next replay overwrites (the
        gradients handed over by the last step's replay too), so the passes add into zeroed
        buffers of the trainer's own."""
        if not (self.passes.graphs and passes > 1):
            self.optimizer.zero_grad(set_to_none=True)
            return
        for group in self.optimizer.param_groups:
            for parameter in group["params"]:
                parameter.grad = torch.zeros_like(parameter)

    def _collate_passes(self, group: list[np.ndarray], key: int) -> list:
        """This rank's micro-batches of the step, fused into passes and collated in the
        background (while the device computes), with the tokens' dropout keys of step ``key``;
        with ``training.pass_buckets``, each in its bucket's shape."""
        t = self.training
        share = np.concatenate(group[self.rank::self.world])
        pin = self.device.type == "cuda"
        passes = device_passes(share, self.train_corpus, t.max_tokens_per_device)
        return [self.loader.submit(collate, self.train_corpus, indices, pin, t.pad_to_multiple,
                                   key, self._bucket(indices)) for indices in passes]

    def _bucket(self, indices: np.ndarray) -> PassShape | None:
        """The shape of the pass of pairs ``indices`` under ``training.pass_buckets``, or None."""
        if not self.training.pass_buckets:
            return None
        corpus = self.train_corpus
        packed_width = self.training.max_source_tokens if self.passes.packed else None
        return pass_shape(corpus.source_lengths[indices] + 1, corpus.target_lengths[indices] + 1,
                          self.training.max_tokens_per_device, self.training.pad_to_multiple,
                          packed_width)

    def _evaluate(self) -> None:
        total, tokens = corpus_negative_log_likelihood(
            self.model, self.dev_corpus, self.training.max_tokens_per_device, self.device)
        loss = self.totals.last_losses["dev"] = total / tokens
        self.records.record(self.step, {"dev_loss": loss, "dev_perplexity": math.exp(loss)})
        if self.rank == 0:
            log.info("step %d dev loss %.4f ppl %.3f", self.step, loss, math.exp(loss))

    def run(self, stop_after_steps: int | None = None) -> dict | None:
        """Train to ``training.steps``, or stop early, checkpointed, after ``stop_after_steps`` or
        at the end of the step during which a stop was requested (then ``None`` is returned)."""
        t = self.training
        if self.rank == 0:  # the run keeps keep_last checkpoints, writes one more, and final.pt
            check_room(self.schedule.directory, checkpoint_bytes(self.model),
                       t.checkpoints.keep_last + 2)
        last_step = t.steps if stop_after_steps is None else min(t.steps, stop_after_steps)
        # tqdm's rate and ETA count the steps since ``initial``: those of this segment alone.
        progress = tqdm(total=t.steps, initial=self.step, unit="step", desc=self.variant.name,
                        disable=self.rank != 0 or not sys.stderr.isatty())
        window = ThroughputWindow()
        queued = None  # the step before, its totals not read yet
        while self.step < last_step:
            started = time.monotonic()
            step = self._train_step()
            if queued is not None:  # while this step's work is queued: the device stays busy
                self._account(queued, window, progress)
                queued = None
            self.totals.wall_seconds += time.monotonic() - started
            if not step.applied:  # an fp16 overflow: not a step
                self.totals.skipped_steps += 1
                if self.rank == 0:
                    log.info("step %d: the fp16 gradient overflowed, update skipped; loss scale "
                             "now %g", self.step + 1, self.optimizer_update.loss_scale)
                continue
            logs = self.step % t.log_every_steps == 0 or self.step == t.steps
            evaluates = self.step % t.eval_every_steps == 0 or self.step == t.steps
            if logs or evaluates:
                outcome = self._account(step, window, progress)
                if logs:
                    self._log_progress(outcome, window, progress)
                    window = ThroughputWindow()
                if evaluates:
                    self._evaluate()
            stopping = self._stopping()
            saves = self.rank == 0 and (self.schedule.due(self.step) or self.step == last_step
                                        or stopping)
            if not (logs or evaluates):
                if saves or stopping or self.step == last_step:
                    self._account(step, window, progress)
                else:
                    queued = step  # read once the next step is queued
            if saves:
                self.schedule.save(self.state(), self.step)
            if stopping:
                log.warning("stopped after step %d (%s); checkpoint saved", self.step,
                            self.interruption.reason)
                break
        progress.close()
        if self.step < t.steps or self.rank != 0:
            return None
        return self._finish()

    def _stopping(self) -> bool:
        """Whether the run stops after this step. One rank stops as soon as it is asked. Ranks
        must stop at the same step, and asking each other at every step would make every step
        wait for the device: a rank's request goes into the totals of the next step it queues,
        summed over the ranks with them, and every rank stops after the step that follows the
        first step whose totals say so (``stop_after``), by when every rank has read them
        (ranks read a step's totals at once or a step late, rank 0 at its timed saves too)."""
        if self.world == 1:
            return self.interruption.pending() is not None
        if self.stop_after is None or self.step < self.stop_after:
            return False
        self.interruption.request("another rank was asked to stop")
        return True

    def _account(self, step: "QueuedStep", window: ThroughputWindow,
                 progress: tqdm) -> StepOutcome:
        """Read an applied step's totals and count them; stop a diverged run
        (:func:`check_finite`) with ``self.step`` the last step whose update was applied: a
        non-finite gradient's update and every later one were skipped on the device
        (:class:`reproduce.training.precision.OptimizerUpdate`)."""
        outcome = step.outcome()
        if outcome.stop_asked and self.stop_after is None:
            self.stop_after = step.attempted + 1
        if not outcome.gradient_finite:
            self.step = step.attempted - 1
        check_finite(outcome, step.attempted, self.precision)
        self.totals.add(outcome)
        window.add(outcome.source_tokens, outcome.target_tokens, outcome.flops)
        progress.update(1)
        return outcome

    def _log_progress(self, outcome: StepOutcome, window: ThroughputWindow, progress: tqdm) -> None:
        """Record the step's metrics; log a progress line where no progress bar shows."""
        rates = window.rates(peak_flops_of(self.device, self.world))
        metrics = {"train_loss": outcome.loss, "lr": self.optimizer.param_groups[0]["lr"],
                   "grad_norm": outcome.grad_norm.item(), "passes_per_step": outcome.passes,
                   **rates}
        if self.precision == "fp16":
            metrics["loss_scale"] = self.optimizer_update.loss_scale
        self.records.record(self.step, metrics)
        progress.set_postfix(loss=f"{outcome.loss:.3f}")
        if progress.disable and self.rank == 0:
            log.info("%s passes/step %.3g", progress_line(
                self.step, self.training.steps, outcome.loss, metrics["lr"], rates,
                self.totals.wall_seconds), outcome.passes)

    def _finish(self) -> dict:
        final = {"model": self.model.state_dict(), "step": self.step, **self.identity.record()}
        run = {"dataset": self.dataset, "variant": self.variant.name,
               "parameters": self.model.num_parameters(),
               "micro_batches_per_step": self.training.micro_batches_per_step,
               "compiled": self.passes.compiled, "precision": self.precision}
        return self.records.finish(final, self.schedule, run, self.totals, self.device,
                                   self.world)


def check_finite(outcome: StepOutcome, attempted: int, precision: str) -> None:
    """Stop a diverged run: step ``attempted``'s loss or gradient is inf or nan."""
    if outcome.gradient_finite and math.isfinite(outcome.loss):
        return
    what = (f"the training loss is {outcome.loss}" if not math.isfinite(outcome.loss)
            else f"the gradient is not finite (norm {outcome.grad_norm.item()})")
    raise NonFiniteLossError(
        f"step {attempted}: {what} ({precision}): training diverged, and this step was not "
        f"saved; lower training.lr_scale or raise training.warmup_steps, then start over with "
        f"--restart")


class QueuedStep:
    """An optimizer step whose work is queued on the device: what the host knows of it, and its
    totals (summed loss, padded positions, pass tokens, passes, ranks asked to stop, a non-finite
    gradient) on their way.

    On a GPU the totals are copied into pinned host memory behind the step's kernels, and an
    event marks the copy's end: reading them waits for that step alone, not for the next one,
    whose kernels the trainer queues first. On a CPU they are ready when the step returns."""

    def __init__(self, attempted: int, applied: bool, source_tokens: int, target_tokens: int,
                 flops: int, world: int, readings: torch.Tensor, grad_norm: torch.Tensor):
        self.attempted, self.applied, self.world = attempted, applied, world
        self.source_tokens, self.target_tokens, self.flops = source_tokens, target_tokens, flops
        self.grad_norm, self.readings, self.ready = grad_norm, readings, None
        if readings.device.type == "cuda":
            self.readings = torch.empty(readings.shape, dtype=readings.dtype, pin_memory=True)
            self.readings.copy_(readings, non_blocking=True)
            self.ready = torch.cuda.Event()
            self.ready.record()

    def outcome(self) -> StepOutcome:
        if self.ready is not None:
            self.ready.synchronize()
        loss_total, padded, tokens, passes, asked, not_finite = self.readings.tolist()
        return StepOutcome(self.applied, loss_total / self.target_tokens, self.source_tokens,
                           self.target_tokens, self.flops, int(padded), int(tokens),
                           passes / self.world, self.grad_norm, not not_finite, asked > 0)


def checkpoint_bytes(model: torch.nn.Module) -> int:
    """About the size of one checkpoint: the parameters and Adam's two moments."""
    return 3 * sum(p.numel() * p.element_size() for p in model.parameters()) + 2**20
