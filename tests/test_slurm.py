"""The cluster path against a real Slurm (scripts/local-slurm.sh): the Snakemake Slurm profile,
multi-task training through submitit, requeue at the time limit, and failures that name their
Slurm log."""

import json
import os
import shutil
import subprocess
import sys
import threading
from contextlib import contextmanager
from importlib.metadata import version
from pathlib import Path

import pytest
import torch
import yaml
from packaging.version import Version

from reproduce.experiment_file import load_experiment
from reproduce.training.checkpoints import load_checkpoint
from reproduce.training.launch import launch_training
from reproduce.training.slurm_request import SlurmRequest
from tests.mlflow_server import free_port
from tests.project_copy import copy_workflow
from tests.slurm_cluster import require_local_slurm
from tests.training_fixtures import random_corpus, small_variant

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


@pytest.fixture(autouse=True)
def slurm():
    require_local_slurm()


def _workdir(tmp_path: Path, experiment_edit) -> Path:
    workdir = copy_workflow(tmp_path / "project")
    shutil.copytree(ROOT / "tests/profiles/slurm-local", workdir / "slurm-local")
    experiment = yaml.safe_load((ROOT / "configs/tiny.yaml").read_text())
    experiment_edit(experiment)
    (workdir / "configs/tiny.yaml").write_text(yaml.safe_dump(experiment, sort_keys=False))
    pipeline = {"experiments": ["configs/tiny.yaml"], "results": "results",
                "training": {"launcher": "slurm", "threads": 1}}
    (workdir / "pipeline.yaml").write_text(yaml.safe_dump(pipeline))
    return workdir


def _snakemake(workdir: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SNAKEMAKE, "--profile", "slurm-local", "--configfile=pipeline.yaml", *args],
        cwd=workdir, capture_output=True, text=True, timeout=1500, env=env,
    )


@contextmanager
def _tracking_server(folder: Path):
    """The project's server script with its defaults, as the README has users start it for
    Slurm: it serves on this node's name (what compute nodes use), not on 127.0.0.1."""
    environment = dict(os.environ, MLFLOW_SERVER_DIR=str(folder),
                       MLFLOW_SERVER_PORT=str(free_port()),
                       PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    environment.pop("MLFLOW_SERVER_HOST", None)

    def server(action):
        return subprocess.run(["bash", str(ROOT / "scripts/mlflow-server.sh"), action],
                              env=environment, capture_output=True, text=True, timeout=200)

    started = server("start")
    assert started.returncode == 0, started.stderr
    try:
        yield started.stdout.strip().removeprefix("export MLFLOW_TRACKING_URI=")
    finally:
        server("stop")


def _one_short_variant(experiment: dict) -> None:
    experiment["training"] |= {"steps": 40, "eval_every_steps": 20, "seed": 1}
    experiment["training"]["checkpoints"]["every_steps"] = 8  # 5 checkpoints to average
    experiment["variants"] = {"base": experiment["variants"]["base"]}
    experiment["tables"]["table2"] = {"base": "base"}


def _set_cluster_settings(profile: Path) -> None:
    """What the README has a cluster user set in the profile: QoS and node features for every
    job, an account, two GPUs and one more sbatch option for training. (The test cluster has no
    accounting database, so the plugin could not check an account for the other jobs.)"""
    settings = yaml.safe_load(profile.read_text())
    settings["default-resources"] |= {"qos": "normal", "constraint": "testnode"}
    settings["set-resources"]["train"] = {"slurm_account": "paper_project", "gpu": 2,
                                          "runtime": 20, "mem_mb": 2000,
                                          "slurm_extra": "'--comment=attention'"}
    profile.write_text(yaml.safe_dump(settings, sort_keys=False))


def _slurm_job(job_id: str) -> tuple[dict[str, str], str]:
    """Slurm's own record of a job: ``scontrol show job`` as a dict, and its stored batch script."""
    shown = subprocess.run(["scontrol", "--oneliner", "show", "job", job_id],
                           capture_output=True, text=True, check=True).stdout
    fields = dict(item.split("=", 1) for item in shown.split() if "=" in item)
    script = subprocess.run(["scontrol", "write", "batch_script", job_id, "-"],
                            capture_output=True, text=True, check=True).stdout
    return fields, script


def test_the_readme_cluster_steps_train_with_the_profiles_request_and_log_to_the_server(tmp_path):
    from mlflow import MlflowClient

    workdir = _workdir(tmp_path, _one_short_variant)
    _set_cluster_settings(workdir / "slurm-local/config.yaml")
    with _tracking_server(tmp_path / "mlflow-server") as uri:
        assert not uri.startswith(("http://127.", "http://localhost")), uri
        environment = dict(os.environ, MLFLOW_TRACKING_URI=uri)
        planned = _snakemake(workdir, "-n", "all", env=environment)
        assert planned.returncode == 0, planned.stderr[-3000:]
        train_job = planned.stdout[planned.stdout.index("rule train:"):].split("\n\n")[0]
        requests = ["gpu=2", "runtime=20"]
        if Version(version("snakemake")) >= Version("9.17"):  # earlier: strings shown as <TBD>
            requests += ["slurm_account=paper_project", "qos=normal", "constraint=testnode",
                         "slurm_extra=--comment=attention"]
        for request in requests:
            assert request in train_job, train_job

        result = _snakemake(workdir, "all", env=environment)
        assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
        client = MlflowClient(uri)  # every job logged to the server, none to a SQLite file
        experiment = client.get_experiment_by_name("tiny")
        runs = client.search_runs([experiment.experiment_id], "tags.kind = 'variant'")
        assert [run.data.tags["mlflow.runName"] for run in runs] == ["base seed 1"]
        assert runs[0].info.status == "FINISHED"
        assert "test_averaged_sacrebleu" in runs[0].data.metrics
    assert not (workdir / "results/mlflow.db").exists()
    summary = json.loads((workdir / "results/tiny/base/seed-1/train/summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] == 40  # one rank per GPU
    assert (workdir / "results/tiny/tables/table3.md").exists()
    # The other rules ran as Slurm jobs (the plugin's logs), training through submitit.
    assert any((workdir / ".snakemake/slurm_logs").rglob("*.log"))
    training_logs = list((workdir / "results/tiny/base/seed-1/submitit").glob("*_0_log.out"))
    assert training_logs
    job, batch_script = _slurm_job(training_logs[0].name.split("_")[0])
    assert job["Account"] == "paper_project" and job["Features"] == "testnode"
    assert job["TresPerNode"] == "gres:gpu:2" and job["NumTasks"] == "2"
    assert job["Comment"] == "attention" and job["TimeLimit"] == "00:20:00"
    assert "#SBATCH --qos=normal" in batch_script  # no accounting database here to keep it


def test_a_failing_job_names_its_slurm_log(tmp_path):
    # prepare, not download: download is a localrule (compute nodes may have no internet)
    def missing_archive_member(experiment):
        _one_short_variant(experiment)
        experiment["data"]["dev"][0]["source_member"] = "dev/missing.src.sgm"
    workdir = _workdir(tmp_path, missing_archive_member)
    result = _snakemake(workdir, "results/tiny/data/dev.src")
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "slurm_logs" in output and ".log" in output, output[-4000:]


@contextmanager
def _releasing_requeued_jobs():
    """Slurm holds a requeued job until a begin time about two minutes later; to keep the test
    short, lift that hold (``scontrol update StartTime=now``) as soon as it appears."""
    stop = threading.Event()

    def release():
        while not stop.wait(1.0):
            queue = subprocess.run(["squeue", "--noheader", "--format=%i %r"], capture_output=True,
                                   text=True)
            for line in queue.stdout.splitlines():
                job, _, reason = line.partition(" ")
                if reason.strip() == "BeginTime":
                    subprocess.run(["scontrol", "update", f"jobid={job}", "StartTime=now"],
                                   capture_output=True)

    watcher = threading.Thread(target=release, daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join()


def test_training_past_its_time_limit_is_requeued_and_ends_as_if_uninterrupted(tmp_path):
    train = random_corpus(tmp_path / "train", 3000, seed=1)
    dev = random_corpus(tmp_path / "dev", 50, seed=2)
    experiment = load_experiment(ROOT / "configs/tiny.yaml")
    # About 60 s of training (as many steps as this machine trains in that time, measured on a
    # short run first) under a 1-minute limit with the signal 15 s before it: Slurm checks
    # limits every 30 s, so the signal comes 15-45 s into each run (a larger delay can signal the
    # job before submitit's handler is installed). The job is requeued at least once and resumes
    # from its last checkpoint each time.
    launch_training(experiment, small_variant(steps=600, dropout=0.1), train, dev,
                    tmp_path / "timing", tmp_path, launcher="inline")
    timing = json.loads((tmp_path / "timing/train/summary.json").read_text())
    steps = max(4500, 50 * round(60 * 600 / timing["wall_seconds"] / 50))
    variant = small_variant(steps=steps, dropout=0.1, log_every_steps=500,
                            eval_every_steps=1500)
    variant = variant.model_copy(update={
        "training": variant.training.model_copy(update={
            "checkpoints": variant.training.checkpoints.model_copy(
                update={"every_steps": 50, "keep_last": 3})}),
    })
    request = SlurmRequest(runtime=1, requeue_signal_seconds=15, cpus_per_task=1,
                           slurm_partition="debug")
    launch_training(experiment, variant, train, dev, tmp_path / "straight", tmp_path,
                    launcher="inline")
    with _releasing_requeued_jobs():
        launch_training(experiment, variant, train, dev, tmp_path / "slurm", tmp_path,
                        launcher="slurm", slurm=request)
    logs = "".join(path.read_text() for path in (tmp_path / "slurm/submitit").glob("*_log.*"))
    assert "Requeued job" in logs and "resumed from" in logs, logs[-3000:]
    straight = load_checkpoint(tmp_path / "straight/train/final.pt")["model"]
    requeued = load_checkpoint(tmp_path / "slurm/train/final.pt")["model"]
    for name, tensor in straight.items():
        assert torch.equal(tensor, requeued[name]), name
