"""pyproject.toml declares compatible ranges; the lock pins every package exactly, inside them;
the conda env of the jobs (workflow/envs/reproduce.yaml) pins the same versions as the lock."""

import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements/lock-py3.11-linux.txt"
CONDA_ENV = ROOT / "workflow/envs/reproduce.yaml"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
RUNTIME = [Requirement(line) for line in PROJECT["dependencies"]]
TEST_TOOLS = [Requirement(line) for line in PROJECT["optional-dependencies"]["test"]]


def _pins(lines) -> dict[str, str]:
    """Package name -> exact version of `name==version` requirement lines."""
    pins = {}
    for line in lines:
        requirement = Requirement(line)
        (specifier,) = requirement.specifier
        assert specifier.operator == "==", f"{line}: not an exact pin"
        pins[canonicalize_name(requirement.name)] = specifier.version
    return pins


def _lock_pins() -> dict[str, str]:
    lines = [line.split("#")[0].strip() for line in LOCK.read_text().splitlines()]
    return _pins(line for line in lines if line)


def _conda_env_pins() -> dict[str, str]:
    environment = yaml.safe_load(CONDA_ENV.read_text())
    pip_section = next(item["pip"] for item in environment["dependencies"] if isinstance(item, dict))
    return _pins(pip_section)


def test_python_3_11_and_newer_are_allowed():
    assert PROJECT["requires-python"] == ">=3.11"


@pytest.mark.parametrize("requirement", RUNTIME + TEST_TOOLS, ids=str)
def test_each_dependency_is_a_range_with_the_locked_version_inside(requirement):
    operators = {specifier.operator for specifier in requirement.specifier}
    assert ">=" in operators and "==" not in operators, f"{requirement}: expected a >= range"
    locked = _lock_pins()[canonicalize_name(requirement.name)]
    assert requirement.specifier.contains(locked), f"{requirement} excludes the locked {locked}"


def test_torch_is_locked_without_a_build_label_so_gpu_hosts_get_the_cuda_build():
    assert "+" not in _lock_pins()["torch"]


def test_the_conda_env_of_the_jobs_pins_the_locked_runtime_versions():
    lock, conda = _lock_pins(), _conda_env_pins()
    assert {name: lock.get(name) for name in conda} == conda
    assert {canonicalize_name(requirement.name) for requirement in RUNTIME} <= set(conda)
    test_only = {canonicalize_name(requirement.name) for requirement in TEST_TOOLS}
    assert not test_only & set(conda)
