#!/usr/bin/env bash
# The prepared GPU check (one GPU, at most 8 minutes on one H200): the CUDA tests, `scaling train`
# in bf16 at d 2,048 x 24 (tokens/s, MFU floor 35%), fp16, stop-and-resume against the
# uninterrupted run, two ranks on the one GPU over gloo (tp2, zero3), peak memory against the
# model, compile on and off; one verdict line per step and a JSON summary, exit 1 if any failed.
# Runs from the checkout on a stock image (torch, numpy, pandas, scipy, pyyaml, rich, typer): the
# wheels of scripts/gpu-wheels.sh that it lacks are installed into .gpu-wheels/site, offline.
#   bash scripts/gpu-wheels.sh                 # here, with a network
#   bash scripts/gpu-check.sh --dry-run        # here: lists the steps and checks the wheels
#   bash scripts/gpu-check.sh --cpu            # here: rehearses the steps on the CPU, tiny model
#   bash scripts/gpu-check.sh [--summary F]    # on the GPU machine
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pick-python.sh
pick_python gpu-check
if [ "${1:-}" != "--dry-run" ] && ! "$python" -c "import pydantic, sqlalchemy, alembic" 2>/dev/null; then
  if ! ls .gpu-wheels/*.whl >/dev/null 2>&1; then
    echo "gpu-check: pydantic, SQLAlchemy or alembic missing and no wheels in .gpu-wheels/ (run bash scripts/gpu-wheels.sh)" >&2
    exit 2
  fi
  "$python" -m pip install --quiet --no-index --no-deps --target .gpu-wheels/site .gpu-wheels/*.whl
  export PYTHONPATH="$PWD/.gpu-wheels/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # the checkout's scaling, installed or not
exec "$python" scripts/gpu_check.py "$@"
