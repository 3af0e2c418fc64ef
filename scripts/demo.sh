#!/usr/bin/env bash
# Quick start, command 1: install, then run the whole pipeline on the embedded tiny default
# (data -> BPE -> tiny variants trained -> averaging -> beam search -> BLEU -> Tables 2 and 3; a
# generated treebank -> parser -> F1 -> Table 4).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
bash scripts/install.sh
installed=$(date +%s)
.venv/bin/snakemake --cores "${CORES:-2}" all "$@"
finished=$(date +%s)
echo "Demo finished in $(( finished - started )) s: install $(( installed - started )) s," \
  "pipeline $(( finished - installed )) s. Tables:"
cat results/tiny/tables/table2.md results/tiny/tables/table3.md results/tiny_parsing/tables/table4.md
echo
echo "Browse the runs: .venv/bin/mlflow ui --backend-store-uri sqlite:///results/mlflow.db, then open"
echo "(each dataset's variants with their key results, and its tables):"
.venv/bin/reproduce mlflow-address --results results
