#!/usr/bin/env bash
# The GPU runs of issue 24 (benchmark stability) and issue 23.15 (fp32 parity under TF32), on the device tool's
# machine. Everything they need travels as ONE tarball (onnxruntime-gpu 1.31.1 cp312 wheel, cuda-bindings 13.0.3 +
# cuda-pathfinder wheels, the demo models), split into five parts so each call stays under the 64 MiB carry limit,
# plus a small code folder (a wheel of this checkout and bench/gpu/*): see bench/NOTES-gpu.md, "Reproduce".
#   bash stability.sh stage N    (N = 0..3) copy part N to /tmp/gg (the machine must stay warm between calls)
#   bash stability.sh final      last part, unpack, install into /tmp/site, run the benchmarks and the CLI gate
#   bash stability.sh rerun      the benchmarks and the CLI gate again (code folder re-sent, parts already unpacked)
# TF32=0 leaves out the TF32 parity study. The code folder holds stability.sh, a wheel of this checkout, bench/gpu's
# scripts (gpu/), .cache/images (images/), optionally tests/ (the suite's CUDA-graph tests and their conftests)
# and the project's own dependencies the machine's image lacks (extra/: jsonschema and its needs, rich, click, ...).
# Logs and JSON go to $OUT. Reads no GPU setting and changes none.
set -o pipefail
export PYTHONUNBUFFERED=1
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p /tmp/gg
case "$1" in
  stage) cp "$here/../p$2"/* /tmp/gg/ && ls -la /tmp/gg; exit ;;
  final) cp "$here/../p4"/* /tmp/gg/ || exit 1
         (cd /tmp/gg && sha256sum -c SHA256SUMS) || exit 1
         rm -rf /tmp/payload && mkdir -p /tmp/payload && cat /tmp/gg/payload.tar.part* | tar x -C /tmp/payload || exit 1 ;;
  rerun) ;;
  *) echo "usage: $0 stage N | final | rerun" >&2; exit 2 ;;
esac
P=/tmp/payload
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  "$P"/wheels/*.whl "$here"/extra/*.whl "$here"/trt_orchestrator-*.whl > "$OUT/install.log" 2>&1 || { tail "$OUT/install.log"; exit 1; }
rm -rf /tmp/proj && mkdir -p /tmp/proj/.cache /tmp/proj/bench && cp -r "$P/models" /tmp/proj/.cache/models \
  && cp -r "$here/gpu" /tmp/proj/bench/gpu || exit 1
if [ -d "$here/images" ]; then cp -r "$here/images" /tmp/proj/.cache/images; fi  # the TF32 study's pictures
cd /tmp/proj || exit 1
export PYTHONPATH=/tmp/site
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  uptime; nproc
  python3 -c "import onnxruntime as o, cuda.bindings, pynvml; print(o.__version__, o.__file__, o.get_available_providers(), cuda.bindings.__version__)"
} 2>&1 | tee "$OUT/machine.txt"
if [ "${TF32:-1}" = 1 ]; then
  timeout 170 python3 bench/gpu/tf32_parity.py --out "$OUT/tf32.json" > "$OUT/tf32.txt" 2>&1; echo "[tf32 exit $?]"
  grep -v -e "No registered plugin EP" -e "Fallback mode" "$OUT/tf32.txt" | tail -60
fi
# the CUDA-graph tests of the suite (they skip on a CPU box): tests/ as carried in the code folder
if [ -d "$here/tests" ]; then
  cp -r "$here/tests" /tmp/proj/tests
  timeout 120 python3 -m pytest -q -p no:cacheprovider -rs tests/integration/test_ort_cuda_graph.py 2>&1 \
    | grep -v "No registered plugin EP" | tail -15 | tee "$OUT/pytest.txt"
fi
timeout 150 python3 bench/gpu/gate_stability.py --out "$OUT/stability.json" > "$OUT/stability.txt" 2>&1
echo "[stability exit $?]"; tail -40 "$OUT/stability.txt"
# the real CLI: build once, gate twice on two copies of the build cache (same engines)
cd bench/gpu || exit 1
timeout 100 python3 -m orchestrator build gate_graph.yaml --cache-dir /tmp/c1 --json > "$OUT/cli.txt" 2>&1
echo "[build exit $?]" | tee -a "$OUT/cli.txt"
cp -r /tmp/c1 /tmp/c2
for c in c1 c2; do
  timeout 80 python3 -m orchestrator gate gate_graph.yaml --cache-dir /tmp/$c >> "$OUT/cli.txt" 2>&1
  echo "[gate $c exit $?]" | tee -a "$OUT/cli.txt"
  python3 - "$c" >> "$OUT/cli.txt" 2>&1 <<'EOF'
import glob, json, sys
for f in sorted(glob.glob(f"/tmp/{sys.argv[1]}/**/benchmark.json", recursive=True)):
    r = json.load(open(f)); s = r["verdict"]["shapes"][0]
    print(sys.argv[1], r["address"], r["status"], s["clock"], s["gated_series"], s["extra"].get("cuda_graph"),
          "device p50 %.4f spread %.1f%%" % (s["compute"]["p50_ms"], s["compute"]["spread_pct"]),
          "e2e p50 %.4f spread %.1f%%" % (s["end_to_end"]["p50_ms"], s["end_to_end"]["spread_pct"]),
          "GPU", [(c["before"]["sm_clock_mhz"], c["after"]["sm_clock_mhz"], c["after"]["temperature_c"])
                  for c in s["conditions"]])
for f in sorted(glob.glob(f"/tmp/{sys.argv[1]}/**/parity.json", recursive=True)):
    r = json.load(open(f))
    for prof, v in r["profiles"].items():
        for case in v["cases"]:
            for o in case["outputs"]:
                print(sys.argv[1], r["address"], r["status"], case["label"], o["name"], o["status"],
                      "max abs %.3g rel-L2 %.3g cos %.7f viol %.3g tol %s" % (o["max_abs_error"], o["rel_l2"],
                      o["cosine"], o["violation_fraction"], o["tolerance"]["source"]))
EOF
done
grep -v '^\s*$' "$OUT/cli.txt" | tail -30
