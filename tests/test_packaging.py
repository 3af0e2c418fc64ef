"""pyproject.toml declares compatible ranges, whose floors are requirements/floors.txt (tested
by scripts/test-floors.sh); the lock pins every package exactly, inside them; the CUDA lock adds
only the CUDA packages of PyPI's torch wheel; the two conda envs (the jobs'
workflow/envs/reproduce.yaml and the user's environment.yml) pin the CUDA lock's versions; and the
package works installed, outside the checkout."""

import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from reproduce.tables.paper import paper_table2, paper_table3, paper_table4

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements/lock-py3.11-linux.txt"
CUDA_LOCK = ROOT / "requirements/lock-py3.11-linux-cu130.txt"
FLOORS = ROOT / "requirements/floors.txt"
JOBS_ENV = ROOT / "workflow/envs/reproduce.yaml"
USER_ENV = ROOT / "environment.yml"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
RUNTIME = [Requirement(line) for line in PROJECT["dependencies"]]
TEST_TOOLS = [Requirement(line) for line in PROJECT["optional-dependencies"]["test"]]
# What PyPI's Linux torch wheel adds to the lock: its CUDA libraries, their Python bindings and
# Triton. Anything else in the CUDA lock would be a pin that the CPU lock lacks by mistake.
CUDA_PACKAGE = re.compile(r"nvidia-.+|cuda-.+|triton")


def _pins(lines) -> dict[str, str]:
    """Package name -> exact version of `name==version` requirement lines."""
    pins = {}
    for line in lines:
        requirement = Requirement(line)
        (specifier,) = requirement.specifier
        assert specifier.operator == "==", f"{line}: not an exact pin"
        name = canonicalize_name(requirement.name)
        assert name not in pins, f"{line}: {name} is pinned twice"
        pins[name] = specifier.version
    return pins


def _file_pins(path: Path) -> dict[str, str]:
    lines = [line.split("#")[0].strip() for line in path.read_text().splitlines()]
    return _pins(line for line in lines if line)


def _lock_pins() -> dict[str, str]:
    return _file_pins(LOCK)


def _pip_section(path: Path) -> list[str]:
    environment = yaml.safe_load(path.read_text())
    (pip_section,) = [item["pip"] for item in environment["dependencies"] if isinstance(item, dict)]
    return pip_section


def _conda_env_pins(path: Path) -> dict[str, str]:
    """The pins of a conda env's pip section; its pip options (`--editable .`) left out."""
    return _pins(line for line in _pip_section(path) if not line.startswith("-"))


def test_python_3_11_and_newer_are_allowed():
    assert PROJECT["requires-python"] == ">=3.11"


@pytest.mark.parametrize("requirement", RUNTIME + TEST_TOOLS, ids=str)
def test_each_dependency_is_a_range_with_the_locked_version_inside(requirement):
    operators = {specifier.operator for specifier in requirement.specifier}
    assert ">=" in operators and "==" not in operators, f"{requirement}: expected a >= range"
    locked = _lock_pins()[canonicalize_name(requirement.name)]
    assert requirement.specifier.contains(locked), f"{requirement} excludes the locked {locked}"


def test_each_floor_is_the_tested_one_of_requirements_floors():
    """A range's floor is a claim that the code runs with that version: scripts/test-floors.sh
    tests the versions of floors.txt, so the two must name the same ones, for every dependency."""
    floors = _file_pins(FLOORS)
    lower_bounds = {}
    for requirement in RUNTIME + TEST_TOOLS:
        (floor,) = [s.version for s in requirement.specifier if s.operator == ">="]
        lower_bounds[canonicalize_name(requirement.name)] = floor
    assert floors == lower_bounds


def test_torchs_range_stops_at_the_locked_minor_release():
    """Newer torch releases are untested until the lock moves to them: `pip install .` must not
    pull one (it did: 2.15 where 2.13 was tested)."""
    (torch,) = [requirement for requirement in RUNTIME if requirement.name == "torch"]
    major, minor, *_ = (int(part) for part in _lock_pins()["torch"].split("."))
    assert not torch.specifier.contains(f"{major}.{minor + 1}.0")


def test_torch_is_locked_without_a_build_label_so_gpu_hosts_get_the_cuda_build():
    assert "+" not in _lock_pins()["torch"]


def test_the_cuda_lock_is_the_lock_plus_the_cuda_packages_of_the_same_torch():
    lock, cuda_lock = _lock_pins(), _file_pins(CUDA_LOCK)
    assert {name: cuda_lock.get(name) for name in lock} == lock
    added = set(cuda_lock) - set(lock)
    assert {"cuda-toolkit", "nvidia-cudnn-cu13", "nvidia-nccl-cu13", "triton"} <= added
    assert all(CUDA_PACKAGE.fullmatch(name) for name in added), sorted(added)


def test_the_conda_env_of_the_jobs_pins_the_cuda_locks_runtime_versions():
    cuda_lock, conda = _file_pins(CUDA_LOCK), _conda_env_pins(JOBS_ENV)
    assert {name: cuda_lock.get(name) for name in conda} == conda
    assert {canonicalize_name(requirement.name) for requirement in RUNTIME} <= set(conda)
    assert set(cuda_lock) - set(_lock_pins()) <= set(conda)  # torch's CUDA libraries too
    test_only = {canonicalize_name(requirement.name) for requirement in TEST_TOOLS}
    assert not test_only & set(conda)


def test_the_users_conda_env_pins_exactly_the_cuda_lock_and_installs_the_project():
    """environment.yml is .venv for conda users: every pin of the CUDA lock (the lock's runtime,
    Snakemake and test tools, plus torch's CUDA libraries, which conda's pip takes from PyPI),
    none other, then the checkout."""
    assert _conda_env_pins(USER_ENV) == _file_pins(CUDA_LOCK)
    assert _pip_section(USER_ENV)[-1] == "--editable ."


@pytest.mark.parametrize("path", [USER_ENV, JOBS_ENV], ids=lambda path: path.name)
def test_the_conda_envs_have_the_shape_conda_expects(path):
    """What `conda env create -f` reads (conda itself is not installed here): optional name,
    channels, and dependencies made of conda match specs (Python 3.11 and pip, which conda needs
    to install the pip list) and one `pip:` list of requirement lines."""
    environment = yaml.safe_load(path.read_text())
    assert set(environment) <= {"name", "channels", "dependencies"}
    assert isinstance(environment.get("name", ""), str)
    assert environment["channels"] == ["conda-forge", "nodefaults"]
    specs = [item for item in environment["dependencies"] if not isinstance(item, dict)]
    assert specs == ["python=3.11", "pip"]
    (pip,) = [item for item in environment["dependencies"] if isinstance(item, dict)]
    assert list(pip) == ["pip"] and all(isinstance(line, str) for line in pip["pip"])


def test_the_users_conda_env_is_named():
    assert yaml.safe_load(USER_ENV.read_text())["name"] == "reproduce"


def _build_isolation() -> list[str]:
    """No build isolation where this environment has the build backend that pyproject.toml asks
    for (the lock pins setuptools), so no download; elsewhere (the floors' venv) pip fetches it."""
    build_system = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
    for line in build_system["requires"]:
        requirement = Requirement(line)
        try:
            installed = version(requirement.name)
        except PackageNotFoundError:
            return []
        if not requirement.specifier.contains(installed):
            return []
    return ["--no-build-isolation"]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path]:
    """The project as a user gets it from `pip install .`: a wheel built from a copy of the
    sources (so the checkout gets no build/ folder), installed without dependencies into a folder
    of its own. Returns (wheel, folder)."""
    base = tmp_path_factory.mktemp("installed")
    source = base / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "reproduce", source / "reproduce",
                    ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    subprocess.run([*pip, "wheel", "--no-deps", *_build_isolation(), "--wheel-dir",
                    str(base / "dist"), str(source)], check=True, cwd=base)
    (wheel,) = (base / "dist").glob("reproduce-*.whl")
    site = base / "site"
    subprocess.run([*pip, "install", "--no-deps", "--no-index", "--target", str(site), str(wheel)],
                   check=True, cwd=base)
    shutil.rmtree(source)
    return wheel, site


def test_the_wheel_carries_the_papers_numbers(installed):
    wheel, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    for table in ("table2.csv", "table3.csv", "table4.csv"):
        assert f"reproduce/tables/paper_numbers/{table}" in names


def _outside_the_checkout(site: Path, *command: str) -> subprocess.CompletedProcess:
    """Runs `python *command` from a folder outside the checkout with only the installed copy
    of the package importable: PYTHONPATH puts it before .venv's editable install (whose finder
    only answers after the path), and nothing puts the checkout on sys.path."""
    environment = {**os.environ, "PYTHONPATH": str(site)}
    result = subprocess.run([sys.executable, *command], cwd=site.parent, env=environment,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result


def test_an_installed_package_reads_the_papers_numbers_outside_the_checkout(installed):
    _, site = installed
    check = (
        "import reproduce\n"
        "from reproduce.tables.paper import paper_table2, paper_table3, paper_table4\n"
        "print(reproduce.__file__)\n"
        "print(len(paper_table2()), len(paper_table3()), len(paper_table4()))\n"
    )
    where, sizes = _outside_the_checkout(site, "-c", check).stdout.splitlines()
    assert Path(where).is_relative_to(site), f"imported {where}, not the installed copy"
    assert sizes.split() == [str(len(paper_table2())), str(len(paper_table3())),
                             str(len(paper_table4()))]
    assert _outside_the_checkout(site, "-m", "reproduce", "tables", "--help").stdout
    console_script = site / "bin" / "reproduce"  # pyproject's [project.scripts] entry point
    assert _outside_the_checkout(site, str(console_script), "tables", "--help").stdout
