#!/usr/bin/env bash
# Create .venv with torch for this machine, then install scaling and its extras.
# A CPU machine gets the CPU wheel of torch, never a multi-GB CUDA download.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
VPY=.venv/bin/python
export PIP_DISABLE_PIP_VERSION_CHECK=1
if ! "$VPY" -c 'import torch' 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    "$VPY" -m pip install -q 'torch>=2.9'                      # CUDA build from PyPI
  elif ls /opt/wheels/torch-2.13.0+cpu-*.whl >/dev/null 2>&1; then
    "$VPY" -m pip install -q --find-links /opt/wheels 'torch==2.13.0'   # CPU wheel on disk
  else
    "$VPY" -m pip install -q 'torch>=2.9' --index-url https://download.pytorch.org/whl/cpu
  fi
fi
"$VPY" -m pip install -q -e ".[${EXTRAS:-dev,postgres,hf,export}]"
