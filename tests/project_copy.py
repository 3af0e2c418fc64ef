"""A copy of the workflow (Snakefile, rules, configs) in a temporary folder, to run Snakemake in."""

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def copy_workflow(destination: Path) -> Path:
    destination.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "Snakefile", destination / "Snakefile")
    for folder in ("workflow", "configs"):
        shutil.copytree(ROOT / folder, destination / folder)
    return destination
