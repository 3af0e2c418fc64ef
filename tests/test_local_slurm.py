"""The single-node Slurm of scripts/local-slurm.sh runs batch jobs and a 2-task submitit job whose
tasks see each other through torch.distributed (as multi-task training does)."""

import socket
import subprocess

import pytest

from tests.slurm_cluster import all_reduce_rank_plus_one, require_local_slurm, submitit_executor

pytestmark = pytest.mark.slurm


@pytest.fixture(autouse=True)
def slurm():
    require_local_slurm()


def test_sbatch_wrap_runs_a_job_that_writes_a_file(tmp_path):
    written = tmp_path / "written.txt"
    submitted = subprocess.run(
        ["sbatch", "--parsable", "--wait", "--partition=debug", "--time=2",
         f"--output={tmp_path}/%j.out", "--wrap",
         f'echo "$SLURM_JOB_ID $SLURM_JOB_PARTITION $SLURM_JOB_NODELIST" > {written}'],
        capture_output=True, text=True, timeout=180,
    )
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip().split(";")[0]
    assert written.read_text() == f"{job_id} debug {socket.gethostname().split('.')[0]}\n"


def test_a_two_task_submitit_job_all_reduces_across_its_ranks(tmp_path):
    executor = submitit_executor(tmp_path / "submitit", tasks_per_node=2, cpus_per_task=1)
    job = executor.submit(all_reduce_rank_plus_one)
    results = sorted(job.results(), key=lambda result: result["rank"])
    assert ([(r["rank"], r["local_rank"], r["torch_rank"]) for r in results]
            == [(0, 0, 0), (1, 1, 1)])
    assert {(r["world_size"], r["torch_world_size"]) for r in results} == {(2, 2)}
    assert [r["sum"] for r in results] == [3.0, 3.0]  # 1 + 2 on both ranks
