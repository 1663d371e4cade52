#!/usr/bin/env bash
# Execute examples/explore.ipynb on a simulated sweep (tests/test_notebook.py, nbconvert) and write
# the executed copy the documentation shows, docs/guides/explore.ipynb. Run after editing the notebook.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
rm -f docs/guides/explore.ipynb
SCALING_WRITE_DOCS_NOTEBOOK=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m pytest -q -p no:cacheprovider \
  -n 0 tests/test_notebook.py -k executes
echo "wrote docs/guides/explore.ipynb"
