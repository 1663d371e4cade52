#!/usr/bin/env bash
# README command 1: set up, then run the example sweep end to end (train, fit, report).
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS=postgres bash scripts/setup.sh
. .venv/bin/activate
mkdir -p scaling_runs
db="sqlite:///$PWD/scaling_runs/example.db"
# It ends with the answer: the recommended run, the laws it rests on, one line per law left out,
# and the commands that print the full tables (`scaling fit`, `scaling recommend`) and the report.
scaling sweep examples/plan.yaml --db "$db"
