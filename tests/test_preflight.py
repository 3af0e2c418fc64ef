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
    cgroup, meminfo = tmp_path / "cgroup", tmp_path / "meminfo"
    cgroup.mkdir()
    monkeypatch.setattr(preflight, "CGROUP_MEMORY", cgroup)
    monkeypatch.setattr(preflight, "PROC_MEMINFO", meminfo)
    return cgroup, meminfo


def test_a_cgroup_limit_below_the_machines_memory_wins(memory_files):
    cgroup, meminfo = memory_files
    meminfo.write_text("MemTotal:  8000 kB\nMemAvailable:  4000 kB\n")
    (cgroup / "memory.max").write_text("3000000\n")
    (cgroup / "memory.current").write_text("1000000\n")
    assert preflight.available_host_bytes() == 2_000_000
    (cgroup / "memory.max").write_text("max\n")  # no limit: the machine's available memory
    assert preflight.available_host_bytes() == 4000 * 1024


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
