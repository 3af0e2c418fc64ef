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

``launches``: the real trainer, compiled as a GPU runs it with ``training.cuda_graphs`` (the
pass, loss included, through torch.compile; pass_buckets), one rank, the WMT14 base's
architecture (6 + 6 layers: its parameter tensors, one by one) at narrow widths, so that this CPU
compiles and runs it, with the base's batching (25k tokens a step, one pass of at most 32,768)
and a 37k vocabulary (the loss's chunks). After two warm-up steps, one step that neither logs
nor checkpoints runs under torch.profiler, which counts the calls of the compiled graphs
(forward and backward: each one graph replay on a GPU with cuda_graphs) and the ATen operations
outside them, those that launch work on a GPU: views, allocations and conversions that copy
nothing are left out. A kernel launch from the host is what each costs there (a multi-tensor
one such as fused Adam's launches one kernel per few dozen tensors).

    .venv/bin/python benchmarks/step_shapes.py shapes
    .venv/bin/python benchmarks/step_shapes.py syncs
    .venv/bin/python benchmarks/step_shapes.py launches
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


# ATen operations that launch nothing on a GPU: views and metadata, allocations.
LAUNCH_FREE = frozenset({
    "aten::view", "aten::_unsafe_view", "aten::as_strided", "aten::alias", "aten::detach",
    "aten::t", "aten::transpose", "aten::permute", "aten::reshape", "aten::expand",
    "aten::unsqueeze", "aten::squeeze", "aten::slice", "aten::select", "aten::narrow",
    "aten::split", "aten::split_with_sizes", "aten::unbind", "aten::numpy_T",
    "aten::lift_fresh", "aten::resolve_conj", "aten::resolve_neg", "aten::result_type",
    "aten::promote_types", "aten::empty", "aten::empty_strided", "aten::empty_like"})
# Profiler ranges of compiled code: what a GPU replays as one captured graph each.
COMPILED_GRAPH = "## Call CompiledFxGraph"


def _outside_compiled_graphs(event) -> bool:
    """Whether a profiler event is an ATen operation called from Python or autograd, not from
    inside another operation nor from a compiled graph."""
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith(("aten::", COMPILED_GRAPH)):
            return False
        parent = parent.cpu_parent
    return True


def _launches(event) -> bool:
    """Whether an ATen operation launches work on a GPU: not a view nor an allocation, and a
    conversion (``to``) only where it copies."""
    if event.name in LAUNCH_FREE:
        return False
    if event.name == "aten::to":
        return any(child.name == "aten::_to_copy" for child in event.cpu_children)
    return True


def compiled_graphs_and_launches(events) -> tuple[int, Counter]:
    """Among torch.profiler's ``events``: the calls of compiled graphs (not those that one of them
    makes: a captured graph holds them), and the ATen operations outside them that launch work on
    a GPU, by name."""
    graphs = sum(event.name.startswith(COMPILED_GRAPH) and _outside_compiled_graphs(event)
                 for event in events)
    outside = Counter(event.name for event in events if event.name.startswith("aten::")
                      and _outside_compiled_graphs(event) and _launches(event))
    return graphs, outside


def count_launches(args) -> None:
    from torch.profiler import ProfilerActivity, profile

    experiment = load_experiment(ROOT / "configs/wmt14_en_de.yaml")
    variant = experiment.variant("base")
    narrow = {"d_model": 32, "d_ff": 64, "heads": 8, "d_k": 4, "d_v": 4}
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        train = write_synthetic_corpus(folder / "train", 20_000, 37_000, seed=0)
        dev = write_synthetic_corpus(folder / "dev", 50, 37_000, seed=1)
        training = variant.training.model_copy(update={
            "steps": 100, "log_every_steps": 100, "eval_every_steps": 100, "precision": "fp32",
            "compile": True, "pass_buckets": True, "cuda_graphs": True,
            "checkpoints": variant.training.checkpoints.model_copy(update={"every_steps": 100})})
        variant = variant.model_copy(update={"model": variant.model.model_copy(update=narrow),
                                             "training": training})
        trainer = build_trainer(variant, experiment, train, dev, folder / "run")
        for _ in range(2):
            trainer._train_step().outcome()
        with profile(activities=[ProfilerActivity.CPU]) as profiler:
            trainer._train_step()
    graphs, outside = compiled_graphs_and_launches(profiler.events())
    parameters = sum(1 for _ in trainer.model.parameters())
    print(f"base's architecture (6 + 6 layers, {parameters} parameter tensors), compiled, "
          f"pass_buckets, one pass a step: a step calls {graphs} compiled graphs and "
          f"{sum(outside.values())} ATen operations outside them that launch work on a GPU")
    for name, count in outside.most_common():
        print(f"  {count:4d} {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    shapes = commands.add_parser("shapes", help="passes, pass shapes and dummy tokens a step")
    shapes.add_argument("--pairs", type=int, default=200_000)
    shapes.add_argument("--steps", type=int, default=1000)
    shapes.add_argument("--max-tokens", type=int, help="default: the WMT14 configs'")
    commands.add_parser("syncs", help="host synchronisations of a real trainer step")
    commands.add_parser("launches", help="compiled graphs and other operations of a step")
    args = parser.parse_args()
    {"shapes": measure_shapes, "syncs": count_syncs,
     "launches": count_launches}[args.command](args)


if __name__ == "__main__":
    main()
