#!/usr/bin/env bash
# Create .venv and install the exact tested pins of a lock (runtime and test tools), then the
# project itself, editable. Idempotent: a second run only checks. The lock depends on the host:
#   requirements/lock-py3.11-linux-cu130.txt  where an NVIDIA driver is loaded: PyPI's torch is the
#                                             CUDA 13.0 build, whose CUDA libraries it pins too
#   requirements/lock-py3.11-linux.txt        elsewhere, or with TORCH_INDEX_URL: torch as pip
#                                             finds it (a CPU wheel in find-links, that index's)
#   TORCH_BUILD=cu130 (or base) bash scripts/install.sh   # choose the lock instead of detecting
#   PYTHON=python3.12 bash scripts/install.sh   # another Python (3.11-3.13 resolve the same pins)
#   TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126 bash scripts/install.sh  # CUDA 12.6
set -euo pipefail
cd "$(dirname "$0")/.."
build="${TORCH_BUILD:-}"
if [ -z "$build" ]; then
  build=base
  if [ -e /proc/driver/nvidia/version ] || command -v nvidia-smi >/dev/null; then
    [ -n "${TORCH_INDEX_URL:-}" ] || build=cu130
  fi
fi
case "$build" in
  base) lock=requirements/lock-py3.11-linux.txt ;;
  cu130) lock=requirements/lock-py3.11-linux-cu130.txt ;;
  *) echo "install.sh: TORCH_BUILD=$build: expected cu130 or base" >&2; exit 2 ;;
esac
if [ "$build" = cu130 ] && [ -n "${TORCH_INDEX_URL:-}" ]; then
  echo "install.sh: TORCH_INDEX_URL installs its own torch build; use it with TORCH_BUILD=base" >&2
  exit 2
fi
python="${PYTHON:-python3.11}"
command -v "$python" >/dev/null || python=python3
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
if [ -n "${TORCH_INDEX_URL:-}" ]; then
  # torch first, from PyTorch's index for that CUDA (or cpu) build; the lock's torch==X then
  # accepts the installed X+cu126 and leaves it in place.
  .venv/bin/python -m pip install --quiet --no-compile --index-url "$TORCH_INDEX_URL" \
    "$(grep -o '^torch==[^ ]*' "$lock")"
fi
# pip compiles every installed module to bytecode one file at a time (40 of a first install's
# 70 s on 2 cores); compileall does the same with one worker per core. Some packages ship files
# that are not Python 3 (templates, tests): pip skips them silently, and so does -qq (its exit
# status counts them).
.venv/bin/python -m pip install --quiet --no-compile --requirement "$lock"
.venv/bin/python -m pip install --quiet --no-compile --no-deps --editable .
.venv/bin/python -m compileall -qq -j 0 .venv/lib/python3*/site-packages || true
# Name what the lock does not pin (a torch build's own CUDA libraries, say, or a package that was
# installed by hand): such packages float from one install to the next.
.venv/bin/python - "$lock" <<'EOF'
import sys
from importlib.metadata import distributions

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

lines = (line.split("#")[0].strip() for line in open(sys.argv[1]))
pinned = {canonicalize_name(Requirement(line).name) for line in lines if line}
installed = {canonicalize_name(dist.metadata["Name"]) for dist in distributions()}
unpinned = sorted(installed - pinned - {"pip", "reproduce"})
if unpinned:
    print(f"install.sh: {len(unpinned)} installed packages are not pinned by {sys.argv[1]}: "
          f"{', '.join(unpinned)}", file=sys.stderr)
EOF
echo "install.sh: .venv holds the pins of $lock"
