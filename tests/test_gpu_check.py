"""scripts/gpu-check.sh: its CPU smoke mode end to end (the report's figures are those of the
steps' logs), and how a step that fails, outlasts its time or finds no budget is reported."""

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
                                             "loss-memory"]
    assert "* mode: cpu smoke" in report and "## Headlines (for BENCHMARKS.md)" in report
    for step in steps:
        assert f"| {step.title} | ok |" in report and f"## {step.title}: ok" in report
    trainer, beam = _log(smoke_run, "trainer-cpu-eager"), _log(smoke_run, "beam-cpu")
    headlines = _lines_with(trainer, r"^CPU cpu \(trainer, (cold|warm)\): ")
    headlines += _lines_with(beam, r"^CPU cpu \(beam 4, alpha 0.6, 12 sentences\): ")
    assert len(headlines) == 3
    block = report.split("## Headlines (for BENCHMARKS.md)")[1].split("```")[1]
    assert all(line in block.splitlines() for line in headlines)
    # every throughput window and every loss-memory row of the logs, as the logs print them
    windows = _lines_with(trainer, r"^\| \d+ \| [\d,]+ \| [\d.]+ \| n/a \|$")
    rows = _lines_with(_log(smoke_run, "loss-memory"), r"^\| (unfused|chunked) \| 64 \|")
    assert len(windows) == 2 and len(rows) == 2
    assert all(line in report.splitlines() for line in windows + rows)


@needs_no_cuda
def test_the_smoke_report_counts_the_gpu_tests_as_skipped(smoke_run):
    gpu_tests = (ROOT / "tests/test_gpu.py").read_text().count("@pytest.mark.gpu\ndef test_")
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


def test_a_step_whose_log_lacks_its_figures_counts_as_failed(tmp_path):
    outcome = gpu_check.run_step(_step("print('no figures here')"), sys.executable, tmp_path,
                                 seconds_left=100)
    assert outcome.status == "failed (output not parsed: no headline line in the log)"
    assert outcome.figures == {} and "no figures here" in outcome.tail


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
