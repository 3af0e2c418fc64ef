#!/usr/bin/env bash
# Create .venv and install the exact tested pins of requirements/lock-py3.11-linux.txt (runtime
# and test tools), then the project itself, editable. Idempotent: a second run only checks.
#   PYTHON=python3.12 bash scripts/install.sh    # another interpreter (3.11 to 3.13 resolve the same pins)
#   TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126 bash scripts/install.sh   # torch's CUDA 12.6 build
set -euo pipefail
cd "$(dirname "$0")/.."
lock=requirements/lock-py3.11-linux.txt
python="${PYTHON:-python3.11}"
command -v "$python" >/dev/null || python=python3
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
if [ -n "${TORCH_INDEX_URL:-}" ]; then
  # torch first, from PyTorch's index for that CUDA (or cpu) build; the lock's torch==X then
  # accepts the installed X+cu126 and leaves it in place.
  .venv/bin/python -m pip install --quiet --index-url "$TORCH_INDEX_URL" \
    "$(grep -o '^torch==[^ ]*' "$lock")"
fi
.venv/bin/python -m pip install --quiet --requirement "$lock"
.venv/bin/python -m pip install --quiet --no-deps --editable .
