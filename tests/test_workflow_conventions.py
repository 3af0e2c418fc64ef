"""Snakemake's conventions: `snakemake --lint` and `snakefmt --check` find nothing, every value
in a shell command is quoted, and jobs write their stdout and stderr to their `log:` file."""

import subprocess
import sys
from pathlib import Path

import yaml

from reproduce.data.download import file_name
from reproduce.experiment_file import load_experiment
from tests.project_copy import copy_workflow

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300)


def test_snakefmt_would_change_nothing():
    result = _run([str(BIN / "snakefmt"), "--check", "Snakefile", "workflow"], ROOT)
    assert result.returncode == 0, result.stderr


def test_snakemake_lint_finds_nothing(tmp_path):
    copy_workflow(tmp_path)
    result = _run([str(BIN / "snakemake"), "--lint"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Lints for" not in result.stdout


def test_a_results_folder_with_a_space_and_a_semicolon_is_passed_quoted(tmp_path):
    copy_workflow(tmp_path)
    results = "out dir; touch INJECTED; x"
    pipeline = yaml.safe_load((ROOT / "configs/pipelines/tiny.yaml").read_text())
    (tmp_path / "pipeline.yaml").write_text(yaml.safe_dump(pipeline | {"results": results}))
    target = f"{results}/tiny/data/test.src"  # download and prepare: seconds
    command = [str(BIN / "snakemake"), "--cores", "1", "--configfile=pipeline.yaml", target]
    result = _run(command, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert not (tmp_path / "INJECTED").exists()
    folder = tmp_path / results
    assert len((folder / "tiny/data/test.src").read_text().splitlines()) > 100
    assert (folder / "mlflow.db").exists()  # the onstart hook got the folder whole too
    assert ([log.name.split(".")[:2] for log in (folder / "logs/download").iterdir()]
            == [["tiny_corpus", "tgz"]])
    assert (folder / "logs/tiny/prepare_test.log").exists()
    benchmark = (folder / "benchmarks/tiny/prepare_test.tsv").read_text().splitlines()
    assert benchmark[0].split("\t")[:2] == ["s", "h:m:s"] and len(benchmark) == 2


def test_a_failed_download_says_why_in_its_log(tmp_path):
    """A job's error goes to its log, which Snakemake names when the job fails; the download
    job's too, although it prints nothing when it succeeds."""
    copy_workflow(tmp_path)
    experiment = yaml.safe_load((ROOT / "configs/tiny.yaml").read_text())
    experiment["data"]["dev"][0]["sha256"] = "0" * 64
    (tmp_path / "configs/tiny.yaml").write_text(yaml.safe_dump(experiment, sort_keys=False))
    (tmp_path / "pipeline.yaml").write_text(yaml.safe_dump(
        yaml.safe_load((ROOT / "configs/pipelines/tiny.yaml").read_text())
        | {"experiments": ["configs/tiny.yaml"]}))
    result = _run([str(BIN / "snakemake"), "--cores", "1", "--configfile=pipeline.yaml",
                   "results/tiny/data/dev.src"], tmp_path)
    assert result.returncode != 0
    download = file_name(load_experiment(tmp_path / "configs/tiny.yaml").data.dev[0])
    log = (tmp_path / f"results/logs/download/{download}.log").read_text()
    assert "sha256" in log, log
