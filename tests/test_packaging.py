"""The conda environment and the pip project pin exactly the same packages."""

import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_environment_yml_pins_the_same_packages_as_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pip_pins = set(project["dependencies"]) | set(project["optional-dependencies"]["test"])
    environment = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda_pip = next(item["pip"] for item in environment["dependencies"] if isinstance(item, dict))
    assert set(conda_pip) == pip_pins
    assert "python=3.11" in environment["dependencies"]


def test_every_dependency_is_pinned_exactly():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for requirement in project["dependencies"] + project["optional-dependencies"]["test"]:
        assert "==" in requirement, f"{requirement} is not pinned with =="
