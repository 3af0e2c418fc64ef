"""A tracking server reached by the node's name, as the compute nodes of a cluster reach it.

MLflow refuses API calls (403 "Invalid Host header") whose Host header it does not allow, and
answers ``/health`` to any: a server is reached here by this machine's name, never as 127.0.0.1.
"""

import json
import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from mlflow.tracking import MlflowClient

from reproduce.experiment_file import load_experiment
from reproduce.errors import ConfigError
from reproduce.tracking import prepare_store
from reproduce.training.launch import launch_training
from tests.mlflow_server import free_port, running_mlflow_server
from tests.training_fixtures import ROOT, random_corpus, small_variant

SECRET = "s3cr3t-pw"
LOOPBACK = {"localhost", "127.0.0.1", "::1"}


@pytest.fixture
def node_name() -> str:
    """This machine's name, which must resolve (a cluster's compute nodes reach a server so)."""
    name = socket.gethostname()
    try:
        socket.getaddrinfo(name, None)
    except OSError:
        pytest.skip(f"this machine's name {name!r} does not resolve")
    return name


@pytest.mark.slow
def test_the_preflight_check_refuses_a_server_that_does_not_allow_the_node_name(
        tmp_path, monkeypatch, node_name):
    with running_mlflow_server(tmp_path, bind="0.0.0.0") as url:
        port = urlsplit(url).port
        with urllib.request.urlopen(f"http://{node_name}:{port}/health", timeout=5):
            pass  # /health answers whatever the name: it proves nothing
        uri = f"http://trainer:{SECRET}@{node_name}:{port}"
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        with pytest.raises(ConfigError) as raised:
            prepare_store(tmp_path / "results")
        message = str(raised.value)
        assert "\n" not in message and SECRET not in message
        assert message.startswith(f"MLFLOW_TRACKING_URI=http://***@{node_name}:{port}: ")
        assert "HTTP 403: Invalid Host header" in message
        assert f"MLFLOW_SERVER_ALLOWED_HOSTS={node_name}:{port} scripts/mlflow-server.sh" in message
        result = subprocess.run(
            [sys.executable, "-m", "reproduce", "init-tracking", "--results", str(tmp_path)],
            capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)),
        )
    assert result.returncode != 0
    assert result.stderr == f"reproduce init-tracking: error: {message}\n"


def _server_script(folder: Path):
    """``scripts/mlflow-server.sh`` with its defaults (the node's name), on a free port."""
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("MLFLOW_SERVER_HOST", "MLFLOW_SERVER_BIND",
                                  "MLFLOW_SERVER_ALLOWED_HOSTS", "MLFLOW_TRACKING_URI")}
    environment |= {"MLFLOW_SERVER_DIR": str(folder), "MLFLOW_SERVER_PORT": str(free_port()),
                    "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}

    def server(action: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(ROOT / "scripts/mlflow-server.sh"), action],
                              env=environment, capture_output=True, text=True, timeout=200)
    return server


@pytest.mark.slow
def test_a_variant_trains_through_the_server_script_reached_by_the_node_name(
        tmp_path, monkeypatch, node_name):
    server = _server_script(tmp_path / "server")
    started = server("start")
    assert started.returncode == 0, started.stderr
    uri = started.stdout.strip().removeprefix("export MLFLOW_TRACKING_URI=")
    try:
        assert urlsplit(uri).hostname not in LOOPBACK  # the cluster's case: the node's name
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        experiment = load_experiment(ROOT / "configs/tiny.yaml")
        train = random_corpus(tmp_path / "train", 64, seed=1)
        dev = random_corpus(tmp_path / "dev", 16, seed=2)
        summary = launch_training(experiment, small_variant(steps=6), train, dev,
                                  tmp_path / "base", tmp_path / "results")
        client = MlflowClient(uri)
        run = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])[0]
        assert run.info.status == "FINISHED"
        final_dev_loss = run.data.metrics["summary/final_dev_loss"]
        assert final_dev_loss == pytest.approx(summary["final_dev_loss"])
        lines = (tmp_path / "base/train/metrics.jsonl").read_text().splitlines()
        recorded = [json.loads(line) for line in lines]
        history = client.get_metric_history(run.info.run_id, "train_loss")
        assert sorted(m.step for m in history) == [e["step"] for e in recorded if "train_loss" in e]
        logged = {item.path for item in client.list_artifacts(run.info.run_id, "train")}
        assert logged == {"train/summary.json", "train/metrics.jsonl"}  # through the proxy too
    finally:
        server("stop")
    assert not (tmp_path / "results/mlflow.db").exists()  # nothing went to an embedded store
