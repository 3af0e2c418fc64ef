"""A finished variant whose summary records no settings (written by a version before summaries
recorded them), as the planning sees it: a real Snakemake dry run on the stand-in results tree of
:mod:`tests.test_dag_inputs`. Whether the experiment file was edited since it trained cannot be
told, so it is treated as a stale variant is: warned of once, nothing replanned or deleted, and,
asked for an output it lacks, the plan stops before Snakemake would delete the others. (The tables
side is a case of tests/test_bad_input.py: tables-summary-without-settings.)"""

from __future__ import annotations

import json
import subprocess

from reproduce.training.staleness import NOT_RECORDED
from tests.test_dag_inputs import SNAKEMAKE, _dry_run, tree  # noqa: F401 (the fixture)

OLD_SUMMARY = {"dataset": "tiny", "variant": "A_h1", "steps": 600, "parameters": 123}


def test_a_summary_without_settings_is_warned_of_once_and_left_as_it_is(tree):  # noqa: F811
    folder = tree / "results/tiny/A_h1"
    summary = folder / "train/summary.json"
    original = summary.read_text()
    try:
        summary.write_text(json.dumps(OLD_SUMMARY))
        before = {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()}
        jobs, output = _dry_run(tree)
        assert "train" not in jobs and "average" not in jobs, jobs
        stale = [line for line in output.splitlines() if line.startswith("Stale: ")]
        assert len(stale) == 1 and "results/tiny/A_h1" in stale[0], output[-3000:]
        assert NOT_RECORDED in stale[0] and "move results/tiny/A_h1 aside" in stale[0]
        assert {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()} == before

        final = folder / "train/final.pt"
        final.rename(folder / "final.pt.kept")
        try:
            result = subprocess.run([SNAKEMAKE, "--cores", "1", "--configfile=pipeline.yaml",
                                     "--dry-run", "results/tiny/A_h1/train/final.pt"], cwd=tree,
                                    capture_output=True, text=True, timeout=600)
            assert result.returncode != 0
            assert "StaleTrainingError" in result.stdout + result.stderr
            assert NOT_RECORDED in result.stdout + result.stderr
        finally:
            (folder / "final.pt.kept").rename(final)
    finally:
        summary.write_text(original)
