"""The local single-node Slurm of scripts/local-slurm.sh, for the Slurm tests.

`require_local_slurm()` skips a test, with the reason, when no Slurm node can take jobs; in CI
(`CI=true` with `REQUIRE_SLURM=1`) it fails instead, so that a broken cluster cannot pass as skips.
Functions that Slurm jobs run through submitit live here, at module level: submitit pickles them
by reference, and the job imports `tests.slurm_cluster` with the repository root on its path
(`submitit_executor` puts it there).
"""

import functools
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import submitit
import torch
import torch.distributed as dist

ROOT = Path(__file__).resolve().parents[1]
# allocated: busy with earlier tests' jobs; new jobs queue behind them.
READY_STATES = ("idle", "mixed", "allocated")


@functools.cache  # once per session: without a controller, sinfo takes about 10 s to give up
def _why_no_slurm() -> str | None:
    """None when `sinfo` answers and names a node that can take jobs, else the reason."""
    if shutil.which("sinfo") is None:
        return "Slurm is not installed (run `bash scripts/local-slurm.sh start` as root)"
    try:
        answer = subprocess.run(["sinfo", "--noheader", "--format=%n %T"],
                                capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return ("sinfo did not answer within 30 s (start it: bash scripts/local-slurm.sh start, "
                "as root)")
    if answer.returncode != 0:
        return (f"sinfo failed: {answer.stderr.strip()} (start it: bash scripts/local-slurm.sh "
                "start, as root)")
    nodes = [line.split() for line in answer.stdout.splitlines() if line.strip()]
    if not any(state in READY_STATES for _, state in nodes):
        found = ", ".join(" ".join(node) for node in nodes) or "no nodes"
        return f"no Slurm node is {'/'.join(READY_STATES)} (sinfo: {found})"
    return None


def require_local_slurm() -> None:
    """Skip the calling test when no local Slurm can run jobs; fail instead in CI with
    REQUIRE_SLURM=1."""
    reason = _why_no_slurm()
    if reason is None:
        return
    if os.environ.get("CI") == "true" and os.environ.get("REQUIRE_SLURM") == "1":
        pytest.fail(f"CI=true and REQUIRE_SLURM=1, but {reason}")
    pytest.skip(reason)


def submitit_executor(folder: Path, **parameters) -> submitit.AutoExecutor:
    """A submitit executor for the local cluster's `debug` partition whose jobs can import
    `tests`."""
    executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
    python_path = shlex.quote(str(ROOT))
    executor.update_parameters(
        slurm_partition="debug", nodes=1, mem_gb=1, timeout_min=5,
        slurm_setup=[f"export PYTHONPATH={python_path}${{PYTHONPATH:+:$PYTHONPATH}}"],
        **parameters,
    )
    return executor


def all_reduce_rank_plus_one() -> dict:
    """Run in each task of a multi-task Slurm job: set up torch.distributed (gloo) from submitit's
    environment and all-reduce (rank + 1); with world size W every task gets W(W+1)/2."""
    job = submitit.JobEnvironment()
    submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    dist.init_process_group("gloo")
    try:
        value = torch.tensor([float(job.global_rank + 1)])
        dist.all_reduce(value)
        return {"rank": job.global_rank, "local_rank": job.local_rank, "world_size": job.num_tasks,
                "torch_rank": dist.get_rank(), "torch_world_size": dist.get_world_size(),
                "sum": value.item()}
    finally:
        dist.destroy_process_group()
