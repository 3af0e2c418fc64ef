"""What training checks before it starts: memory for the model's fixed state, read where a Slurm
job's cgroup limits it (the command-line cases are in test_bad_input.py)."""

from __future__ import annotations

import pytest
import torch

from reproduce.config import ModelConfig
from reproduce.errors import ConfigError
from reproduce.model.architectures import build_model
from reproduce.training import preflight


def test_training_state_is_sixteen_bytes_per_parameter():
    config = ModelConfig(layers=1, d_model=16, d_ff=32, heads=2, d_k=8, d_v=8)
    parameters = build_model(config, 50).num_parameters()
    assert preflight.training_state_bytes(config, 50) == 16 * parameters


@pytest.fixture
def memory_files(tmp_path, monkeypatch):
    """A cgroup mount, /proc/meminfo and /proc/self/cgroup of their own: this process in cgroup
    v2's root (as in a container) until a test says otherwise."""
    cgroup, meminfo = tmp_path / "cgroup", tmp_path / "meminfo"
    cgroup.mkdir()
    (tmp_path / "self_cgroup").write_text("0::/\n")
    monkeypatch.setattr(preflight, "CGROUP_MEMORY", cgroup)
    monkeypatch.setattr(preflight, "PROC_MEMINFO", meminfo)
    monkeypatch.setattr(preflight, "PROC_CGROUP", tmp_path / "self_cgroup")
    return cgroup, meminfo


def test_a_cgroup_limit_below_the_machines_memory_wins(memory_files):
    cgroup, meminfo = memory_files
    meminfo.write_text("MemTotal:  8000 kB\nMemAvailable:  4000 kB\n")
    (cgroup / "memory.max").write_text("3000000\n")
    (cgroup / "memory.current").write_text("1000000\n")
    assert preflight.available_host_bytes() == 2_000_000
    (cgroup / "memory.max").write_text("max\n")  # no limit: the machine's available memory
    assert preflight.available_host_bytes() == 4000 * 1024


def _limit(folder, limit, used, files=("memory.max", "memory.current")):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / files[0]).write_text(f"{limit}\n")
    (folder / files[1]).write_text(f"{used}\n")


def test_a_slurm_jobs_own_cgroup_v2_limits_it_and_so_does_every_group_above(memory_files,
                                                                             tmp_path):
    """Slurm puts a job's processes in a cgroup of its own, below the mount's root: its limit
    (or a tighter one higher up) is what the job may use, not the root's lack of one."""
    cgroup, meminfo = memory_files
    meminfo.write_text("MemAvailable:  4000000 kB\n")
    (tmp_path / "self_cgroup").write_text("0::/system.slice/slurmstepd.scope/job_7/step_0\n")
    _limit(cgroup, "max", 9_000_000_000)
    _limit(cgroup / "system.slice/slurmstepd.scope/job_7", 3_000_000, 1_000_000)
    _limit(cgroup / "system.slice/slurmstepd.scope/job_7/step_0", "max", 900_000)
    assert preflight.available_host_bytes() == 2_000_000
    _limit(cgroup / "system.slice", 1_500_000, 1_000_000)  # a tighter limit above the job's
    assert preflight.available_host_bytes() == 500_000


def test_a_cgroup_v1_memory_controller_limits_the_job_too(memory_files, tmp_path):
    """cgroup v1 (and the hybrid layout) keeps the memory controller in a hierarchy of its own,
    with other file names; its 'no limit' is a huge number, not ``max``."""
    cgroup, meminfo = memory_files
    meminfo.write_text("MemAvailable:  4000000 kB\n")
    (tmp_path / "self_cgroup").write_text(
        "5:cpu,cpuacct:/slurm/uid_0/job_7/step_0\n4:memory:/slurm/uid_0/job_7/step_0\n0::/\n")
    v1 = ("memory.limit_in_bytes", "memory.usage_in_bytes")
    _limit(cgroup / "memory", 9223372036854771712, 5_000_000_000, v1)
    _limit(cgroup / "memory/slurm/uid_0/job_7/step_0", 5_000_000, 1_000_000, v1)
    assert preflight.available_host_bytes() == 4_000_000


def test_unknown_memory_skips_the_check(memory_files):
    config = ModelConfig(d_model=32768, d_ff=2**24)
    assert preflight.available_host_bytes() is None
    preflight.check_fits(config, 100, torch.device("cpu"), "base")


def test_a_model_fits_exactly_up_to_the_free_memory(memory_files):
    _, meminfo = memory_files
    config = ModelConfig(layers=1, d_model=16, d_ff=32, heads=2, d_k=8, d_v=8)
    needed = preflight.training_state_bytes(config, 50)
    meminfo.write_text(f"MemAvailable: {needed // 1024 + 1} kB\n")
    preflight.check_fits(config, 50, torch.device("cpu"), "base")
    meminfo.write_text(f"MemAvailable: {needed // 1024 - 1} kB\n")
    with pytest.raises(ConfigError, match="variant base: model"):
        preflight.check_fits(config, 50, torch.device("cpu"), "base")


def test_a_model_that_needs_exactly_the_free_memory_is_let_through(memory_files):
    """The check refuses a model whose fixed state exceeds the free memory, not one that just
    fits: a cgroup's limit less its use gives the free bytes to the byte."""
    cgroup, meminfo = memory_files
    config = ModelConfig(layers=1, d_model=16, d_ff=32, heads=2, d_k=8, d_v=8)
    needed = preflight.training_state_bytes(config, 50)
    meminfo.write_text(f"MemAvailable: {needed} kB\n")  # the machine has far more
    (cgroup / "memory.current").write_text("4096\n")
    (cgroup / "memory.max").write_text(f"{needed + 4096}\n")
    assert preflight.available_host_bytes() == needed
    preflight.check_fits(config, 50, torch.device("cpu"), "base")
    (cgroup / "memory.max").write_text(f"{needed + 4095}\n")
    with pytest.raises(ConfigError, match="variant base: model"):
        preflight.check_fits(config, 50, torch.device("cpu"), "base")


def test_on_a_gpu_the_free_memory_is_what_other_processes_left(monkeypatch):
    """A GPU shared with other jobs has less free than it has: the check must use what is free
    (CUDA's first number), or a model that cannot fit passes it."""
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (3 * 2**30, 80 * 2**30))
    assert preflight.available_bytes(torch.device("cuda", 0)) == 3 * 2**30
