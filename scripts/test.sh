#!/usr/bin/env bash
# Quick start, command 2: install (Chromium for the browser tests too), start the local
# single-node Slurm, run the whole test suite
# (slow end-to-end and Slurm tests included). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
if ! bash scripts/install-browser.sh; then
  echo "Chromium could not be installed: the browser tests will say why they skip." >&2
fi
if ! bash scripts/local-slurm.sh start; then
  echo "Local Slurm could not be started: the Slurm tests will say why they skip." >&2
fi
.venv/bin/python -m pytest -ra "$@"
