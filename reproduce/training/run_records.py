"""What a training writes besides its checkpoints, in ``<out-dir>/train/``, and hands to the
experiment tracker.

- ``metrics.jsonl``: the live log, one record per logged or evaluated step
  (:func:`reproduce.files.read_records`); a resumed run first drops the records after its
  checkpoint's step, which it trains again, and each record is handed to ``on_metrics`` (the
  MLflow run) as it is written.
- At the end, in this order: ``final.pt`` (the last weights and the model's identity,
  :class:`reproduce.provenance.ModelIdentity`), ``checkpoints.json`` (the grid checkpoints that
  ``average`` reads) and ``summary.json``, which tells a finished run (Snakemake's outputs) and
  holds what the tables read: the settings, throughput with exact FLOPs, the dev curve.

Only rank 0 writes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, NamedTuple

import torch

from reproduce.model.flops import peak_flops
from reproduce.files import append_record, read_records, write_records, write_text_whole
from reproduce.training.checkpoints import CheckpointSchedule, save_checkpoint, write_manifest
from reproduce.training.precision import device_name
from reproduce.training.progress import dev_curve

MetricsCallback = Callable[[dict, int], None]


class StepOutcome(NamedTuple):
    """What one attempted optimizer step did (``applied`` is False for a skipped fp16 update)."""

    applied: bool
    loss: float  # mean per target token
    source_tokens: int
    target_tokens: int
    flops: int
    padded_positions: int  # of the passes' [B, T] batches, both sides
    pass_tokens: int  # the passes' tokens, both sides: the pairs' and a bucket's dummy ones
    passes: float  # forward/backward passes per rank
    grad_norm: torch.Tensor  # of the true gradient before clipping
    gradient_finite: bool
    stop_asked: bool  # some rank had been asked to stop when it queued the step


@dataclass
class RunTotals:
    """The counters of a run over all its segments (a checkpoint carries them on)."""

    source_tokens: int = 0
    target_tokens: int = 0
    wall_seconds: float = 0.0
    training_flops: int = 0
    padded_positions: int = 0
    pass_tokens: int = 0
    skipped_steps: int = 0
    passes: float = 0.0  # forward/backward passes per rank, summed over steps
    last_losses: dict = field(default_factory=lambda: {"train": float("nan"),
                                                       "dev": float("nan")})

    def add(self, outcome: StepOutcome) -> None:
        """Count an applied step (a skipped one adds only its time)."""
        self.source_tokens += outcome.source_tokens
        self.target_tokens += outcome.target_tokens
        self.training_flops += outcome.flops
        self.padded_positions += outcome.padded_positions
        self.pass_tokens += outcome.pass_tokens
        self.passes += outcome.passes
        self.last_losses["train"] = outcome.loss

    def state(self) -> dict:
        counters = {name: value for name, value in vars(self).items() if name != "last_losses"}
        return {"totals": counters, "last_losses": dict(self.last_losses)}

    def load(self, state: dict) -> None:
        for name, value in state["totals"].items():
            setattr(self, name, value)
        self.last_losses = dict(state["last_losses"])

    def summary(self, steps: int, peak_flops: float | None) -> dict:
        """The counters and what follows from them: means per step, rates, padding."""
        steps, seconds = max(steps, 1), max(self.wall_seconds, 1e-9)
        real_positions = self.source_tokens + self.target_tokens
        return {
            **self.state()["totals"],
            "mean_source_tokens_per_step": self.source_tokens / steps,
            "mean_target_tokens_per_step": self.target_tokens / steps,
            # Forward/backward passes a rank made per step (max_tokens_per_device caps a pass).
            "mean_passes_per_step": self.passes / steps,
            "target_tokens_per_second": self.target_tokens / seconds,
            "model_flops_per_second": self.training_flops / seconds,
            # Against the GPUs' dense bf16 peak (reproduce.model.flops); null on CPUs and unknown
            # GPUs.
            "mfu": self.training_flops / seconds / peak_flops if peak_flops else None,
            "final_train_loss": self.last_losses["train"],
            "final_dev_loss": self.last_losses["dev"],
            # Padding in the passes' [B, T] batches: attention on the padded batch computes it,
            # the matrices skip it (reproduce.model.token_layout), and so does attention over
            # packed tokens.
            "padding_waste": (1.0 - real_positions / self.padded_positions
                              if self.padded_positions else 0.0),
            # Dummy tokens of bucketed passes (training.pass_buckets): every layer computes
            # them, for no loss and no gradient.
            "dummy_token_share": (1.0 - real_positions / self.pass_tokens
                                  if self.pass_tokens else 0.0),
        }


class RunRecords:
    """The files of ``train_dir`` (see the module's docstring); ``writes``: this is rank 0."""

    def __init__(self, train_dir: Path, on_metrics: MetricsCallback | None, writes: bool):
        self.train_dir, self.on_metrics, self.writes = train_dir, on_metrics, writes

    @property
    def metrics_path(self) -> Path:
        return self.train_dir / "metrics.jsonl"

    @property
    def manifest_path(self) -> Path:
        """The kept grid checkpoints, which ``average`` reads (a declared output of training)."""
        return self.train_dir / "checkpoints.json"

    @property
    def summary_path(self) -> Path:
        return self.train_dir / "summary.json"

    def keep_until(self, step: int) -> None:
        """Keep the records up to ``step`` (those after it are recorded again as the run goes
        on); a torn last line (:func:`reproduce.files.read_records`) goes too, before anything
        is appended."""
        if self.writes and self.metrics_path.exists():
            kept = [record for record in read_records(self.metrics_path) if record["step"] <= step]
            write_records(self.metrics_path, kept)

    def record(self, step: int, metrics: dict) -> None:
        if not self.writes:
            return
        self.train_dir.mkdir(parents=True, exist_ok=True)
        append_record(self.metrics_path, {"step": step, **metrics})
        if self.on_metrics is not None:
            self.on_metrics(metrics, step)

    def finish(self, final: dict, schedule: CheckpointSchedule, run: dict, totals: RunTotals,
               device: torch.device, world: int) -> dict:
        """Write ``final.pt`` (``final``: the last weights and the model's identity), the manifest
        and ``summary.json``: ``run``'s entries, the settings, the totals, and the dev curve (so
        that the tables read declared outputs only: metrics.jsonl is the live log, which a
        resumed training rewrites). The summary as written."""
        save_checkpoint(final, self.train_dir / "final.pt")
        write_manifest(self.manifest_path, schedule)
        on_gpu = device.type == "cuda"
        summary = {
            **run,
            # What the weights depend on: an edit of the experiment file is told by it
            # (reproduce.provenance), without loading a checkpoint.
            "settings": final["settings"],
            "fingerprint": final["fingerprint"],
            "steps": final["step"],
            "world_size": world,
            "device": device_name(device),
            "gpu_hours": world * totals.wall_seconds / 3600 if on_gpu else 0.0,
            **totals.summary(final["step"], peak_flops_of(device, world)),
            "dev_curve": dev_curve(read_records(self.metrics_path)),
        }
        write_text_whole(self.summary_path, json.dumps(summary, indent=2) + "\n")
        return summary


def peak_flops_of(device: torch.device, world: int) -> float | None:
    """The peak FLOP/s of ``world`` ranks on ``device``s together, where it is a known GPU."""
    if device.type != "cuda":
        return None
    peak = peak_flops(device_name(device))
    return None if peak is None else peak * world
