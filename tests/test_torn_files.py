"""A torn last line of ``metrics.jsonl`` (an append cut short: a killed process, a node losing
power, a full disk) is left out with a warning by every reader and cut off before the trainer
appends again; a bad line before the last is one error naming the file and line."""

import json
import logging

import pytest

from reproduce.errors import DataError
from reproduce.files import read_records
from reproduce.tables.results import read_training
from reproduce.tracking import start_variant_run, tracking_uri
from reproduce.training.assembly import build_trainer
from tests.test_tables import make_experiment
from tests.training_fixtures import TINY, corpus_pair, small_variant
from tests.training_fixtures import one_torch_thread  # noqa: F401 (autouse: one torch thread)

STEPS = 9
TORN = {
    "cut short": b'{"step": 6, "train_loss": 2.91, "lr": 0.0012, "grad_norm": 1.5, "tokens_per_s',
    "NUL-filled": b"\0" * 107,
}


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    return corpus_pair(tmp_path_factory.mktemp("corpora"), 200)


@pytest.fixture(scope="module")
def straight_curve(corpora, tmp_path_factory):
    folder = tmp_path_factory.mktemp("straight")
    build_trainer(small_variant(steps=STEPS), TINY, *corpora, folder).run()
    return _curve(folder / "train/metrics.jsonl")


def _curve(metrics) -> list:
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    return [(row["step"], row.get("train_loss"), row.get("dev_loss")) for row in rows]


@pytest.mark.parametrize("tail", TORN.values(), ids=TORN.keys())
def test_a_torn_tail_is_cut_off_and_the_run_resumes_to_the_same_curve(
        corpora, straight_curve, tmp_path, tail, caplog):
    folder = tmp_path / "run"
    build_trainer(small_variant(steps=STEPS), TINY, *corpora, folder).run(stop_after_steps=5)
    metrics = folder / "train/metrics.jsonl"
    with metrics.open("ab") as stream:
        stream.write(tail)
    with caplog.at_level(logging.WARNING):
        build_trainer(small_variant(steps=STEPS), TINY, *corpora, folder).run()
    assert f"{metrics}: its last line" in caplog.text
    assert _curve(metrics) == straight_curve


def test_a_torn_tail_without_a_checkpoint_is_cut_off_before_appending(corpora, straight_curve,
                                                                       tmp_path):
    metrics = tmp_path / "run/train/metrics.jsonl"
    metrics.parent.mkdir(parents=True)
    metrics.write_bytes(TORN["cut short"])
    build_trainer(small_variant(steps=STEPS), TINY, *corpora, tmp_path / "run").run()
    assert _curve(metrics) == straight_curve


def test_a_bad_line_before_the_last_is_refused_with_file_and_line(corpora, tmp_path):
    folder = tmp_path / "run"
    build_trainer(small_variant(steps=STEPS), TINY, *corpora, folder).run(stop_after_steps=5)
    metrics = folder / "train/metrics.jsonl"
    lines = metrics.read_bytes().split(b"\n")
    metrics.write_bytes(b"\n".join([lines[0], TORN["cut short"], *lines[1:]]))
    with pytest.raises(DataError) as raised:
        build_trainer(small_variant(steps=STEPS), TINY, *corpora, folder)
    message = str(raised.value)
    assert message.startswith(f"{metrics}:2: not a JSON line (") and "\n" not in message


def test_the_mlflow_replay_leaves_a_torn_tail_out(tmp_path, monkeypatch, caplog):
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    metrics = tmp_path / "metrics.jsonl"
    run = start_variant_run(tmp_path, "tiny", "base", 1, None, tmp_path, metrics)
    metrics.write_bytes(b'{"step": 2, "train_loss": 3.0}\n' + TORN["NUL-filled"])
    with caplog.at_level(logging.WARNING):
        assert run.replay_metrics() == 1
    assert f"{metrics}: its last line (2) is a torn record" in caplog.text
    history = MlflowClient(tracking_uri(tmp_path)).get_metric_history(run.run_id, "train_loss")
    assert [(m.step, m.value) for m in history] == [(2, 3.0)]


def test_the_tables_leave_a_torn_tail_out_with_a_warning(tmp_path, caplog):
    metrics = tmp_path / "toy/base/seed-1/train/metrics.jsonl"
    metrics.parent.mkdir(parents=True)
    rows = [{"step": 4, "dev_loss": 2.0, "dev_perplexity": 7.4}]
    metrics.write_bytes(b"".join(json.dumps(row).encode() + b"\n" for row in rows)
                        + TORN["NUL-filled"] + b"\n\n")
    with caplog.at_level(logging.WARNING):
        assert read_training(tmp_path, make_experiment(), "base", 1).dev_curve == rows
    assert f"{metrics}: its last line (2) is a torn record" in caplog.text


@pytest.mark.parametrize("content, records", [
    (b"", []),
    (b'{"step": 1}\n\n{"step": 2}', [{"step": 1}, {"step": 2}]),  # complete, its newline lost
    (b'{"step": 1}\n{"step": 2}\n' + TORN["cut short"], [{"step": 1}, {"step": 2}]),
])
def test_read_records(tmp_path, content, records):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(content)
    assert read_records(path) == records


@pytest.mark.parametrize("bad, reason", [(b"\xff\xfe", "not UTF-8"), (b"[1, 2]", "a JSON list"),
                                         (b"\0\0", "Expecting value at column 1")])
def test_a_bad_middle_line_names_file_line_and_reason(tmp_path, bad, reason):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 1}\n' + bad + b'\n{"step": 3}\n')
    with pytest.raises(DataError, match=rf"metrics\.jsonl:2: not a JSON line \({reason}"):
        read_records(path)
