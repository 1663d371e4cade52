#!/usr/bin/env bash
# README command 1: set up, then run the example sweep end to end (train, fit, report).
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS=postgres bash scripts/setup.sh
. .venv/bin/activate
mkdir -p scaling_runs
db="sqlite:///$PWD/scaling_runs/example.db"
scaling sweep examples/plan.yaml --db "$db"
scaling fit --db "$db"
scaling recommend --db "$db"
