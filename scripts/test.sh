#!/usr/bin/env bash
# README command 2: set up, then build the docs strictly and run the whole test suite against real
# PostgreSQL and Chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
need_apt=()
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
ls -d /usr/lib/postgresql/*/bin >/dev/null 2>&1 || need_apt+=(postgresql)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  fi
fi
bash scripts/setup.sh
pgdir=$(mktemp -d /tmp/scaling-pg.XXXXXX)
trap 'bash scripts/postgres.sh stop "$pgdir"' EXIT
export SCALING_TEST_POSTGRES_URL=$(bash scripts/postgres.sh start "$pgdir")
export SCALING_CHROMIUM=$(command -v chromium)
echo "PostgreSQL for the tests at $SCALING_TEST_POSTGRES_URL; Chromium at $SCALING_CHROMIUM"
bash scripts/docs.sh   # the documentation site builds strictly, every command and plan field in it
# Two workers (this machine's cores), one shared Ray per worker (tests/conftest.py); a worker that runs
# out of tests takes half of the other's queue (worksteal), so one long test near the end does not leave
# a core idle. The slowest tests, for keeping CI short. A worker that crashes ends the run (its test
# named, failed) rather than being replaced mid-run.
.venv/bin/python -m pytest -n "${SCALING_TEST_WORKERS:-2}" --dist worksteal --max-worker-restart 0 --durations=60 "$@"
