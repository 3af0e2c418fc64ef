"""The order in which the demo's jobs take the cores (the rules' `priority:`), read from the plan
of the default pipeline: every experiment's data steps before any training, the trainings the
longest first, and the short jobs after them, so that on two cores no long training runs alone at
the end."""

import re
import subprocess
import sys
from pathlib import Path

from tests.project_copy import copy_workflow

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
DATA_RULES = {"download", "prepare", "train_bpe", "encode"}


def _planned_priorities(workdir: Path) -> list[tuple[str, str, int]]:
    """(rule, wildcards, priority) of every job `snakemake -n all` plans (0 where unprinted)."""
    result = subprocess.run([SNAKEMAKE, "-n", "--cores", "2", "all"], cwd=workdir,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", result.stdout):
        rule = re.match(r"(?:local)?rule (\w+):", block)
        if rule is None:
            continue
        wildcards = re.search(r"^\s+wildcards: (.*)$", block, re.MULTILINE)
        priority = re.search(r"^\s+priority: (\d+)$", block, re.MULTILINE)
        jobs.append((rule.group(1), wildcards.group(1) if wildcards else "",
                     int(priority.group(1)) if priority else 0))
    return jobs


def test_data_first_then_the_longest_trainings_first_then_the_rest(tmp_path):
    jobs = _planned_priorities(copy_workflow(tmp_path))
    trainings = sorted(((priority, wildcards) for rule, wildcards, priority in jobs
                        if rule == "train"), reverse=True)
    assert len(trainings) == 9
    data = [priority for rule, _, priority in jobs if rule in DATA_RULES]
    others = [priority for rule, _, priority in jobs if rule not in DATA_RULES | {"train"}]
    assert len(data) == 16 and min(data) > trainings[0][0]
    assert set(others) == {0} and trainings[-1][0] > 0
    assert len({priority for priority, _ in trainings}) == 9  # no ties: a total order
    longest = [wildcards for _, wildcards in trainings[:2]]
    assert longest == ["dataset=tiny, variant=big, seed=1",
                       "dataset=tiny_parsing, variant=base, seed=1"]
