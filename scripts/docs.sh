#!/usr/bin/env bash
# Build the documentation site strictly (any warning fails the build).
# Usage: scripts/docs.sh [OUTPUT_DIR]   (default: a temporary folder, removed afterwards)
# Installs the `docs` extra into .venv when MkDocs or its plugins are missing (scripts/setup.sh
# makes .venv first if there is none).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/setup.sh
VPY=.venv/bin/python
if ! "$VPY" -c 'import mkdocs, material, mkdocstrings, mkdocstrings_handlers.python, mkdocs_jupyter' 2>/dev/null; then
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$VPY" -m pip install -q -e ".[docs]"
fi
out=${1:-}
if [ -z "$out" ]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
export NO_MKDOCS_2_WARNING=1   # Material's notice about MkDocs 2, printed on every build
"$VPY" -m mkdocs build --strict --clean -f mkdocs.yml -d "$(realpath -m "$out")"
"$VPY" docs/hooks/check_site.py "$out"   # every command, option and plan field is in the site
[ -n "${1:-}" ] && echo "documentation built in $out"; true
