"""A small sweep against a real tracking server of scripts/mlflow-server.sh: concurrent trainings'
logging (benchmarks/tracking_sweep.py) leaves every metric value in the store, without errors."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_concurrent_trainings_lose_no_metric_and_meet_no_error(tmp_path):
    figures_file = tmp_path / "figures.json"
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/tracking_sweep.py"), "--clients", "3",
         "--log-calls", "10", "--speedup", "1000", "--json", str(figures_file)],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(figures_file.read_text())
    assert figures["failed_clients"] == 0 and figures["warnings"] == 0
    assert figures["errors"] == 0, figures["errors_by_request"]
    assert figures["values"] == 3 * 10 * 8  # eight trainer metrics per record, no evaluation yet
    assert figures["lost_in_flight"] == 0 and figures["lost"] == 0
    assert "| requests | seconds | requests/s | p50 ms | p99 ms |" in result.stdout
