#!/usr/bin/env bash
# Measure the whole GPU path in one command: pytest -m gpu, the trainer (base and big, eager and
# compiled), beam search on 3,003 sentences (worst-case and trained-like lengths) and the loss's
# peak memory, then OUTDIR/gpu-report.md.
# Without CUDA the same command runs a smoke mode (reduced model, tiny inputs, a minute or two).
# What each step does: benchmarks/gpu_check.py. BENCHMARKS.md ("Measuring on a GPU") gives the
# device call.
#
# Usage: scripts/gpu-check.sh OUTDIR [--budget SECONDS]
#   PYTHON: the interpreter (default: .venv/bin/python where it exists, else python3)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [[ $# -lt 1 || $1 == -* ]]; then
  echo "usage: scripts/gpu-check.sh OUTDIR [--budget SECONDS]" >&2
  exit 2
fi
if [[ -z ${PYTHON:-} ]]; then
  if [[ -x $root/.venv/bin/python ]]; then PYTHON=$root/.venv/bin/python; else PYTHON=python3; fi
fi
outdir=$(mkdir -p "$1" && cd "$1" && pwd)
shift
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
cd "$root"
exec "$PYTHON" benchmarks/gpu_check.py "$outdir" --python "$PYTHON" "$@"
