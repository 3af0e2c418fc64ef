"""A tracking URI's credentials appear in no file a pipeline writes, MLflow's own output included.

The commands run as the pipeline's rules run them (``python -m reproduce ... > log 2>&1``) against
a real ``mlflow server``, which ignores basic-auth credentials, so a planted password is really
used for every request and must come back in no file.
"""

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from reproduce.tracking.store import RedactCredentials
from tests.mlflow_server import free_port, running_mlflow_server
from tests.training_fixtures import ROOT, random_corpus

SECRET = "planted-secret"


def _short_experiment(folder: Path) -> Path:
    """configs/tiny.yaml with a 4-step training of a one-layer model: seconds on a CPU."""
    raw = yaml.safe_load((ROOT / "configs/tiny.yaml").read_text())
    raw["model"] |= {"layers": 1, "d_model": 16, "d_ff": 32, "heads": 2, "d_k": 8, "d_v": 8}
    raw["training"] |= {"steps": 4, "tokens_per_step": 300, "max_tokens_per_device": 256,
                        "warmup_steps": 2, "log_every_steps": 2, "eval_every_steps": 4,
                        "average_last": 2}
    raw["training"]["checkpoints"] |= {"every_steps": 2, "keep_last": 2}
    path = folder / "short.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _as_a_rule(arguments: list[str], log: Path, environment: dict) -> None:
    """``python -m reproduce <arguments> > log 2>&1``, as the workflow's rules run commands."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as stream:
        result = subprocess.run([sys.executable, "-m", "reproduce", *arguments], stdout=stream,
                                stderr=subprocess.STDOUT, env=environment, timeout=300)
    assert result.returncode == 0, log.read_text()[-3000:]


def _files_holding(root: Path, text: bytes, skip: Path) -> list[Path]:
    """Every file under ``root`` but ``skip`` whose bytes contain ``text``."""
    files = [path for path in root.rglob("*") if path.is_file() and path != skip]
    assert files
    return [path for path in files if text in path.read_bytes()]


@pytest.mark.slow
def test_a_password_in_the_tracking_uri_reaches_no_file(tmp_path):
    """Training and ``tables`` through a server named with a password: not one file written under
    the results folder (logs, checkpoints, tables, metrics) holds it, nor do the files MLflow
    stored for the runs (artifacts, the server's database). The server's own folder is searched
    too, except its log, which only the server writes."""
    server_dir = tmp_path / "server"
    server_dir.mkdir()
    experiment = _short_experiment(tmp_path)
    results = tmp_path / "results"
    train = random_corpus(results / "tiny/encoded/train", 64, seed=1)
    dev = random_corpus(results / "tiny/encoded/dev", 16, seed=2)
    logs = results / "logs/tiny"
    with running_mlflow_server(server_dir) as url:
        uri = url.replace("http://", f"http://trainer:{SECRET}@")
        environment = {name: value for name, value in os.environ.items()
                       if not name.startswith("MLFLOW_")} | {
            "MLFLOW_TRACKING_URI": uri, "PYTHONPATH": str(ROOT)}
        _as_a_rule(["train", "--experiment", str(experiment), "--variant", "base",
                    "--train-data", str(train), "--dev-data", str(dev),
                    "--out-dir", str(results / "tiny/base"), "--results", str(results)],
                   logs / "train_base.log", environment)
        _as_a_rule(["tables", "--experiment", str(experiment), "--results", str(results),
                    "--out-dir", str(results / "tiny/tables")], logs / "final_tables.log",
                   environment)
        client = MlflowClient(uri)
        runs = client.search_runs([client.get_experiment_by_name(name).experiment_id
                                   for name in ("tiny", "tiny tables")])
    assert sorted(run.data.tags["kind"] for run in runs) == ["tables", "variant"]
    assert all(run.info.status == "FINISHED" for run in runs)
    assert (results / "tiny/tables").is_dir() and (logs / "train_base.log").stat().st_size
    assert _files_holding(tmp_path, SECRET.encode(), skip=server_dir / "server.log") == []


# A training's first steps with the server gone: MLflow's system-metrics monitor (a thread) warns
# through MLflow's own logger, naming the URI, then stops; joining it waits for that warning.
MONITOR_DURING_AN_OUTAGE = """
import logging, sys
from mlflow.tracking import MlflowClient
from reproduce.tracking import VariantRun, redact_credentials_in_logs
logging.basicConfig(level=logging.INFO)  # as reproduce.cli.main does
redact_credentials_in_logs()  # as start_training_run does before it starts the monitor
run = VariantRun(MlflowClient(sys.argv[1]), "0" * 32)
run.start_system_metrics(sys.argv[1])
run._system_metrics._process.join()
"""


def test_mlflow_warnings_during_an_outage_mask_the_password():
    uri = f"http://trainer:{SECRET}@127.0.0.1:{free_port()}"
    environment = dict(os.environ, MLFLOW_TRACKING_URI=uri, PYTHONPATH=str(ROOT),
                       MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL="0.1",
                       MLFLOW_HTTP_REQUEST_MAX_RETRIES="0")
    result = subprocess.run([sys.executable, "-c", MONITOR_DURING_AN_OUTAGE, uri],
                            capture_output=True, text=True, timeout=120, env=environment)
    assert result.returncode == 0, result.stderr
    assert "Failed to get mlflow run: API request to http://***@127.0.0.1" in result.stderr
    assert SECRET not in result.stdout + result.stderr


def test_a_traceback_in_a_log_record_is_masked():
    try:
        raise ConnectionError(f"API request to https://alice:{SECRET}@mlflow.example.org failed")
    except ConnectionError:
        record = logging.LogRecord("mlflow", logging.WARNING, __file__, 1, "lost", (),
                                   sys.exc_info())
    assert RedactCredentials().filter(record)
    text = logging.Formatter().format(record)
    assert SECRET not in text and "https://***@mlflow.example.org failed" in text
