#!/usr/bin/env bash
# Everything the tests need on a fresh machine, the static checks (scripts/check.sh), then the test suite.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# A real OCI registry (CNCF distribution) and headless Chromium for the report test, from Debian.
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  need=""
  command -v docker-registry >/dev/null 2>&1 || need="$need docker-registry"
  command -v chromium >/dev/null 2>&1 || need="$need chromium"
  command -v dot >/dev/null 2>&1 || need="$need graphviz"   # `orchestrate graph --format dot` parsed for real
  if [ -n "$need" ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need >/dev/null
  fi
fi
bash scripts/setup-env.sh test
# The test-only third-party plugin is never installed here: tests/integration/test_third_party_plugin.py installs it
# into a private folder. Remove the copy earlier versions of this script put into the venv (it showed in `doctor`).
if .venv/bin/python -m pip show -q onnx-copy-plugin >/dev/null 2>&1; then
  .venv/bin/python -m pip uninstall -y -q onnx-copy-plugin
fi
if [ -f scripts/install-ci-tools.sh ]; then bash scripts/install-ci-tools.sh; fi
.venv/bin/python scripts/fetch_models.py
.venv/bin/python scripts/fetch_images.py  # real photos for the gates' image-folder path
bash scripts/check.sh
# In parallel, one pytest-xdist worker per CPU; each test module runs whole on one worker (its module-scoped engines are
# built once) and the demo is built and gated once for all workers (tests/integration/conftest.py).
# A test that hangs (a blocked read, a lost subprocess) fails after 30 minutes with its stack instead of stalling the run;
# the slowest setups (the demo built and gated once for every worker) take a few minutes.
exec .venv/bin/python -m pytest -q -p no:cacheprovider -n auto --dist loadscope --timeout 1800 "$@"
