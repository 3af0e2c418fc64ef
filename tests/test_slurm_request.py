"""Training's Slurm request: set in the Snakemake profile with the plugin's resource names, turned
into submitit's parameters, refused in one line before anything is submitted; experiment files
hold no Slurm settings."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from submitit.core.utils import DelayedSubmission, FailedJobError

from reproduce.config import ConfigError
from reproduce.errors import UsageError
from reproduce.training.interruption import STOP_REQUEST, STOP_WITH
from reproduce.training.launch import launch_training
from reproduce.training.slurm_request import SlurmRequest, parse_request
from tests.project_copy import copy_workflow
from tests.training_fixtures import TINY, corpus_pair, small_variant

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def test_every_setting_reaches_submitit_under_its_slurm_name():
    request = parse_request(["slurm_partition=gpu", "slurm_account=proj", "qos=high",
                             "constraint=a100|h100", "nodes=2", "gpu=16", "cpus_per_task=8",
                             "mem_mb=256000", "runtime=1440", "requeue_signal_seconds=90",
                             "max_requeues=6", "slurm_extra='--reservation=paper' --exclusive"])
    assert request.submitit_parameters("train-x") == {
        "name": "train-x", "nodes": 2, "tasks_per_node": 8, "gpus_per_node": 8,
        "cpus_per_task": 8, "timeout_min": 1440, "slurm_signal_delay_s": 90,
        "slurm_partition": "gpu", "slurm_account": "proj", "slurm_qos": "high",
        "slurm_constraint": "a100|h100", "slurm_mem": "256000M",
        "slurm_additional_parameters": {"reservation": "paper", "exclusive": True},
    }
    assert request.max_requeues == 6 and request.ranks == 16


def test_unset_settings_are_left_to_the_cluster():
    parameters = SlurmRequest().submitit_parameters("train-x")
    assert not {"slurm_partition", "slurm_account", "slurm_qos", "slurm_constraint", "slurm_mem",
                "gpus_per_node", "slurm_additional_parameters"} & parameters.keys()
    assert parameters["tasks_per_node"] == 1


def test_ranks_are_one_per_gpu_or_the_tasks_per_node_without_gpus():
    assert SlurmRequest(gpu=8).ranks == 8
    assert SlurmRequest(nodes=2, gpu=4).ranks == 4
    assert SlurmRequest(nodes=2, tasks_per_node=3).ranks == 6


@pytest.mark.parametrize("assignments, named", [
    (["gpu=3", "nodes=2"], "gpu (3) must be a multiple of nodes (2)"),
    (["nodes=0"], "nodes: Input should be greater than 0"),
    (["gpu=8", "tasks_per_node=2"], "tasks_per_node (2) with gpu (8) on 1 node(s): a job with "
                                    "GPUs runs one rank per GPU, 8 a node"),
    (["runtime=a day"], "runtime: Input should be a valid integer"),
    (["partition=gpu"], "partition: unknown key"),
    (["gpu"], "--slurm 'gpu': expected name=value"),
    (["slurm_extra=-w node1"], "slurm_extra (the profile's set-resources: train"),
    (["slurm_extra=--exclusive --"], "'--' is not an sbatch long option"),
])
def test_a_bad_request_is_one_line_naming_the_resource(assignments, named):
    with pytest.raises(ConfigError) as caught:
        parse_request(assignments)
    assert named in str(caught.value) and "\n" not in str(caught.value)


def test_train_refuses_ranks_that_do_not_divide_a_step_before_submitting(tmp_path):
    (tmp_path / "data").mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "reproduce", "train", "--experiment",
         str(ROOT / "configs/tiny.yaml"), "--variant", "base", "--train-data",
         str(tmp_path / "data"), "--dev-data", str(tmp_path / "data"), "--out-dir",
         str(tmp_path / "base"), "--results", str(tmp_path), "--launcher", "slurm", "--slurm",
         "gpu=3"],
        capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "micro_batches_per_step (8) is not a multiple of the 3 ranks" in result.stderr
    assert not (tmp_path / "base/submitit").exists()


def test_the_dry_run_shows_the_paper_profiles_training_request(tmp_path):
    """The training job's request as a dry run lists it, strings and numbers (before 9.17,
    below the floor, Snakemake listed string resources as ``<TBD>``)."""
    workdir = copy_workflow(tmp_path / "project")
    shutil.copytree(ROOT / "slurm", workdir / "slurm")
    result = subprocess.run(
        [SNAKEMAKE, "--profile", "slurm", "-n", "results/wmt14_en_de/big/seed-1/train/final.pt"],
        cwd=workdir, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    train_job = result.stdout[result.stdout.index("rule train:"):].split("\n\n")[0]
    requests = ["gpu=8", "nodes=1", "cpus_per_task=8", "mem_mb=256000", "runtime=1440",
                "max_requeues=30", "slurm_partition=gpu"]
    for request in requests:
        assert request in train_job, train_job


@pytest.fixture
def refusing_sbatch(tmp_path, monkeypatch):
    """An ``sbatch`` first on the PATH that takes no job: submitit writes the job's sbatch script
    and pickled task into the submitit folder, then fails, so that what a submission would ask
    Slurm for can be read without a cluster (an ``srun`` beside it, which submitit and the
    launcher look for and which never runs)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "sbatch").write_text("#!/bin/sh\necho 'sbatch: error: no cluster in tests' >&2\n"
                                   "exit 1\n")
    (folder / "srun").write_text("#!/bin/sh\nexit 1\n")
    for command in ("sbatch", "srun"):
        (folder / command).chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def _submit_refused(tmp_path, request, **options):
    """The sbatch script and the pickled submission of a training launched on Slurm."""
    corpora = corpus_pair(tmp_path / "corpora", 20)
    with pytest.raises(FailedJobError, match="no cluster in tests"):
        launch_training(TINY, small_variant(steps=2), *corpora, tmp_path / "variant", tmp_path,
                        launcher="slurm", slurm=request, threads=3, **options)
    # submitit's name for it: .submission_file_<uid>.sh (1.5.4), submission_file_<uid>.sh before
    [script] = (tmp_path / "variant/submitit").glob("*submission_file_*.sh")
    [pickled] = (tmp_path / "variant/submitit").glob("*.pkl")
    return script.read_text(), DelayedSubmission.load(pickled)


def test_a_slurm_training_asks_for_the_request_and_requeues_as_often_as_it_says(
        tmp_path, refusing_sbatch, monkeypatch):
    """What the launcher submits: the request's ranks as tasks per node, its time limit in
    minutes (sbatch's --time unit), its signal, and the requeues it allows; and the task trains
    from the given folders with the threads asked, dying with no process of this host (the job
    runs on another) but stopping on Snakemake's stop request."""
    monkeypatch.setenv(STOP_WITH, f"{os.getpid()} 1")  # this launcher's owner, for local jobs
    monkeypatch.setenv(STOP_REQUEST, str(tmp_path / "stop"))
    request = SlurmRequest(nodes=2, tasks_per_node=2, cpus_per_task=3, runtime=90, mem_mb=1000,
                           requeue_signal_seconds=60, max_requeues=5)
    script, submission = _submit_refused(tmp_path, request)
    for line in ("--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=3", "--time=90",
                 "--mem=1000M", "--signal=USR2@60", "--job-name=train-tiny-base"):
        assert f"#SBATCH {line}\n" in script, script
    assert "--gpus-per-node" not in script
    assert submission._timeout_countdown == 5
    task = submission.function
    assert (task.threads, task.stop_after_steps, task.stop_with) == (3, None, ())
    assert task.stop_request == tmp_path / "stop"
    assert task.output_dir == (tmp_path / "variant").resolve()
    assert task.train_dir == (tmp_path / "corpora/train").resolve()
    assert task.dev_dir == (tmp_path / "corpora/dev").resolve()


def test_restart_moves_the_earlier_run_aside_before_submitting_and_only_then(tmp_path,
                                                                              refusing_sbatch):
    """``--restart`` starts from step 0: without it the checkpoints stay, to be resumed."""
    (tmp_path / "variant/checkpoints").mkdir(parents=True)
    (tmp_path / "variant/checkpoints/step_3.pt").write_bytes(b"a checkpoint")
    _submit_refused(tmp_path, SlurmRequest())
    assert (tmp_path / "variant/checkpoints/step_3.pt").exists()
    for leftover in (tmp_path / "variant/submitit").iterdir():
        leftover.unlink()
    _submit_refused(tmp_path, SlurmRequest(), restart=True)
    assert not (tmp_path / "variant/checkpoints").exists()
    [replaced] = (tmp_path / "variant").glob("replaced-*")
    assert (replaced / "checkpoints/step_3.pt").read_bytes() == b"a checkpoint"


def test_slurm_ranks_without_gpus_must_divide_a_step_too(tmp_path, refusing_sbatch):
    """Ranks are the request's tasks per node times its nodes when it asks for no GPU: three of
    them cannot share eight micro-batches, refused before anything is submitted."""
    with pytest.raises(ConfigError, match=r"\(8\) is not a multiple of the 3 ranks the slurm"):
        launch_training(TINY, small_variant(steps=2), *corpus_pair(tmp_path, 20), tmp_path / "v",
                        tmp_path, launcher="slurm", slurm=SlurmRequest(tasks_per_node=3))
    assert not (tmp_path / "v/submitit").exists()


def test_without_slurm_commands_the_slurm_launcher_is_refused_before_setting_the_run_aside(
        tmp_path, monkeypatch):
    """On a machine with no ``sbatch`` and ``srun`` (not a Slurm login node), one line says so
    and names the local launcher, instead of submitit's traceback; a restart sets nothing aside
    for a job that could never be submitted."""
    (tmp_path / "variant/checkpoints").mkdir(parents=True)
    monkeypatch.setenv("PATH", str(tmp_path / "no-commands"))
    with pytest.raises(UsageError, match="needs sbatch and srun on the PATH.*local launcher"):
        launch_training(TINY, small_variant(steps=2), *corpus_pair(tmp_path / "corpora", 20),
                        tmp_path / "variant", tmp_path, launcher="slurm", restart=True)
    assert sorted(path.name for path in (tmp_path / "variant").iterdir()) == ["checkpoints"]
