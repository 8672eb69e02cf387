#!/usr/bin/env bash
# The embedded default, end to end, on any machine (no GPU needed): install, fetch the demo models, then
# validate -> plan -> build (TensorRT-RTX AOT + onnxruntime) -> gate -> publish (local store) -> pull -> report.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-env.sh demo
export PATH="$PWD/.venv/bin:$PATH"
python scripts/fetch_models.py
M=manifests/demo.yaml
set -x
orchestrate validate "$M"
orchestrate plan "$M"
orchestrate build "$M"
orchestrate gate "$M"
orchestrate publish "$M"
orchestrate ls "$M"
orchestrate pull orientation --precision fp32 --registry artifacts -o .orchestrate/pulled/orientation.engine
orchestrate pull ocr-det --precision fp16 --registry artifacts --gpu sm90 --runtime rtx1.7 \
  || echo "(expected: TensorRT-RTX engines cannot run on a CC 9.0 GPU; every candidate is listed above)"
orchestrate report "$M" -o .orchestrate/report.html
orchestrate explain "orientation/fp16/default@cpu+ort1.31" "$M"   # what its build and gate keys are made of
orchestrate plan "$M"
