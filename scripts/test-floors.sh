#!/usr/bin/env bash
# Test the floors of pyproject.toml's ranges: install the oldest version of every direct dependency
# (requirements/floors.txt, as constraints; transitive packages resolve to what those floors
# allow) into a fresh venv of its own, check that exactly the floors got installed, then run the
# fast tests (not slow, not slurm, not gpu) there. The lock is what .venv runs; this shows that a
# slightly older environment that meets the floors runs the code too. A job of its own, not part
# of .ci/run: torch's floor comes from PyPI as its CUDA build (about 4 GB of wheels to fetch and
# unpack, 6 GB in the venv); with pip's cache warm it took 4 minutes on 2 cores.
#   bash scripts/test-floors.sh                 # venv in $TMPDIR, then the fast tests
#   bash scripts/test-floors.sh -k tables       # extra arguments go to pytest
#   bash scripts/test-floors.sh -m slurm        # the Slurm tests instead (scripts/local-slurm.sh)
#   FLOORS_VENV=/scratch/floors PYTHON=python3.11 bash scripts/test-floors.sh
set -euo pipefail
cd "$(dirname "$0")/.."
floors=requirements/floors.txt
venv="${FLOORS_VENV:-${TMPDIR:-/tmp}/reproduce-floors-venv}"
python="${PYTHON:-python3.11}"
command -v "$python" >/dev/null || python=python3
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet --constraint "$floors" --editable ".[test]"
# A constraint only bounds what pip installs; make sure each floor is what the tests will import
# (torch's build label, +cpu or +cu121, aside).
"$venv/bin/python" - "$floors" <<'EOF'
import sys
from importlib.metadata import version

from packaging.requirements import Requirement

wrong = []
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if line:
        requirement = Requirement(line)
        (floor,) = requirement.specifier
        installed = version(requirement.name).split("+")[0]
        if installed != floor.version:
            wrong.append(f"{requirement.name}: {installed} installed, floor {floor.version}")
if wrong:
    sys.exit("not the floors:\n  " + "\n  ".join(wrong))
print(f"floors installed: {sys.argv[1]}")
EOF
# Temporary folders of its own: pytest keeps only the newest three of the shared default, so
# other pytest runs on the machine would delete this run's folders under it. Left out: one
# cross-check whose oracle is torch's own FLOP counter, which before torch 2.13 also counts some
# matrix products inside the model's nn.LSTM (2.6.0 to 2.12.0 fail it, 2.13.0 passes); the
# project's FLOP numbers come from its own formulas, not from that counter.
# The Slurm plugin's floor reads $USER, which login shells set and some containers do not.
export USER="${USER:-$(id -un)}"
"$venv/bin/python" -m pytest -ra -m "not slow and not slurm and not gpu" -p no:cacheprovider \
  --basetemp "$venv/pytest-tmp" \
  --deselect tests/test_recurrent.py::test_flops_outside_the_lstms_equal_the_torch_counter \
  "$@"
