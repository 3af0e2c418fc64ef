#!/usr/bin/env bash
# Create .venv (Python 3.11) and install the project with the given extras, e.g. `install.sh test`.
# Idempotent: a second run only checks that everything is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
python="${PYTHON:-python3.11}"
command -v "$python" >/dev/null || python=python3
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
target="."
[ -n "$extras" ] && target=".[$extras]"
.venv/bin/python -m pip install --quiet --editable "$target"
