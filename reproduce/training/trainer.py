"""The training loop of one variant (section 5): Adam(0.9, 0.98, 1e-9) with eq. 3's learning
rate, label smoothing, optimizer steps of ``tokens_per_step`` target tokens over all ranks.

Each step's gradient is the sum of per-token losses over the step's micro-batches divided by the
number of target tokens in the step, whatever the number of ranks: every rank back-propagates its
micro-batches' summed losses divided by that global count, and the gradients are summed across
ranks. Dropout noise is reseeded from (seed, rank, step) at every step, so a resumed run replays
exactly the randomness an uninterrupted run would have drawn.
"""

from __future__ import annotations

import json
import logging
import math
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from tqdm import tqdm

from reproduce.config import ResolvedVariant
from reproduce.data.encoded import EncodedCorpus
from reproduce.model.transformer import Transformer
from reproduce.training import distributed
from reproduce.training.batching import MicroBatchStream, StreamPosition, collate, padding_waste
from reproduce.training.checkpoints import CheckpointSchedule, list_checkpoints, save_atomically
from reproduce.training.evaluation import corpus_negative_log_likelihood
from reproduce.training.loss import label_smoothed_loss
from reproduce.training.schedule import learning_rate

log = logging.getLogger(__name__)

MetricsCallback = Callable[[dict, int], None]


def _seed_step(seed: int, rank: int, step: int) -> None:
    torch.manual_seed((seed * 1_000_003 + rank * 7_919 + step) % 2**63)


class Trainer:
    def __init__(self, variant: ResolvedVariant, dataset: str, train_dir: Path, dev_dir: Path,
                 output_dir: Path, on_metrics: MetricsCallback | None = None):
        self.variant, self.dataset = variant, dataset
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

        torch.manual_seed(self.training.seed)  # identical initial weights on every rank
        self.model = Transformer(self.config, self.vocab_size).to(self.device)
        # The compiled module shares the model's parameters; checkpoints save the plain model.
        self.forward = torch.compile(self.model) if self.training.compile else self.model
        # Batches of a step are assembled in a background thread while the device computes.
        self.loader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="collate")
        self.parameters = list(self.model.parameters())
        t = self.training
        self.optimizer = torch.optim.Adam(self.parameters, lr=0.0, betas=(t.adam_beta1, t.adam_beta2), eps=t.adam_eps)
        self.stream = MicroBatchStream(self.train_corpus, t.max_tokens_per_device, t.max_source_tokens,
                                       t.tokens_per_step, t.seed)
        self.schedule = CheckpointSchedule(self.checkpoint_dir, t.checkpoints.every_steps,
                                           t.checkpoints.every_minutes, t.checkpoints.keep_last)
        self.step = 0
        self.totals = {"source_tokens": 0, "target_tokens": 0, "wall_seconds": 0.0}
        self.last_train_loss = float("nan")
        self.last_dev_loss = float("nan")
        self._resume()

    # -- state ----------------------------------------------------------------------------------
    def state(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "step": self.step,
            "stream_position": vars(self.stream.position).copy(),
            "totals": dict(self.totals),
            "last_losses": {"train": self.last_train_loss, "dev": self.last_dev_loss},
            "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()},
            "model_config": self.config.model_dump(),
            "vocab_size": self.vocab_size,
        }

    def _resume(self) -> None:
        checkpoints = list_checkpoints(self.checkpoint_dir)
        if not checkpoints:
            return
        state = torch.load(checkpoints[-1], map_location=self.device, weights_only=False)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step = state["step"]
        self.stream.seek(StreamPosition(**state["stream_position"]))
        self.totals = state["totals"]
        self.last_train_loss, self.last_dev_loss = state["last_losses"]["train"], state["last_losses"]["dev"]
        torch.set_rng_state(state["rng"]["torch"])
        np.random.set_state(state["rng"]["numpy"])
        random.setstate(state["rng"]["python"])
        if self.rank == 0:
            self._truncate_metrics_after(self.step)
        log.info("resumed from %s at step %d", checkpoints[-1], self.step)

    # -- metrics --------------------------------------------------------------------------------
    @property
    def metrics_path(self) -> Path:
        return self.train_dir / "metrics.jsonl"

    def _truncate_metrics_after(self, step: int) -> None:
        if self.metrics_path.exists():
            kept = [line for line in self.metrics_path.read_text().splitlines()
                    if line and json.loads(line)["step"] <= step]
            self.metrics_path.write_text("".join(line + "\n" for line in kept))

    def _record(self, metrics: dict) -> None:
        if self.rank != 0:
            return
        self.train_dir.mkdir(parents=True, exist_ok=True)
        with self.metrics_path.open("a") as stream:
            stream.write(json.dumps({"step": self.step, **metrics}) + "\n")
        if self.on_metrics is not None:
            self.on_metrics(metrics, self.step)

    # -- loop -----------------------------------------------------------------------------------
    def _train_step(self) -> tuple[float, int, int]:
        group = self.stream.next_step()
        step_target_tokens = sum(int(self.train_corpus.target_lengths[b].sum()) + len(b) for b in group)
        _seed_step(self.training.seed, self.rank, self.step + 1)
        self.model.train()
        self.optimizer.zero_grad(set_to_none=False)
        loss_sum = torch.zeros(3, dtype=torch.float64, device=self.device)  # loss, src, tgt tokens
        autocast = self.training.precision == "bf16" and self.device.type == "cuda"
        pin = self.device.type == "cuda"
        batches = [self.loader.submit(collate, self.train_corpus, indices, pin)
                   for indices in group[self.rank :: self.world]]
        for pending in batches:
            batch = pending.result().to(self.device)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
                logits = self.forward(batch.source, batch.target_input)
            loss, _ = label_smoothed_loss(logits, batch.target_output, self.config.label_smoothing)
            (loss / step_target_tokens).backward()
            loss_sum[0] += loss.detach()  # stays on the device: no synchronisation per micro-batch
            loss_sum[1] += batch.source_tokens
            loss_sum[2] += batch.target_tokens
        distributed.all_reduce_gradients(self.parameters)
        distributed.all_reduce_sum(loss_sum)
        self.step += 1
        lr = learning_rate(self.step, self.config.d_model, self.training.warmup_steps, self.training.lr_scale)
        for group_settings in self.optimizer.param_groups:
            group_settings["lr"] = lr
        self.optimizer.step()
        loss_value, source_tokens, target_tokens = loss_sum.tolist()
        return loss_value / target_tokens, int(source_tokens), int(target_tokens)

    def _evaluate(self) -> None:
        total, tokens = corpus_negative_log_likelihood(
            self.model, self.dev_corpus, self.training.max_tokens_per_device, self.device)
        self.last_dev_loss = total / tokens
        self._record({"dev_loss": self.last_dev_loss, "dev_perplexity": math.exp(self.last_dev_loss)})

    def run(self, stop_after_steps: int | None = None) -> dict | None:
        """Train to ``training.steps`` (or stop early, checkpointed, after ``stop_after_steps``)."""
        t = self.training
        last_step = t.steps if stop_after_steps is None else min(t.steps, stop_after_steps)
        progress = tqdm(total=t.steps, initial=self.step, unit="step", desc=self.variant.name,
                        disable=self.rank != 0 or not sys.stderr.isatty())
        window_start, window_tokens = time.monotonic(), 0
        while self.step < last_step:
            started = time.monotonic()
            loss, source_tokens, target_tokens = self._train_step()
            self.totals["wall_seconds"] += time.monotonic() - started
            self.totals["source_tokens"] += source_tokens
            self.totals["target_tokens"] += target_tokens
            self.last_train_loss = loss
            window_tokens += source_tokens + target_tokens
            progress.update(1)
            if self.step % t.log_every_steps == 0 or self.step == t.steps:
                elapsed = time.monotonic() - window_start
                metrics = {"train_loss": loss, "lr": self.optimizer.param_groups[0]["lr"],
                           "tokens_per_second": window_tokens / elapsed}
                self._record(metrics)
                progress.set_postfix(loss=f"{loss:.3f}")
                if progress.disable and self.rank == 0:
                    log.info("step %d/%d loss %.4f lr %.3g tokens/s %.0f", self.step, t.steps, loss,
                             metrics["lr"], metrics["tokens_per_second"])
                window_start, window_tokens = time.monotonic(), 0
            if self.step % t.eval_every_steps == 0 or self.step == t.steps:
                self._evaluate()
                if self.rank == 0:
                    log.info("step %d dev loss %.4f ppl %.3f", self.step, self.last_dev_loss,
                             math.exp(self.last_dev_loss))
            if self.rank == 0 and (self.schedule.due(self.step) or self.step == last_step):
                self.schedule.save(self.state(), self.step)
        progress.close()
        if self.step < t.steps or self.rank != 0:
            return None
        return self._finish()

    def _finish(self) -> dict:
        save_atomically({"model": self.model.state_dict(), "model_config": self.config.model_dump(),
                         "vocab_size": self.vocab_size, "step": self.step}, self.train_dir / "final.pt")
        on_gpu = self.device.type == "cuda"
        summary = {
            "dataset": self.dataset,
            "variant": self.variant.name,
            "steps": self.step,
            "parameters": self.model.num_parameters(),
            **self.totals,
            "world_size": self.world,
            "device": torch.cuda.get_device_name(self.device) if on_gpu else "cpu",
            "gpu_hours": self.world * self.totals["wall_seconds"] / 3600 if on_gpu else 0.0,
            "final_train_loss": self.last_train_loss,
            "final_dev_loss": self.last_dev_loss,
            "padding_waste": padding_waste(self.stream.batches, self.train_corpus),
        }
        temporary = self.train_dir / "summary.json.tmp"
        temporary.write_text(json.dumps(summary, indent=2) + "\n")
        temporary.replace(self.train_dir / "summary.json")
        return summary
