"""Training speed through the real trainer (``reproduce.training.trainer.Trainer``), with exact MFU.

A synthetic corpus with WMT-like lengths (log-normal around 26 tokens, targets correlated with
sources) and a 37k vocabulary is encoded like real data; the paper's base or big variant from
``configs/wmt14_en_de.yaml`` trains on it for a few hundred steps with its own batching (8
micro-batches of ~3.1k tokens a step, fused into device passes), precision and optimizer. Cold
throughput is the first logging window (kernels meeting shapes for the first time, compilation);
warm is the median of the later ones. FLOPs are counted exactly (reproduce.model.flops) and MFU is
against the GPU's dense bf16 peak. Prints one headline line per run, e.g.

    H100 base (trainer, warm): 912.0k target tok/s, exact MFU 36.1%, 36.5 steps/s

On a CPU ``--size cpu`` shrinks the model (N=2, d_model=256) so that a run takes a minute:

    .venv/bin/python benchmarks/trainer_speed.py --size cpu --pairs 20000 --tokens-per-step 4000 \\
        --steps 12 --log-every 4

``--size small`` is a model a user tries first on one GPU: N=3, d_model=256, 4 heads, steps of
3,000 tokens in passes of at most 3,000 (unless ``--tokens-per-step`` and
``--max-tokens-per-device`` say otherwise). Its steps are so short that the host's work per
step, not the GPU's, sets their pace: its headline is steps per second.

``--profile K`` then profiles K more steps of the trained (warm, compiled where asked) trainer
with torch.profiler: the wall time of a profiled step, the device's busy time (its kernels' time
summed), the kernels it ran and the launches the host made per step (a CUDA graph's replay is one
launch), the device's time by kind of kernel (matrix products, attention, layer normalisation...,
told by the kernels' names: ``profile_table.KERNEL_KINDS``) with the rate at which the matrix
products and attention computed their exact model FLOPs, the kernels that take the most device
time and the host operations that take the most host time; where an unprofiled step's wall time
is far above the device's busy time, the host is the bottleneck. The matrix products' rate says
how far the step can go: at 35% MFU a base step (24k target tokens) has 26 ms for everything.

``--json PATH`` also writes the figures, unrounded, as JSON (what ``gpu_check.py`` reads):
``device``, ``name``, ``size``, ``precision``, ``compile``, ``steps``, the mean tokens per step,
``padding`` (the share of the passes' ``[B, T]`` positions that hold no token: what attention
on the padded batch computes for nothing), ``dummy_tokens`` (the share of the passes' tokens that
are a bucket's dummy ones: what every layer computes for nothing), every window (``step``,
``target_tokens_per_second``, ``model_tflops_per_second``, ``mfu`` or null) and the ``cold``
and ``warm`` headlines (``target_tokens_per_second``, ``mfu`` against the GPU's peak, or null
when none is known); with ``--profile``, ``profile`` (:func:`profile_runs`' figures, per step,
and the profiled steps' ``matrix_flops`` and ``attention_flops`` a step).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from reproduce.config import Experiment
from reproduce.experiment_file import load_experiment
from reproduce.data.encoded import EncodedCorpusWriter
from reproduce.model.flops import TRAINING_MULTIPLIER, TransformerFlops, peak_flops
from reproduce.files import read_records, write_json
from reproduce.training.assembly import build_trainer
from profile_table import kernel_kinds, profile_lines, trainer_headline

ROOT = Path(__file__).resolve().parents[1]
# The reduced models of --size cpu and small, and small's tokens a step and a pass.
CPU_MODEL = {"layers": 2, "d_model": 256, "d_ff": 1024, "heads": 4, "d_k": 64, "d_v": 64}
SMALL_MODEL = {**CPU_MODEL, "layers": 3}
SMALL_TOKENS = 3_000
TOP_KERNELS, TOP_HOST_OPS = 15, 10
# The CUDA runtime and driver calls by which the host launches work on the GPU.
HOST_LAUNCHES = frozenset({"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel",
                           "cuLaunchKernelEx", "cudaGraphLaunch"})


def short_device_name(device: str) -> str:
    """How a headline names the machine: ``H100`` for ``NVIDIA H100 80GB HBM3``, ``CPU`` for
    ``cpu`` (:func:`reproduce.training.precision.device_name`'s names)."""
    return "CPU" if device == "cpu" else device.replace("NVIDIA ", "").split()[0]


def wmt_source_lengths(rng: np.random.Generator, sentences: int) -> np.ndarray:
    """WMT-like sentence lengths in tokens: log-normal around 26, between 1 and 200."""
    return np.clip(rng.lognormal(np.log(26), 0.6, sentences).astype(int), 1, 200)


def write_synthetic_corpus(directory: Path, pairs: int, vocab: int, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    source_lengths = wmt_source_lengths(rng, pairs)
    target_lengths = np.clip((source_lengths * rng.normal(1.05, 0.15, pairs)).astype(int), 1, 200)
    writer = EncodedCorpusWriter(directory, vocab, {"synthetic": True})
    for start in range(0, pairs, 100_000):
        chunk = slice(start, start + 100_000)
        writer.write([rng.integers(4, vocab, n).tolist() for n in source_lengths[chunk]],
                     [rng.integers(4, vocab, n).tolist() for n in target_lengths[chunk]])
    writer.close()
    return directory


def variant_for(experiment: Experiment, size: str, steps: int, log_every: int,
                compile_model: bool, precision: str | None, tokens_per_step: int | None,
                max_tokens_per_device: int | None = None, pass_buckets: bool = False,
                attention: str = "auto", cuda_graphs: bool = False):
    variant = experiment.variant("big" if size == "big" else "base")
    reduced = {"cpu": CPU_MODEL, "small": SMALL_MODEL}
    model = variant.model.model_copy(update=reduced[size]) if size in reduced else variant.model
    if size == "small":
        tokens_per_step = tokens_per_step or SMALL_TOKENS
        max_tokens_per_device = max_tokens_per_device or SMALL_TOKENS
    training = variant.training.model_copy(update={
        "steps": steps, "log_every_steps": log_every, "eval_every_steps": 10 * steps,
        "compile": compile_model or cuda_graphs,
        "precision": precision or variant.training.precision,
        "tokens_per_step": tokens_per_step or variant.training.tokens_per_step,
        "max_tokens_per_device": (max_tokens_per_device
                                  or variant.training.max_tokens_per_device),
        "pass_buckets": pass_buckets or cuda_graphs, "attention": attention,
        "cuda_graphs": cuda_graphs,
        "checkpoints": variant.training.checkpoints.model_copy(update={"every_steps": steps}),
    })
    return variant.model_copy(update={"model": model, "training": training})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=["cpu", "small", "base", "big"], default="cpu")
    parser.add_argument("--pairs", type=int, default=200_000, help="synthetic training pairs")
    parser.add_argument("--vocab", type=int, default=37_000)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--log-every", type=int, default=50, help="steps per throughput window")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--precision", choices=["fp32", "bf16", "fp16", "auto"],
                        help="default: the config's")
    parser.add_argument("--tokens-per-step", type=int,
                        help="default: the config's 25,000 (small: 3,000; CPUs: fewer)")
    parser.add_argument("--max-tokens-per-device", type=int,
                        help="tokens of a device pass (default: the config's; small: 3,000)")
    parser.add_argument("--pass-buckets", action="store_true",
                        help="training.pass_buckets: passes of few shapes")
    parser.add_argument("--cuda-graphs", action="store_true",
                        help="training.cuda_graphs (with pass_buckets, compiled)")
    parser.add_argument("--attention", choices=["auto", "padded", "varlen", "flex"],
                        default="auto",
                        help="training.attention")
    parser.add_argument("--profile", type=int, default=0, metavar="K",
                        help="then profile K more steps (where the time goes)")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        started = time.perf_counter()
        train = write_synthetic_corpus(folder / "train", args.pairs, args.vocab, seed=0)
        dev = write_synthetic_corpus(folder / "dev", 500, args.vocab, seed=1)
        print(f"synthetic corpus: {args.pairs} pairs in {time.perf_counter() - started:.0f} s")
        experiment = load_experiment(ROOT / "configs/wmt14_en_de.yaml")
        variant = variant_for(experiment, args.size, args.steps, args.log_every, args.compile,
                              args.precision, args.tokens_per_step,
                              args.max_tokens_per_device, args.pass_buckets, args.attention,
                              args.cuda_graphs)
        trainer = build_trainer(variant, experiment, train, dev, folder / "run")
        summary = trainer.run()
        peak_mib = (torch.cuda.max_memory_allocated() / 2**20
                    if trainer.device.type == "cuda" else None)
        windows = read_records(trainer.records.metrics_path)
        windows = [row for row in windows if "target_tokens_per_second" in row]
        profiled = None
        if args.profile:
            steps = []  # the profiled steps, for their FLOPs
            profiled = profile_runs(lambda: steps.append(trainer._train_step()), args.profile,
                                    "step", trainer.device.type == "cuda")
            profiled.update(matrix_and_attention_flops(trainer.flops, steps))

    figures = trainer_figures(summary, windows, args.size, args.compile)
    figures.update(peak_memory_mib=peak_mib, pass_buckets=variant.training.pass_buckets,
                   attention=args.attention, cuda_graphs=args.cuda_graphs,
                   max_tokens_per_device=variant.training.max_tokens_per_device,
                   passes_per_step=summary.get("mean_passes_per_step"))
    print(f"device: {figures['device']}, threads: {torch.get_num_threads()}, torch "
          f"{torch.__version__}, size: {args.size}, precision: {figures['precision']} "
          f"(training.precision: {variant.training.precision}), compile: {args.compile}")
    print(f"steps: {figures['steps']}, mean tokens per step: "
          f"{figures['mean_source_tokens_per_step']:.0f} source, "
          f"{figures['mean_target_tokens_per_step']:.0f} target; padding "
          f"{100 * figures['padding']:.1f}%, dummy tokens "
          f"{100 * figures['dummy_tokens']:.1f}%; max_tokens_per_device "
          f"{figures['max_tokens_per_device']}, pass_buckets {variant.training.pass_buckets}, "
          f"cuda_graphs {args.cuda_graphs}, attention {args.attention}, passes per step "
          f"{figures['passes_per_step']}, peak memory "
          + (f"{peak_mib:,.0f} MiB" if peak_mib is not None else "n/a"))
    print("\n| window (steps) | steps/s | target tok/s | model TFLOP/s | MFU |\n"
          "|---|---|---|---|---|")
    for row in figures["windows"]:
        mfu = f"{100 * row['mfu']:.1f}%" if row["mfu"] is not None else "n/a"
        print(f"| {row['step']} | {row['steps_per_second']:.1f} | "
              f"{row['target_tokens_per_second']:,.0f} | {row['model_tflops_per_second']:.3f} | "
              f"{mfu} |")
    for label in ("cold", "warm"):
        print(trainer_headline(figures, label))
    if profiled:
        figures["profile"] = profiled
        print("\n".join(profile_lines(profiled)))
    if args.json:
        write_json(args.json, figures)


def profile_runs(run: Callable[[], object], runs: int, unit: str, cuda: bool) -> dict:
    """``runs`` calls of ``run`` (a training step, a batch's decoding) under torch.profiler:
    per call (``unit``), the wall time; on a GPU (else None) the device's kernel time, the
    kernels it ran, and the launches the host made (:data:`HOST_LAUNCHES`: a captured graph's
    replay is one launch, whatever kernels it runs), graph replays among them, the kernels'
    time by kind (``kinds``, :func:`profile_table.kernel_kinds`); the kernels with the most
    device time and the host operations with the most host time of their own."""
    synchronize = torch.cuda.synchronize if cuda else (lambda: None)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    synchronize()
    started = time.perf_counter()
    with profile(activities=activities) as profiler:
        for _ in range(runs):
            run()
        synchronize()
    wall = time.perf_counter() - started
    kernels = defaultdict(lambda: [0.0, 0])  # name -> [microseconds, launches]
    launch_calls = Counter()  # the host's launch calls, by name
    for event in profiler.events():
        if event.device_type == DeviceType.CUDA:
            kernels[event.name][0] += event.device_time_total
            kernels[event.name][1] += 1
        elif event.name in HOST_LAUNCHES:
            launch_calls[event.name] += 1
    busy = sum(time_us for time_us, _ in kernels.values())
    host = sorted(profiler.key_averages(), key=lambda op: op.self_cpu_time_total, reverse=True)
    return {
        "unit": unit, "runs": runs, "wall_ms": 1e3 * wall / runs,
        "device_busy_ms": busy / 1e3 / runs if cuda else None,
        "kinds": kernel_kinds({name: (time_us / 1e3, launches)
                               for name, (time_us, launches) in kernels.items()}, runs),
        "kernels": sum(n for _, n in kernels.values()) / runs if cuda else None,
        "host_launches": sum(launch_calls.values()) / runs if cuda else None,
        "graph_launches": launch_calls["cudaGraphLaunch"] / runs if cuda else None,
        "top_kernels": [{"name": name, "ms": time_us / 1e3 / runs, "launches": launches / runs}
                        for name, (time_us, launches) in sorted(
                            kernels.items(), key=lambda item: -item[1][0])[:TOP_KERNELS]],
        "top_host_ops": [{"name": op.key, "self_ms": op.self_cpu_time_total / 1e3 / runs,
                          "calls": op.count / runs} for op in host[:TOP_HOST_OPS]],
    }


def matrix_and_attention_flops(flops: TransformerFlops, steps: list) -> dict:
    """The model FLOPs a step of the training ``steps`` (the trainer's queued steps): those of
    the matrix products (every token through the projections, the feed-forward networks and
    the output projection) and those of attention's products (eq. 1), which make up the rest."""
    matrix = sum(TRAINING_MULTIPLIER * (flops.per_source_token() * step.source_tokens
                                        + flops.per_target_token() * step.target_tokens)
                 for step in steps)
    attention = sum(step.flops for step in steps) - matrix
    return {"matrix_flops": matrix / len(steps), "attention_flops": attention / len(steps)}


def trainer_figures(summary: dict, windows: list[dict], size: str, compiled: bool) -> dict:
    """The run's figures: what it prints, as numbers (``--json``)."""
    device = summary["device"]
    peak = peak_flops(device) if device != "cpu" else None
    headlines = {}
    for label, rows in (("cold", windows[:1]), ("warm", windows[1:] or windows)):
        flops = statistics.median(row["model_tflops_per_second"] for row in rows) * 1e12
        headlines[label] = {
            "target_tokens_per_second": statistics.median(row["target_tokens_per_second"]
                                                          for row in rows),
            "steps_per_second": statistics.median(row["steps_per_second"] for row in rows),
            "model_tflops_per_second": flops / 1e12, "mfu": flops / peak if peak else None}
    return {
        "benchmark": "trainer_speed", "device": device,
        "name": short_device_name(device),
        "size": size, "precision": summary["precision"], "compile": compiled,
        "steps": summary["steps"],
        "mean_source_tokens_per_step": summary["mean_source_tokens_per_step"],
        "mean_target_tokens_per_step": summary["mean_target_tokens_per_step"],
        "padding": summary["padding_waste"], "dummy_tokens": summary["dummy_token_share"],
        "peak_flops": peak,
        "windows": [{"step": row["step"], "steps_per_second": row["steps_per_second"],
                     "target_tokens_per_second": row["target_tokens_per_second"],
                     "model_tflops_per_second": row["model_tflops_per_second"],
                     "mfu": row.get("mfu")} for row in windows],
        "headlines": headlines}


if __name__ == "__main__":
    main()
