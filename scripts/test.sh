#!/usr/bin/env bash
# README command 2: set up, then run the whole test suite against real PostgreSQL and Chromium.
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
.venv/bin/python -m pytest --durations=30 "$@"  # the slowest tests, for keeping CI short
