"""MLflow tracking against the embedded SQLite store and a real mlflow server on loopback."""

import json
import logging
import multiprocessing
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import mlflow.artifacts
import pytest
from mlflow.tracking import MlflowClient

from reproduce.experiment_file import load_experiment
from reproduce.errors import ConfigError
from reproduce.tracking import (
    VariantRun, find_variant_run, flat_params, prepare_store, run_description,
    start_training_run, start_variant_run, tables_run, tracking_uri,
)
from reproduce.cli import main
from reproduce.tracking.datasets import dataset_inputs, public_url
from reproduce.tracking.store import artifact_root
from reproduce.tracking.view import KEY_RESULTS, SEED_COLUMN, VIEW_STATE_TAG, ui_base
from reproduce.training.launch import launch_training
from tests.mlflow_server import free_port, running_mlflow_server
from tests.training_fixtures import ROOT, corpus_pair, random_corpus, small_variant

SECRET = "s3cr3t-pw"


def _exercise_store(results, run_dir, uri):
    run = start_variant_run(results, "tiny", "A_h1", 1, "A", run_dir)
    run.log_params({"model.heads": 1})
    run.log_metrics({"train_loss": 3.5}, step=10)
    run.log_metrics({"train_loss": 2.5}, step=20)
    resumed = start_variant_run(results, "tiny", "A_h1", 1, "A", run_dir)
    assert resumed.run_id == run.run_id  # a requeued job continues the same run
    resumed.log_params({"model.heads": 1})  # logging the same params again is harmless
    found = find_variant_run(results, "tiny", "A_h1", 1)
    assert found.run_id == run.run_id
    assert find_variant_run(results, "tiny", "base", 1) is None
    assert find_variant_run(results, "tiny", "A_h1", 2) is None  # each seed is a run of its own
    client = MlflowClient(uri)
    history = client.get_metric_history(run.run_id, "train_loss")
    assert [(m.step, m.value) for m in history] == [(10, 3.5), (20, 2.5)]
    tags = client.get_run(run.run_id).data.tags
    assert tags["dataset"] == "tiny" and tags["variant"] == "A_h1" and tags["table3_row"] == "A"
    assert tags["kind"] == "variant" and tags["mlflow.runName"] == "A_h1 seed 1"
    assert tags["seed"] == "1"
    assert tags["mlflow.source.name"] == "python -m reproduce train"
    assert len(tags["mlflow.source.git.commit"]) == 40
    experiment = client.get_experiment_by_name("tiny")
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"


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


LOG_A_TABLE = """
import sys
from pathlib import Path
from reproduce.tracking import tables_run
with tables_run(Path(sys.argv[1]), "tiny") as run:
    run.log_artifact(Path(sys.argv[2]), "again")
print(run.run_id)
"""


@pytest.mark.slow
def test_a_tracking_servers_folder_can_move_with_its_artifacts(tmp_path, monkeypatch):
    """A server (as scripts/mlflow-server.sh starts it: --artifacts-destination) records
    ``mlflow-artifacts:`` locations, relative to that destination: started again on the moved
    folder, it serves the artifacts logged before and takes new ones there."""
    first, moved = tmp_path / "first", tmp_path / "elsewhere/moved"
    first.mkdir()
    table = tmp_path / "table3.md"
    table.write_text("| row |\n")
    with running_mlflow_server(first) as url:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
        with tables_run(tmp_path / "results", "tiny") as run:
            run.log_artifact(table, "tables")
        location = MlflowClient(url).get_experiment_by_name("tiny tables").artifact_location
        assert location.startswith("mlflow-artifacts:")
    moved.parent.mkdir()
    shutil.move(first, moved)
    with running_mlflow_server(moved, store=f"sqlite:///{moved / 'server.db'}") as url:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
        downloaded = MlflowClient(url).download_artifacts(run.run_id, "tables/table3.md",
                                                          str(tmp_path))
        assert Path(downloaded).read_text() == "| row |\n"
        # a new process, as every command is (MLflow caches a run's artifact repository, the
        # first server's address with it, for the life of the process)
        again = subprocess.run([sys.executable, "-c", LOG_A_TABLE, str(tmp_path / "results"),
                                str(table)], capture_output=True, text=True, timeout=120,
                               env=dict(os.environ, PYTHONPATH=str(ROOT)))
        assert again.returncode == 0, again.stderr
        assert again.stdout.splitlines()[-1] == run.run_id
    assert not first.exists()
    assert (moved / f"artifacts/{location.split(':', 1)[1].strip('/')}/{run.run_id}"
            "/artifacts/again/table3.md").is_file()


def test_flat_params_name_every_hyper_parameter():
    experiment = load_experiment(ROOT / "configs/wmt14_en_de.yaml")
    params = flat_params(experiment.variant("big"), experiment.name)
    assert params["model.d_model"] == 1024
    assert params["training.checkpoints.keep_last"] == 20
    assert params["decoding.beam_size"] == 4
    assert params["model.architecture"] == "transformer"
    tiny = load_experiment(ROOT / "configs/tiny.yaml")
    assert flat_params(tiny.variant("rnn"), "tiny")["model.architecture"] == "rnn"
    assert run_description(tiny.variant("A_h1")).startswith(
        "A_h1 (Table 3 row A): (A) one attention head")


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
    tags = MlflowClient(tracking_uri(results)).get_run(run.run_id).data.tags
    assert tags["kind"] == "tables" and "variant" not in tags


def test_the_tables_run_is_kept_apart_from_the_variants(tmp_path, monkeypatch, caplog):
    """The tables have an experiment of their own (``<dataset> tables``): the variants' runs
    table lists the variants alone. A tables run that an earlier version kept among the variants
    is deleted (softly: MLflow restores it) once the tables are logged apart."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    start_variant_run(tmp_path, "tiny", "base", 1, None, tmp_path / "base").finish()
    client = MlflowClient(tracking_uri(tmp_path))
    variants = client.get_experiment_by_name("tiny").experiment_id
    earlier = client.create_run(variants, run_name="tables", tags={"kind": "tables"}).info.run_id
    with caplog.at_level(logging.WARNING), tables_run(tmp_path, "tiny") as run:
        pass
    assert client.get_run(earlier).info.lifecycle_stage == "deleted"
    assert [record.getMessage() for record in caplog.records
            if record.levelno >= logging.WARNING] == [
        f"MLflow: the tables run {earlier} of experiment tiny deleted (restorable); the tables"
        " are logged to the experiment 'tiny tables'"]
    tables = client.get_experiment_by_name("tiny tables")
    assert client.get_run(run.run_id).info.experiment_id == tables.experiment_id
    assert tables.tags["mlflow.experimentKind"] == "custom_model_development"
    assert [found.data.tags["variant"] for found in client.search_runs([variants])] == ["base"]
    with tables_run(tmp_path, "tiny") as again:
        assert again.run_id == run.run_id  # reused


def test_a_dataset_experiment_opens_on_its_key_results(tmp_path, monkeypatch):
    """The shared view that MLflow's UI opens by ``viewStateShareKey``: the key results as the
    runs table's columns; set again on an experiment made by an earlier version."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    start_variant_run(tmp_path, "tiny", "base", 1, None, tmp_path / "base")
    client = MlflowClient(tracking_uri(tmp_path))
    experiment = client.get_experiment_by_name("tiny")
    view = json.loads(experiment.tags[VIEW_STATE_TAG])
    assert view["selectedColumns"] == [SEED_COLUMN, *KEY_RESULTS]
    assert KEY_RESULTS[:2] == ["metrics.`test_averaged_tokenized_bleu`",
                               "metrics.`test_averaged_sacrebleu`"]
    assert {"params.`parameters`", "metrics.`summary/gpu_hours`", "metrics.`test_averaged_f1`",
            "metrics.`dev_last_perplexity`"} <= set(KEY_RESULTS)
    client.delete_experiment_tag(experiment.experiment_id, VIEW_STATE_TAG)
    start_variant_run(tmp_path, "tiny", "A_h1", 1, "A", tmp_path / "A_h1")
    assert VIEW_STATE_TAG in client.get_experiment_by_name("tiny").tags
    with tables_run(tmp_path, "tiny"):
        pass
    assert VIEW_STATE_TAG not in client.get_experiment_by_name("tiny tables").tags


def test_scores_are_one_value_each_under_their_split_and_checkpoint(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run = start_variant_run(tmp_path, "tiny", "base", 1, None, tmp_path / "base")
    run.log_scores("test", "averaged", {"sacrebleu": 26.5, "perplexity": 4.9})
    history = MlflowClient(tracking_uri(tmp_path)).get_metric_history(
        run.run_id, "test_averaged_sacrebleu")
    assert [(m.step, m.value) for m in history] == [(0, 26.5)]


def test_mlflow_address_prints_each_experiments_page(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(SystemExit) as exit_status:
        main(["mlflow-address", "--results", str(tmp_path)])
    assert exit_status.value.code == (f"reproduce mlflow-address: error: {tmp_path}/mlflow.db: "
                                      "no MLflow store there yet; run the pipeline first")
    prepare_store(tmp_path)
    with pytest.raises(SystemExit) as exit_status:
        main(["mlflow-address", "--results", str(tmp_path)])
    assert exit_status.value.code == (
        f"reproduce mlflow-address: error: MLflow store sqlite:///{tmp_path}/mlflow.db: no"
        " experiment of this project in it yet; run the pipeline first")
    start_variant_run(tmp_path, "tiny", "base", 1, None, tmp_path / "base")
    artifact = tmp_path / "table3.html"
    artifact.write_text("<table></table>")
    with tables_run(tmp_path, "tiny") as tables:
        tables.log_artifact(artifact, "tables")
    client = MlflowClient(tracking_uri(tmp_path))
    variants = client.get_experiment_by_name("tiny").experiment_id
    apart = client.get_experiment_by_name("tiny tables").experiment_id
    main(["mlflow-address", "--results", str(tmp_path)])
    assert capsys.readouterr().out == (
        f"tiny: http://127.0.0.1:5000/#/experiments/{variants}/runs"
        "?viewStateShareKey=key-results&workflowType=machine_learning\n"
        f"tiny tables: http://127.0.0.1:5000/#/experiments/{apart}/runs/{tables.run_id}"
        "/artifacts/tables/table3.html?workflowType=machine_learning\n")
    main(["mlflow-address", "--results", str(tmp_path), "--ui", "http://node7:5917/"])
    assert capsys.readouterr().out.startswith(
        f"tiny: http://node7:5917/#/experiments/{variants}/runs?")


def test_the_ui_of_a_tracking_server_is_its_address_without_credentials(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"https://trainer:{SECRET}@node7:5917/mlflow/")
    assert ui_base(tmp_path) == "https://node7:5917/mlflow"
    assert ui_base(tmp_path, "http://127.0.0.1:8080/") == "http://127.0.0.1:8080"
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    assert ui_base(tmp_path) == "http://127.0.0.1:5000"  # mlflow ui's


LOG_AN_ARTIFACT = """
import sys
from pathlib import Path
from reproduce.tracking import start_variant_run
results, artifact = Path(sys.argv[1]), Path(sys.argv[2])
run = start_variant_run(results, "tiny", "base", 1, None, results / "tiny/base/checkpoints")
run.log_artifact(artifact, "train")
run.finish()
print(run.run_id)
"""


def _log_in_a_new_process(results: Path, artifact: Path) -> subprocess.CompletedProcess:
    """Log ``artifact`` to the variant run recorded in ``results``, as a command would."""
    return subprocess.run([sys.executable, "-c", LOG_AN_ARTIFACT, str(results), str(artifact)],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))


ELSEWHERE = "outside this results folder (moved or copied)"


def _logged_files(results: Path) -> list[Path]:
    return sorted(path.relative_to(results) for path in results.rglob("*.md"))


def test_a_moved_project_keeps_its_runs_and_writes_nothing_to_the_old_place(tmp_path, monkeypatch):
    """MLflow records artifact locations as absolute paths and has no call to change them (no SQL
    is run against its store): after a move the runs, params and metrics are all there and the
    same run is resumed, the artifacts' files moved with the folder and are read from there, one
    warning says that MLflow looks for them at the old place, and no artifact is logged to the
    old place. A symbolic link from the old place to the new one makes MLflow's locations valid
    again."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    old, new = tmp_path / "home/project", tmp_path / "scratch/project"
    (old / "results").mkdir(parents=True)
    for name in ("before.md", "after.md", "linked.md"):
        (tmp_path / name).write_text(f"{name}\n")
    before = _log_in_a_new_process(old / "results", tmp_path / "before.md")
    assert before.returncode == 0, before.stderr
    assert ELSEWHERE not in before.stderr  # a store that never moved says nothing
    run_id = before.stdout.strip()
    new.parent.mkdir()
    shutil.move(old, new)
    results = new / "results"
    after = _log_in_a_new_process(results, tmp_path / "after.md")
    assert after.returncode == 0, after.stderr
    assert after.stdout == before.stdout  # the same run, resumed
    assert after.stderr.count(ELSEWHERE) == 1, after.stderr  # one warning says what MLflow lacks
    assert f"under {artifact_root(old / 'results')}," in after.stderr
    assert not old.exists()  # nothing was written to the old place
    before_file = Path(f"mlartifacts/{run_id}/artifacts/train/before.md")
    assert _logged_files(results) == [before_file]  # after.md was not logged
    client = MlflowClient(tracking_uri(results))
    assert client.get_experiment_by_name("tiny").artifact_location == artifact_root(
        old / "results")  # MLflow's record, unchanged
    assert client.get_run(run_id).data.tags["variant"] == "base"
    copied = mlflow.artifacts.download_artifacts(
        artifact_uri=(results / before_file).as_uri(), dst_path=str(tmp_path / "read"))
    assert Path(copied).read_text() == "before.md\n"

    old.parent.mkdir(exist_ok=True)
    old.symlink_to(new)  # the old place leads to the new one: MLflow's locations hold again
    linked = _log_in_a_new_process(results, tmp_path / "linked.md")
    assert linked.returncode == 0 and ELSEWHERE not in linked.stderr, linked.stderr
    assert _logged_files(results) == [before_file, before_file.with_name("linked.md")]
    downloaded = client.download_artifacts(run_id, "train/before.md", str(tmp_path))
    assert Path(downloaded).read_text() == "before.md\n"


def test_a_copied_project_logs_no_artifact_into_the_original(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    original, copy = tmp_path / "original", tmp_path / "copy"
    (original / "results").mkdir(parents=True)
    for name in ("before.md", "after.md"):
        (tmp_path / name).write_text(f"{name}\n")
    before = _log_in_a_new_process(original / "results", tmp_path / "before.md")
    assert before.returncode == 0, before.stderr
    shutil.copytree(original, copy)
    kept = _logged_files(original / "results")
    after = _log_in_a_new_process(copy / "results", tmp_path / "after.md")
    assert after.returncode == 0, after.stderr
    assert after.stdout == before.stdout and after.stderr.count(ELSEWHERE) == 1, after.stderr
    assert _logged_files(original / "results") == kept  # the original is left as it was
    assert _logged_files(copy / "results") == kept


def test_a_store_named_by_the_tracking_uri_keeps_its_artifact_locations(tmp_path, monkeypatch):
    """Several results folders may share it: none of them takes its artifacts over."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'shared.db'}")
    start_variant_run(tmp_path / "a", "tiny", "base", 1, None, tmp_path / "a")
    start_variant_run(tmp_path / "b", "tiny", "base", 1, None, tmp_path / "b")
    experiment = MlflowClient(tracking_uri(tmp_path)).get_experiment_by_name("tiny")
    assert experiment.artifact_location == artifact_root(tmp_path / "a")


# -- a training's run ----------------------------------------------------------------------------
@pytest.fixture
def trained(tmp_path, monkeypatch):
    """A 6-step training through the launcher, logged to a fresh embedded store."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    experiment = load_experiment(ROOT / "configs/tiny.yaml")
    data = tmp_path / "results/tiny/data"
    data.mkdir(parents=True)
    (data / "train.report.json").write_text(json.dumps(
        {"split": "train",
         "sources": {"tiny_train": {"read": 120, "kept": 100, "dropped_ratio": 20}}}))
    train = random_corpus(tmp_path / "train", 64, seed=1)
    dev = random_corpus(tmp_path / "dev", 16, seed=2)
    summary = launch_training(experiment, small_variant(steps=6), train, dev,
                              tmp_path / "results/tiny/base", tmp_path / "results")
    client = MlflowClient(tracking_uri(tmp_path / "results"))
    run_id = (tmp_path / "results/tiny/base/checkpoints/mlflow_run_id").read_text()
    return experiment, summary, client, client.get_run(run_id), tmp_path / "results/tiny/base"


def test_a_training_run_is_finished_with_its_curves_and_no_value_twice(trained):
    experiment, summary, client, run, folder = trained
    assert run.info.status == "FINISHED"
    assert not set(run.data.params) & set(run.data.metrics)  # no value as both param and metric
    assert run.data.params["parameters"] == str(summary["parameters"])
    assert run.data.params["world_size"] == "1" and run.data.params["training.steps"] == "6"
    assert run.data.params["precision"] == summary["precision"] == "fp32"  # what ran, on a CPU
    recorded = [json.loads(line)
                for line in (folder / "train/metrics.jsonl").read_text().splitlines()]
    # The summary: one value each at step 0 (a bar in MLflow's charts, not a one-point curve),
    # in the section summary/, apart from the curves, which keep their steps.
    final_dev_loss = client.get_metric_history(run.info.run_id, "summary/final_dev_loss")
    assert [(m.step, m.value) for m in final_dev_loss] == [
        (0, pytest.approx(summary["final_dev_loss"]))]
    curves = {key for entry in recorded for key in entry if key != "step"}
    assert {key for key in run.data.metrics if not key.startswith(("summary/", "system/"))} \
        == curves
    history = client.get_metric_history(run.info.run_id, "train_loss")
    assert [(m.step, m.value) for m in history] == [(e["step"], e["train_loss"]) for e in recorded
                                                   if "train_loss" in e]
    assert run.data.tags["mlflow.user"] and run.data.tags["kind"] == "variant"
    assert run.data.params["model.architecture"] == "transformer"
    # the description
    assert run.data.tags["mlflow.note.content"].startswith(f"{summary['variant']} (")


def test_a_training_run_names_its_datasets_with_pair_counts(trained):
    experiment, _, _, run, _ = trained
    inputs = {item.dataset.name: item for item in run.inputs.dataset_inputs}
    declared = {source.name for split in ("train", "dev", "test")
                for source in getattr(experiment.data, split)}
    assert set(inputs) == declared
    train_source = experiment.data.train[0]
    logged = inputs[train_source.name]
    assert json.loads(logged.dataset.source) == {"url": public_url(train_source.url)}
    assert json.loads(logged.dataset.profile)["pairs_kept"] == 100
    assert {tag.key: tag.value for tag in logged.tags}["mlflow.data.context"] == "train"


def test_public_urls_keep_neither_credentials_nor_queries():
    assert (public_url("https://user:pw@host.org:8443/a/b.tgz?token=abc#x")
            == "https://host.org:8443/a/b.tgz")
    assert (public_url("file:configs/data/tiny_corpus.tgz?x=1")
            == "file:configs/data/tiny_corpus.tgz")


def test_a_report_without_a_source_leaves_its_counts_out(tmp_path):
    experiment = load_experiment(ROOT / "configs/tiny.yaml")
    inputs = dataset_inputs(experiment.data, tmp_path)  # no reports: prepare has not run
    assert all("pairs_kept" not in json.loads(item.dataset.profile) for item in inputs)


def test_a_training_that_crashes_marks_its_run_failed(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    experiment = load_experiment(ROOT / "configs/tiny.yaml")
    train, dev = corpus_pair(tmp_path / "data", 60)

    def crash(*args, **kwargs):
        raise RuntimeError("the trainer crashed")

    monkeypatch.setattr("reproduce.training.launch.build_trainer", crash)
    with pytest.raises(RuntimeError, match="the trainer crashed"):
        launch_training(experiment, small_variant(steps=6), train, dev, tmp_path / "variant",
                        tmp_path)
    run_id = (tmp_path / "variant/checkpoints/mlflow_run_id").read_text()
    assert MlflowClient(tracking_uri(tmp_path)).get_run(run_id).info.status == "FAILED"


# -- the store: created once, checked before training, never fatal during it --------------------
def _create_store_and_run(results: str, variant: str, barrier) -> None:
    barrier.wait()
    prepare_store(Path(results))
    start_variant_run(Path(results), "tiny", variant, 1, None, Path(results) / variant)


def test_six_trainings_on_a_new_store_all_start(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(6)
    processes = [context.Process(target=_create_store_and_run,
                                 args=(str(tmp_path), f"v{i}", barrier))
                 for i in range(6)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=300)
    assert [process.exitcode for process in processes] == [0] * 6
    runs = MlflowClient(tracking_uri(tmp_path)).search_runs(
        [MlflowClient(tracking_uri(tmp_path)).get_experiment_by_name("tiny").experiment_id])
    assert sorted(run.data.tags["variant"] for run in runs) == [f"v{i}" for i in range(6)]


def test_an_unreachable_server_is_one_line_without_credentials(tmp_path, monkeypatch):
    uri = f"http://trainer:{SECRET}@127.0.0.1:{free_port()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    with pytest.raises(ConfigError) as raised:
        prepare_store(tmp_path, timeout=2)
    message = str(raised.value)
    assert "\n" not in message and SECRET not in message
    assert "http://***@127.0.0.1" in message and "mlflow-server.sh" in message


def test_train_refuses_to_start_with_a_server_address_that_cannot_work(tmp_path):
    """A server that does not answer is waited for (tests/test_tracking_faults.py); an address
    without a port number never answers."""
    for split in ("train", "dev"):
        (tmp_path / split).mkdir()  # the arguments are checked first; the store before any work
    environment = dict(os.environ, MLFLOW_TRACKING_URI=f"http://u:{SECRET}@127.0.0.1:port",
                       PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, "-m", "reproduce", "train",
         "--experiment", str(ROOT / "configs/tiny.yaml"), "--variant", "base",
         "--train-data", str(tmp_path / "train"), "--dev-data", str(tmp_path / "dev"),
         "--out-dir", str(tmp_path / "base"), "--results", str(tmp_path)],
        capture_output=True, text=True, timeout=120, env=environment,
    )
    assert result.returncode != 0
    assert result.stderr.startswith("reproduce train: error: MLFLOW_TRACKING_URI=http://***@127.0.0.1"
                                    ":port: not a server address")
    assert result.stderr.count("\n") == 1 and SECRET not in result.stderr
    assert not (tmp_path / "base").exists()  # nothing started


def test_logging_to_a_lost_server_warns_once_and_goes_on(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setattr("reproduce.tracking.runs.RETRY_AFTER_SECONDS", 0.0)  # try every call
    lost = MlflowClient(f"http://u:{SECRET}@127.0.0.1:{free_port()}")
    run = VariantRun(lost, "0" * 32, tmp_path / "metrics.jsonl")
    with caplog.at_level(logging.WARNING, logger="reproduce.tracking.runs"):
        for step in range(1, 4):
            run.log_metrics({"train_loss": 1.0 / step}, step)
        run.finish("FINISHED")
    warnings = [record.getMessage() for record in caplog.records]
    assert len([w for w in warnings if "going on without tracking" in w]) == 1
    assert all(SECRET not in warning for warning in warnings)
    assert run.outage_since is not None


def test_credentials_are_masked_in_every_logged_record(caplog):
    from reproduce.tracking.store import RedactCredentials

    record = logging.LogRecord("mlflow", logging.WARNING, __file__, 1, "request to %s failed", (
        f"https://alice:{SECRET}@mlflow.example.org/api/2.0/mlflow/runs/get",), None)
    assert RedactCredentials().filter(record)
    assert record.getMessage() == ("request to https://***@mlflow.example.org"
                                   "/api/2.0/mlflow/runs/get failed")


def test_system_metrics_are_sampled_into_the_run(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "0.2")
    run = start_variant_run(tmp_path, "tiny", "base", 1, None, tmp_path)
    client = MlflowClient(tracking_uri(tmp_path))
    run.start_system_metrics(tracking_uri(tmp_path))
    for _ in range(300):  # the monitor's thread logs its first sample after one interval
        if "system/cpu_utilization_percentage" in client.get_run(run.run_id).data.metrics:
            break
        time.sleep(0.1)
    run.finish()
    metrics = client.get_run(run.run_id).data.metrics
    assert 0.0 <= metrics["system/cpu_utilization_percentage"] <= 100.0
    assert metrics["system/system_memory_usage_megabytes"] > 0


def test_the_store_back_gets_the_metrics_it_missed(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run = start_variant_run(tmp_path, "tiny", "base", 1, None, tmp_path, tmp_path / "metrics.jsonl")
    lines = [{"step": 2, "train_loss": 3.0, "lr": 0.1}, {"step": 4, "train_loss": 2.0, "lr": 0.2},
             {"step": 4, "dev_loss": 2.5}, {"step": 6, "train_loss": 1.0, "lr": 0.3}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    run.log_metrics({"train_loss": 3.0, "lr": 0.1}, step=2)  # logged before the outage
    assert run.replay_metrics() == 5  # steps 4 and 6 of train_loss and lr, and dev_loss at 4
    assert run.replay_metrics() == 0  # nothing twice
    client = MlflowClient(tracking_uri(tmp_path))
    history = client.get_metric_history(run.run_id, "train_loss")
    assert sorted((m.step, m.value) for m in history) == [(2, 3.0), (4, 2.0), (6, 1.0)]
    assert [(m.step, m.value)
            for m in client.get_metric_history(run.run_id, "dev_loss")] == [(4, 2.5)]


def test_a_run_ending_soon_after_an_outage_still_replays_its_metrics_and_ends(tmp_path,
                                                                              monkeypatch):
    """The back-off between attempts during an outage (30 s) must not skip the run's last
    chance: a training ending within it still gets its missed metrics replayed and its status."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    metrics = tmp_path / "metrics.jsonl"
    run = start_variant_run(tmp_path, "tiny", "base", 1, None, tmp_path, metrics)

    def lost() -> None:
        raise ConnectionError("the store went away")

    assert not run._call("logging metrics", lost)  # the outage begins
    metrics.write_text("".join(json.dumps({"step": step, "train_loss": 1.0 / step}) + "\n"
                               for step in (1, 2, 3)))
    run.log_metrics({"train_loss": 1.0 / 3}, step=3)  # within the back-off: not even tried
    run.finish("FINISHED")
    client = MlflowClient(tracking_uri(tmp_path))
    assert client.get_run(run.run_id).info.status == "FINISHED"
    assert sorted(m.step for m in client.get_metric_history(run.run_id, "train_loss")) == [1, 2, 3]


@pytest.mark.slow
def test_a_variant_trains_through_a_server_that_vanishes_and_returns(tmp_path, monkeypatch):
    """The project's server script on loopback; the server is stopped mid-training and restarted."""
    script = ROOT / "scripts/mlflow-server.sh"
    environment = dict(os.environ, MLFLOW_SERVER_DIR=str(tmp_path / "server"),
                       MLFLOW_SERVER_HOST="127.0.0.1", MLFLOW_SERVER_PORT=str(free_port()),
                       PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")

    def server(action):
        return subprocess.run(["bash", str(script), action], env=environment, capture_output=True,
                              text=True, timeout=200)

    started = server("start")
    assert started.returncode == 0, started.stderr
    uri = started.stdout.strip().removeprefix("export MLFLOW_TRACKING_URI=")
    try:
        assert server("status").stdout == started.stdout
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        monkeypatch.setattr("reproduce.tracking.runs.RETRY_AFTER_SECONDS", 0.0)
        experiment = load_experiment(ROOT / "configs/tiny.yaml")
        train = random_corpus(tmp_path / "train", 64, seed=1)
        dev = random_corpus(tmp_path / "dev", 16, seed=2)
        lost_at = []

        def start_and_lose_the_server_at_step_4(*args, **kwargs):
            run = start_training_run(*args, **kwargs)
            log_metrics = run.log_metrics

            def log_through_an_outage(metrics, step):
                if step == 4 and not lost_at:
                    assert server("stop").returncode == 0
                    log_metrics(metrics, step)  # fails: warns, training goes on
                    lost_at.append(run.outage_since)
                    assert server("start").returncode == 0
                else:
                    log_metrics(metrics, step)  # the first success replays what was missed
            run.log_metrics = log_through_an_outage
            return run

        monkeypatch.setattr("reproduce.tracking.start_training_run",
                            start_and_lose_the_server_at_step_4)
        summary = launch_training(experiment, small_variant(steps=8), train, dev, tmp_path / "base",
                                  tmp_path)
        assert lost_at and lost_at[0] is not None  # the server was really gone for a while
        client = MlflowClient(uri)
        run = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])[0]
        assert run.info.status == "FINISHED" and run.data.params["training.steps"] == "8"
        lines = (tmp_path / "base/train/metrics.jsonl").read_text().splitlines()
        recorded = [json.loads(line) for line in lines]
        history = client.get_metric_history(run.info.run_id, "train_loss")
        assert sorted(m.step for m in history) == [e["step"] for e in recorded if "train_loss" in e]
        assert summary["steps"] == 8
    finally:
        server("stop")
