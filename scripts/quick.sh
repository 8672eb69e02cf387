#!/usr/bin/env bash
# The quick tier for daily work: every test not marked `slow` (tests/conftest.py marks the end-to-end ones: real
# builds, gates, registries, the journeys), in parallel. Needs .venv from `bash scripts/test.sh` (or
# `bash scripts/setup-env.sh test`). Extra arguments go to pytest. CI (scripts/test.sh) runs everything.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m pytest -q -p no:cacheprovider -m "not slow" -n auto --dist loadscope "$@"
