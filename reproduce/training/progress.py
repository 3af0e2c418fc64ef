"""Training progress as a person reads it in a log: throughput of the last logging window, the
run's elapsed training time and an estimate of the time left.

Under Snakemake or Slurm the trainer's log is a file, not a terminal, so every logged step says
how far the run is, how fast it goes now and when it should end:

    step 2500/100000 loss 3.2145 lr 0.000884 target tokens/s 61234 steps/s 2.45 elapsed
    00:17:01 ETA 11:03:40

``elapsed`` is the run's training time over all its segments (a requeued job goes on from its
checkpoint's ``totals.wall_seconds``; evaluation and checkpoint writing are not in it). The ETA
divides the steps left by the steps per second of the last window alone, so that neither the
first segment's warm-up nor the steps before a resume, made on another machine perhaps, skew it.

The dev curve (:func:`dev_curve`) is the progress of the dev loss, read from the run's metrics
log (``train/metrics.jsonl``) for its summary and for the tables of a run still training.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from reproduce.stage_progress import format_duration


@dataclass
class ThroughputWindow:
    """The steps since the last log line: their count, tokens, FLOPs, and when it began."""

    start: float = field(default_factory=time.monotonic)
    steps: int = 0
    target_tokens: int = 0
    tokens: int = 0  # source and target
    flops: int = 0

    def add(self, source_tokens: int, target_tokens: int, flops: int) -> None:
        self.steps += 1
        self.target_tokens += target_tokens
        self.tokens += source_tokens + target_tokens
        self.flops += flops

    def rates(self, peak_flops: float | None) -> dict:
        """Per-second rates of the window; ``mfu`` against ``peak_flops`` where one is known."""
        seconds = max(time.monotonic() - self.start, 1e-9)
        flops_per_second = self.flops / seconds
        return {"target_tokens_per_second": self.target_tokens / seconds,
                "tokens_per_second": self.tokens / seconds,
                "steps_per_second": self.steps / seconds,
                "model_tflops_per_second": flops_per_second / 1e12,
                **({"mfu": flops_per_second / peak_flops} if peak_flops else {})}


def progress_line(step: int, total_steps: int, loss: float, lr: float, rates: dict,
                  elapsed_seconds: float) -> str:
    """One log line: the step, loss, learning rate, the window's ``rates``
    (:meth:`ThroughputWindow.rates`), the run's elapsed training time and the time left."""
    steps_per_second = rates["steps_per_second"]
    left = (total_steps - step) / steps_per_second if steps_per_second > 0 else math.inf
    return (f"step {step}/{total_steps} loss {loss:.4f} lr {lr:.3g} "
            f"target tokens/s {rates['target_tokens_per_second']:.0f} "
            f"steps/s {steps_per_second:.3g} elapsed {format_duration(elapsed_seconds)} "
            f"ETA {format_duration(left)}")


def dev_curve(records: list[dict]) -> list[dict]:
    """The dev rows (``step``, ``dev_loss``, ``dev_perplexity``) of a metrics log by step; a step
    logged twice (training resumed from an earlier checkpoint) keeps its last."""
    latest = {record["step"]: record for record in records if "dev_perplexity" in record}
    return [{key: latest[step][key] for key in ("step", "dev_loss", "dev_perplexity")
             if key in latest[step]} for step in sorted(latest)]
