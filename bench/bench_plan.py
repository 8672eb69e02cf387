"""Benchmark: resolve + plan_against at 1k, 10k and 100k cells.

Manifests are generated at the dataclass level (tests.unit.core_fixtures builders, no YAML: the loader is timed
elsewhere), 20 cells per model: 10 targets (TensorRT 10.13/11.1 on several CCs, TensorRT-RTX AOT lists,
onnxruntime CPU) x fp16 + int8 x one profile set, spread over 10 manifests. The registry index has one
IndexEntry per address: half up to date, 10% rebuilds (published with an older TensorRT build number, so the
planner has to name the change), the rest unpublished.

    .venv/bin/python bench/bench_plan.py [--sizes 1000,10000,100000] [--reps 3] [--profile N]

Prints a table of medians; ``--profile N`` runs cProfile on one resolve+plan of N cells instead.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orchestrator.contracts.store import IndexEntry  # noqa: E402
from orchestrator.core.plan import plan_against  # noqa: E402
from orchestrator.core.resolve import resolve  # noqa: E402
from tests.unit.core_fixtures import (  # noqa: E402
    capabilities,
    inputs_for,
    manifest,
    model,
    ort_target,
    rtx_target,
    target,
)

CELLS_PER_MODEL = 20
MANIFESTS = 10


def _targets():
    return (
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


def make_world(cells: int):
    models_total = cells // CELLS_PER_MODEL
    per_manifest = max(1, models_total // MANIFESTS)
    manifests = []
    targets = _targets()
    for mi in range(0, models_total, per_manifest):
        models = [model(f"model-{i:06d}", precs=("fp16", "int8"), calibration=f"/data/calib-{i:06d}")
                  for i in range(mi, min(models_total, mi + per_manifest))]
        manifests.append(manifest(models, targets, file=f"/repo/manifests/m{mi:06d}.yaml"))
    return manifests, inputs_for(*manifests)


def make_index(graph) -> dict[str, IndexEntry]:
    index = {}
    for i, cell in enumerate(graph.cells):
        slot = i % 10
        if slot < 5:  # up to date
            index[cell.address] = IndexEntry(cell.address, cell.build_key, cell.key_inputs, cell.model,
                                             cell.model_version, "sha256:" + "e" * 64, gate_key=cell.gate_key,
                                             gate_inputs=cell.gate_inputs)
        elif slot == 5:  # rebuild: published by an older TensorRT build
            old = {**cell.key_inputs, "builder": {**cell.key_inputs["builder"], "version": "10.13.2.6"}}
            index[cell.address] = IndexEntry(cell.address, "0" * 64, old, cell.model, cell.model_version,
                                             "sha256:" + "e" * 64)
    return index


def _time(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def bench(cells: int, reps: int) -> dict:
    manifests, inputs = make_world(cells)
    graph = resolve(manifests, inputs, capabilities)
    index = make_index(graph)
    r_times, p_times, t_times = [], [], []
    for _ in range(reps):
        tr, g = _time(lambda: resolve(manifests, inputs, capabilities))
        tp, plan = _time(lambda g=g: plan_against(g, index, "bench"))
        r_times.append(tr)
        p_times.append(tp)
        t_times.append(tr + tp)
    c = plan.counts()
    return {"cells": len(graph.cells), "nodes": len(graph.nodes), "resolve": statistics.median(r_times),
            "plan": statistics.median(p_times), "total": statistics.median(t_times),
            "counts": f"{c['build']}+ {c['rebuild']}~ {c['up-to-date']}= {c['blocked']}!",
            "shards": len(plan.shards)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--profile", type=int, default=0)
    args = ap.parse_args()
    if args.profile:
        manifests, inputs = make_world(args.profile)
        index = make_index(resolve(manifests, inputs, capabilities))
        prof = cProfile.Profile()
        prof.enable()
        plan_against(resolve(manifests, inputs, capabilities), index, "bench")
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
        return
    print(f"{'cells':>7} {'nodes':>7} {'resolve s':>10} {'plan s':>8} {'total s':>8} {'us/cell':>8}  "
          f"{'statuses':<24} shards")
    for size in (int(s) for s in args.sizes.split(",")):
        r = bench(size, args.reps)
        print(f"{r['cells']:>7} {r['nodes']:>7} {r['resolve']:>10.3f} {r['plan']:>8.3f} {r['total']:>8.3f} "
              f"{1e6 * r['total'] / r['cells']:>8.1f}  {r['counts']:<24} {r['shards']}", flush=True)


if __name__ == "__main__":
    main()
