"""MLflow is a sink: score and tables write the same result files whether the store is there, was
deleted, or is a server that does not answer (then one warning line says what was not logged),
and a score needs no run of another job: with none to log to, it starts one tagged with the
dataset and variant."""

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from reproduce.cli import main
from reproduce.config import ModelConfig
from reproduce.experiment_file import load_experiment
from reproduce.provenance import trained_settings
from reproduce.model.transformer import Transformer
from reproduce.tables.outputs import TABLE_FILES
from reproduce.tracking import tracking_uri
from reproduce.training.checkpoints import save_checkpoint
from tests.mlflow_server import free_port
from tests.training_fixtures import ROOT, write_encoded

SECRET = "s3cr3t-pw"
VOCAB = 40


def _base_settings() -> dict:
    """What the tiny base variant is trained with: score refuses a checkpoint of other settings."""
    experiment = load_experiment(ROOT / "configs/tiny.yaml")
    return trained_settings(experiment.variant("base"), experiment)


@pytest.fixture
def scoring(tmp_path) -> dict:
    config = ModelConfig(d_model=16, layers=1, d_ff=32, heads=2, d_k=8, d_v=8, max_positions=64)
    torch.manual_seed(0)
    checkpoint = tmp_path / "final.pt"
    save_checkpoint({"model": Transformer(config, VOCAB).state_dict(),
                     "model_config": config.model_dump(),
                     "vocab_size": VOCAB, "step": 1, "settings": _base_settings()}, checkpoint)
    write_encoded(tmp_path / "encoded", VOCAB, [([5, 6, 7], [8, 9]), ([10, 11], [12, 13, 14])])
    (tmp_path / "hyp.txt").write_text("ein kleines Haus\nder Hund bellt\n")
    (tmp_path / "ref.txt").write_text("ein kleines Haus\nder Hund schläft\n")
    return {"root": tmp_path, "checkpoint": checkpoint}


def _score(scoring: dict, results: Path, out: Path, process: bool = False) -> bytes:
    """``reproduce score`` here, or in a process of its own as the pipeline runs it (MLflow
    keeps a store it opened for the process's life, schema included)."""
    root = scoring["root"]
    arguments = ["score", "--experiment", str(ROOT / "configs/tiny.yaml"), "--variant", "base",
                 "--split", "test", "--checkpoint-name", "averaged", "--translations",
                 str(root / "hyp.txt"), "--reference", str(root / "ref.txt"), "--checkpoint",
                 str(scoring["checkpoint"]), "--encoded", str(root / "encoded"), "--results",
                 str(results), "--out", str(out)]
    if process:
        subprocess.run([sys.executable, "-m", "reproduce", *arguments], check=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    else:
        main(arguments)
    return out.read_bytes()


def _variant_runs(results: Path) -> list:
    client = MlflowClient(tracking_uri(results))
    experiment = client.get_experiment_by_name("tiny")
    return client.search_runs([experiment.experiment_id], filter_string="tags.variant = 'base'")


def test_scores_do_not_depend_on_the_store(scoring, tmp_path, monkeypatch, caplog):
    results = tmp_path / "results"
    logged = _score(scoring, results, tmp_path / "logged.json")
    runs = _variant_runs(results)  # no training run to log to: one of its own, so tagged
    assert len(runs) == 1 and "test_averaged_sacrebleu" in runs[0].data.metrics
    assert runs[0].data.tags["dataset"] == "tiny" and runs[0].data.tags["kind"] == "variant"

    (results / "mlflow.db").unlink()  # a deleted store: created again, the same scores
    shutil.rmtree(results / "mlartifacts")
    assert _score(scoring, results, tmp_path / "after_deletion.json", process=True) == logged
    assert len(_variant_runs(results)) == 1

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://u:{SECRET}@127.0.0.1:{free_port()}")
    with caplog.at_level(logging.WARNING):
        assert _score(scoring, results, tmp_path / "unreachable.json") == logged
    warnings = [record.getMessage() for record in caplog.records
                if record.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("MLflow: the test averaged scores not logged "
                                  "(MLFLOW_TRACKING_URI=")
    assert "\n" not in warnings[0] and SECRET not in warnings[0]


def test_tables_do_not_depend_on_the_store(tmp_path, monkeypatch, caplog):
    def render(name: str) -> dict[str, bytes]:
        out = tmp_path / name
        main(["tables", "--experiment", str(ROOT / "configs/tiny.yaml"), "--results",
              str(tmp_path / "results"), "--out-dir", str(out)])
        return {path.name: path.read_bytes() for path in out.iterdir()
                if path.suffix in (".md", ".html", ".csv")}

    logged = render("logged")
    assert sorted(logged) == sorted(name for name in TABLE_FILES["translation"]
                                    if not name.endswith(".png"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{free_port()}")
    with caplog.at_level(logging.WARNING):
        assert render("unreachable") == logged
    assert [record.getMessage()[:30] for record in caplog.records
            if record.levelno >= logging.WARNING] == ["MLflow: the tables not logged "]
