# Sourced by the GPU scripts: `pick_python NAME` sets $python to $PYTHON when it is set (never
# another in its place), else .venv/bin/python, else python3; a Python that does not run, or is
# older than 3.10, stops the script with one line naming it (exit 2).
pick_python() {
  local who=$1
  if [ -n "${PYTHON:-}" ]; then
    python=$PYTHON
  elif [ -x .venv/bin/python ]; then
    python=.venv/bin/python
  else
    python=python3
  fi
  if ! "$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' >/dev/null 2>&1; then
    echo "$who: $python${PYTHON:+ (from \$PYTHON)} is not a Python 3.10 or newer that runs; set PYTHON to one" >&2
    exit 2
  fi
}
