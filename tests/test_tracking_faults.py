"""The tracking store failing a training, through the real command line in subprocesses: a
tracking server that accepts connections and never answers when the training starts (a listening
socket that never replies, as a loaded machine's server is), later replaced by a real
``mlflow server``; the embedded store removed during the training; and a server started again
on a new store during it.

Neither costs the training, nor anything of its MLflow record: the run is opened when the store
answers, and recorded again from what the training logged and ``train/metrics.jsonl`` when the
store lost it."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from mlflow.tracking import MlflowClient

from tests.mlflow_server import free_port, running_mlflow_server
from tests.training_fixtures import ROOT, random_corpus

SECRET = "s3cr3t-pw"
SILENT = "no MLflow tracking server answers within 5 s"


def experiment_file(folder: Path, steps: int) -> Path:
    """The tiny experiment with a one-layer model of width 16, trained for ``steps`` steps."""
    raw = yaml.safe_load((ROOT / "configs/tiny.yaml").read_text())
    raw["model"].update(layers=1, d_model=16, d_ff=32, heads=2, d_k=8, d_v=8)
    raw["training"].update(steps=steps, tokens_per_step=300, max_tokens_per_device=256,
                           warmup_steps=10, log_every_steps=2, eval_every_steps=4, average_last=2)
    raw["training"]["checkpoints"].update(every_steps=3, keep_last=5)
    path = folder / "tiny.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@contextmanager
def silent_server() -> Iterator[str]:
    """A URI (with credentials) of a server that accepts connections and never answers: the
    kernel completes them in the listening socket's backlog, and nothing reads or replies."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(64)
        yield f"http://trainer:{SECRET}@127.0.0.1:{listening.getsockname()[1]}"


def environment(**settings: str) -> dict[str, str]:
    variables = {key: value for key, value in os.environ.items() if key != "MLFLOW_TRACKING_URI"}
    return variables | {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"} | settings


def start_training(folder: Path, steps: int, env: dict[str, str]) -> subprocess.Popen:
    """``reproduce train`` of the base variant on a small random corpus, its stderr in
    ``folder/train.log``."""
    train = random_corpus(folder / "train", 64, seed=1)
    dev = random_corpus(folder / "dev", 16, seed=2)
    return subprocess.Popen(
        [sys.executable, "-m", "reproduce", "train", "--experiment",
         str(experiment_file(folder, steps)), "--variant", "base", "--train-data", str(train),
         "--dev-data", str(dev), "--out-dir", str(folder / "base"),
         "--results", str(folder / "results"), "--threads", "1"],
        stdout=subprocess.DEVNULL, stderr=(folder / "train.log").open("w"), env=env)


def wait_until(condition, what: str, process: subprocess.Popen, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert process.poll() is None, f"the training ended before {what}"
        assert time.monotonic() < deadline, f"no {what} within {seconds} s"
        time.sleep(0.01)


def recorded(folder: Path) -> list[dict]:
    return [json.loads(line)
            for line in (folder / "base/train/metrics.jsonl").read_text().splitlines()]


def assert_the_run_holds_the_training(client: MlflowClient, folder: Path) -> None:
    """The store holds one run of the training, the one ``mlflow_run_id`` names, finished, with
    its params, tags, dataset inputs, every step metric of ``metrics.jsonl``, its summary and
    its files."""
    experiment = client.get_experiment_by_name("tiny")
    [run] = client.search_runs([experiment.experiment_id])
    assert run.info.run_id == (folder / "base/checkpoints/mlflow_run_id").read_text()
    assert run.info.status == "FINISHED"
    summary = json.loads((folder / "base/train/summary.json").read_text())
    assert run.data.params["training.steps"] == str(summary["steps"])
    assert run.data.params["parameters"] == str(summary["parameters"])
    assert run.data.tags["variant"] == "base" and "mlflow.note.content" in run.data.tags
    assert run.inputs.dataset_inputs
    for key in ("train_loss", "lr", "dev_loss"):
        history = client.get_metric_history(run.info.run_id, key)
        assert sorted(metric.step for metric in history) == [
            entry["step"] for entry in recorded(folder) if key in entry], key
    assert run.data.metrics["summary/final_dev_loss"] == pytest.approx(summary["final_dev_loss"])
    stored = {item.path for item in client.list_artifacts(run.info.run_id, "train")}
    assert stored == {"train/summary.json", "train/metrics.jsonl"}


def test_init_tracking_warns_of_a_silent_server_and_goes_on(tmp_path):
    with silent_server() as uri:
        result = subprocess.run(
            [sys.executable, "-m", "reproduce", "init-tracking", "--results", str(tmp_path)],
            capture_output=True, text=True, timeout=120,
            env=environment(MLFLOW_TRACKING_URI=uri))
    assert result.returncode == 0, result.stderr
    port = urlsplit(uri).port
    [warning] = [line for line in result.stderr.splitlines() if "WARNING" in line]
    assert f"MLFLOW_TRACKING_URI=http://***@127.0.0.1:{port}: {SILENT} (timed out)" in warning
    assert result.stderr.splitlines()[-1] == f"MLflow store: http://***@127.0.0.1:{port}"
    assert SECRET not in result.stderr


def test_a_training_goes_on_with_a_server_that_never_answers(tmp_path):
    """One warning as it starts, the model and its records complete; the run, never opened, is
    said not to be recorded."""
    with silent_server() as uri:
        # MLflow's timeout shortened for the test: the training tries the server as it ends.
        training = start_training(tmp_path, 12, environment(MLFLOW_TRACKING_URI=uri,
                                                            MLFLOW_HTTP_REQUEST_TIMEOUT="2"))
        assert training.wait(timeout=600) == 0, (tmp_path / "train.log").read_text()[-3000:]
    log = (tmp_path / "train.log").read_text()
    assert SECRET not in log
    assert len([line for line in log.splitlines() if SILENT in line]) == 1
    assert "going on without tracking" not in log  # the silence is warned of once
    assert "the store did not answer during the training; no run of it is recorded" in log
    assert json.loads((tmp_path / "base/train/summary.json").read_text())["steps"] == 12
    assert (tmp_path / "base/train/final.pt").exists()
    assert [entry["step"] for entry in recorded(tmp_path) if "train_loss" in entry] == list(
        range(2, 13, 2))
    assert not (tmp_path / "base/checkpoints/mlflow_run_id").exists()


@pytest.mark.slow
def test_a_training_started_on_a_silent_server_is_recorded_when_it_answers(tmp_path):
    """The training is held (SIGSTOP) once it has warned of the silent server and started; the
    silent socket gives way to a real mlflow server on its port, and the training goes on."""
    with silent_server() as uri:
        training = start_training(tmp_path, 12, environment(MLFLOW_TRACKING_URI=uri))
        wait_until(lambda: SILENT in (tmp_path / "train.log").read_text(), "warning", training)
        training.send_signal(signal.SIGSTOP)
    try:
        port = urlsplit(uri).port
        with running_mlflow_server(tmp_path, port=port) as url:
            training.send_signal(signal.SIGCONT)
            assert training.wait(timeout=600) == 0, (tmp_path / "train.log").read_text()[-3000:]
            assert_the_run_holds_the_training(MlflowClient(url), tmp_path)
    finally:
        training.kill()
    log = (tmp_path / "train.log").read_text()
    assert len([line for line in log.splitlines() if SILENT in line]) == 1
    assert "going on without tracking" not in log and SECRET not in log


def test_an_embedded_store_removed_during_a_training_records_it_again(tmp_path):
    """The store (``results/mlflow.db``) is removed while the training is held (SIGSTOP) after
    its first records; the training goes on, creates the store again and records its run there
    anew, all of it."""
    training = start_training(tmp_path, 36, environment())
    metrics = tmp_path / "base/train/metrics.jsonl"
    try:
        wait_until(lambda: metrics.exists() and metrics.read_text().count("\n") >= 2,
                   "records", training)
        training.send_signal(signal.SIGSTOP)
        lost = (tmp_path / "base/checkpoints/mlflow_run_id").read_text()
        for name in ("mlflow.db", "mlflow.db-journal"):
            (tmp_path / "results" / name).unlink(missing_ok=True)
        assert recorded(tmp_path)[-1]["step"] < 36  # mid-training
        training.send_signal(signal.SIGCONT)
        assert training.wait(timeout=600) == 0, (tmp_path / "train.log").read_text()[-3000:]
    finally:
        training.kill()
    store = MlflowClient(f"sqlite:///{tmp_path / 'results/mlflow.db'}")
    assert_the_run_holds_the_training(store, tmp_path)
    assert (tmp_path / "base/checkpoints/mlflow_run_id").read_text() != lost
    assert f"run {lost} is not in the store any more" in (tmp_path / "train.log").read_text()


@pytest.mark.slow
def test_a_training_whose_server_comes_back_on_a_new_store_is_recorded_there(tmp_path):
    """The server is started again on an empty store while the training is held (SIGSTOP) after
    its first records: the store answers without the run, which is recorded there anew."""
    port = free_port()
    metrics = tmp_path / "base/train/metrics.jsonl"
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    with running_mlflow_server(tmp_path / "first", port=port) as url:
        training = start_training(tmp_path, 36, environment(MLFLOW_TRACKING_URI=url))
        try:
            wait_until(lambda: metrics.exists() and metrics.read_text().count("\n") >= 2,
                       "records", training)
        finally:
            training.send_signal(signal.SIGSTOP)
    try:
        lost = (tmp_path / "base/checkpoints/mlflow_run_id").read_text()
        with running_mlflow_server(tmp_path / "second", port=port) as url:
            training.send_signal(signal.SIGCONT)
            assert training.wait(timeout=600) == 0, (tmp_path / "train.log").read_text()[-3000:]
            assert_the_run_holds_the_training(MlflowClient(url), tmp_path)
    finally:
        training.kill()
    assert (tmp_path / "base/checkpoints/mlflow_run_id").read_text() != lost
    assert f"run {lost} is not in the store any more" in (tmp_path / "train.log").read_text()
