"""What fusing a rank's micro-batches into few passes buys: ATen operations per training step, and
training speed on the tiny config, through the real trainer (``Trainer._train_step``).

``ops``: the paper's base widths (d_model 512, 8 heads, d_ff 2048) with 2 layers per stack,
4,000 tokens a step in 8 micro-batches, on a synthetic corpus with WMT-like lengths; one warm-up
step, then one step under ``torch.profiler``, counting the ATen operations the host dispatched:
all of them, and the top-level ones (those no other ATen operation called: on a GPU in eager
mode, each is about one kernel launch or more). Every pass repeats the model's operations, so
the count grows with the passes a step makes, whatever their size.

``speed``: configs/tiny.yaml's base on the tiny corpus as the pipeline encodes it (``--train``,
``--dev``), ``--steps`` steps; prints the run's target tokens/s and passes per step.

``passes``: how many passes each rank makes per step for a given ``max_tokens_per_device``, over
200 steps of the WMT14 configs' batching (25k tokens, 8 micro-batches) on 200,000 synthetic
WMT-length pairs (no model: the batcher alone).

Run the same command from a checkout of the code before the change to compare (it uses nothing
the trainer did not have then):

    .venv/bin/python benchmarks/pass_fusion.py ops
    .venv/bin/python benchmarks/pass_fusion.py passes --max-tokens 16384 40960
    .venv/bin/python benchmarks/pass_fusion.py speed --train results/tiny/encoded/train \\
        --dev results/tiny/encoded/dev --steps 100
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

from reproduce.config import Experiment
from reproduce.experiment_file import load_experiment
from reproduce.data.encoded import EncodedCorpus
from reproduce.training.batching import MicroBatchStream, device_passes
from reproduce.training.assembly import build_trainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trainer_speed import write_synthetic_corpus  # noqa: E402 (a sibling script)

ROOT = Path(__file__).resolve().parents[1]
BASE_WIDTHS = {"layers": 2}  # the rest as the paper's base in configs/wmt14_en_de.yaml


def _variant(experiment: Experiment, name: str, model: dict, training: dict):
    variant = experiment.variant(name)
    return variant.model_copy(update={"model": variant.model.model_copy(update=model),
                                      "training": variant.training.model_copy(update=training)})


def _aten_counts(events) -> tuple[int, int]:
    """All ATen operations among profiler ``events``, and those no other ATen operation called."""
    aten = [event for event in events if event.name.startswith("aten::")]

    def top_level(event) -> bool:
        parent = event.cpu_parent
        while parent is not None:
            if parent.name.startswith("aten::"):
                return False
            parent = parent.cpu_parent
        return True

    return len(aten), sum(top_level(event) for event in aten)


def count_operations(args) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        train = write_synthetic_corpus(folder / "train", 20_000, args.vocab, seed=0)
        dev = write_synthetic_corpus(folder / "dev", 100, args.vocab, seed=1)
        experiment = load_experiment(ROOT / "configs/wmt14_en_de.yaml")
        variant = _variant(experiment, "base", BASE_WIDTHS,
                           {"steps": 10, "tokens_per_step": args.tokens_per_step,
                            "precision": "fp32", "compile": False})
        trainer = build_trainer(variant, experiment, train, dev, folder / "run")
        trainer._train_step()  # warm-up: allocations, first shapes
        with profile(activities=[ProfilerActivity.CPU]) as profiler:
            outcome = trainer._train_step()
        total, top = _aten_counts(profiler.events())
    passes = getattr(outcome, "passes", None)
    print(f"torch {torch.__version__}, base widths, {BASE_WIDTHS['layers']} layers, "
          f"{args.tokens_per_step} tokens a step, 8 micro-batches, max_tokens_per_device "
          f"{variant.training.max_tokens_per_device}")
    print(f"passes per step: {passes if passes is not None else 'one per micro-batch (8)'}")
    print(f"ATen operations per step: {total} dispatched, {top} top-level")


def measure_speed(args) -> None:
    experiment = load_experiment(ROOT / "configs/tiny.yaml")
    variant = _variant(experiment, "base", {},
                       {"steps": args.steps, "log_every_steps": args.steps,
                        "eval_every_steps": 10 * args.steps, "compile": False})
    with tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        summary = build_trainer(variant, experiment, args.train, args.dev, Path(scratch)).run()
        seconds = time.perf_counter() - started
    passes = summary.get("mean_passes_per_step", "one per micro-batch (8)")
    print(json.dumps({"target_tokens_per_second": round(summary["target_tokens_per_second"]),
                      "passes_per_step": passes, "steps": summary["steps"],
                      "wall_seconds": round(seconds, 1), "threads": torch.get_num_threads()}))


def count_passes(args) -> None:
    print("| max_tokens_per_device | ranks | passes per rank and step: mean | max |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as scratch:
        corpus = EncodedCorpus.open(write_synthetic_corpus(Path(scratch) / "train", 200_000,
                                                           37_000, seed=0))
        for limit in args.max_tokens:
            for ranks in (1, 2, 4, 8):
                stream = MicroBatchStream(corpus, 25_000, 8, 256, seed=1)
                counts = [max(len(device_passes(np.concatenate(group[rank::ranks]), corpus,
                                                limit)) for rank in range(ranks))
                          for group in (stream.next_step() for _ in range(200))]
                print(f"| {limit:,} | {ranks} | {np.mean(counts):.3g} | {max(counts)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    ops = commands.add_parser("ops", help="ATen operations per step at base widths")
    ops.add_argument("--tokens-per-step", type=int, default=4000)
    ops.add_argument("--vocab", type=int, default=8000)
    speed = commands.add_parser("speed", help="the tiny config's training tokens/s")
    speed.add_argument("--train", type=Path, required=True)
    speed.add_argument("--dev", type=Path, required=True)
    speed.add_argument("--steps", type=int, default=100)
    passes = commands.add_parser("passes", help="passes per step of the WMT14 batching")
    passes.add_argument("--max-tokens", type=int, nargs="+", default=[16384, 40960])
    args = parser.parse_args()
    {"ops": count_operations, "speed": measure_speed, "passes": count_passes}[args.command](args)


if __name__ == "__main__":
    main()
