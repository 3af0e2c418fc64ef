"""What a training step gives the GPU to compute: passes per step, the distinct shapes of those
passes with ``training.pass_buckets``, the share of dummy tokens the buckets add, and the host
synchronisations of a step that neither logs nor checkpoints.

``shapes``: the WMT14 configs' batching (25k tokens a step in 8 micro-batches, one rank,
``max_tokens_per_device`` of configs/wmt14_en_de.yaml unless ``--max-tokens``) over ``--steps``
steps of ``--pairs`` synthetic WMT-length pairs (``trainer_speed.write_synthetic_corpus``:
source lengths log-normal around 26 pieces, mean ~30.6, clipped to 1-200; targets the source
length times N(1.05, 0.15)); the batcher alone, no model. Prints passes per step, the distinct
pass shapes (rows, width, tokens), the dummy-token share (dummy tokens / all tokens the matrices
compute, both sides) and, for attention, the padded positions and ``rows x width^2`` (its score
entries) against the same passes unbucketed. Attention on the padded batch is what puts the
width into a pass's shape; the count of (rows, tokens) alone is what an attention over the
tokens alone (variable-length kernels) would leave. Then the same passes as packed buckets, the
shapes of ``training.attention: varlen`` with ``pass_buckets`` (fixed width, rows from a floor,
dummy tokens in rows of their own: ``pass_shape``'s ``packed_width``).

``syncs``: the real trainer (configs/tiny.yaml's base on a synthetic corpus, fp32, eager, one
rank) takes two warm-up steps, then a step that neither logs, evaluates nor checkpoints runs
under :class:`HostSyncCounter`; then the reading of that step's totals, which the trainer does
once the next step is queued, runs under it alone.

    .venv/bin/python benchmarks/step_shapes.py shapes
    .venv/bin/python benchmarks/step_shapes.py syncs
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from reproduce.data.encoded import EncodedCorpus
from reproduce.experiment_file import load_experiment
from reproduce.training.batching import (PACKED_TOKENS_PER_ROW, MicroBatchStream,
                                         device_passes, pass_shape, round_up)
from reproduce.training.assembly import build_trainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trainer_speed import write_synthetic_corpus  # noqa: E402 (a sibling script)

ROOT = Path(__file__).resolve().parents[1]
# The tensor methods that bring a value to the host (on a GPU: wait for the device).
SYNCING_METHODS = ("item", "tolist", "__bool__", "__float__", "__int__", "numpy", "cpu",
                   "nonzero")
# The ATen operations under them, and under library code that calls none of the methods.
SYNCING_OPERATIONS = ("aten::_local_scalar_dense", "aten::nonzero", "aten::masked_select")


class HostSyncCounter(TorchDispatchMode):
    """Counts, while entered, the calls of :data:`SYNCING_METHODS` on tensors (``methods``)
    and the ATen operations of :data:`SYNCING_OPERATIONS` and copies from a device to the CPU
    (``operations``), by name. Patches ``torch.Tensor`` for the methods, so use it for one
    thread's work at a time."""

    def __init__(self):
        super().__init__()
        self.methods: Counter[str] = Counter()
        self.operations: Counter[str] = Counter()
        self._originals = {}

    def __enter__(self):
        for name in SYNCING_METHODS:
            original = self._originals[name] = getattr(torch.Tensor, name)
            setattr(torch.Tensor, name, self._counted(name, original))
        return super().__enter__()

    def __exit__(self, *exc):
        for name, original in self._originals.items():
            setattr(torch.Tensor, name, original)
        return super().__exit__(*exc)

    def _counted(self, name, original):
        def method(tensor, *args, **kwargs):
            self.methods[name] += 1
            return original(tensor, *args, **kwargs)
        return method

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.name().replace(".default", "").split(".")[0]
        name = "aten::" + name.removeprefix("aten::")
        if name in SYNCING_OPERATIONS or (name in ("aten::_to_copy", "aten::copy_")
                                          and _to_cpu_from_device(func, args, kwargs or {})):
            self.operations[name] += 1
        return func(*args, **(kwargs or {}))

    def total(self) -> int:
        return sum(self.methods.values()) + sum(self.operations.values())


def _to_cpu_from_device(func, args, kwargs) -> bool:
    """Whether a copy operation brings a device tensor to the CPU."""
    tensors = [value for value in args if isinstance(value, torch.Tensor)]
    if func.name().startswith("aten::copy_"):
        return tensors[0].device.type == "cpu" and tensors[1].device.type != "cpu"
    device = kwargs.get("device")
    return (tensors[0].device.type != "cpu" and device is not None
            and torch.device(device).type == "cpu")


def measure_shapes(args) -> None:
    experiment = load_experiment(ROOT / "configs/wmt14_en_de.yaml")
    training = experiment.variant("base").training
    max_tokens = args.max_tokens or training.max_tokens_per_device
    multiple = training.pad_to_multiple
    passes, shapes, packed_shapes = [], Counter(), Counter()
    real = computed = packed_computed = padded = bucketed_padded = scores = bucketed_scores = 0
    with tempfile.TemporaryDirectory() as scratch:
        corpus = EncodedCorpus.open(write_synthetic_corpus(Path(scratch) / "train", args.pairs,
                                                           37_000, seed=0))
        stream = MicroBatchStream(corpus, training.tokens_per_step,
                                  training.micro_batches_per_step, training.max_source_tokens,
                                  seed=1)
        for _ in range(args.steps):
            step = device_passes(np.concatenate(stream.next_step()), corpus, max_tokens)
            passes.append(len(step))
            for indices in step:
                source = corpus.source_lengths[indices] + 1
                target = corpus.target_lengths[indices] + 1
                shape = pass_shape(source, target, max_tokens, multiple)
                shapes[shape] += 1
                packed = pass_shape(source, target, max_tokens, multiple,
                                    packed_width=training.max_source_tokens)
                packed_shapes[packed] += 1
                packed_computed += 2 * packed.tokens
                real += int(source.sum() + target.sum())
                computed += 2 * shape.tokens
                widths = [round_up(int(sizes.max()), multiple) for sizes in (source, target)]
                padded += len(indices) * sum(widths)
                bucketed_padded += 2 * shape.rows * shape.width
                scores += len(indices) * sum(width**2 for width in widths)
                bucketed_scores += 2 * shape.rows * shape.width**2
    print(f"{args.steps} steps of {training.tokens_per_step:,} tokens ({args.pairs:,} synthetic "
          f"pairs), one rank, max_tokens_per_device {max_tokens:,}")
    print(f"passes per step: mean {np.mean(passes):.3f}, max {max(passes)}")
    print(f"distinct pass shapes (training.pass_buckets): {len(shapes)}; distinct (rows, "
          f"tokens), the shapes of an attention without padded batches: "
          f"{len({(shape.rows, shape.tokens) for shape in shapes})}")
    for shape, count in sorted(shapes.items(), key=lambda item: -item[1]):
        print(f"  rows {shape.rows:5d} width {shape.width:4d} tokens {shape.tokens:6d}: "
              f"{count} passes")
    print(f"dummy tokens: {1 - real / computed:.2%} of the tokens computed")
    print(f"packed buckets (attention over packed tokens: width {training.max_source_tokens}, "
          f"rows from max_tokens_per_device / {PACKED_TOKENS_PER_ROW}): {len(packed_shapes)} "
          f"distinct shapes, dummy tokens {1 - real / packed_computed:.2%} of the tokens "
          f"computed")
    for shape, count in sorted(packed_shapes.items(), key=lambda item: -item[1]):
        print(f"  rows {shape.rows:5d} width {shape.width:4d} tokens {shape.tokens:6d}: "
              f"{count} passes")
    print(f"padding in attention's [rows, width] batches: {1 - real / padded:.1%} unbucketed, "
          f"{1 - real / bucketed_padded:.1%} bucketed; attention score entries (rows x width^2) "
          f"bucketed / unbucketed: {bucketed_scores / scores:.2f}")


def count_syncs(args) -> None:
    experiment = load_experiment(ROOT / "configs/tiny.yaml")
    variant = experiment.variant("base")
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        train = write_synthetic_corpus(folder / "train", 5_000, 8_000, seed=0)
        dev = write_synthetic_corpus(folder / "dev", 50, 8_000, seed=1)
        for buckets in (False, True):
            training = variant.training.model_copy(update={
                "steps": 100, "log_every_steps": 100, "eval_every_steps": 100,
                "precision": "fp32", "compile": False, "pass_buckets": buckets,
                "checkpoints": variant.training.checkpoints.model_copy(update={
                    "every_steps": 100})})
            trainer = build_trainer(variant.model_copy(update={"training": training}), experiment,
                                    train, dev, folder / f"run-{buckets}")
            for _ in range(2):
                trainer._train_step().outcome()
            with HostSyncCounter() as step_counter:
                queued = trainer._train_step()
            with HostSyncCounter() as reading_counter:
                queued.outcome()
            print(f"pass_buckets {buckets}: step {trainer.step} (no log, evaluation or "
                  f"checkpoint): {step_counter.total()} host synchronisations "
                  f"{dict(step_counter.methods) | dict(step_counter.operations)}; reading its "
                  f"totals once the next step is queued: "
                  f"{dict(reading_counter.methods) | dict(reading_counter.operations)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    shapes = commands.add_parser("shapes", help="passes, pass shapes and dummy tokens a step")
    shapes.add_argument("--pairs", type=int, default=200_000)
    shapes.add_argument("--steps", type=int, default=1000)
    shapes.add_argument("--max-tokens", type=int, help="default: the WMT14 configs'")
    commands.add_parser("syncs", help="host synchronisations of a real trainer step")
    args = parser.parse_args()
    {"shapes": measure_shapes, "syncs": count_syncs}[args.command](args)


if __name__ == "__main__":
    main()
