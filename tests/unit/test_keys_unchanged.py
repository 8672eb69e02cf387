"""Every key, node and plan entry resolve() and plan_against() give stays byte-identical across speed work.

The resolver computes key parts shared by many cells once and splices their canonical JSON (issue 24.1); the
planner and shards are restructured for a million cells. Neither may move a single key: a moved build key
rebuilds every engine of a fleet. The digests below were written by the code before that work (commit 76332ce)
for the demo and fleet manifests (loaded by the real loader) and a generated 3,000-cell world that uses every key
input (calibration, transforms, fp8, several profile sets, salts, plugin libraries, target and matrix-rule gates,
include/exclude, runner pools that block cells), planned against an index that gives every plan status.

A change that is meant to move keys (a new key input, a schema bump) regenerates them:
``.venv/bin/python -m tests.unit.test_keys_unchanged --write`` and says so in its commit.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from orchestrator.app.project import load_manifests
from orchestrator.core.artifact import IndexEntry
from orchestrator.core.graph import BuildGraph
from orchestrator.core.keys import canonical_json
from orchestrator.core.model import GateSettings, MatrixRule, RunnerPool
from orchestrator.core.plan import plan_against
from orchestrator.core.resolve import ResolveInputs, resolve
from orchestrator.plugins import builder_capabilities
from tests.unit.core_fixtures import (
    capabilities,
    image_input,
    inputs_for,
    manifest,
    model,
    ort_target,
    precisions,
    rtx_target,
    shapes,
    target,
)

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).with_name("keys_unchanged.json")
RECIPES = {"builder:tensorrt": "1", "builder:tensorrt-rtx": "1", "builder:onnxruntime": "1", "builder:trtexec": "1",
           "transform:fp16": "1", "transform:bf16": "1", "transform:int8-qdq": "1", "transform:fp8-qdq": "1"}


def _stand_in(path: str) -> str:
    """A digest per file that does not depend on where the checkout lives."""
    return "sha256:" + hashlib.sha256(os.path.relpath(path, ROOT).encode()).hexdigest()


def _manifest_world(name: str) -> tuple[BuildGraph, dict[str, IndexEntry]]:
    manifests = load_manifests([ROOT / "manifests" / name])
    paths = {m.source.path for man in manifests for m in man.models}
    data = {p for man in manifests for m in man.models for d in (m.calibration, m.gate.parity.data) if d
            for p in (d.path, d.labels) if p}
    inputs = ResolveInputs(model_digests={p: _stand_in(p) for p in paths},
                           data_digests={p: _stand_in(p) for p in data}, recipes=RECIPES)
    return resolve(manifests, inputs, builder_capabilities), {}


def _generated_world() -> tuple[BuildGraph, dict[str, IndexEntry]]:
    t4 = target("t4", ccs=("7.5",), build=("self-hosted", "t4"))
    targets = (
        t4,
        target("a10", ccs=("8.6",), build=("self-hosted", "a10"), gate=("self-hosted", "a10", "gate")),
        target("l4", ccs=("8.9",), build=("self-hosted", "l4")),
        target("h100-11", version="11.1.0.8", ccs=("9.0",), build=("self-hosted", "h100", "trt11")),
        target("ampere", ccs=(), hardware_compatibility="ampere_plus", build=("self-hosted", "a10")),
        rtx_target("rtx-a", version="1.7.1.116", ccs=("12.0", "8.6", "8.9")),
        rtx_target("rtx-b", version="1.7.1.116", ccs=("8.0",)),
        ort_target("cpu"),
        ort_target("cpu-old", version="1.22.0"),
    )
    two = image_input(profiles={"small": shapes((1, 3, 320, 320), (1, 3, 640, 640), (2, 3, 960, 960)),
                                "big": shapes((1, 3, 640, 640), (4, 3, 960, 960), (8, 3, 1280, 1280))})
    specs = (*precisions("fp32"), *precisions("fp16", via="transform", keep_io_types=False),
             *precisions("int8", calibration_method="minmax"), *precisions("fp8"))
    strict = GateSettings()
    strict = replace(strict, benchmark=replace(strict.benchmark, iterations=7, max_regression_pct=5.0))
    manifests = []
    for mi in range(3):
        models = []
        for i in range(mi * 20, mi * 20 + 20):
            kind = i % 4
            if kind == 0:
                models.append(model(f"m{i:03d}", precs=specs, inputs=(two,), calibration=f"/data/c{i % 3}",
                                    profile_sets={"small": ("small",), "big": ("big",), "both": ("small", "big")}))
            elif kind == 1:
                models.append(model(f"m{i:03d}", version=f"2.{i}", precs=("fp16", "int8"),
                                    calibration="/data/shared", path="/models/shared.onnx"))
            elif kind == 2:
                models.append(model(f"m{i:03d}", precs=("fp32", "bf16"), parity=False))
            else:
                models.append(model(f"m{i:03d}", precs=("fp16",), benchmark=False))
        first = models[0].name
        extra: dict[str, Any] = {}
        if mi == 1:
            extra = {"runner_pools": (RunnerPool(labels=("self-hosted", "t4")), RunnerPool(labels=("ubuntu-latest",)),
                                      RunnerPool(labels=("self-hosted", "l4", "extra"))), "salt": "rebuild-all-1"}
        m = manifest(models, targets, file=f"/repo/manifests/gen{mi}.yaml",
                     exclude=(MatrixRule(model=first, target="cpu"), MatrixRule(precision="int8", target="cpu-old")),
                     include=(MatrixRule(model=first, precision="int8", profile_set="small", target="cpu"),),
                     **extra)
        gates = (((first, "l4"), strict),)
        rules = (((models[1].name, "int8", "default", "a10"), strict),)
        manifests.append(replace(m, cell_gates=gates, rule_gates=rules,
                                 transform_tools=(("onnx", "1.17"),) if mi == 2 else ()))
    inputs = replace(inputs_for(*manifests, data={"/data/shared": "sha256:" + "d" * 64}),
                     plugin_libraries={"/opt/plugins/libnms.so": "sha256:" + "f" * 64}, recipes=RECIPES)
    graph = resolve(manifests, inputs, capabilities)
    return graph, _index(graph)


def _index(graph: BuildGraph) -> dict[str, IndexEntry]:
    """One entry per address, every status: up to date, rebuilt (another TensorRT build), re-gated, published
    under another model version, damaged, unpublished."""
    index = {}
    for i, cell in enumerate(c for c in graph.cells if not c.blocked):
        slot = i % 7
        common = dict(address=cell.address, model=cell.model, digest="sha256:" + f"{i:064x}")
        if slot == 0:
            index[cell.address] = IndexEntry(build_key=cell.build_key, key_inputs=cell.key_inputs,
                                             version=cell.model_version, gate_key=cell.gate_key,
                                             gate_inputs=cell.gate_inputs, record_key=cell.record_key, **common)
        elif slot == 1:
            old = {**cell.key_inputs, "builder": {**cell.key_inputs["builder"], "version": "10.13.2.6"}}
            index[cell.address] = IndexEntry(build_key="0" * 64, key_inputs=old, version=cell.model_version,
                                             **common)
        elif slot == 2:
            old_gate = {**cell.gate_inputs, "benchmark": {"warmup": 1}}
            index[cell.address] = IndexEntry(build_key=cell.build_key, key_inputs=cell.key_inputs,
                                             version=cell.model_version, gate_key="1" * 64, gate_inputs=old_gate,
                                             **common)
        elif slot == 3:
            index[cell.address] = IndexEntry(build_key=cell.build_key, key_inputs=cell.key_inputs, version="0.9",
                                             gate_key=cell.gate_key, gate_inputs=cell.gate_inputs, **common)
        elif slot == 4:
            index[cell.address] = IndexEntry(build_key=cell.build_key, key_inputs=cell.key_inputs,
                                             version=cell.model_version, gate_key=cell.gate_key,
                                             damage="its metadata is not JSON", **common)
    return index


def _records(graph: BuildGraph) -> dict[str, str]:
    """Record keys the store holds beside the newest per address: every 11th cell's own record."""
    return {c.record_key: "sha256:" + "e" * 64 for i, c in enumerate(graph.cells) if i % 11 == 0 and not c.blocked}


def summary(graph: BuildGraph, index: dict[str, IndexEntry]) -> dict[str, Any]:
    cells = {c.address: [c.build_key, c.gate_key, c.record_key, c.route, c.blocked, c.transform_node,
                         c.calibrate_node, c.toolchain.digest()] for c in graph.cells}
    nodes = [[n.id, n.kind, n.key, list(n.deps), n.address, n.model, n.transform_kind, n.calibrator]
             for n in sorted(graph.nodes.values(), key=lambda n: n.id)]
    plan = plan_against(graph, index, "state-1", {"m.yaml": "0" * 64}, records=_records(graph),
                        max_cells_per_shard=97).to_json()
    digest = hashlib.sha256(canonical_json({"cells": cells, "nodes": nodes, "order": list(graph.order),
                                            "plan": plan}).encode()).hexdigest()
    return {"digest": digest, "cells": len(cells), "nodes": len(nodes),
            "keys": {a: v[:3] for a, v in sorted(cells.items())[:60]}}


WORLDS = {"demo": lambda: _manifest_world("demo.yaml"), "fleet": lambda: _manifest_world("fleet.yaml"),
          "generated": _generated_world}


@pytest.mark.parametrize("world", sorted(WORLDS))
def test_keys_nodes_order_and_plan_unchanged(world):
    golden = json.loads(GOLDEN.read_text())[world]
    got = summary(*WORLDS[world]())
    assert (got["cells"], got["nodes"]) == (golden["cells"], golden["nodes"])
    assert got["keys"] == golden["keys"]  # the first cells' keys, to say which moved
    assert got["digest"] == golden["digest"]


if __name__ == "__main__" and "--write" in sys.argv:
    GOLDEN.write_text(json.dumps({name: summary(*make()) for name, make in sorted(WORLDS.items())}, indent=1,
                                 sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
