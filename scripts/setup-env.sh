#!/usr/bin/env bash
# Create .venv and install the project with the given extras (idempotent). Used by demo.sh, test.sh and .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-demo}"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# (some machines' pip config names local index folders that do not exist; pip warns per package: drop that noise)
quiet() { "$@" 2> >(grep -v "^WARNING: Location 'file://" >&2); }
quiet .venv/bin/python -m pip install -q --upgrade pip >/dev/null
quiet .venv/bin/python -m pip install -q -e ".[${extras}]"
