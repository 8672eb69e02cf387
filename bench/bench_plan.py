"""Benchmark: resolve + plan_against (+ the plan's JSON as `plan --json` prints it) at 10k, 100k and 1M cells.

Manifests are generated at the dataclass level (tests.unit.core_fixtures builders, no YAML: the loader is timed
by ``--cli``), 20 cells per model: 10 targets (TensorRT 10.13/11.1 on several CCs, TensorRT-RTX AOT lists,
onnxruntime CPU) x fp16 + int8 (calibrated) x one profile set, spread over 10 manifests. The registry index has one
IndexEntry per published address and ``records`` every record key the store holds: 40 % up to date, 10 % rebuilds
(published by an older TensorRT build, so the planner names the change), 5 % re-gates (other benchmark
settings), 5 % `+ publish` (the engine published under the previous model version), 1 % damaged records, the
rest never published.

Each (checkout, size, GC mode) runs in a fresh child process, so its peak RSS is its own; timings are the best of
``--reps`` in that process, wall and CPU (``time.process_time``: other jobs on a shared machine inflate the wall).
GC modes: ``default`` (CPython's cyclic GC as a library caller has it) and ``cli`` (as `orchestrate plan` runs it:
``orchestrator.cli.common.long_lived``).

    .venv/bin/python bench/bench_plan.py [--sizes 10000,100000,1000000] [--gc default,cli] [--reps 3]
    .venv/bin/python bench/bench_plan.py --compare /tmp/old-checkout      # the same rows for another tree
    .venv/bin/python bench/bench_plan.py --profile 100000                 # cProfile of one resolve + plan
    .venv/bin/python bench/bench_plan.py --cli 100000                     # `orchestrate plan --json` end to end
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import json
import os
import pstats
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
CELLS_PER_MODEL = 20
MANIFESTS = 10


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def make_world(cells: int):
    from tests.unit.core_fixtures import inputs_for, manifest, model, ort_target, rtx_target, target

    targets = (
        target("t4", ccs=("7.5",), build=("self-hosted", "t4")),
        target("a10", ccs=("8.6",), build=("self-hosted", "a10")),
        target("l4", ccs=("8.9",), build=("self-hosted", "l4")),
        target("h100", ccs=("9.0",), build=("self-hosted", "h100")),
        target("h100-11", version="11.1.0.8", ccs=("9.0",), build=("self-hosted", "h100", "trt11")),
        target("ampere", ccs=(), hardware_compatibility="ampere_plus", build=("self-hosted", "a10")),
        rtx_target("rtx-a", version="1.7.1.116", ccs=("8.6", "8.9", "12.0")),
        rtx_target("rtx-b", version="1.7.1.116", ccs=("8.0",)),
        ort_target("cpu"),
        ort_target("cpu-old", version="1.22.0"),
    )
    models_total = cells // CELLS_PER_MODEL
    per_manifest = max(1, models_total // MANIFESTS)
    manifests = []
    for mi in range(0, models_total, per_manifest):
        models = [model(f"model-{i:07d}", precs=("fp16", "int8"), calibration=f"/data/calib-{i:07d}")
                  for i in range(mi, min(models_total, mi + per_manifest))]
        manifests.append(manifest(models, targets, file=f"/repo/manifests/m{mi:07d}.yaml"))
    return manifests, inputs_for(*manifests)


def make_index(graph):
    """The newest record per address and every record key -> engine digest (``RecordKeyIndex.record_digests``).
    Up-to-date entries carry no key inputs: the planner reads them only for a changed key (a real index's entry
    holds them; the index's own size is the store's, not the planner's)."""
    from orchestrator.contracts.store import IndexEntry

    index, records = {}, {}
    digest = "sha256:" + "e" * 64
    for i, cell in enumerate(graph.cells):
        slot = i % 100
        common = dict(address=cell.address, model=cell.model, digest=digest)
        if slot < 40:  # up to date
            index[cell.address] = IndexEntry(build_key=cell.build_key, key_inputs={}, version=cell.model_version,
                                             gate_key=cell.gate_key, record_key=cell.record_key, **common)
            records[cell.record_key] = digest
        elif slot < 50:  # rebuild: published by an older TensorRT build
            old = {**cell.key_inputs, "builder": {**cell.key_inputs["builder"], "version": "10.13.2.6"}}
            index[cell.address] = IndexEntry(build_key="0" * 64, key_inputs=old, version=cell.model_version,
                                             gate_key="1" * 64, record_key="2" * 64, **common)
        elif slot < 55:  # re-gate: other benchmark settings
            gate = {**cell.gate_inputs, "benchmark": {**(cell.gate_inputs["benchmark"] or {}), "iterations": 50}}
            index[cell.address] = IndexEntry(build_key=cell.build_key, key_inputs={}, version=cell.model_version,
                                             gate_key="3" * 64, gate_inputs=gate, record_key="4" * 64, **common)
        elif slot < 60:  # + publish: the same engine published under the previous model version
            index[cell.address] = IndexEntry(build_key=cell.build_key, key_inputs={}, version="0.9.0",
                                             gate_key=cell.gate_key, record_key="5" * 64, **common)
        elif slot < 61:  # its newest record is damaged
            index[cell.address] = IndexEntry(build_key=cell.build_key, key_inputs={}, version=cell.model_version,
                                             gate_key=cell.gate_key, record_key=cell.record_key,
                                             damage="metadata is not JSON", **common)
            records[cell.record_key] = digest
    return index, records


def _long_lived():
    try:
        from orchestrator.cli import common
    except ImportError:
        return None
    if not hasattr(common, "long_lived"):
        return None
    common.own_process()
    return common.long_lived


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(size: int, mode: str, reps: int, with_json: bool) -> dict:
    """One (size, GC mode) in this process: the world and index first, then ``reps`` resolve + plan + JSON."""
    from orchestrator.core.plan import plan_against
    from orchestrator.core.resolve import resolve
    from tests.unit.core_fixtures import capabilities

    gc.disable()  # the world and the index are set-up, not measured
    manifests, inputs = make_world(size)
    index, records = make_index(resolve(manifests, inputs, capabilities))
    gc.enable()
    gc.collect()
    base = _rss_mib()
    runs = []
    scope = _long_lived() if mode == "cli" else None
    if mode == "cli" and scope is None:
        return {"skipped": "this checkout has no orchestrator.cli.common.long_lived"}
    for _ in range(reps):
        ctx = scope() if scope else contextlib.nullcontext()
        with ctx:
            w0, c0 = time.perf_counter(), time.process_time()
            graph = resolve(manifests, inputs, capabilities)
            w1, c1 = time.perf_counter(), time.process_time()
            plan = plan_against(graph, index, "bench", records=records)
            w2, c2 = time.perf_counter(), time.process_time()
        peak = _peak_mib()
        # what `plan --json` prints: the plan's JSON (the CLI adds each cell's local outcome), indented
        text = json.dumps(plan.to_json(), indent=2, sort_keys=False, default=str) if with_json else ""
        w3, c3 = time.perf_counter(), time.process_time()
        runs.append({"resolve": w1 - w0, "plan": w2 - w1, "json": w3 - w2, "resolve_cpu": c1 - c0,
                     "plan_cpu": c2 - c1, "json_cpu": c3 - c2, "json_mb": len(text) / 1e6, "peak": peak})
        counts = plan.counts()
        del graph, plan, text
        if mode != "cli":
            gc.collect()
    best = {k: min(r[k] for r in runs) for k in runs[0]}
    return {**best, "cells": size, "rss_base_mib": base, "rss_peak_mib": max(r["peak"] for r in runs),
            "rss_peak_json_mib": _peak_mib(),
            "counts": {k: counts[k] for k in sorted(counts)}}


def run_child(tree: Path, size: int, mode: str, reps: int, with_json: bool) -> dict:
    code = (f"import sys; sys.path.insert(0, {str(tree)!r}); sys.path.insert(1, {str(HERE / 'bench')!r}); "
            f"import json, bench_plan; print(json.dumps(bench_plan.child({size}, {mode!r}, {reps}, {with_json})))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tree, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def write_manifest(root: Path, size: int) -> Path:
    """A generated manifest of ``size`` cells under ``root`` (YAML; each model its own tiny ONNX file, a Relu, so
    what is timed is the tool, not reading big models), registry: an empty local store there."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 32, 32])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    (root / "models").mkdir(parents=True, exist_ok=True)
    lines = ["manifest_version: 1", "project: big", "defaults:", "  precisions: [fp32, fp16]", "models:"]
    for i in range(size // CELLS_PER_MODEL):
        (root / "models" / f"m{i}.onnx").write_bytes(data)
        lines += [f"  - name: model-{i:07d}", '    version: "1.0.0"', f"    source: {{path: models/m{i}.onnx}}",
                  "    inputs:", "      x:", "        shape: [N, 3, 32, 32]",
                  "        profiles: {default: {min: [1, 3, 32, 32], opt: [8, 3, 32, 32], max: [32, 3, 32, 32]}}"]
    lines.append("targets:")
    for name, cc in (("t4", "7.5"), ("a10", "8.6"), ("l4", "8.9"), ("h100", "9.0")):
        lines += [f"  - {{name: {name}, builder: tensorrt, builder_version: '10.13.3.9', "
                  f"compute_capability: '{cc}', runners: {{build: [self-hosted, {name}]}}}}"]
    lines += ["  - {name: h100-11, builder: tensorrt, builder_version: '11.1.0.106', compute_capability: '9.0'}",
              "  - {name: ampere, builder: tensorrt, builder_version: '10.13.3.9', "
              "hardware_compatibility: ampere_plus}",
              "  - {name: rtx-a, builder: tensorrt-rtx, builder_version: '1.7.1.116', "
              "compute_capabilities: ['8.6', '8.9', '12.0']}",
              "  - {name: rtx-b, builder: tensorrt-rtx, builder_version: '1.7.1.116', compute_capability: '8.0'}",
              "  - {name: cpu, builder: onnxruntime, builder_version: '1.31', device: cpu}",
              "  - {name: cpu-old, builder: onnxruntime, builder_version: '1.22', device: cpu}",
              f"registry: {{store: local, path: {root}/store}}"]
    path = root / "big.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def cli_bench(size: int) -> None:
    """`orchestrate plan --json` of ``write_manifest``'s manifest, end to end in a child process: wall time and the
    child's peak RSS, run twice (the first hashes every model; the second finds them in the digest cache)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        manifest = write_manifest(root, size)
        env = {**os.environ, "ORCHESTRATE_CACHE": str(root / "cache")}
        cmd = [str(HERE / ".venv" / "bin" / "orchestrate"), "plan", str(manifest), "--json"]
        for label in ("first (hashes, empty digest cache)", "again"):
            t0 = time.perf_counter()
            with open(root / "out.json", "w") as out:
                proc = subprocess.run([sys.executable, "-c", _MEASURE, *cmd], stdout=out, stderr=subprocess.PIPE,
                                      text=True, env=env)
            wall = time.perf_counter() - t0
            if proc.returncode != 0:
                sys.exit(proc.stderr[-2000:])
            rss = proc.stderr.strip().splitlines()[-1]
            summary = json.loads((root / "out.json").read_text())["summary"]["text"]
            print(f"orchestrate plan --json, {size} cells, {label}: {wall:.2f} s, peak RSS {rss} MiB, "
                  f"{(root / 'out.json').stat().st_size / 1e6:.1f} MB of JSON; {summary}", flush=True)


# runs a command and prints its peak RSS (MiB) on stderr last
_MEASURE = ("import resource, subprocess, sys; rc = subprocess.call(sys.argv[1:]); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024, file=sys.stderr); sys.exit(rc)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--gc", default="cli,default", help="GC modes: cli, default (comma-separated)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json-max", type=int, default=100_000, help="time the plan's JSON up to this many cells")
    ap.add_argument("--compare", type=Path, help="another checkout: the same rows run from its tree")
    ap.add_argument("--profile", type=int, default=0)
    ap.add_argument("--cli", type=int, default=0, help="time `orchestrate plan --json` of a generated manifest")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    if args.cli:
        cli_bench(args.cli)
        return
    if args.profile:
        from orchestrator.core.plan import plan_against
        from orchestrator.core.resolve import resolve
        from tests.unit.core_fixtures import capabilities

        manifests, inputs = make_world(args.profile)
        index, records = make_index(resolve(manifests, inputs, capabilities))
        prof = cProfile.Profile()
        prof.enable()
        plan_against(resolve(manifests, inputs, capabilities), index, "bench", records=records)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
        return
    trees = [("this", HERE)] + ([(args.compare.name, args.compare.resolve())] if args.compare else [])
    load = os.getloadavg()
    print(f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the start")
    print(f"{'tree':>14} {'gc':>7} {'cells':>8} {'resolve s':>9} {'plan s':>7} {'total s':>8} {'cpu s':>13} "
          f"{'us/cell':>7} {'json s':>7} {'base MiB':>8} {'peak MiB':>8} {'+json':>6}  statuses")
    for size in (int(s) for s in args.sizes.split(",")):
        for mode in args.gc.split(","):
            for name, tree in trees:
                r = run_child(tree, size, mode, args.reps if size < 1_000_000 else 1, size <= args.json_max)
                if "error" in r or "skipped" in r:
                    print(f"{name:>14} {mode:>7} {size:>8}  {r.get('error') or r.get('skipped')}", flush=True)
                    continue
                total = r["resolve"] + r["plan"]
                cpu = f"{r['resolve_cpu']:.2f}+{r['plan_cpu']:.2f}"
                counts = " ".join(f"{v} {k}" for k, v in r["counts"].items())
                json_s = f"{r['json']:.2f}" if r["json_mb"] else "-"
                print(f"{name:>14} {mode:>7} {size:>8} {r['resolve']:>9.2f} {r['plan']:>7.2f} {total:>8.2f} "
                      f"{cpu:>13} {1e6 * total / size:>7.1f} {json_s:>7} {r['rss_base_mib']:>8.0f} "
                      f"{r['rss_peak_mib']:>8.0f} {r['rss_peak_json_mib']:>6.0f}  {counts}", flush=True)
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end")


if __name__ == "__main__":
    main()
