"""What a variant's MLflow run records, value by value, against small exact cases in an embedded
store: the params as they are logged, each single value once, the summary split into params and
values, a long replay whole, and a run resumed, or replaced when it was deleted."""

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest
from mlflow.tracking import MlflowClient

from reproduce.errors import ConfigError
from reproduce.experiment_file import load_experiment
from reproduce.tracking import (
    RUN_ID_FILE, VariantRun, find_variant_run, start_variant_run, tables_run, tracking_uri,
    variant_run_for,
)
from reproduce.tracking.datasets import dataset_inputs
from reproduce.tracking.runs import _retry_while_locked
from reproduce.tracking.store import (
    SUPPRESS_RUN_URL, check_scheme, host_header, redact_credentials_in_logs, server_silence,
)
from tests.training_fixtures import ROOT


@pytest.fixture
def store(tmp_path, monkeypatch):
    """The embedded store of a results folder ``tmp_path``, read by a client of its own."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return MlflowClient(tracking_uri(tmp_path))


def _history(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((metric.step, metric.value) for metric in client.get_metric_history(run_id, key))


def _begin_an_outage(run) -> None:
    """A failed call, as one to a store that went away: the run's calls wait out the back-off."""
    def lost() -> None:
        raise ConnectionError("the store went away")

    assert not run._call("logging metrics", lost)


def test_params_reach_the_run_as_they_are_logged_not_only_when_it_ends(tmp_path, store):
    """A training runs for days, and a killed one never ends its run: the parameter count logged
    after the model is built must show in the run at once."""
    run = start_variant_run(tmp_path, "tiny", "base", 1, None, tmp_path / "base")
    run.log_params({"model.heads": 8, "training.steps": 100})
    run.log_params({"parameters": 1234, "model.heads": 8})
    assert store.get_run(run.run_id).data.params == {
        "model.heads": "8", "training.steps": "100", "parameters": "1234"}


def test_a_record_logs_its_numbers_at_its_step_and_leaves_other_values_out(tmp_path, store):
    """A record may hold a value that is no number (None, a flag): the numbers are logged at the
    record's step, and the rest neither stops the training nor becomes a metric."""
    run = start_variant_run(tmp_path, "tiny", "base", 1, None, tmp_path / "base")
    run.log_metrics({"train_loss": 2.5, "lr": 0.001, "grad_norm": None, "skipped": True,
                     "note": "warm-up"}, step=40)
    assert set(store.get_run(run.run_id).data.metrics) == {"train_loss", "lr"}
    assert _history(store, run.run_id, "train_loss") == [(40, 2.5)]
    assert _history(store, run.run_id, "lr") == [(40, 0.001)]


def test_a_score_logged_again_is_one_point_not_two(tmp_path, store):
    """A score run again (a rule re-run, a requeued job) logs the same value: the run keeps one
    value at step 0; a changed score is logged as the new latest value."""
    run = start_variant_run(tmp_path, "tiny", "base", 1, None, tmp_path / "base")
    run.log_scores("test", "averaged", {"sacrebleu": 26.5, "perplexity": 4.9})
    run.log_scores("test", "averaged", {"sacrebleu": 26.5, "perplexity": 4.9})
    assert _history(store, run.run_id, "test_averaged_sacrebleu") == [(0, 26.5)]
    assert _history(store, run.run_id, "test_averaged_perplexity") == [(0, 4.9)]
    run.log_scores("test", "averaged", {"sacrebleu": 27.0})
    assert store.get_run(run.run_id).data.metrics["test_averaged_sacrebleu"] == 27.0


def test_the_summary_logs_its_counts_as_params_and_its_results_as_values_only(tmp_path, store):
    """``steps`` is the param ``training.steps`` already, and the counts describe the run: none
    of them is also a metric; the numeric results are ``summary/<name>`` at step 0, and what
    is no number (settings, fingerprint, dev curve, a flag) is not logged."""
    run = start_variant_run(tmp_path, "tiny", "base", 1, None, tmp_path / "base")
    run.log_summary({"steps": 6, "parameters": 1234, "world_size": 2, "device": "cpu",
                     "precision": "fp32", "final_dev_loss": 2.5, "gpu_hours": 0.0,
                     "settings": {"model.d_model": 16}, "fingerprint": "ab12", "resumed": True,
                     "dev_curve": [{"step": 4, "dev_loss": 2.5}], "mfu": None}, [])
    data = store.get_run(run.run_id).data
    assert data.params == {"parameters": "1234", "world_size": "2", "device": "cpu",
                           "precision": "fp32"}
    assert data.metrics == {"summary/final_dev_loss": 2.5, "summary/gpu_hours": 0.0}
    assert _history(store, run.run_id, "summary/final_dev_loss") == [(0, 2.5)]


def test_values_given_during_an_outage_reach_the_run_as_it_ends(tmp_path, store):
    """The summary and scores are in no ``metrics.jsonl``: given while the store does not answer
    (within the back-off, not even tried), they are kept and logged by the run's last call."""
    run = start_variant_run(tmp_path, "tiny", "base", 1, None, tmp_path / "base")
    _begin_an_outage(run)
    run.log_params({"parameters": 1234})
    run.log_summary({"steps": 6, "parameters": 1234, "final_dev_loss": 2.5}, [])
    run.log_scores("dev", "last", {"sacrebleu": 12.5})
    assert store.get_run(run.run_id).data.metrics == {}  # not tried within the back-off
    run.finish()
    finished = store.get_run(run.run_id)
    assert finished.info.status == "FINISHED"
    assert finished.data.params == {"parameters": "1234"}
    assert finished.data.metrics == {"summary/final_dev_loss": 2.5, "dev_last_sacrebleu": 12.5}


def test_a_replay_longer_than_one_batch_logs_every_line(tmp_path, store):
    """MLflow takes at most 1000 metrics per call: a long training's metrics missed during an
    outage are replayed in several calls, none of them left out."""
    metrics = tmp_path / "metrics.jsonl"
    run = start_variant_run(tmp_path, "tiny", "base", 1, None, tmp_path / "base", metrics)
    metrics.write_text("".join(json.dumps({"step": step, "train_loss": 1.0 / step}) + "\n"
                               for step in range(1, 1202)))
    assert run.replay_metrics() == 1201
    history = _history(store, run.run_id, "train_loss")
    assert [step for step, _ in history] == list(range(1, 1202))
    assert history[-1] == (1201, 1.0 / 1201)
    assert run.replay_metrics() == 0


def test_a_resumed_run_is_the_same_run_running_again(tmp_path, store):
    """A requeued training continues its run (``mlflow_run_id``), which shows it running again,
    not as killed, until it ends."""
    run = start_variant_run(tmp_path, "tiny", "base", 1, None, tmp_path / "base")
    run.finish("KILLED")
    assert store.get_run(run.run_id).info.status == "KILLED"
    resumed = start_variant_run(tmp_path, "tiny", "base", 1, None, tmp_path / "base")
    assert resumed.run_id == run.run_id
    assert store.get_run(run.run_id).info.status == "RUNNING"


def test_a_resumed_training_logs_each_step_it_trains_again_once(tmp_path, store):
    """Killed after step 4 with its checkpoint at step 3, a training resumes at step 3 and logs
    step 4 again (its ``metrics.jsonl`` cut back to step 2's line): the run holds one point a
    step, the first, not two at step 4; the steps after it are logged as ever."""
    metrics = tmp_path / "metrics.jsonl"
    run = start_variant_run(tmp_path, "tiny", "base", 1, None, tmp_path / "base", metrics)
    for step, loss in ((2, 3.0), (4, 2.0)):
        with metrics.open("a") as stream:
            stream.write(json.dumps({"step": step, "train_loss": loss}) + "\n")
        run.log_metrics({"train_loss": loss}, step)
    metrics.write_text(json.dumps({"step": 2, "train_loss": 3.0}) + "\n")
    resumed = start_variant_run(tmp_path, "tiny", "base", 1, None, tmp_path / "base", metrics)
    assert resumed.run_id == run.run_id
    for step, loss in ((4, 2.0), (6, 1.5)):
        with metrics.open("a") as stream:
            stream.write(json.dumps({"step": step, "train_loss": loss}) + "\n")
        resumed.log_metrics({"train_loss": loss, "lr": step / 10}, step)
    resumed.finish()
    assert _history(store, run.run_id, "train_loss") == [(2, 3.0), (4, 2.0), (6, 1.5)]
    assert _history(store, run.run_id, "lr") == [(4, 0.4), (6, 0.6)]


def test_a_run_deleted_in_the_store_is_replaced_by_a_new_one_on_resume(tmp_path, store):
    """A run deleted in the UI is kept, deleted, by the store, which refuses to log to it: the
    resumed training records a new run, so tagged, and logs there, instead of going on without
    tracking."""
    run = start_variant_run(tmp_path, "tiny", "base", 2, None, tmp_path / "base")
    run.finish("KILLED")
    store.delete_run(run.run_id)
    resumed = start_variant_run(tmp_path, "tiny", "base", 2, None, tmp_path / "base")
    assert resumed.run_id != run.run_id and resumed.outage_since is None
    assert (tmp_path / "base" / RUN_ID_FILE).read_text() == resumed.run_id
    resumed.log_metrics({"train_loss": 2.0}, step=10)
    new = store.get_run(resumed.run_id)
    assert new.info.lifecycle_stage == "active" and new.info.status == "RUNNING"
    assert (new.data.tags["variant"], new.data.tags["seed"]) == ("base", "2")
    assert _history(store, resumed.run_id, "train_loss") == [(10, 2.0)]


# -- the corpora as dataset inputs ---------------------------------------------------------------
def _reports(folder, counts: dict[str, tuple[int, int]]) -> None:
    """``<split>.report.json`` of the prepare stage: (read, kept) pairs of each split's source."""
    folder.mkdir(parents=True, exist_ok=True)
    for split, (read, kept) in counts.items():
        (folder / f"{split}.report.json").write_text(json.dumps(
            {"split": split, "sources": {f"tiny_{split}": {"read": read, "kept": kept}}}))


def test_each_dataset_input_names_its_split_its_kind_and_its_pair_counts(tmp_path):
    """The UI's dataset column tells a run's train, dev and test corpora apart by their context
    tag, a local archive from a download by its source type, and shows the pairs read and kept."""
    experiment = load_experiment(ROOT / "configs/tiny.yaml")
    _reports(tmp_path, {"train": (120, 100), "dev": (300, 300), "test": (310, 305)})
    inputs = {item.dataset.name: item for item in dataset_inputs(experiment.data, tmp_path)}
    sha256 = experiment.data.train[0].sha256
    assert {name: ({tag.key: tag.value for tag in item.tags}, item.dataset.source_type,
                   json.loads(item.dataset.profile)) for name, item in inputs.items()} == {
        "tiny_train": ({"mlflow.data.context": "train"}, "local",
                       {"sha256": sha256, "pairs_read": 120, "pairs_kept": 100}),
        "tiny_dev": ({"mlflow.data.context": "dev"}, "local",
                     {"sha256": sha256, "pairs_read": 300, "pairs_kept": 300}),
        "tiny_test": ({"mlflow.data.context": "test"}, "local",
                      {"sha256": sha256, "pairs_read": 310, "pairs_kept": 305})}
    wmt = load_experiment(ROOT / "configs/wmt14_en_de.yaml")
    assert {item.dataset.source_type for item in dataset_inputs(wmt.data, tmp_path / "none")} \
        == {"http"}


def test_a_dataset_inputs_digest_changes_with_what_cleaning_kept(tmp_path):
    """The digest names the corpus as trained on: the same archive cleaned to other pairs is
    another dataset, the same one again is the same."""
    experiment = load_experiment(ROOT / "configs/tiny.yaml")

    def digests(kept: int) -> dict[str, str]:
        _reports(tmp_path / str(kept), {"train": (120, kept), "dev": (300, 300)})
        return {item.dataset.name: item.dataset.digest
                for item in dataset_inputs(experiment.data, tmp_path / str(kept))}

    assert digests(100) == digests(100)
    assert digests(100)["tiny_train"] != digests(90)["tiny_train"]
    assert digests(100)["tiny_dev"] == digests(90)["tiny_dev"]


def test_a_store_answering_again_gets_the_missed_metrics_at_once(tmp_path, store, monkeypatch):
    """After an outage, the first call the store answers replays what ``metrics.jsonl`` holds
    and the run lacks: the curves are whole while the training goes on, not only at its end."""
    monkeypatch.setattr("reproduce.tracking.runs.RETRY_AFTER_SECONDS", 0.0)  # no back-off
    metrics = tmp_path / "metrics.jsonl"
    run = start_variant_run(tmp_path, "tiny", "base", 1, None, tmp_path / "base", metrics)
    _begin_an_outage(run)
    metrics.write_text("".join(json.dumps({"step": step, "train_loss": 4.0 - step}) + "\n"
                               for step in (1, 2, 3)))
    run.log_metrics({"train_loss": 1.0}, step=3)  # the store answers again
    assert _history(store, run.run_id, "train_loss") == [(1, 3.0), (2, 2.0), (3, 1.0)]


def test_a_run_recorded_anew_gets_what_the_lost_one_was_given_at_once(tmp_path, monkeypatch):
    """The embedded store removed during a training: the run is recorded again in the store
    created anew, with its params, tags and the metrics of ``metrics.jsonl``, by the call that
    found it gone, not only when the training ends (a killed one never does)."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    # as a training sets it before its store is first opened (tracking.store.configure_client)
    monkeypatch.setenv("MLFLOW_SQLALCHEMYSTORE_POOLCLASS", "NullPool")
    metrics = tmp_path / "metrics.jsonl"
    run = start_variant_run(tmp_path, "tiny", "base", 1, "A", tmp_path / "base", metrics)
    run.log_params({"model.heads": 8})
    run.set_tags({"mlflow.note.content": "base (not a Table 3 row)"})
    metrics.write_text(json.dumps({"step": 1, "train_loss": 3.0}) + "\n")
    run.log_metrics({"train_loss": 3.0}, step=1)
    lost = run.run_id
    (tmp_path / "mlflow.db").unlink()
    with metrics.open("a") as records:
        records.write(json.dumps({"step": 2, "train_loss": 2.0}) + "\n")
    run.log_metrics({"train_loss": 2.0}, step=2)
    assert run.run_id != lost and run.outage_since is None
    store = MlflowClient(tracking_uri(tmp_path))
    anew = store.get_run(run.run_id)
    assert anew.data.params == {"model.heads": "8"}
    assert anew.data.tags["mlflow.note.content"] == "base (not a Table 3 row)"
    assert (anew.data.tags["seed"], anew.data.tags["table3_row"]) == ("1", "A")
    assert _history(store, run.run_id, "train_loss") == [(1, 3.0), (2, 2.0)]

# -- finding, creating and ending runs -----------------------------------------------------------
def test_a_score_logs_to_the_newest_run_of_its_variant_and_seed(tmp_path, store):
    """A training recorded again (its store lost the first run, or --restart) leaves two runs of
    one variant and seed: the scores belong to the newest, the one that trained the weights."""
    older = start_variant_run(tmp_path, "tiny", "base", 1, None, tmp_path / "first")
    experiment = store.get_experiment_by_name("tiny").experiment_id
    started = store.get_run(older.run_id).info.start_time
    newer = store.create_run(experiment, start_time=started + 60_000,
                             tags={"variant": "base", "seed": "1"}).info.run_id
    store.create_run(experiment, start_time=started + 120_000,
                     tags={"variant": "base", "seed": "2"})  # another seed's
    assert find_variant_run(tmp_path, "tiny", "base", 1).run_id == newer


def test_a_run_that_a_score_starts_is_finished_and_tagged_by_it(tmp_path, store):
    """A variant's run made by ``score`` (none was trained with tracking) holds finished
    results: it must not show as running forever."""
    run = variant_run_for(tmp_path, "tiny", "base", 2, "score")
    recorded = store.get_run(run.run_id)
    assert recorded.info.status == "FINISHED"
    assert recorded.info.run_name == "base seed 2"
    assert {key: recorded.data.tags[key] for key in ("dataset", "variant", "seed", "kind")} == {
        "dataset": "tiny", "variant": "base", "seed": "2", "kind": "variant"}
    assert recorded.data.tags["mlflow.source.name"] == "python -m reproduce score"
    assert variant_run_for(tmp_path, "tiny", "base", 2, "score").run_id == run.run_id


def test_tables_that_fail_to_log_leave_their_run_failed(tmp_path, store):
    with pytest.raises(RuntimeError, match="rendering failed"):
        with tables_run(tmp_path, "tiny") as run:
            raise RuntimeError("rendering failed")
    assert store.get_run(run.run_id).info.status == "FAILED"


def test_an_artifact_given_during_an_outage_is_stored_as_the_run_ends(tmp_path, store):
    """A training's files logged while the store does not answer are stored by the run's last
    call, with what is already there left as it is."""
    summary = tmp_path / "summary.json"
    summary.write_text("{}\n")
    run = start_variant_run(tmp_path, "tiny", "base", 1, None, tmp_path / "base")
    _begin_an_outage(run)
    run.log_artifact(summary, "train")
    assert store.list_artifacts(run.run_id, "train") == []  # not tried within the back-off
    run.finish()
    assert [item.path for item in store.list_artifacts(run.run_id, "train")] == [
        "train/summary.json"]


# -- the back-off of an outage, SQLite's lock ----------------------------------------------------
def test_the_back_off_doubles_from_30_seconds_up_to_8_minutes(tmp_path):
    """A store that does not answer costs a training one attempt per back-off: 30 s after the
    first failure, doubled after each further one, never more than 480 s (nor less than 30)."""
    run = VariantRun(None, None)
    waits = []
    for failures in (0, 1, 2, 3, 4, 5, 6, 10):
        run._failures = failures
        waits.append(run._back_off())
    assert waits == [30.0, 30.0, 60.0, 120.0, 240.0, 480.0, 480.0, 480.0]


def test_a_locked_store_is_tried_again_and_then_refused():
    """"database is locked" (parallel jobs on one SQLite file) is tried again, and after the last
    attempt raised, not taken for success; any other error is raised at once."""
    calls = []

    def locked_once() -> None:
        calls.append("once")
        if len(calls) == 1:
            raise RuntimeError("(sqlite3.OperationalError) database is locked")

    _retry_while_locked(locked_once, attempts=2)
    assert calls == ["once", "once"]

    def always_locked() -> None:
        calls.append("always")
        raise RuntimeError("(sqlite3.OperationalError) database is locked")

    with pytest.raises(RuntimeError, match="database is locked"):
        _retry_while_locked(always_locked, attempts=2)
    assert calls.count("always") == 2

    def refused() -> None:
        calls.append("refused")
        raise RuntimeError("no such table: runs")

    with pytest.raises(RuntimeError, match="no such table"):
        _retry_while_locked(refused, attempts=2)
    assert calls.count("refused") == 1


def test_a_removed_store_is_told_from_one_that_is_there(tmp_path, store):
    """The embedded store's file removed during a training: created again before the next call
    (an empty file would fail it); a store that is there is used as it is."""
    run = start_variant_run(tmp_path, "tiny", "base", 1, None, tmp_path / "base")
    assert not run.opener.store_removed()
    (tmp_path / "mlflow.db").unlink()
    assert run.opener.store_removed()


# -- the store's address -------------------------------------------------------------------------
def test_a_database_uri_naming_its_driver_is_a_known_store():
    """``postgresql+psycopg2://`` is MLflow's way to name a database's driver: its scheme is
    postgresql, not refused as unknown; an unknown scheme with a driver still is."""
    check_scheme("postgresql+psycopg2://trainer@db.example.org:5432/mlflow")
    check_scheme("mysql+pymysql://trainer@db.example.org/mlflow")
    with pytest.raises(ConfigError, match="no store of scheme 'ftp'"):
        check_scheme("ftp+tls://example.org/mlflow")


def test_the_host_header_of_a_server_keeps_its_port_and_brackets_an_ipv6_address():
    """The preflight check asks as MLflow's client does: ``Host: name:port``, an IPv6 address in
    brackets, never the credentials."""
    assert host_header(urlsplit("http://trainer:pw@node7:5000/mlflow")) == "node7:5000"
    assert host_header(urlsplit("http://[::1]:5000")) == "[::1]:5000"
    assert host_header(urlsplit("https://mlflow.example.org")) == "mlflow.example.org"


class _Failing(BaseHTTPRequestHandler):
    """Answers every request with the status in the server's ``status``."""

    def do_GET(self):
        self.send_error(self.server.status, "from the test")

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("status, silent", [(500, True), (503, True), (403, False),
                                            (404, False)])
def test_a_server_error_is_silence_and_a_client_error_a_refusal(status, silent):
    """A 5xx (a proxy before a loaded server, a server failing for now) is waited for, as a
    server that does not answer is: a training goes on; a 4xx is a refusal that no wait mends."""
    with ThreadingHTTPServer(("127.0.0.1", 0), _Failing) as server:
        server.status = status
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        uri = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            if silent:
                assert server_silence(uri, timeout=5) == f"HTTP {status}"
            else:
                with pytest.raises(ConfigError, match=f"refuses API calls \\(HTTP {status}"):
                    server_silence(uri, timeout=5)
        finally:
            server.shutdown()


def test_mlflows_run_link_is_not_printed_for_a_uri_with_credentials(monkeypatch):
    """MLflow prints ``View run ... at: <tracking URI>/...`` to stdout as a run ends, out of any
    logging filter's reach: with a password in the URI it must be switched off; without one the
    link is harmless and left on."""
    monkeypatch.delenv(SUPPRESS_RUN_URL, raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://node7:5000")
    redact_credentials_in_logs()
    assert SUPPRESS_RUN_URL not in os.environ
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://trainer:s3cr3t@node7:5000")
    redact_credentials_in_logs()
    assert os.environ[SUPPRESS_RUN_URL] == "true"
