#!/usr/bin/env bash
# The wheels the trainer and `scaling train` need that the lent GPU machine's stock image lacks
# (Python 3.12 with torch, numpy, pandas, scipy, pyyaml, rich, typer, tokenizers; no network
# there): pydantic, SQLAlchemy and alembic with their dependencies, for CPython 3.12 on
# manylinux x86-64, at the versions this checkout's environment runs. Downloaded here into
# .gpu-wheels/ (git-ignored, at most 40 MiB); scripts/gpu-check.sh installs them there with
# `pip install --no-index --target`. Ray and plotly are not needed: `scaling train` runs without them.
#   bash scripts/gpu-wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
[ -x "$python" ] || python=python3
out=.gpu-wheels
limit_mib=40
packages=(pydantic pydantic-core annotated-types typing-inspection typing-extensions SQLAlchemy alembic Mako MarkupSafe)
pins=()
for name in "${packages[@]}"; do
  pins+=("$name==$("$python" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")")
done
rm -rf "$out" && mkdir -p "$out"
"$python" -m pip download --quiet --no-deps --only-binary=:all: --dest "$out" \
  --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
  "${pins[@]}"
bytes=$(du -cb "$out"/*.whl | tail -1 | cut -f1)
count=$(ls "$out"/*.whl | wc -l)
mib=$(( (bytes + 1048575) / 1048576 ))
if [ "$count" -ne "${#packages[@]}" ]; then
  echo "gpu-wheels: $count wheels in $out, expected ${#packages[@]} (${packages[*]})" >&2; exit 1
fi
if [ "$bytes" -gt $(( limit_mib * 1048576 )) ]; then
  echo "gpu-wheels: $count wheels take $mib MiB, over the $limit_mib MiB that may travel with the checkout" >&2; exit 1
fi
echo "gpu-wheels: $count wheels, $bytes bytes (under $limit_mib MiB) in $out: ${pins[*]}"
