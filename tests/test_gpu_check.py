"""scripts/gpu-check.sh: its CPU smoke mode end to end (the report's figures are those of the
JSON each benchmark writes, shown as the benchmark prints them in its log), and how a step that
fails, writes no figures, outlasts its time or finds no budget is reported."""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))  # what gpu_check.py imports beside it, as a script
_spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks/gpu_check.py")
gpu_check = sys.modules.setdefault("gpu_check", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(gpu_check)  # benchmarks/ is no package: loaded from its file

MACHINE = {"cuda": False, "torch": "2.x", "cuda_runtime": None, "cudnn": None, "gpu": None,
           "gpus": 0, "python": "3.12", "processor": "x86_64", "cpus": 2, "nvidia_smi": None}


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("gpu-check")
    result = subprocess.run([str(ROOT / "scripts/gpu-check.sh"), str(outdir)], capture_output=True,
                            text=True, timeout=600, env=os.environ | {"PYTHON": sys.executable})
    assert result.returncode == 0, result.stderr[-3000:]
    return outdir


def _log(outdir: Path, step: str) -> str:
    return (outdir / "logs" / f"{step}.log").read_text()


def _lines_with(text: str, pattern: str) -> list[str]:
    return [line for line in text.splitlines() if re.search(pattern, line)]


needs_no_cuda = pytest.mark.skipif(torch.cuda.is_available(),
                                   reason="with CUDA the command measures for minutes (the "
                                          "device call of BENCHMARKS.md)")


@needs_no_cuda
def test_the_smoke_report_holds_every_step_ok_and_the_headlines_of_their_logs(smoke_run):
    report = (smoke_run / "gpu-report.md").read_text()
    steps = gpu_check.plan(cuda=False, logs=smoke_run / "logs")
    assert [step.name for step in steps] == ["pytest-gpu", "trainer-cpu-eager", "beam-cpu",
                                             "beam-cpu-trained-check4",
                                             "beam-cpu-trained-check4-graphs", "loss-memory",
                                             "varlen-attention", "trainer-cpu-eager-varlen"]
    assert "* mode: cpu smoke" in report and "## Headlines (for BENCHMARKS.md)" in report
    for step in steps:
        assert f"| {step.title} | ok |" in report and f"## {step.title}: ok" in report
    trainer, beam = _log(smoke_run, "trainer-cpu-eager"), _log(smoke_run, "beam-cpu")
    headlines = _lines_with(trainer, r"^CPU cpu \(trainer, (cold|warm)\): ")
    headlines += _lines_with(beam, r"^CPU cpu \(beam 4, alpha 0.6, 12 sentences, worst "
                                   r"lengths, check_every=1 \(auto\), cuda_graphs=False "
                                   r"\(auto\)\): ")
    headlines += _lines_with(_log(smoke_run, "beam-cpu-trained-check4"),
                             r"^CPU cpu \(beam 4, alpha 0.6, 12 sentences, trained lengths, "
                             r"check_every=4, cuda_graphs=False \(auto\)\): ")
    assert len(headlines) == 4
    block = report.split("## Headlines (for BENCHMARKS.md)")[1].split("```")[1]
    assert all(line in block.splitlines() for line in headlines)
    # every throughput window and every loss-memory row of the logs, as the logs print them
    windows = _lines_with(trainer, r"^\| \d+ \| [\d.]+ \| [\d,]+ \| [\d.]+ \| n/a \|$")
    rows = _lines_with(_log(smoke_run, "loss-memory"), r"^\| (unfused|chunked) \| 64 \|")
    attention = _lines_with(_log(smoke_run, "varlen-attention"),
                            r"^\| [\d,]+ \| (base|big) \| (encoder|decoder|cross) \|")
    assert len(windows) == 2 and len(rows) == 2 and len(attention) == 6
    assert all(line in report.splitlines() for line in windows + rows + attention)
    # the profiles of the trainer's further step and of a batch's decoding, as the logs print
    # them: a headline and the ten host operations with the most host time (ATen's, autograd's,
    # the loss's own operator, ...)
    for log, unit in ((trainer, "step"), (beam, "batch")):
        profile = _lines_with(log, rf"^(profiled 1 x {unit}: |\| `[^`]+` \| [\d.]+ \| [\d,]+ \|$)")
        assert len(profile) == 11 and all(line in report.splitlines() for line in profile)
    # gpu-report.json holds each benchmark's own JSON, whole
    summary = json.loads((smoke_run / "gpu-report.json").read_text())
    for step in summary["steps"][1:]:
        written = json.loads((smoke_run / "logs" / f"{step['name']}.json").read_text())
        assert step["figures"] == written and written["benchmark"] in step["step"]["arguments"][0]
    assert summary["headlines"] == block.splitlines()[1:]


def test_the_gpu_step_runs_every_file_that_holds_gpu_tests():
    """A ``gpu`` test in a file the step does not list would never run on a GPU."""
    marked = re.compile(r"^\s*@pytest\.mark\.gpu|marks=pytest\.mark\.gpu|^pytestmark = .*gpu", re.M)
    holding = {f"tests/{path.name}" for path in (ROOT / "tests").glob("test_*.py")
               if marked.search(path.read_text(encoding="utf-8"))}
    assert holding == set(gpu_check.GPU_TEST_FILES)


@needs_no_cuda
def test_the_smoke_report_counts_the_gpu_tests_as_skipped(smoke_run):
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "gpu", "-k",
         f"not {gpu_check.RANKS_TESTS}", "-p", "no:cacheprovider", *gpu_check.GPU_TEST_FILES],
        cwd=ROOT, capture_output=True, text=True)
    gpu_tests = sum(1 for line in collected.stdout.splitlines() if "::test_" in line)
    assert gpu_tests > 10, collected.stdout
    report = (smoke_run / "gpu-report.md").read_text()
    assert f"0 passed, 0 failed, 0 errors, {gpu_tests} skipped (of {gpu_tests})" in report
    summary = json.loads((smoke_run / "gpu-report.json").read_text())
    assert {step["status"] for step in summary["steps"]} == {"ok"}
    assert summary["steps"][0]["figures"]["counts"]["skipped"] == gpu_tests


def _step(script: str, kind: str = "trainer", cap: float = 60) -> gpu_check.Step:
    return gpu_check.Step("fake", "fake step", kind, ["-c", script], cap_seconds=cap)


def test_a_failed_step_shows_its_status_and_log_tail_and_no_figure(tmp_path):
    script = ("print('CPU cpu (trainer, warm): 9.9k target tok/s, exact MFU n/a'); "
              "print('Traceback: it broke'); raise SystemExit(3)")
    outcome = gpu_check.run_step(_step(script), sys.executable, tmp_path, seconds_left=100)
    assert outcome.status == "failed (exit 3)" and outcome.figures == {}
    assert "Traceback: it broke" in outcome.tail
    report = gpu_check.render_report(MACHINE, "cpu smoke", [outcome], 100, 1)
    assert gpu_check.headlines([outcome], "CPU") == []
    assert "| fake step | failed (exit 3) |" in report and "## fake step: failed (exit 3)" in report
    assert "Last 40 lines of logs/fake.log" in report


def test_a_step_that_writes_no_figures_counts_as_failed(tmp_path):
    """Its printed lines are not read back, headline-like or not."""
    script = "print('CPU cpu (trainer, warm): 9.9k target tok/s, exact MFU n/a')"
    outcome = gpu_check.run_step(_step(script), sys.executable, tmp_path, seconds_left=100)
    assert outcome.status == "failed (no figures: fake.json was not written)"
    assert outcome.figures == {} and "9.9k target tok/s" in outcome.tail


BEAM_FIGURES = {"benchmark": "beam_speed", "name": "H100", "size": "base", "beam": 4,
                "alpha": 0.6, "lengths": "trained", "replaced": {"check_every": 8},
                "auto": {"cuda_graphs": True}, "options": {}, "window_stride": 32,
                "sentences": 3003, "source_tokens": 90_000,
                "generated_tokens": 240_000, "seconds": 73.25, "sentences_per_second": 41.0,
                "generated_tokens_per_second": 3276.5,
                "model_flops": 84_704_701_964_288,
                "peak": {"gpu": "H100 SXM", "precision": "fp32", "flops_per_second": 67e12},
                "steps": {"eager": 120, "replayed": 2400, "recorded": 60,
                          "recording_seconds": 1.5}}


def _writes(figures: dict, tmp_path: Path) -> str:
    return f"import json; open({str(tmp_path / 'fake.json')!r}, 'w').write({json.dumps(figures)!r})"


def test_the_report_shows_the_figures_a_step_wrote(tmp_path):
    outcome = gpu_check.run_step(_step(_writes(BEAM_FIGURES, tmp_path), kind="beam"),
                                 sys.executable, tmp_path, seconds_left=100)
    assert outcome.ok and outcome.figures == BEAM_FIGURES
    assert gpu_check.headlines([outcome], "H100") == [
        "H100 base (beam 4, alpha 0.6, 3003 sentences, trained lengths, check_every=8, "
        "cuda_graphs=True (auto)): 41.0 sentences/s, 3,276 generated tok/s"]
    report = gpu_check.render_report(MACHINE, "gpu", [outcome], 100, 80)
    assert ("trained lengths; 3003 sentences, 90,000 source tokens, 240,000 generated tokens in "
            "73.2 s: 41.0 sentences/s, 3,276 generated tok/s") in report
    assert ("search steps: 120 eager, 2,400 replayed as CUDA graphs; 60 graphs recorded in "
            "1.50 s of the host's time") in report
    assert ("model FLOPs of the searches (every hypothesis to its length limit): 84.7 TFLOP, "
            "1.156 TFLOP/s, 1.7% of the H100 SXM's fp32 peak") in report


def test_the_report_shows_what_a_precision_did_to_the_translations(tmp_path):
    figures = {"benchmark": "decoding_precision", "device": "cuda", "precision": "tf32",
               "checkpoint": str(ROOT / "results/tiny/base/seed-1/averaged.pt"),
               "source": str(ROOT / "results/tiny/data/test.src"), "sentences": 300,
               "fp32": {"sacrebleu": 50.11, "seconds": 0.41},
               "tf32": {"sacrebleu": 50.05, "seconds": 0.32},
               "changed_lines": 3, "changed_share": 0.01, "bleu_difference": -0.06}
    outcome = gpu_check.run_step(_step(_writes(figures, tmp_path), kind="decoding_precision"),
                                 sys.executable, tmp_path, seconds_left=100)
    assert outcome.ok and gpu_check.headlines([outcome], "H200") == [
        "H200 decoding in tf32 vs fp32 (300 sentences of results/tiny/data/test.src): -0.06 "
        "BLEU, 3 translations changed (1.0%)"]
    report = gpu_check.render_report(MACHINE, "gpu", [outcome], 100, 80).splitlines()
    assert "fp32: sacreBLEU 50.11 in 0.4 s" in report and "tf32: sacreBLEU 50.05 in 0.3 s" in report
    steps = [step for step in gpu_check.plan(cuda=True, logs=tmp_path)
             if step.kind == "decoding_precision"]
    assert [step.name for step in steps] == [
        f"decoding-precision-{precision}-{split}" for precision in ("tf32", "bf16")
        for split in ("dev", "test")]


def test_figures_that_lack_a_value_count_as_failed_and_an_earlier_runs_are_not_read(tmp_path):
    incomplete = {key: value for key, value in BEAM_FIGURES.items() if key != "seconds"}
    outcome = gpu_check.run_step(_step(_writes(incomplete, tmp_path), kind="beam"),
                                 sys.executable, tmp_path, seconds_left=100)
    assert outcome.status == "failed (figures unreadable: KeyError('seconds'))"
    assert outcome.figures == {}
    (tmp_path / "fake.json").write_text(json.dumps(BEAM_FIGURES))  # left by an earlier run
    outcome = gpu_check.run_step(_step("pass", kind="beam"), sys.executable, tmp_path,
                                 seconds_left=100)
    assert outcome.status == "failed (no figures: fake.json was not written)"


def test_a_step_past_its_time_is_killed_and_one_without_budget_is_not_started(tmp_path,
                                                                             monkeypatch):
    monkeypatch.setattr(gpu_check, "SHORTEST_USEFUL_STEP", 0)
    script = "import time; print('started', flush=True); time.sleep(60)"
    outcome = gpu_check.run_step(_step(script, cap=1), sys.executable, tmp_path, seconds_left=100)
    assert outcome.status == "timed out after 1 s" and outcome.seconds < 30
    assert "started" in outcome.tail
    monkeypatch.undo()
    outcome = gpu_check.run_step(_step(script), sys.executable, tmp_path, seconds_left=5)
    assert outcome.status == "not run: 5 s of the budget left" and outcome.seconds == 0
