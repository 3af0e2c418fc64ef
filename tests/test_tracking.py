"""MLflow tracking against the embedded SQLite store and a real mlflow server on loopback."""

import pytest
from mlflow.tracking import MlflowClient

from reproduce.config import load_experiment
from reproduce.tracking import (
    find_variant_run, flat_params, start_variant_run, tables_run, tracking_uri,
)
from tests.mlflow_server import running_mlflow_server


def _exercise_store(results, run_dir, uri):
    run = start_variant_run(results, "tiny", "A_h1", "A", run_dir)
    run.log_params({"model.heads": 1})
    run.log_metrics({"train_loss": 3.5}, step=10)
    run.log_metrics({"train_loss": 2.5}, step=20)
    resumed = start_variant_run(results, "tiny", "A_h1", "A", run_dir)
    assert resumed.run_id == run.run_id  # a requeued job continues the same run
    resumed.log_params({"model.heads": 1})  # logging the same params again is harmless
    found = find_variant_run(results, "tiny", "A_h1")
    assert found.run_id == run.run_id
    assert find_variant_run(results, "tiny", "base") is None
    client = MlflowClient(uri)
    history = client.get_metric_history(run.run_id, "train_loss")
    assert [(m.step, m.value) for m in history] == [(10, 3.5), (20, 2.5)]
    tags = client.get_run(run.run_id).data.tags
    assert tags["dataset"] == "tiny" and tags["variant"] == "A_h1" and tags["table3_row"] == "A"
    assert client.get_experiment_by_name("tiny") is not None


def test_sqlite_store_by_default(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = tracking_uri(tmp_path)
    assert uri == f"sqlite:///{tmp_path / 'mlflow.db'}"
    _exercise_store(tmp_path, tmp_path / "checkpoints", uri)


@pytest.mark.slow
def test_a_real_mlflow_server_on_loopback(tmp_path, monkeypatch):
    with running_mlflow_server(tmp_path) as url:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
        _exercise_store(tmp_path / "results", tmp_path / "checkpoints", url)
        artifact = tmp_path / "table3.md"
        artifact.write_text("| row |\n")
        with tables_run(tmp_path / "results", "tiny") as run:
            run.log_artifact(artifact, "tables")
        listed = MlflowClient(url).list_artifacts(run.run_id, "tables")
        assert [item.path for item in listed] == ["tables/table3.md"]


def test_flat_params_name_every_hyper_parameter():
    from pathlib import Path

    experiment = load_experiment(Path(__file__).parents[1] / "configs/wmt14_en_de.yaml")
    params = flat_params(experiment.variant("big"), experiment.name)
    assert params["model.d_model"] == 1024
    assert params["training.checkpoints.keep_last"] == 20
    assert params["decoding.beam_size"] == 4


def test_artifacts_of_the_embedded_store_stay_beside_it(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    results = tmp_path / "results"
    artifact = tmp_path / "table2.md"
    artifact.write_text("| model |\n")
    with tables_run(results, "tiny") as run:
        run.log_artifact(artifact, "tables")
    assert (results / "mlartifacts").is_dir()
    assert not (tmp_path / "mlruns").exists()
