#!/usr/bin/env bash
# The prepared GPU check (one GPU, an 8-minute deadline, each step killed past its budget), most
# valuable first: a bf16 llama with GQA and qk_norm at d 2,048 x 24 (MFU floor 35%, peak memory
# against the model, fused AdamW), ZeRO-3 with accumulation (memory), tp2 on two ranks of the GPU
# (step 1's gradient norm), stop-and-resume, compile on and off, fp16, the CUDA tests; one verdict
# line per step, the JSON summary rewritten after each ($OUT/gpu-check.json), exit 1 if any failed.
# Runs from the checkout on a stock image (torch, numpy, pandas, scipy, pyyaml, rich, typer): the
# wheels of scripts/gpu-wheels.sh that it lacks are installed into .gpu-wheels/site, offline.
#   bash scripts/gpu-wheels.sh                 # here, with a network
#   bash scripts/gpu-check.sh --dry-run        # here: lists the steps and budgets, checks the wheels
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
