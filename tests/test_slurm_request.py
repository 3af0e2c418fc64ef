"""Training's Slurm request: set in the Snakemake profile with the plugin's resource names, turned
into submitit's parameters, refused in one line before anything is submitted; experiment files
hold no Slurm settings."""

import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.version import Version

from reproduce.config import ConfigError
from reproduce.training.slurm_request import SlurmRequest, parse_request
from tests.project_copy import copy_workflow

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
    (["runtime=a day"], "runtime: Input should be a valid integer"),
    (["partition=gpu"], "partition: unknown key"),
    (["gpu"], "--slurm 'gpu': expected name=value"),
    (["slurm_extra=-w node1"], "slurm_extra (the profile's set-resources: train"),
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
    """Snakemake lists string resources as ``<TBD>`` in a dry run before 9.17 (the floor is
    9.0.1): their values are checked from 9.17 on, the numbers always."""
    workdir = copy_workflow(tmp_path / "project")
    shutil.copytree(ROOT / "slurm", workdir / "slurm")
    result = subprocess.run(
        [SNAKEMAKE, "--profile", "slurm", "-n", "results/wmt14_en_de/big/seed-1/train/final.pt"],
        cwd=workdir, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    train_job = result.stdout[result.stdout.index("rule train:"):].split("\n\n")[0]
    requests = ["gpu=8", "nodes=1", "cpus_per_task=8", "mem_mb=256000", "runtime=1440",
                "max_requeues=30"]
    if Version(version("snakemake")) >= Version("9.17"):
        requests.append("slurm_partition=gpu")
    for request in requests:
        assert request in train_job, train_job
