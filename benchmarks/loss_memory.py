"""Peak memory and time of the output projection + label-smoothed loss, forward and backward:
the unfused path (``label_smoothed_loss(F.linear(states, W))``: every position's fp32 logits,
padding included) against the chunked one (:mod:`reproduce.training.projected_loss`: non-PAD
positions only, one chunk's logits at a time), with the backward pass recomputing the logits
(``chunked``) and with the gradients computed from the forward pass's logits, as the trainer
runs it (``gradient-with-loss``).

Base-model sizes by default (d_model 512, vocabulary 37,000), N real target tokens among
N / (1 - padding) positions. Each (path, N) runs in a fresh process so that peaks do not mix:
on a CPU the peak is the process's peak resident set (``ru_maxrss``) minus what it held once
its inputs were built; on a GPU ``torch.cuda.max_memory_allocated`` minus the memory allocated
before the pass (``--bf16``: under bf16 autocast, as the trainer runs). ``--compile``: the chunked
path's element-wise work through ``torch.compile``, as the trainer runs it where it compiles (the
first pass, which compiles, gives the peak; the later ones the time).

    .venv/bin/python benchmarks/loss_memory.py

``--json PATH`` also writes the figures, unrounded, as JSON (what ``gpu_check.py`` reads): the
``device`` and settings (``bf16``, ``compile``...), every ``rows`` entry (``path``, ``tokens``,
``projected``, ``peak_mib``, ``seconds``) and the chunked / unfused ``ratios`` per N
(``tokens``, ``memory``, ``time``, and ``gradient_with_loss_time``: that path's time over
chunked's).
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from reproduce.files import write_json
from reproduce.special_tokens import PAD
from reproduce.training.loss import label_smoothed_loss
from reproduce.training.projected_loss import projected_label_smoothed_loss, rows_per_chunk

# unfused; chunked, the backward recomputing the logits; chunked with the gradients computed
# in the forward pass from the same logits (the gradient announced: the trainer's way)
PATHS = ("unfused", "chunked", "gradient-with-loss")
LENGTH = 64  # target positions per sentence
EPSILON = 0.1


def _inputs(tokens: int, padding: float, d_model: int, vocab: int, device: torch.device):
    """States ``[B, 64, d]``, weight ``[V, d]`` and targets ``[B, 64]`` with exactly ``tokens``
    non-PAD targets, the rest (about ``padding`` of the positions) PAD at random places."""
    generator = torch.Generator().manual_seed(0)
    positions = round(tokens / (1 - padding))
    batch = -(-positions // LENGTH)
    targets = torch.randint(4, vocab, (batch * LENGTH,), generator=generator)
    targets[torch.randperm(batch * LENGTH, generator=generator)[tokens:]] = PAD
    states = torch.randn(batch, LENGTH, d_model, generator=generator)
    weight = torch.randn(vocab, d_model, generator=generator) * d_model**-0.5
    return (states.to(device).requires_grad_(), weight.to(device).requires_grad_(),
            targets.view(batch, LENGTH).to(device))


def _pass(path: str, states, weight, targets, bf16: bool, compiled: bool) -> None:
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
        if path == "unfused":
            loss, _ = label_smoothed_loss(F.linear(states, weight), targets, EPSILON)
        else:  # the target tokens alone, as the trainer's token layout gives them
            real = targets.ne(PAD)
            announced = (torch.ones((), device=states.device) if path == "gradient-with-loss"
                         else None)
            loss, _ = projected_label_smoothed_loss(states[real], weight, targets[real], EPSILON,
                                                    compiled=compiled, gradient_scale=announced)
    loss.backward()
    states.grad = weight.grad = None


def _synchronise(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def measure(path: str, tokens: int, args) -> dict:
    """One path's peak extra memory (first pass) and median seconds (later passes)."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    states, weight, targets = _inputs(tokens, args.padding, args.d_model, args.vocab, device)
    _synchronise(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        baseline = torch.cuda.memory_allocated()
    else:
        baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    started = time.perf_counter()
    _pass(path, states, weight, targets, args.bf16, args.compile)
    _synchronise(device)
    seconds = [time.perf_counter() - started]
    peak = (torch.cuda.max_memory_allocated() if device.type == "cuda"
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    for _ in range(args.repeats):
        started = time.perf_counter()
        _pass(path, states, weight, targets, args.bf16, args.compile)
        _synchronise(device)
        seconds.append(time.perf_counter() - started)
    projected = targets.numel() if path == "unfused" else tokens
    return {"path": path, "tokens": tokens, "projected": projected,
            "peak_mib": (peak - baseline) / 2**20,
            "seconds": statistics.median(seconds[1:] or seconds), "device": str(device)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, nargs="+", default=[2048, 8192],
                        help="real target tokens N")
    parser.add_argument("--padding", type=float, default=0.2, help="share of PAD target positions")
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=37000)
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed passes after the first (median kept)")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast (GPUs)")
    parser.add_argument("--compile", action="store_true",
                        help="the chunked path's element-wise work compiled (as GPUs train)")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--worker", nargs=2, metavar=("PATH", "TOKENS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(measure(args.worker[0], int(args.worker[1]), args)))
        return
    forwarded = [f"--padding={args.padding}", f"--d-model={args.d_model}", f"--vocab={args.vocab}",
                 f"--repeats={args.repeats}", *(["--bf16"] if args.bf16 else []),
                 *(["--compile"] if args.compile else [])]
    rows = []
    for tokens in args.tokens:
        for path in PATHS:
            result = subprocess.run([sys.executable, __file__, *forwarded, "--worker", path,
                                     str(tokens)],
                                    capture_output=True, text=True, check=True)
            rows.append(json.loads(result.stdout.splitlines()[-1]))
    ratios = []
    for tokens in args.tokens:
        paths = {row["path"]: row for row in rows if row["tokens"] == tokens}
        unfused, chunked, early = (paths[path] for path in PATHS)
        ratios.append({"tokens": tokens, "memory": chunked["peak_mib"] / unfused["peak_mib"],
                       "time": chunked["seconds"] / unfused["seconds"],
                       "gradient_with_loss_time": early["seconds"] / chunked["seconds"]})
    print(f"device: {rows[0]['device']}, threads: {torch.get_num_threads()}, torch "
          f"{torch.__version__}, {platform.machine()}; d_model {args.d_model}, vocab {args.vocab}, "
          f"padding {args.padding:.0%}, eps {EPSILON}, bf16 autocast: {args.bf16}, compiled "
          f"chunks: {args.compile}, chunk {rows_per_chunk(args.vocab)} rows\n")
    print("| path | target tokens N | positions projected | peak extra memory (MiB) | "
          "forward+backward (s) |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['path']} | {row['tokens']} | {row['projected']} | {row['peak_mib']:,.0f} | "
              f"{row['seconds']:.3f} |")
    print()
    for ratio in ratios:
        print(f"N {ratio['tokens']}: chunked / unfused memory {ratio['memory']:.2f}x, time "
              f"{ratio['time']:.2f}x; gradient with the loss / chunked time "
              f"{ratio['gradient_with_loss_time']:.2f}x")
    if args.json:
        figures = {"benchmark": "loss_memory", "device": rows[0]["device"],
                   "threads": torch.get_num_threads(), "d_model": args.d_model,
                   "vocab": args.vocab, "padding": args.padding, "epsilon": EPSILON,
                   "bf16": args.bf16, "compile": args.compile,
                   "chunk_rows": rows_per_chunk(args.vocab), "rows": rows, "ratios": ratios}
        write_json(args.json, figures)


if __name__ == "__main__":
    main()
