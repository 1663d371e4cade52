#!/usr/bin/env bash
# The wheels the trainer and `scaling train` need that the lent GPU machine's stock image lacks
# (Python 3.12 with torch, numpy, pandas, scipy, pyyaml, rich, typer, tokenizers; no network
# there): pydantic, SQLAlchemy and alembic with their dependencies, for CPython 3.12 on
# manylinux x86-64, at the versions this checkout's environment runs. Downloaded here into
# .gpu-wheels/ (git-ignored, at most 40 MiB); scripts/gpu-check.sh installs them there with
# `pip install --no-index --target`. Ray and plotly are not needed: `scaling train` runs without them.
# The wheels are downloaded into a fresh folder beside .gpu-wheels/ and replace it only when all are
# there and within the limit: a failed download (no network) keeps the last good wheels.
# $SCALING_GPU_WHEELS names another folder (as for scripts/gpu_check.py).
#   bash scripts/gpu-wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pick-python.sh
pick_python gpu-wheels
out=${SCALING_GPU_WHEELS:-.gpu-wheels}
limit_mib=40
packages=(pydantic pydantic-core annotated-types typing-inspection typing-extensions SQLAlchemy alembic Mako MarkupSafe)
if ! pinned=$("$python" - "${packages[@]}" <<'PY'
import importlib.metadata as m
import sys

missing = []
for name in sys.argv[1:]:
    try:
        print(f"{name}=={m.version(name)}")
    except m.PackageNotFoundError:
        missing.append(name)
if missing:
    sys.exit(f"gpu-wheels: {sys.executable} has no {', '.join(missing)} to pin the wheels to; set PYTHON to "
             "the checkout's environment")
PY
); then
  exit 2
fi
mapfile -t pins <<<"$pinned"
mkdir -p "$(dirname "$out")"
new=$(mktemp -d "$out.new.XXXXXX")
trap 'rm -rf "$new"' EXIT
if ! "$python" -m pip download --quiet --no-deps --only-binary=:all: --dest "$new" \
  --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
  "${pins[@]}" >"$new/pip.log" 2>&1; then
  why=$(grep -m1 -E "^ERROR|Error" "$new/pip.log" || tail -1 "$new/pip.log")
  echo "gpu-wheels: the download failed (${why:-pip said nothing}); $out is left as it was" >&2
  exit 1
fi
rm -f "$new/pip.log"
count=$(find "$new" -maxdepth 1 -name '*.whl' | wc -l)
bytes=$(find "$new" -maxdepth 1 -name '*.whl' -printf '%s\n' | awk '{s += $1} END {print s + 0}')
mib=$(( (bytes + 1048575) / 1048576 ))
if [ "$count" -ne "${#packages[@]}" ]; then
  echo "gpu-wheels: $count wheels downloaded, expected ${#packages[@]} (${packages[*]}); $out is left as it was" >&2
  exit 1
fi
if [ "$bytes" -gt $(( limit_mib * 1048576 )) ]; then
  echo "gpu-wheels: $count wheels take $mib MiB, over the $limit_mib MiB that may travel with the checkout;" \
    "$out is left as it was" >&2
  exit 1
fi
rm -rf "$out"
mv "$new" "$out"
trap - EXIT
echo "gpu-wheels: $count wheels, $bytes bytes (under $limit_mib MiB) in $out: ${pins[*]}"
