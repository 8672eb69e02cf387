"""Does the pause between benchmark blocks (`gate.benchmark.block_gap_s`) buy a steadier verdict?

    .venv/bin/python scripts/fetch_models.py
    .venv/bin/python bench/block_gap.py [--series 12] [--gaps 0,0.2] [--json out.json]

The benchmark gate times a series in blocks and judges the blocks' median p50 (docs/gates.md, "Benchmark noise");
the pause between rounds of blocks was meant to spread a series over more time, so that a slow spell of the machine
lands in fewer of its blocks. This measures what the pause changes, with the gate's own code
(``orchestrator.gates.run.run_benchmark``) and the demo's settings (warm-up 3, 20 iterations, the ``opt`` shape,
5 blocks), on the demo's three models (the original ONNX on the onnxruntime CPU EP, the gate's own input tensors):

* **calm**: nothing else runs. Per model, the reference p50 is the median of every calm series' median p50.
* **bursts**: background processes (half the cores) alternate busy spells of 0.05-0.6 s with idle ones of
  0.05-1.0 s (a seeded schedule, the same for every gap): a shared CI runner's neighbours.

For each (load, gap), ``--series`` series per model, the gaps alternating series by series. Reported per
(load, gap): the error of the series' verdict p50 against the calm reference (median and 90th percentile, %), the
blocks' p50 spread (median, 90th percentile), how many series a 10 % spread would call ``noisy``-prone, and the
wall time a series takes.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import gate_overhead  # noqa: E402  (the demo copy with absolute model paths)

from orchestrator.app.project import load_manifests  # noqa: E402
from orchestrator.contracts.runtime import RuntimeOptions  # noqa: E402
from orchestrator.core.artifact import EngineDescriptor, EngineTarget  # noqa: E402
from orchestrator.core.gatekeys import BlockSchedule  # noqa: E402
from orchestrator.gates.inputs import benchmark_inputs  # noqa: E402
from orchestrator.gates.run import run_benchmark  # noqa: E402
from trt_orchestrator_plugins.runtimes import onnxruntime as ort_runtime  # noqa: E402

MODELS = ("ocr-det", "ocr-rec", "orientation")


def _burst(seed: int, stop: Any) -> None:
    rng = random.Random(seed)
    while not stop.is_set():
        end = time.perf_counter() + rng.uniform(0.05, 0.6)
        x = 0
        while time.perf_counter() < end:
            x += 1
        stop.wait(rng.uniform(0.05, 1.0))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=12, help="series per model, load and gap")
    parser.add_argument("--gaps", default="0,0.2", help="comma-separated block_gap_s values")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated, of " + ", ".join(MODELS))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    wanted = args.models.split(",")
    gaps = [float(g) for g in args.gaps.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="block-gap-"))
    manifest = gate_overhead.demo_copy(tmp)
    models = {m.name: m for man in load_manifests([manifest]) for m in man.models if m.name in wanted}
    sessions, inputs, settings = {}, {}, {}
    for name, model in models.items():
        engine = EngineDescriptor(address=f"{name}/fp32/default@cpu+ort", precision="fp32", builder="onnxruntime",
                                  builder_version="1.31.1", runtime="onnxruntime",
                                  target=EngineTarget("cpu", device="cpu"))
        sessions[name] = ort_runtime.runtime.load(Path(model.source.path), engine, RuntimeOptions())
        inputs[name] = benchmark_inputs(model, "default", ("opt",))
        settings[name] = model.gate.benchmark
    cores = os.cpu_count() or 2
    print(f"machine: {cores} cores, {platform.processor() or platform.machine()}, Python "
          f"{platform.python_version()}, load average {os.getloadavg()[0]:.2f}", flush=True)

    def series(name: str, gap: float) -> dict:
        s = replace(settings[name], block_gap_s=gap)
        t0 = time.perf_counter()
        verdict = run_benchmark(sessions[name], inputs[name], s, schedule=BlockSchedule.of(s))
        wall = time.perf_counter() - t0
        gated = verdict.shapes[0].gated
        return {"p50": gated.p50_ms, "spread": gated.spread_pct, "blocks": list(gated.block_p50_ms), "wall": wall}

    results: dict[str, dict[str, dict[str, list[dict]]]] = {}
    for load in ("calm", "bursts"):
        stop = mp.Event()
        workers = []
        if load == "bursts":
            workers = [mp.Process(target=_burst, args=(1000 + i, stop), daemon=True) for i in range(max(1, cores // 2))]
            for w in workers:
                w.start()
        try:
            for name in models:
                for gap in gaps:  # warm each session once per load, untimed
                    series(name, gap)
                for n in range(args.series):
                    for gap in (gaps if n % 2 == 0 else list(reversed(gaps))):
                        r = series(name, gap)
                        results.setdefault(load, {}).setdefault(name, {}).setdefault(str(gap), []).append(r)
                print(f"{load} {name}: done", flush=True)
        finally:
            stop.set()
            for w in workers:
                w.join(5)

    summary: dict[str, dict] = {}
    for name in models:
        calm = [r["p50"] for g in gaps for r in results["calm"][name][str(g)]]
        reference = statistics.median(calm)
        for load in ("calm", "bursts"):
            for gap in gaps:
                rows = results[load][name][str(gap)]
                errors = [abs(r["p50"] - reference) / reference * 100 for r in rows]
                spreads = [r["spread"] for r in rows]
                summary.setdefault(f"{load} gap {gap:g}", {})[name] = {
                    "reference_p50_ms": reference,
                    "error_median_pct": statistics.median(errors),
                    "error_p90_pct": float(np.percentile(errors, 90)),
                    "spread_median_pct": statistics.median(spreads),
                    "spread_p90_pct": float(np.percentile(spreads, 90)),
                    "spread_over_10pct": sum(s > 10 for s in spreads), "series": len(rows),
                    "wall_median_s": statistics.median(r["wall"] for r in rows),
                }
    print(f"{'condition':<16} {'model':<12} {'ref p50':>8} {'err med':>8} {'err p90':>8} {'spr med':>8} "
          f"{'spr p90':>8} {'>10%':>5} {'wall s':>7}")
    for cond, per_model in summary.items():
        for name, s in per_model.items():
            print(f"{cond:<16} {name:<12} {s['reference_p50_ms']:>8.3f} {s['error_median_pct']:>7.1f}% "
                  f"{s['error_p90_pct']:>7.1f}% {s['spread_median_pct']:>7.1f}% {s['spread_p90_pct']:>7.1f}% "
                  f"{s['spread_over_10pct']:>2}/{s['series']:<2} {s['wall_median_s']:>7.2f}")
    if args.json:
        args.json.write_text(json.dumps({"machine": {"cores": cores, "python": platform.python_version()},
                                         "summary": summary, "series": results}, indent=1))
    for s in sessions.values():
        s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
