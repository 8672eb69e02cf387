#!/usr/bin/env bash
# The static checks: import layering (import-linter), mypy --strict on the core, the ports and the app verbs,
# plain mypy on the rest of orchestrator/, and ruff. Run by scripts/test.sh before the tests (needs .venv from
# `bash scripts/setup-env.sh test`).
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/lint-imports --no-cache
.venv/bin/mypy --strict orchestrator/core orchestrator/contracts orchestrator/app
.venv/bin/mypy
.venv/bin/ruff check .
