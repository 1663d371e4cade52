#!/usr/bin/env bash
# The prepared GPU check (one GPU, under 10 minutes): real `scaling train` in bf16 with flash-attn
# and with SDPA (their losses agree; tokens/s and MFU), fp16 with loss scaling, a resume from a
# checkpoint, a two-run sweep through Ray with one GPU each, and the GPU-only tests; one line per
# check, exit 1 if any failed.
#   bash scripts/gpu-check.sh              # on the GPU machine
#   bash scripts/gpu-check.sh --dry-run    # the same checks on the CPU with a tiny model
set -euo pipefail
cd "$(dirname "$0")/.."
python=.venv/bin/python
[ -x "$python" ] || python=python3
exec "$python" scripts/gpu_check.py "$@"
