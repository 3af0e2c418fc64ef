"""A project copied or moved to another folder, or run by another path to its interpreter, keeps
its finished results: nothing machine-specific is among what makes Snakemake plan a job again."""

import shutil
import subprocess
import sys
from pathlib import Path

from tests.project_copy import copy_workflow

TARGET = "results/tiny/data/dev.src"


def _snakemake(python: Path, workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-m", "snakemake", "--cores", "1", *args, TARGET],
                          cwd=workdir, capture_output=True, text=True, timeout=600)


def test_a_moved_project_run_by_another_interpreter_path_has_nothing_to_do(tmp_path):
    interpreter = Path(sys.executable)
    alias = next(path for path in interpreter.parent.glob("python3*")
                 if path.name != interpreter.name and path.samefile(interpreter))
    first = copy_workflow(tmp_path / "first")
    made = _snakemake(interpreter, first)
    assert made.returncode == 0, made.stderr[-3000:]

    moved = tmp_path / "elsewhere/moved"
    moved.parent.mkdir()
    shutil.move(first, moved)
    planned = _snakemake(alias, moved, "--dry-run")
    assert planned.returncode == 0, planned.stderr[-3000:]
    assert "Nothing to be done" in planned.stdout + planned.stderr, planned.stdout[-3000:]
