"""The whole GPU path measured by one command (``scripts/gpu-check.sh OUTDIR``), within a budget.

Steps, each a subprocess whose output goes to ``OUTDIR/logs/<step>.log`` as it runs (kept
whatever happens; a step that fails or runs out of time never stops the later ones):

1. ``pytest -m gpu`` on GPU_TEST_FILES (counts from its JUnit XML), but for the tests that
   compile trainings in several processes (RANKS_TESTS), which run last as ``pytest-gpu-ranks``;
2. ``benchmarks/varlen_attention.py``: a pass's attention, padded against varlen;
3. ``benchmarks/trainer_speed.py``: base and big through the real Trainer with the paper's
   batching (25k tokens a step, bf16), cold and warm windows and peak memory, eager then
   ``torch.compile``d, and a profile of a few more steps of each (``--profile``: where a step's
   time goes); base and big eager again with padded attention (``--attention padded``; the
   configs' ``auto`` runs varlen on GPUs); last, base compiled with CUDA graphs of bucketed
   passes (``--cuda-graphs``), padded and packed (``--attention varlen``); and the small model a
   user tries first (``--size small``: N=3, d_model 256, 3,000-token steps), eager, compiled
   and with CUDA graphs, whose figure is its steps a second;
4. ``benchmarks/beam_speed.py``: 3,003 sentences (newstest2014's size), beam 4, alpha 0.6,
   base and big, each at the config's settings (``auto``: on a GPU each step replayed as a CUDA
   graph, done sentences read every 8 steps) with worst-case lengths (and a profile of one
   batch's decoding) and with trained-like ones (``--lengths``); base eager, reading every step
   (what auto replaced); then base with trained-like lengths, eager, reading which sentences
   are done every 8 steps (``--check-every 8``), with 64 sentences a batch and with 256, in
   bf16, and with each step replayed as a CUDA graph (``--cuda-graphs``: worst-case lengths at
   64 and 256 sentences a batch, base and big; trained-like ones for base at 256; at 512
   sentences and 262,144 positions a batch, base and big in fp32 and in TF32, big in bf16);
5. ``benchmarks/decoding_precision.py``: the tiny demo's trained base (``results/tiny``, made
   by ``snakemake --cores 2 results/tiny/base/seed-1/averaged.pt`` and carried to the device),
   its dev and test sets decoded in fp32 and in TF32, then bf16: BLEU and translations changed;
6. ``benchmarks/loss_memory.py --bf16 --compile``: peak GPU memory and time, the chunked loss
   (compiled, as GPUs train) against the unfused one.

Each benchmark writes its figures as JSON (its ``--json`` option) to ``OUTDIR/logs/<step>.json``;
pytest's counts come from its JUnit XML. No printed line is read back: the logs are for people.
Then ``OUTDIR/gpu-report.md`` (and the same figures in ``gpu-report.json``): the machine, every
step's status and seconds, every figure of those files, and the headline lines that BENCHMARKS.md
takes. A step that did not finish, or left no readable figures, shows its status and the tail of
its log, never a number. Steps run in the order above except that the compiled trainer runs, then
``pytest-gpu-ranks``, come last: they are the slowest to start, so a budget cut loses them first.
``--only PATTERN...``
runs the steps whose names match (a device call too short for all of them).

Without CUDA the same command is a **smoke mode**: the reduced model (``--size cpu``), tiny
inputs, no compilation, a minute or two on a CPU, so that the command is tested in CI.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import asdict, dataclass, field
from pathlib import Path

from profile_table import (attention_table, beam_headline, precision_headline, precision_lines,
                           profile_lines, search_flops_line, steps_line, trainer_headline)

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
DEFAULT_BUDGET_SECONDS = 540  # 9 minutes: a 10-minute device call also installs wheels
REPORT_SECONDS = 10  # kept back from the budget for the report itself
SHORTEST_USEFUL_STEP = 20  # seconds; a step offered less is not started
TAIL_LINES = 40
GPU_TEST_FILES = ["tests/test_gpu.py", "tests/test_packed_attention.py",
                  "tests/test_token_dropout.py"]  # every file with `gpu` tests
# The gpu tests that compile a training in several processes: a step of their own, run last.
RANKS_TESTS = "replaying_captured_passes"
# Beam search's batches where memory, not the CPU's default, bounds them: up to 512 sentences and
# 262,144 cached positions (beam x (longest source + 50) a sentence).
GPU_BATCHES = ["--sentences-per-batch", "512", "--tokens-per-batch", "262144"]

PROBE = """
import json, platform, torch
cuda = torch.cuda.is_available()
print(json.dumps({
    "cuda": cuda, "torch": torch.__version__, "cuda_runtime": torch.version.cuda,
    "cudnn": torch.backends.cudnn.version() if cuda else None,
    "gpu": torch.cuda.get_device_name(0) if cuda else None,
    "gpus": torch.cuda.device_count() if cuda else 0,
    "python": platform.python_version(), "processor": platform.processor() or platform.machine(),
    "cpus": __import__("os").cpu_count(),
}))
"""


@dataclass(frozen=True)
class Step:
    name: str  # the log's file name, and the key of its figures
    title: str
    kind: str  # its figures': pytest, trainer, beam, attention, decoding_precision, loss_memory
    arguments: list[str]  # after the python executable
    cap_seconds: float
    compiled: bool = False


@dataclass
class Outcome:
    step: Step
    status: str  # "ok", "failed (exit N)", "timed out after N s", "not run: why"
    seconds: float = 0.0
    figures: dict = field(default_factory=dict)
    tail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def plan(cuda: bool, logs: Path) -> list[Step]:
    """The steps of a GPU run (full sizes), or of the CPU smoke mode (tiny sizes)."""
    pytest = _pytest(logs, "pytest-gpu", f"not {RANKS_TESTS}")
    if not cuda:
        trainer = ["--pairs", "2000", "--vocab", "500", "--tokens-per-step", "2000", "--steps",
                   "4", "--log-every", "2", "--profile", "1"]
        return [pytest,
                _trainer(logs, "cpu", trainer, 120),
                _beam(logs, "cpu", ["--sentences", "12", "--vocab", "500", "--profile"], 90),
                _beam(logs, "cpu", ["--sentences", "12", "--vocab", "500", "--lengths",
                                    "trained", "--check-every", "4"], 90, "trained-check4"),
                _beam(logs, "cpu", ["--sentences", "12", "--vocab", "500", "--lengths",
                                    "trained", "--check-every", "4", "--cuda-graphs"], 90,
                      "trained-check4-graphs"),
                _loss_memory(logs, "loss memory, fused vs unfused",
                             ["--tokens", "64", "--vocab", "500", "--d-model", "16", "--repeats",
                              "1"]),
                _attention(logs, ["--tokens", "256", "--repeats", "1"]),
                _trainer(logs, "cpu", [*trainer, "--max-tokens-per-device", "1000",
                                       "--attention", "varlen"], 120, variant="varlen")]
    # 100,000 pairs hold ~110 steps of 25k tokens: no step count below re-reads the corpus.
    base = ["--pairs", "100000", "--steps", "40", "--log-every", "10", "--precision", "bf16",
            "--profile", "4"]
    big = ["--pairs", "100000", "--steps", "24", "--log-every", "6", "--precision", "bf16",
           "--profile", "3"]
    # The configs' attention (varlen on GPUs) against the padded batch's: time and peak memory.
    padded = ["--attention", "padded"]
    # A first model of one's own (N=3, d_model 256, 3,000-token steps): how many steps a second.
    small = ["--pairs", "100000", "--steps", "400", "--log-every", "100", "--precision", "bf16",
             "--profile", "10"]
    return [pytest,
            _attention(logs, []),
            _trainer(logs, "base", base, 90),
            _trainer(logs, "big", big, 120),
            _trainer(logs, "base", [*base, *padded], 90, variant="padded"),
            _trainer(logs, "big", [*big, *padded], 120, variant="padded"),
            _trainer(logs, "small", small, 60),
            _beam(logs, "base", ["--profile"], 90),
            # The defaults before auto turned graphs on (each step eager, done read every step).
            _beam(logs, "base", ["--no-cuda-graphs", "--check-every", "1"], 90, "eager"),
            _beam(logs, "base", ["--lengths", "trained"], 60, "trained"),
            _beam(logs, "big", ["--profile"], 120),
            _beam(logs, "big", ["--lengths", "trained"], 60, "trained"),
            _beam(logs, "base", ["--lengths", "trained", "--check-every", "8",
                                 "--no-cuda-graphs"], 60, "trained-check8"),
            _beam(logs, "base", ["--lengths", "trained", "--check-every", "8",
                                 "--no-cuda-graphs", "--sentences-per-batch", "256"], 60,
                  "trained-check8-256"),
            _beam(logs, "base", ["--precision", "bf16"], 90, "bf16"),
            # The decoder's steps replayed as CUDA graphs (decoding.cuda_graphs).
            _beam(logs, "base", ["--check-every", "8", "--cuda-graphs"], 90, "check8-graphs"),
            _beam(logs, "base", ["--check-every", "8", "--cuda-graphs", "--sentences-per-batch",
                                 "256"], 90, "check8-256-graphs"),
            _beam(logs, "big", ["--check-every", "8", "--cuda-graphs"], 120, "check8-graphs"),
            _beam(logs, "big", ["--check-every", "8", "--cuda-graphs", "--sentences-per-batch",
                                "256"], 120, "check8-256-graphs"),
            _beam(logs, "base", ["--lengths", "trained", "--check-every", "8", "--cuda-graphs",
                                 "--sentences-per-batch", "256", "--profile"], 60,
                  "trained-check8-256-graphs"),
            # Batches sized by a GPU's memory (4x the default positions: 6.4 GB of fp32 keys
            # and values for base, 12.9 GB for big), in fp32, then TF32 products, and big in
            # bf16.
            _beam(logs, "base", [*GPU_BATCHES, "--check-every", "8", "--cuda-graphs"], 90,
                  "check8-512-graphs"),
            _beam(logs, "big", [*GPU_BATCHES, "--check-every", "8", "--cuda-graphs"], 120,
                  "check8-512-graphs"),
            # The same with every step reading its whole buffer of keys and values, as before
            # the window (a stride above any output's length).
            _beam(logs, "base", [*GPU_BATCHES, "--check-every", "8", "--cuda-graphs",
                                 "--window-stride", "100000"], 90,
                  "check8-512-graphs-whole-buffer"),
            # Attention as matrix products (SDPA's math kernel), where the efficient kernel
            # spends a tile of queries on a step's one.
            _beam(logs, "base", [*GPU_BATCHES, "--check-every", "8", "--cuda-graphs",
                                 "--attention-kernels", "math"], 90, "check8-512-graphs-math"),
            _beam(logs, "big", [*GPU_BATCHES, "--check-every", "8", "--cuda-graphs",
                                "--attention-kernels", "math"], 120, "check8-512-graphs-math"),
            _beam(logs, "base", [*GPU_BATCHES, "--check-every", "8", "--cuda-graphs",
                                 "--precision", "tf32"], 90, "check8-512-graphs-tf32"),
            _beam(logs, "big", [*GPU_BATCHES, "--check-every", "8", "--cuda-graphs",
                                "--precision", "tf32"], 120, "check8-512-graphs-tf32"),
            _beam(logs, "big", [*GPU_BATCHES, "--check-every", "8", "--cuda-graphs",
                                "--precision", "bf16"], 120, "check8-512-graphs-bf16"),
            # What TF32 and bf16 do to a trained model's translations: the tiny demo's base
            # (results/tiny, which the device call carries), dev and test.
            *(_decoding_precision(logs, precision, split) for precision in ("tf32", "bf16")
              for split in ("dev", "test")),
            _loss_memory(logs, "loss memory, fused (compiled) vs unfused (bf16)",
                         ["--bf16", "--compile"]),
            # H200, 2026-11-26: the compiled base run took 139 s, three compilations among its
            # first 20 steps
            _trainer(logs, "base", base, 170, compiled=True),
            _trainer(logs, "big", big, 200, compiled=True),
            _trainer(logs, "base", [*base, "--cuda-graphs"], 200, compiled=True,
                     variant="graphs"),
            _trainer(logs, "base", [*base, "--cuda-graphs", "--attention", "varlen"], 200,
                     compiled=True, variant="graphs-varlen"),
            # FlexAttention's shared tiles in place of a tile a sentence (not yet run on a GPU)
            _trainer(logs, "base", [*base, "--attention", "flex", "--pass-buckets"], 200,
                     compiled=True, variant="flex"),
            _trainer(logs, "base", [*base, "--cuda-graphs", "--attention", "flex"], 200,
                     compiled=True, variant="graphs-flex"),
            _trainer(logs, "small", small, 150, compiled=True),
            _trainer(logs, "small", [*small, "--cuda-graphs"], 200, compiled=True,
                     variant="graphs"),
            _pytest(logs, "pytest-gpu-ranks", RANKS_TESTS)]


def _pytest(logs: Path, name: str, selected: str) -> Step:
    """``pytest -m gpu`` on GPU_TEST_FILES, the tests whose names ``selected`` (``-k``) picks."""
    return Step(name, f"pytest -m gpu -k '{selected}'", "pytest",
                ["-m", "pytest", "-m", "gpu", "-k", selected, "-ra", "-v", "--durations=20",
                 "-p", "no:cacheprovider", *GPU_TEST_FILES,
                 f"--junitxml={junit_file(logs, name)}"],
                cap_seconds=300)


def figures_file(logs: Path, name: str) -> Path:
    """Where the step ``name`` writes its figures (a benchmark's ``--json``)."""
    return logs / f"{name}.json"


def junit_file(logs: Path, name: str) -> Path:
    """Where the pytest step ``name`` writes its JUnit XML."""
    return logs / f"{name}.xml"


def _trainer(logs: Path, size: str, options: list[str], cap: float,
             compiled: bool = False, variant: str = "") -> Step:
    how = "compiled" if compiled else "eager"
    name, title = f"trainer-{size}-{how}", f"trainer, {size}, {how}"
    if variant:
        name, title = f"{name}-{variant}", f"{title}, {variant}"
    return Step(name, title, "trainer",
                [str(BENCHMARKS / "trainer_speed.py"), "--size", size, *options,
                 *(["--compile"] if compiled else []), "--json",
                 str(figures_file(logs, name))], cap, compiled)


def _beam(logs: Path, size: str, options: list[str], cap: float, variant: str = "") -> Step:
    name, title = f"beam-{size}", f"beam search, {size}"
    if variant:
        name, title = f"{name}-{variant}", f"{title}, {variant}"
    return Step(name, title, "beam",
                [str(BENCHMARKS / "beam_speed.py"), "--size", size, *options, "--json",
                 str(figures_file(logs, name))], cap)


def _decoding_precision(logs: Path, precision: str, split: str) -> Step:
    """The tiny demo's trained base (``snakemake --cores 2 results/tiny/base/seed-1/averaged.pt``
    makes it) decoding ``split`` in fp32 and in ``precision``."""
    name, tiny = f"decoding-precision-{precision}-{split}", ROOT / "results/tiny"
    return Step(name, f"decoding in {precision} vs fp32, tiny base, {split}", "decoding_precision",
                [str(BENCHMARKS / "decoding_precision.py"), "--experiment",
                 str(ROOT / "configs/tiny.yaml"), "--variant", "base", "--checkpoint",
                 str(tiny / "base/seed-1/averaged.pt"), "--spm-model", str(tiny / "bpe/spm.model"),
                 "--source", str(tiny / f"data/{split}.src"), "--reference",
                 str(tiny / f"data/{split}.ref"), "--precision", precision, "--json",
                 str(figures_file(logs, name))], cap_seconds=60)


def _attention(logs: Path, options: list[str]) -> Step:
    return Step("varlen-attention", "attention, padded vs varlen", "attention",
                [str(BENCHMARKS / "varlen_attention.py"), *options, "--json",
                 str(figures_file(logs, "varlen-attention"))], cap_seconds=60)


def _loss_memory(logs: Path, title: str, options: list[str]) -> Step:
    return Step("loss-memory", title, "loss_memory",
                [str(BENCHMARKS / "loss_memory.py"), *options, "--json",
                 str(figures_file(logs, "loss-memory"))], cap_seconds=90)


# -- running ------------------------------------------------------------------------------------
def run_step(step: Step, python: str, logs: Path, seconds_left: float) -> Outcome:
    """Run one step, its output into its log; killed with its whole process group (compile
    workers, spawned ranks) when it outlasts its cap or the budget's remainder."""
    limit = min(step.cap_seconds, seconds_left)
    if limit < SHORTEST_USEFUL_STEP:
        return Outcome(step, f"not run: {seconds_left:.0f} s of the budget left")
    log = logs / f"{step.name}.log"
    for earlier in (figures_file(logs, step.name), junit_file(logs, step.name)):
        earlier.unlink(missing_ok=True)  # an earlier run's figures are not this one's
    started = time.monotonic()
    with log.open("w") as stream:
        stream.write(f"$ {python} {' '.join(step.arguments)}\n")
        stream.flush()
        process = subprocess.Popen([python, *step.arguments], cwd=ROOT, stdout=stream,
                                   stderr=subprocess.STDOUT, start_new_session=True,
                                   env=os.environ | {"PYTHONUNBUFFERED": "1"})
        try:
            code = process.wait(timeout=limit)
            status = "ok" if code == 0 else f"failed (exit {code})"
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            status = f"timed out after {limit:.0f} s"
    return read_figures(Outcome(step, status, time.monotonic() - started), logs)


def read_figures(outcome: Outcome, logs: Path) -> Outcome:
    """The figures of a step that finished: a benchmark's JSON file (``--json``), pytest's JUnit
    XML. A step without them, or with figures that cannot be reported, counts as failed. pytest's
    counts are read whether or not tests failed (they are the result); a step that did not
    finish gets its log's tail instead, never a number."""
    text = (logs / f"{outcome.step.name}.log").read_text(errors="replace")
    tail = "\n".join(text.splitlines()[-TAIL_LINES:])
    if outcome.ok or (outcome.step.kind == "pytest" and outcome.status == "failed (exit 1)"):
        try:
            outcome.figures = READERS[outcome.step.kind](outcome.step, logs)
            _figure_lines(outcome)  # every figure the report shows is there and a number
            headlines([outcome], "")
        except MissingFigures as error:
            outcome.status, outcome.figures = f"failed (no figures: {error})", {}
        except (OSError, ValueError, KeyError, TypeError, ElementTree.ParseError) as error:
            outcome.status, outcome.figures = f"failed (figures unreadable: {error!r})", {}
    if not outcome.ok:
        outcome.tail = tail
    return outcome


def probe_machine(python: str) -> dict:
    """Torch, CUDA and the GPU as the steps' python sees them (in a process of its own, so that
    this one holds no CUDA context), and the driver from nvidia-smi."""
    result = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, cwd=ROOT,
                            check=True)
    machine = json.loads(result.stdout.splitlines()[-1])
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=60)
        machine["nvidia_smi"] = smi.stdout.strip().splitlines()[0] if smi.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, IndexError):
        machine["nvidia_smi"] = None
    return machine


# -- figures ------------------------------------------------------------------------------------
class MissingFigures(ValueError):
    """A step exited 0 but wrote no figures."""


def read_json_figures(step: Step, logs: Path) -> dict:
    path = figures_file(logs, step.name)
    if not path.exists():
        raise MissingFigures(f"{path.name} was not written")
    return json.loads(path.read_text())


def read_pytest(step: Step, logs: Path) -> dict:
    """Counts from the JUnit XML, and a line for each test that failed, erred or was skipped
    (with pytest's message), as ``-ra`` summarises them."""
    path = junit_file(logs, step.name)
    if not path.exists():
        raise MissingFigures(f"{path.name} was not written")
    suite = ElementTree.parse(path).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    summary = []
    for case in suite.iter("testcase"):
        for outcome in case:
            label = JUNIT_OUTCOMES.get(outcome.tag)
            if label:
                test = f"{case.get('classname', '')}::{case.get('name', '')}"
                message = (outcome.get("message") or "").splitlines()
                summary.append(f"{label} {test}" + (f" - {message[0]}" if message else ""))
    return {"counts": counts, "summary": summary}


JUNIT_OUTCOMES = {"failure": "FAILED", "error": "ERROR", "skipped": "SKIPPED"}
READERS = {"trainer": read_json_figures, "beam": read_json_figures,
           "attention": read_json_figures, "decoding_precision": read_json_figures,
           "loss_memory": read_json_figures, "pytest": read_pytest}


# -- report -------------------------------------------------------------------------------------
def _shown(arguments: list[str]) -> list[str]:
    """A step's arguments with paths relative to the repository (as BENCHMARKS.md quotes them)."""
    return [argument.replace(f"{ROOT}/", "") for argument in arguments]


def device_label(machine: dict) -> str:
    """"H100" for an NVIDIA H100 80GB HBM3, as trainer_speed.py and beam_speed.py name it."""
    return machine["gpu"].replace("NVIDIA ", "").split()[0] if machine["cuda"] else "CPU"


def _percent(share: float | None, missing: str) -> str:
    return f"{100 * share:.1f}%" if share is not None else missing


def headlines(outcomes: list[Outcome], device: str) -> list[str]:
    """The lines BENCHMARKS.md takes, from the figures of the steps that finished (as the
    benchmarks print them)."""
    lines = []
    for outcome in outcomes:
        if not outcome.ok:
            continue
        figures = outcome.figures
        if outcome.step.kind == "trainer":
            how = "trainer, compiled" if outcome.step.compiled else "trainer"
            lines += [trainer_headline(figures, window, how) for window in ("cold", "warm")]
        elif outcome.step.kind == "beam":
            lines.append(beam_headline(figures))
        elif outcome.step.kind == "decoding_precision":
            lines.append(precision_headline(figures, device, _shown([figures["source"]])[0]))
        elif outcome.step.kind == "loss_memory":
            for ratio in figures["ratios"]:
                lines.append(f"{device} loss (bf16 autocast: {figures['bf16']}, compiled "
                             f"chunks: {figures['compile']}, N {ratio['tokens']}): chunked / "
                             f"unfused peak memory "
                             f"{ratio['memory']:.2f}x, time {ratio['time']:.2f}x; gradient "
                             f"with the loss / chunked time "
                             f"{ratio['gradient_with_loss_time']:.2f}x")
    return lines


def _machine_lines(machine: dict, mode: str, budget: float, spent: float) -> list[str]:
    gpu = (f"{machine['gpu']} x{machine['gpus']}" if machine["cuda"] else "none (CUDA not "
           "available)")
    return [f"* mode: {mode}",
            f"* GPU: {gpu}; nvidia-smi (name, driver, memory): {machine['nvidia_smi'] or 'n/a'}",
            f"* torch {machine['torch']}, CUDA runtime {machine['cuda_runtime']}, cuDNN "
            f"{machine['cudnn']}, Python {machine['python']}",
            f"* host: {machine['processor']}, {machine['cpus']} CPUs",
            f"* budget {budget:.0f} s, spent {spent:.0f} s"]


def _figure_lines(outcome: Outcome) -> list[str]:
    figures, kind = outcome.figures, outcome.step.kind
    if kind == "pytest":
        counts = figures["counts"]
        lines = [f"{counts['passed']} passed, {counts['failures']} failed, {counts['errors']} "
                 f"errors, {counts['skipped']} skipped (of {counts['tests']})"]
        return lines + ["", "```", *figures["summary"], "```"] if figures["summary"] else lines
    if kind == "trainer":
        lines = [f"{figures['steps']} steps in {figures['precision']}, mean tokens per step "
                 f"{figures['mean_source_tokens_per_step']:.0f} source / "
                 f"{figures['mean_target_tokens_per_step']:.0f} target, padding "
                 f"{100 * figures['padding']:.1f}%, dummy tokens "
                 f"{100 * figures['dummy_tokens']:.1f}%; max_tokens_per_device "
                 f"{figures['max_tokens_per_device']}, {figures['passes_per_step']:.2f} passes a "
                 f"step, peak memory {_mib(figures['peak_memory_mib'])}", "",
                 "| window ends at step | steps/s | target tok/s | model TFLOP/s | MFU |",
                 "|---|---|---|---|---|"]
        lines += [f"| {w['step']} | {w['steps_per_second']:.1f} | "
                  f"{w['target_tokens_per_second']:,.0f} | {w['model_tflops_per_second']:.3f} | "
                  f"{_percent(w['mfu'], 'n/a')} |" for w in figures["windows"]]
        return lines + _profile(figures)
    if kind == "beam":
        return [f"{figures['lengths']} lengths; {figures['sentences']} sentences, "
                f"{figures['source_tokens']:,} source tokens, "
                f"{figures['generated_tokens']:,} generated tokens in {figures['seconds']:.1f} s:"
                f" {figures['sentences_per_second']:,.1f} sentences/s, "
                f"{figures['generated_tokens_per_second']:,.0f} generated tok/s",
                steps_line(figures["steps"]), search_flops_line(figures), *_profile(figures)]
    if kind == "attention":
        return attention_table(figures["rows"])
    if kind == "decoding_precision":
        return precision_lines(figures)
    lines = ["| path | target tokens N | positions projected | peak extra memory (MiB) | "
             "forward+backward (s) |", "|---|---|---|---|---|"]
    lines += [f"| {r['path']} | {r['tokens']} | {r['projected']} | {r['peak_mib']:,.0f} | "
              f"{r['seconds']:.3f} |" for r in figures["rows"]]
    return lines


def _mib(value: float | None) -> str:
    return f"{value:,.0f} MiB" if value is not None else "n/a"


def _profile(figures: dict) -> list[str]:
    return ["", *profile_lines(figures["profile"])] if "profile" in figures else []


def render_report(machine: dict, mode: str, outcomes: list[Outcome], budget: float,
                  spent: float) -> str:
    lines = ["# GPU check", "", *_machine_lines(machine, mode, budget, spent), "",
             "## Steps", "", "| step | status | seconds | log |", "|---|---|---|---|"]
    lines += [f"| {o.step.title} | {o.status} | {o.seconds:.0f} | logs/{o.step.name}.log |"
              for o in outcomes]
    lines += ["", "## Headlines (for BENCHMARKS.md)", "", "```",
              *headlines(outcomes, device_label(machine)), "```"]
    for outcome in outcomes:
        lines += ["", f"## {outcome.step.title}: {outcome.status}", "",
                  f"`python {' '.join(_shown(outcome.step.arguments))}`", ""]
        if outcome.figures:
            lines += _figure_lines(outcome)
        if outcome.tail:
            lines += [*([""] if outcome.figures else []),
                      f"Last {TAIL_LINES} lines of logs/{outcome.step.name}.log:", "", "```",
                      outcome.tail, "```"]
    return "\n".join(lines) + "\n"


def report_json(machine: dict, mode: str, outcomes: list[Outcome], spent: float) -> dict:
    return {"machine": machine, "mode": mode, "seconds": spent,
            "headlines": headlines(outcomes, device_label(machine)),
            "steps": [{"name": o.step.name, "title": o.step.title, "status": o.status,
                       "seconds": o.seconds, "figures": o.figures, "step": asdict(o.step)}
                      for o in outcomes]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--python", default=sys.executable, help="the python the steps run with")
    parser.add_argument("--budget", type=float, default=DEFAULT_BUDGET_SECONDS,
                        help="seconds for every step together (the report included)")
    parser.add_argument("--only", nargs="+", metavar="PATTERN",
                        help="run only the steps whose names match one of these glob patterns "
                             "(e.g. 'trainer-*-32k' 'pytest-gpu'), in the plan's order")
    args = parser.parse_args()
    started = time.monotonic()
    logs = args.outdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    machine = probe_machine(args.python)
    mode = "gpu" if machine["cuda"] else "cpu smoke (no CUDA: reduced model, tiny inputs)"
    outcomes = []
    for step in plan(machine["cuda"], logs):
        if args.only and not any(fnmatch.fnmatch(step.name, p) for p in args.only):
            continue
        left = args.budget - REPORT_SECONDS - (time.monotonic() - started)
        outcome = run_step(step, args.python, logs, left)
        print(f"gpu-check: {step.title}: {outcome.status} ({outcome.seconds:.0f} s)", flush=True)
        outcomes.append(outcome)
    spent = time.monotonic() - started
    (args.outdir / "gpu-report.md").write_text(
        render_report(machine, mode, outcomes, args.budget, spent))
    (args.outdir / "gpu-report.json").write_text(
        json.dumps(report_json(machine, mode, outcomes, spent), indent=2) + "\n")
    print(f"gpu-check: report in {args.outdir / 'gpu-report.md'}")


if __name__ == "__main__":
    main()
