#!/usr/bin/env bash
# pull --build-on-miss where the engine's runtime runs (issue 26.1): on a GPU machine, from the repository root,
# with the project installed (and onnxruntime-gpu for an onnxruntime CUDA engine, tensorrt_rtx for an RTX one).
# The CPU tests (tests/integration/test_build_on_miss.py) show every RTX engine built on a miss as gate pending;
# here the engine built on the miss is gated on this GPU. Publishes a manifest with one TensorRT-RTX target for
# $PUBLISHED_CC (default 12.0: pick one this GPU is not, or its published engine fits and nothing is built)
# (its gates pending: built on this machine's CPU side, as CI would), then pulls with --build-on-miss for this GPU
# and prints what was built and the gate's verdict. Expected: "built" with gate "passed" (an RTX engine for this
# GPU's CC on an RTX/Ampere+ GPU, an onnxruntime CUDA engine on others, e.g. Hopper, which RTX does not run on).
# Logs go to $OUT (default: ./build-on-miss-gpu).
set -euo pipefail
OUT=${OUT:-$PWD/build-on-miss-gpu}
WORK=$(mktemp -d)
mkdir -p "$OUT"
export ORCHESTRATE_CACHE=$WORK/ci-cache PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
python3 -c "import sys; sys.path.insert(0, '.'); from pathlib import Path; from tests.weights_models import mlp; \
mlp(Path('$WORK/mlp.onnx'))"
cat > "$WORK/heal.yaml" <<EOF
manifest_version: 1
project: heal-gpu
models:
  - name: mlp
    version: "1.0"
    source: {path: $WORK/mlp.onnx}
    inputs: {x: {shape: [N, 64], profiles: {default: {min: [1, 64], opt: [2, 64], max: [4, 64]}}}}
    precisions: [fp32]
    gate: {parity: {data: {samples: 2, seed: 3}}, benchmark: {warmup: 5, iterations: 50}, allow_ungated_publish: true}
targets:
  - {name: rtx-published, builder: tensorrt-rtx, builder_version: "1.7.1.116", compute_capability: "${PUBLISHED_CC:-12.0}"}
registry: {store: local, path: $WORK/artifacts, publish_onnx: true}
EOF
for verb in build gate publish; do python3 -m orchestrator "$verb" "$WORK/heal.yaml" -q; done
python3 -m orchestrator doctor > "$OUT/doctor.txt" 2>&1 || true
ORCHESTRATE_CACHE=$WORK/deploy-cache python3 -m orchestrator pull mlp --build-on-miss --manifest "$WORK/heal.yaml" \
  -o "$WORK/mlp.engine" --json > "$OUT/pull.json" 2> "$OUT/pull.stderr" && rc=0 || rc=$?
echo "exit $rc" | tee "$OUT/exit.txt"
python3 - "$OUT/pull.json" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
heal = doc.get("build_on_miss") or {}
print(heal.get("address"), heal.get("built"), "gate:", (heal.get("gate") or {}).get("status"),
      "recorded:", ((heal.get("gate") or {}).get("recorded_outputs") or {}).get("compared"))
EOF
