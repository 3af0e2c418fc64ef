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
uninterrupted run would have drawn. Within a step nothing waits for the device but the reading
of its totals at the end (loss, padding, passes, a non-finite gradient): shapes come from the
host's collate, never from the data on the device. Every step's exact FLOPs
(:mod:`reproduce.model.flops`) are counted from its pairs' lengths, for throughput and MFU.
``training.compile: auto`` compiles the forward pass on GPUs and leaves CPUs eager.

A run resumes from its newest checkpoint that verifies (:mod:`reproduce.training.checkpoints`),
and only if that checkpoint was trained with the same settings
(:func:`reproduce.config.trained_settings`) and no further than ``training.steps``: raising
``steps`` continues a run, anything else is refused with the differing keys named. A stop request
(:class:`reproduce.training.interruption.Interruption`: SIGTERM, SIGHUP, Slurm's pre-timeout
signal, the parent's death) ends the run after the current step, with a checkpoint of that step;
off the save grid, that checkpoint serves resuming only (:mod:`reproduce.training.checkpoints`),
so the checkpoints averaged, listed in ``train/checkpoints.json`` at the end, are those of an
uninterrupted run.

``training.precision`` picks the arithmetic (:mod:`reproduce.training.precision`: fp32, bf16,
fp16 with dynamic loss scaling, or auto); a run keeps the precision it started in, which its
checkpoints record with the loss scaler's state, so that a resumed fp16 run goes on exactly. An
fp16 update that overflows is skipped and not counted as a step. In fp32 and bf16 an update whose
gradient is not finite is never applied (the optimizer skips it on the device), and that step, or
a step whose loss is not finite, stops the run (:class:`NonFiniteLossError`) before anything of
it is saved.
``training.clip_norm`` clips the true (unscaled) gradient of a step. Every ``log_every_steps``
steps the log says how far the run is, how fast and how long it has left
(:mod:`reproduce.training.progress`).
"""

from __future__ import annotations

import json
import logging
import math
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np
import torch
from tqdm import tqdm

from reproduce.config import ResolvedVariant, differing_settings, fingerprint, trained_settings
from reproduce.data.encoded import EncodedCorpus
from reproduce.errors import CheckpointError, ReproduceError
from reproduce.model.architectures import build_model
from reproduce.model.dropout import step_key
from reproduce.model.flops import model_flops, peak_flops
from reproduce.files import append_record, read_records, write_records, write_text_whole
from reproduce.training import distributed
from reproduce.training.batching import MicroBatchStream, StreamPosition, collate, device_passes
from reproduce.training.checkpoints import (CheckpointSchedule, check_room, latest_good_checkpoint,
                                            save_checkpoint, write_manifest)
from reproduce.training.interruption import Interruption
from reproduce.training.evaluation import corpus_negative_log_likelihood
from reproduce.training.precision import (OptimizerUpdate, autocast_dtype, can_compute_in,
                                          has_bf16_units, resolve_precision)
from reproduce.training.progress import ThroughputWindow, dev_curve, progress_line
from reproduce.training.projected_loss import projected_label_smoothed_loss
from reproduce.training.schedule import learning_rate
from reproduce.training.teacher_forcing import TeacherForcedStates

log = logging.getLogger(__name__)

MetricsCallback = Callable[[dict, int], None]


RESTART_HINT = ("to start over, run `reproduce train` again with --restart, which moves "
                "checkpoints/ and train/ into {folder}/replaced-<UTC time>/ (nothing is deleted)")


class SettingsMismatchError(CheckpointError):
    """A checkpoint was trained with other settings than the variant now has."""


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


class StepOutcome(NamedTuple):
    """What one attempted optimizer step did (``applied`` is False for a skipped fp16 update)."""

    applied: bool
    loss: float  # mean per target token
    source_tokens: int
    target_tokens: int
    flops: int
    padded_positions: int
    passes: float  # forward/backward passes per rank
    grad_norm: torch.Tensor  # of the true gradient before clipping
    gradient_finite: bool


class Trainer:
    def __init__(self, variant: ResolvedVariant, dataset: str, train_dir: Path, dev_dir: Path,
                 output_dir: Path, on_metrics: MetricsCallback | None = None,
                 settings: dict | None = None, interruption: Interruption | None = None):
        """``settings``: what the weights depend on (:func:`reproduce.config.trained_settings`;
        the launcher passes the experiment's data and BPE settings too)."""
        self.variant, self.dataset = variant, dataset
        self.settings = settings if settings is not None else trained_settings(variant)
        self.interruption = interruption or Interruption()
        self.config, self.training = variant.model, variant.training
        self.output_dir = output_dir
        self.checkpoint_dir = output_dir / "checkpoints"
        self.train_dir = output_dir / "train"
        self.on_metrics = on_metrics
        self.rank, self.world = distributed.rank(), distributed.world_size()
        self.device = distributed.device()
        self.train_corpus = EncodedCorpus.open(train_dir)
        self.dev_corpus = EncodedCorpus.open(dev_dir)
        self.vocab_size = self.train_corpus.vocab_size

        t = self.training  # launch checks that the ranks share a step evenly (_check_partition)
        checkpoint = self._checkpoint_to_resume()
        self.precision = self._choose_precision(checkpoint)
        torch.manual_seed(t.seed)  # identical initial weights on every rank
        self.model = build_model(self.config, self.vocab_size).to(self.device)
        self.flops = model_flops(self.config, self.vocab_size)
        # The wrappers share the model's parameters; checkpoints save the plain model. The
        # wrapped call gives decoder states; the projection is fused with the loss (_train_step).
        teacher_forced = TeacherForcedStates(self.model)
        self.parallel = distributed.data_parallel(teacher_forced)
        wrapped = self.parallel or teacher_forced
        self.compiled = t.compile is True or (t.compile == "auto" and self.device.type == "cuda")
        self.forward = torch.compile(wrapped) if self.compiled else wrapped
        # Batches of a step are assembled in a background thread while the device computes.
        self.loader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="collate")
        self.parameters = list(self.model.parameters())
        self.optimizer = torch.optim.Adam(self.parameters, lr=0.0,
                                          betas=(t.adam_beta1, t.adam_beta2), eps=t.adam_eps,
                                          fused=True)
        self.optimizer_update = OptimizerUpdate(self.optimizer, self.device.type,
                                                loss_scaling=self.precision == "fp16",
                                                clip_norm=t.clip_norm)
        self.stream = MicroBatchStream(self.train_corpus, t.tokens_per_step,
                                       t.micro_batches_per_step, t.max_source_tokens, t.seed)
        self.schedule = CheckpointSchedule(self.checkpoint_dir, t.checkpoints.every_steps,
                                           t.checkpoints.every_minutes, t.checkpoints.keep_last,
                                           final_step=t.steps)
        self.step = 0
        self.totals = {"source_tokens": 0, "target_tokens": 0, "wall_seconds": 0.0,
                       "training_flops": 0, "padded_positions": 0, "skipped_steps": 0,
                       "passes": 0.0}
        self.last_train_loss = float("nan")
        self.last_dev_loss = float("nan")
        if checkpoint is not None:
            self._resume(*checkpoint)
        if self.rank == 0:
            # The records after the checkpoint's step (all, without one) are trained again.
            self._truncate_metrics_after(self.step)
            log.info("training in %s (training.precision: %s) on %s", self.precision, t.precision,
                     self._device_name())

    # -- state ----------------------------------------------------------------------------------
    def state(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "precision": self.precision,
            "loss_scaler": self.optimizer_update.state_dict(),
            "step": self.step,
            "stream_position": vars(self.stream.position).copy(),
            "totals": dict(self.totals),
            "last_losses": {"train": self.last_train_loss, "dev": self.last_dev_loss},
            "rng": _rng_states(),
            **self._identity(),
        }

    def _identity(self) -> dict:
        """What rebuilds the model and tells which settings trained it."""
        return {"model_config": self.config.model_dump(mode="json"), "vocab_size": self.vocab_size,
                "settings": self.settings, "fingerprint": fingerprint(self.settings),
                "spm_model_sha256": self.train_corpus.meta.get("spm_model_sha256")}

    def _checkpoint_to_resume(self) -> tuple[Path, dict] | None:
        """The newest good checkpoint, checked to be of this run's settings; None: start afresh."""
        found = latest_good_checkpoint(self.checkpoint_dir)
        if found is not None:
            self._check_resumable(*found)
        return found

    def _choose_precision(self, checkpoint: tuple[Path, dict] | None) -> str:
        """``training.precision`` resolved for this device; a resumed run keeps the precision it
        started in (one that predates the record: as resolved now). ``auto`` resolves by the
        GPU, which a requeued job may find changed: a run that started in fp16 goes on in fp16
        on a bf16-capable GPU, one that started in bf16 is refused on a GPU without bf16 units
        rather than continued in fp16; so is a GPU run resumed on a CPU."""
        bf16_units = has_bf16_units(self.device)
        fresh = resolve_precision(self.training.precision, self.device.type, bf16_units)
        if fresh == "bf16" and not bf16_units and self.rank == 0:
            log.warning("training.precision: bf16 on %s, which has no bf16 units: torch emulates "
                        "it, slowly (auto would train in fp16)", self._device_name())
        started_in = None if checkpoint is None else checkpoint[1].get("precision")
        if started_in is None or started_in == fresh:
            return fresh
        path = checkpoint[0]
        if not can_compute_in(started_in, self.device.type, bf16_units):
            raise SettingsMismatchError(
                f"{path}: the run trains in {started_in} (training.precision: "
                f"{self.training.precision}) and {self._device_name()} cannot; resume it where "
                f"it can, so that one run does not mix two arithmetics, or "
                f"{RESTART_HINT.format(folder=self.output_dir)}")
        if self.rank == 0:
            log.warning("%s: the run goes on in %s, the precision it started in (training."
                        "precision: %s would pick %s here)", path, started_in,
                        self.training.precision, fresh)
        return started_in

    def _device_name(self) -> str:
        return torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "cpu"

    def _resume(self, path: Path, state: dict) -> None:
        # Loaded on the CPU (the RNG states must stay CPU tensors); parameters and optimizer
        # moments are copied onto the model's device by load_state_dict.
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.optimizer_update.load_state_dict(state.get("loss_scaler", {}))
        self.step = state["step"]
        self.stream.seek(StreamPosition(**state["stream_position"]))
        self.totals = self.totals | state["totals"]  # counters added since start at 0
        self.last_train_loss = state["last_losses"]["train"]
        self.last_dev_loss = state["last_losses"]["dev"]
        _restore_rng_states(state["rng"])
        log.info("resumed from %s at step %d", path, self.step)

    def _check_resumable(self, path: Path, state: dict) -> None:
        hint = RESTART_HINT.format(folder=self.output_dir)
        recorded = state.get("settings")
        if recorded is None:
            raise SettingsMismatchError(f"{path}: records no training settings (written by an "
                                        f"older version); {hint}")
        self._check_same_data(path, state, hint)
        if recorded != self.settings:
            differences = "; ".join(differing_settings(recorded, self.settings))
            raise SettingsMismatchError(f"{path}: trained with other settings than variant "
                                        f"{self.variant.name} now has ({differences}); {hint}")
        if state["step"] > self.training.steps:
            raise SettingsMismatchError(
                f"{path}: already at step {state['step']}, beyond training.steps = "
                f"{self.training.steps}; only raising steps continues a run; {hint}")

    def _check_same_data(self, path: Path, state: dict, hint: str) -> None:
        """A checkpoint of another vocabulary or sentencepiece model is refused before its
        weights are loaded (they would not fit, or would mean other pieces)."""
        train_dir = self.train_corpus.directory
        if state.get("vocab_size") != self.vocab_size:
            raise SettingsMismatchError(
                f"{path}: trained with a vocabulary of {state.get('vocab_size')} pieces, but "
                f"{train_dir} has {self.vocab_size}; {hint}")
        recorded, current = state.get("spm_model_sha256"), self.train_corpus.meta.get(
            "spm_model_sha256")
        if recorded != current:
            raise SettingsMismatchError(
                f"{path}: trained on pieces of the sentencepiece model with sha256 "
                f"{str(recorded)[:12]}..., but {train_dir} was encoded with "
                f"{str(current)[:12]}...; {hint}")

    # -- metrics --------------------------------------------------------------------------------
    @property
    def manifest_path(self) -> Path:
        """The kept grid checkpoints, which ``average`` reads (a declared output of training)."""
        return self.train_dir / "checkpoints.json"

    @property
    def metrics_path(self) -> Path:
        return self.train_dir / "metrics.jsonl"

    def _truncate_metrics_after(self, step: int) -> None:
        """Keep the records up to ``step`` (those after it are recorded again as the run goes
        on); a torn last line (:mod:`reproduce.files`) goes too, before anything is appended."""
        if self.metrics_path.exists():
            kept = [record for record in read_records(self.metrics_path) if record["step"] <= step]
            write_records(self.metrics_path, kept)

    def _record(self, metrics: dict) -> None:
        if self.rank != 0:
            return
        self.train_dir.mkdir(parents=True, exist_ok=True)
        append_record(self.metrics_path, {"step": self.step, **metrics})
        if self.on_metrics is not None:
            self.on_metrics(metrics, self.step)

    # -- loop -----------------------------------------------------------------------------------
    def _step_sizes(self, group: list) -> tuple[int, int, int]:
        """Real source and target tokens (EOS included) and training FLOPs of a whole step."""
        indices = np.concatenate(group)
        source = self.train_corpus.source_lengths[indices] + 1
        target = self.train_corpus.target_lengths[indices] + 1
        return int(source.sum()), int(target.sum()), self.flops.training(source, target)

    def _logs_at(self, step: int) -> bool:
        return step % self.training.log_every_steps == 0 or step == self.training.steps

    def _train_step(self) -> StepOutcome:
        """One optimizer step on the stream's next micro-batches (skipped on an fp16 overflow:
        then ``self.step`` stays, and the next attempt takes the next micro-batches)."""
        group = self.stream.next_step()
        source_tokens, target_tokens, flops = self._step_sizes(group)
        attempted = self.step + 1
        self.model.train()
        self.optimizer.zero_grad(set_to_none=False)
        # loss, padded positions, passes: summed on the device, read once at the end of the step
        totals = torch.zeros(3, dtype=torch.float64, device=self.device)
        batches = self._collate_passes(group, step_key(self.training.seed, attempted))
        for number, pending in enumerate(batches):
            batch = pending.result().to(self.device)
            totals[1] += batch.source.numel() + batch.target_output.numel()
            last = number == len(batches) - 1  # gradients are all-reduced during its backward
            with nullcontext() if last or self.parallel is None else self.parallel.no_sync():
                loss = self._pass_loss(batch)
                self.optimizer_update.backward(loss * (self.world / target_tokens))  # x S in fp16
            totals[0] += loss.detach()
        totals[2] += len(batches)
        distributed.all_reduce_sum(totals)
        lr = learning_rate(attempted, self.config.d_model, self.training.warmup_steps,
                           self.training.lr_scale)  # eq. 3
        for group_settings in self.optimizer.param_groups:
            group_settings["lr"] = lr
        update = self.optimizer_update.apply()
        readings = torch.cat([totals, update.not_finite.to(totals.dtype).view(1)])
        loss_total, padded, passes, not_finite = readings.tolist()  # the step's one wait
        applied = update.applied and not not_finite
        if applied:
            self.step = attempted
        return StepOutcome(update.applied, loss_total / target_tokens, source_tokens,
                           target_tokens, flops, int(padded), passes / self.world, update.norm,
                           not not_finite)

    def _collate_passes(self, group: list[np.ndarray], key: int) -> list:
        """This rank's micro-batches of the step, fused into passes and collated in the
        background (while the device computes), with the tokens' dropout keys of step ``key``."""
        t = self.training
        share = np.concatenate(group[self.rank::self.world])
        pin = self.device.type == "cuda"
        return [self.loader.submit(collate, self.train_corpus, indices, pin, t.pad_to_multiple, key)
                for indices in device_passes(share, self.train_corpus, t.max_tokens_per_device,
                                             t.pad_to_multiple)]

    def _pass_loss(self, batch) -> torch.Tensor:
        """The summed label-smoothed loss of one pass's target tokens (section 5.4)."""
        dtype = autocast_dtype(self.precision)
        with torch.autocast(self.device.type, dtype=dtype, enabled=dtype is not None):
            states = self.forward(batch.source, batch.target_input, batch.source_index,
                                  batch.target_index, batch.source_noise,
                                  batch.target_noise)  # [N, d] at the target tokens
            loss, _ = projected_label_smoothed_loss(states, self.model.embedding.weight,
                                                    batch.target_tokens(),
                                                    self.config.label_smoothing)
            return loss

    def _evaluate(self) -> None:
        total, tokens = corpus_negative_log_likelihood(
            self.model, self.dev_corpus, self.training.max_tokens_per_device, self.device)
        self.last_dev_loss = total / tokens
        self._record({"dev_loss": self.last_dev_loss,
                      "dev_perplexity": math.exp(self.last_dev_loss)})

    def checkpoint_bytes(self) -> int:
        """About the size of one checkpoint: the parameters and Adam's two moments."""
        return 3 * sum(p.numel() * p.element_size() for p in self.parameters) + 2**20

    def _stop_requested(self) -> bool:
        """Whether any rank was asked to stop (all ranks agree, so they stop at the same step)."""
        requested = self.interruption.pending() is not None
        if self.world == 1:
            return requested
        flag = torch.tensor([float(requested)], device=self.device)
        distributed.all_reduce_sum(flag)
        if flag.item() > 0:
            self.interruption.request("another rank was asked to stop")
            return True
        return False

    def run(self, stop_after_steps: int | None = None) -> dict | None:
        """Train to ``training.steps``, or stop early, checkpointed, after ``stop_after_steps`` or
        at the end of the step during which a stop was requested (then ``None`` is returned)."""
        t = self.training
        if self.rank == 0:  # the run keeps keep_last checkpoints, writes one more, and final.pt
            check_room(self.checkpoint_dir, self.checkpoint_bytes(), t.checkpoints.keep_last + 2)
        last_step = t.steps if stop_after_steps is None else min(t.steps, stop_after_steps)
        # tqdm's rate and ETA count the steps since ``initial``: those of this segment alone.
        progress = tqdm(total=t.steps, initial=self.step, unit="step", desc=self.variant.name,
                        disable=self.rank != 0 or not sys.stderr.isatty())
        window = ThroughputWindow()
        while self.step < last_step:
            started = time.monotonic()
            outcome = self._train_step()
            self.totals["wall_seconds"] += time.monotonic() - started
            if not outcome.applied:
                self._skipped()
                continue
            self._check_finite(outcome)
            self._count(outcome)
            window.add(outcome.source_tokens, outcome.target_tokens, outcome.flops)
            progress.update(1)
            if self._logs_at(self.step):
                self._log_progress(outcome, window, progress)
                window = ThroughputWindow()
            if self.step % t.eval_every_steps == 0 or self.step == t.steps:
                self._evaluate()
                if self.rank == 0:
                    log.info("step %d dev loss %.4f ppl %.3f", self.step, self.last_dev_loss,
                             math.exp(self.last_dev_loss))
            stopping = self._stop_requested()
            if self.rank == 0 and (self.schedule.due(self.step) or self.step == last_step
                                   or stopping):
                self.schedule.save(self.state(), self.step)
            if stopping:
                log.warning("stopped after step %d (%s); checkpoint saved", self.step,
                            self.interruption.reason)
                break
        progress.close()
        if self.step < t.steps or self.rank != 0:
            return None
        return self._finish()

    def _check_finite(self, outcome: StepOutcome) -> None:
        """Stop a diverged run: its last step's loss or gradient is inf or nan (a non-finite
        gradient's update was not applied: ``self.step`` is still the step before)."""
        if outcome.gradient_finite and math.isfinite(outcome.loss):
            return
        attempted = self.step if outcome.gradient_finite else self.step + 1
        what = (f"the training loss is {outcome.loss}" if not math.isfinite(outcome.loss)
                else f"the gradient is not finite (norm {outcome.grad_norm.item()})")
        raise NonFiniteLossError(
            f"step {attempted}: {what} ({self.precision}): training diverged, and this step was "
            f"not saved; lower training.lr_scale or raise training.warmup_steps, then start over "
            f"with --restart")

    def _skipped(self) -> None:
        self.totals["skipped_steps"] += 1
        if self.rank == 0:
            log.info("step %d: the fp16 gradient overflowed, update skipped; loss scale now %g",
                     self.step + 1, self.optimizer_update.loss_scale)

    def _count(self, outcome: StepOutcome) -> None:
        """Add an applied step to the run's totals (a skipped one adds only its time)."""
        self.totals["source_tokens"] += outcome.source_tokens
        self.totals["target_tokens"] += outcome.target_tokens
        self.totals["training_flops"] += outcome.flops
        self.totals["padded_positions"] += outcome.padded_positions
        self.totals["passes"] += outcome.passes
        self.last_train_loss = outcome.loss

    def _log_progress(self, outcome: StepOutcome, window: ThroughputWindow, progress: tqdm) -> None:
        """Record the step's metrics; log a progress line where no progress bar shows."""
        rates = window.rates(self._peak_flops())
        metrics = {"train_loss": outcome.loss, "lr": self.optimizer.param_groups[0]["lr"],
                   "grad_norm": outcome.grad_norm.item(), "passes_per_step": outcome.passes,
                   **rates}
        if self.precision == "fp16":
            metrics["loss_scale"] = self.optimizer_update.loss_scale
        self._record(metrics)
        progress.set_postfix(loss=f"{outcome.loss:.3f}")
        if progress.disable and self.rank == 0:
            log.info("%s passes/step %.3g", progress_line(
                self.step, self.training.steps, outcome.loss, metrics["lr"], rates,
                self.totals["wall_seconds"]), outcome.passes)

    def _peak_flops(self) -> float | None:
        """The peak FLOP/s of all ranks together, where the device is a known GPU."""
        if self.device.type != "cuda":
            return None
        peak = peak_flops(torch.cuda.get_device_name(self.device))
        return None if peak is None else peak * self.world

    def _finish(self) -> dict:
        save_checkpoint({"model": self.model.state_dict(), "step": self.step, **self._identity()},
                        self.train_dir / "final.pt")
        write_manifest(self.manifest_path, self.schedule)
        on_gpu = self.device.type == "cuda"
        totals, steps, peak = self.totals, max(self.step, 1), self._peak_flops()
        seconds = max(totals["wall_seconds"], 1e-9)
        real_positions = totals["source_tokens"] + totals["target_tokens"]
        summary = {
            "dataset": self.dataset,
            "variant": self.variant.name,
            # What the weights depend on: an edit of the experiment file is told by it
            # (reproduce.training.staleness), without loading a checkpoint.
            "settings": self.settings,
            "fingerprint": fingerprint(self.settings),
            "steps": self.step,
            "parameters": self.model.num_parameters(),
            **totals,
            "mean_source_tokens_per_step": totals["source_tokens"] / steps,
            "mean_target_tokens_per_step": totals["target_tokens"] / steps,
            "micro_batches_per_step": self.training.micro_batches_per_step,
            # Forward/backward passes a rank made per step (max_tokens_per_device caps a pass).
            "mean_passes_per_step": totals["passes"] / steps,
            "compiled": self.compiled,
            "target_tokens_per_second": totals["target_tokens"] / seconds,
            "model_flops_per_second": totals["training_flops"] / seconds,
            # Against the GPUs' dense bf16 peak (reproduce.model.flops); null on CPUs and unknown
            # GPUs.
            "mfu": totals["training_flops"] / seconds / peak if peak else None,
            "world_size": self.world,
            "device": self._device_name(),
            # What the passes computed in (training.precision resolved on this device).
            "precision": self.precision,
            "gpu_hours": self.world * totals["wall_seconds"] / 3600 if on_gpu else 0.0,
            "final_train_loss": self.last_train_loss,
            "final_dev_loss": self.last_dev_loss,
            # Padding in the passes' [B, T] batches: attention's products compute it, the
            # matrices skip it (reproduce.model.token_layout).
            "padding_waste": (1.0 - real_positions / totals["padded_positions"]
                              if totals["padded_positions"] else 0.0),
            # The finished run's dev curve, so that the tables read declared outputs only
            # (metrics.jsonl is the live log, which a resumed training rewrites).
            "dev_curve": dev_curve(read_records(self.metrics_path)),
        }
        write_text_whole(self.train_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
        return summary


def _rng_states() -> dict:
    """Every random generator's state as tensors and plain values (weights_only-loadable)."""
    name, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    version, python_state, gauss_next = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)),
                  "position": int(position), "has_gauss": int(has_gauss),
                  "cached_gaussian": float(cached_gaussian)},
        "python": {"version": version, "state": list(python_state), "gauss_next": gauss_next},
    }


def _restore_rng_states(states: dict) -> None:
    torch.set_rng_state(states["torch"])  # a CPU ByteTensor: checkpoints are loaded on the CPU
    if states["cuda"] and torch.cuda.is_available():
        if len(states["cuda"]) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(states["cuda"])
        else:
            log.warning("checkpoint holds %d CUDA RNG states, this machine has %d devices: not "
                        "restored", len(states["cuda"]), torch.cuda.device_count())
    numpy = states["numpy"]
    np.random.set_state((numpy["name"], numpy["keys"].numpy().astype(np.uint32), numpy["position"],
                         numpy["has_gauss"], numpy["cached_gaussian"]))
    python = states["python"]
    random.setstate((python["version"], tuple(python["state"]), python["gauss_next"]))
