"""Issue 12 end to end, through the real command line on real files: a tiny conv net built as onnxruntime CPU
engines and TensorRT-RTX AOT engines (fp32, fp16 and int8 by Q/DQ calibration on .npy data), gated, published to
a local store; then the manifest is edited as a user would and `plan` / `gate` / `publish` must say exactly what
moved:

- a calibration setting (samples, preprocess, method, one calibration file) rebuilds exactly the int8 cells,
  naming the field; fp32/fp16 cells stay up to date;
- a tightened fp16 tolerance re-gates (no rebuild), `gate` exits 3 without a fresh cache dir, `publish`
  publishes nothing that failed;
- one calibration cache is computed for the model and every int8 target reuses it (the build logs say so), and
  `ls` / `show` list it;
- a Windows and a Linux target of the same TensorRT cell have different build keys.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (pip install 'trt-orchestrator[ort]')")
pytest.importorskip("tensorrt_rtx", reason="tensorrt-rtx is not installed (pip install 'trt-orchestrator[rtx]')")

pytestmark = pytest.mark.integration

_TRACEBACK = "Traceback (most recent call last)"
RTX = "1.7.1.116"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "ORCHESTRATE_CACHE": str(cwd / ".orchestrate"), "COLUMNS": "250"}
    env.pop("ORCHESTRATE_REGISTRY", None)
    proc = subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=600)
    assert _TRACEBACK not in proc.stderr, proc.stderr
    return proc


def _conv_model(path: Path) -> None:
    """x[N,3,16,16] -> Conv 3x3 (8 channels) -> Relu -> Conv 1x1 (4) -> y: weights the int8 Q/DQ transform
    quantizes (Conv), values fp16 rounds."""
    rng = np.random.default_rng(7)
    w1 = numpy_helper.from_array(rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.normal(0, 0.1, (8,)).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.normal(0, 0.3, (4, 8, 1, 1)).astype(np.float32), "w2")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 16, 16])
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["y"], name="conv2")]
    graph = helper.make_graph(nodes, "tinyconv", [x], [y], [w1, b1, w2])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)


def _calibration(folder: Path, n: int = 4) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(11)
    for i in range(n):
        np.save(folder / f"sample{i}.npy", rng.uniform(0, 1, (1, 3, 16, 16)).astype(np.float32))


MANIFEST = """\
manifest_version: 1
project: fingerprints
registry: {store: local, path: artifacts}
defaults:
  gate:
    parity:
      data: {samples: 2, seed: 0}
      tolerances:
        int8: {atol: 1.0, rtol: 1.0, min_cosine: 0.9, max_rel_l2: 1.0}   # 4 calibration samples: a loose int8
TOLERANCES
    benchmark: {enabled: false}
    allow_ungated_publish: true
models:
  - name: tiny
    version: "1.0.0"
    source: {path: tiny.onnx}
    inputs:
      x:
        shape: [N, 3, 16, 16]
        profiles:
          default: {min: [1, 3, 16, 16], opt: [1, 3, 16, 16], max: [2, 3, 16, 16]}
    precisions:
      - fp32
      - {name: fp16, via: transform}
      - {name: int8, via: transform, calibration_method: METHOD}
    calibration:
      path: calib
      samples: SAMPLES
      preprocess: {std: STD}
targets:
  - {name: cpu, builder: onnxruntime, builder_version: "1.31", device: cpu, runners: {build: [ubuntu-latest]}}
  - {name: rtx-a, builder: tensorrt-rtx, builder_version: "RTX", compute_capability: "8.6",
     runners: {build: [ubuntu-latest], gate: [rtx]}}
  - {name: rtx-b, builder: tensorrt-rtx, builder_version: "RTX", compute_capabilities: ["8.9", "12.0"],
     runners: {build: [ubuntu-latest], gate: [rtx]}}
transforms:
  tools: {onnx: "1.23", onnxruntime: "1.31", onnxconverter-common: "1.16"}
"""
BASE = {"METHOD": "entropy", "SAMPLES": "4", "STD": "[1.0, 1.0, 1.0]", "TOLERANCES": ""}
TIGHT = "        fp16: {atol: 0, rtol: 0, min_cosine: 1.0}\n"


def _manifest(**changes: str) -> str:
    text = MANIFEST.replace("RTX", RTX)
    for key, value in {**BASE, **changes}.items():
        text = text.replace(key + "\n", value) if key == "TOLERANCES" else text.replace(key, value)
    return text


def _plan(cwd: Path, **changes: str) -> dict[str, dict]:
    (cwd / "m.yaml").write_text(_manifest(**changes))
    proc = run("plan", "m.yaml", "--json", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return {c["address"]: c for c in json.loads(proc.stdout)["cells"]}


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> Path:
    """Built, gated and published once: 9 cells (3 precisions x cpu, rtx-a, rtx-b)."""
    cwd = tmp_path_factory.mktemp("fingerprints")
    _conv_model(cwd / "tiny.onnx")
    _calibration(cwd / "calib")
    (cwd / "m.yaml").write_text(_manifest())
    for verb in ("build", "gate", "publish"):
        proc = run(verb, "m.yaml", cwd=cwd)
        assert proc.returncode == 0, f"{verb}: {proc.stdout}\n{proc.stderr}"
    return cwd


def _int8(cells: dict[str, dict]) -> set[str]:
    return {a for a in cells if "/int8/" in a}


def test_everything_is_up_to_date_after_publishing(published):
    cells = _plan(published)
    assert len(cells) == 9 and {c["status"] for c in cells.values()} == {"up-to-date"}


@pytest.mark.parametrize("change,field", [
    ({"SAMPLES": "3"}, "calibration.data.samples: 4 -> 3"),
    ({"STD": "[0.5, 1.0, 1.0]"}, "calibration.data.preprocess.std: [1.0,1.0,1.0] -> [0.5,1.0,1.0]"),
    ({"METHOD": "minmax"}, "calibration.method: entropy -> minmax"),
])
def test_a_calibration_setting_rebuilds_exactly_the_int8_cells_naming_it(published, change, field):
    cells = _plan(published, **change)
    rebuilt = {a for a, c in cells.items() if c["status"] == "rebuild"}
    assert rebuilt == _int8(cells) and len(rebuilt) == 3
    for address in rebuilt:
        assert field in cells[address]["changes"], cells[address]["changes"]
    assert {c["status"] for a, c in cells.items() if a not in rebuilt} == {"up-to-date"}


def test_one_changed_calibration_file_rebuilds_exactly_the_int8_cells(published, tmp_path):
    sample = published / "calib" / "sample2.npy"
    original = sample.read_bytes()
    try:
        np.save(sample, np.full((1, 3, 16, 16), 0.5, np.float32))
        cells = _plan(published)
    finally:
        sample.write_bytes(original)
    rebuilt = {a for a, c in cells.items() if c["status"] == "rebuild"}
    assert rebuilt == _int8(cells)
    assert all(any(ch.startswith("calibration.data.digest: sha256:") for ch in cells[a]["changes"]) for a in rebuilt)
    assert {c["status"] for a, c in cells.items() if a not in rebuilt} == {"up-to-date"}


def test_one_calibration_cache_serves_every_int8_target_and_is_listed(published):
    runs = sorted((published / ".orchestrate" / "runs").glob("*.json"))
    calibrations = [n for r in runs for n in json.loads(r.read_text()).get("nodes", [])
                    if str(n.get("node", "")).startswith("calibrate:") and n.get("status") == "done"]
    assert len(calibrations) == 1, calibrations  # computed once for the model
    logs = published / ".orchestrate" / "logs"
    digest = None
    for target in ("cpu+ort1.31", "sm86+rtx1.7", "sm89-sm120+rtx1.7"):
        text = next(logs.glob(f"build_tiny_int8_default@{target}*.log")).read_text()
        line = next(x for x in text.splitlines() if "calibration cache sha256:" in x)
        assert "shared by every int8 cell with this calibration key, not recomputed" in line
        found = line.split("calibration cache ")[1].split()[0]
        assert digest in (None, found)
        digest = found
    ls = run("ls", "--registry", "artifacts", "--json", cwd=published)
    assert ls.returncode == 0, ls.stderr
    assert digest in ls.stdout and "calibration" in ls.stdout
    show = run("show", "tiny/int8/default@cpu+ort1.31", "--registry", "artifacts", "--json", cwd=published)
    assert show.returncode == 0, show.stderr
    meta = json.loads(show.stdout)
    meta = meta.get("metadata", meta)
    assert meta["caches"]["calibration"]["digest"] == digest
    assert any(a["role"] == "calibration-cache" and a["digest"] == digest for a in meta["attachments"])


def test_a_tightened_tolerance_re_gates_fails_and_publishes_nothing_failed(published):
    cells = _plan(published, TOLERANCES=TIGHT)
    regate = {a for a, c in cells.items() if c["status"] == "regate"}
    assert regate == {a for a in cells if "/fp16/" in a} and len(regate) == 3
    assert all(any(ch.startswith("gate.parity.tolerances.fp16.atol") for ch in cells[a]["changes"])
               for a in regate)
    assert {c["status"] for a, c in cells.items() if a not in regate} == {"up-to-date"}
    human = run("plan", "m.yaml", cwd=published)
    assert "re-gate" in human.stdout and "~" in human.stdout

    gate = run("gate", "m.yaml", cwd=published)  # same cache dir: the old verdicts are not reused
    assert gate.returncode == 3, gate.stdout + gate.stderr
    before = {p.name for p in (published / "artifacts" / "meta").glob("*.json")}
    publish = run("publish", "m.yaml", cwd=published)
    after = {p.name for p in (published / "artifacts" / "meta").glob("*.json")}
    records = [json.loads((published / "artifacts" / "meta" / n).read_text()) for n in after - before]
    # the CPU fp16 engine failed the tightened gate: no record of it; the RTX ones are pending (ungated, allowed)
    assert all(r["address"] != "tiny/fp16/default@cpu+ort1.31" for r in records), publish.stdout
    assert all(r["gates"]["status"] != "failed" for r in records)
    cells = _plan(published, TOLERANCES=TIGHT)
    assert cells["tiny/fp16/default@cpu+ort1.31"]["status"] == "regate"  # still: its new verdict failed
    (published / "m.yaml").write_text(_manifest())


TRT_MANIFEST = """\
manifest_version: 1
project: platforms
registry: {store: local, path: artifacts}
models:
  - name: tiny
    version: "1.0.0"
    source: {path: tiny.onnx}
    inputs:
      x:
        shape: [N, 3, 16, 16]
        profiles:
          default: {min: [1, 3, 16, 16], opt: [1, 3, 16, 16], max: [2, 3, 16, 16]}
targets:
  - {name: l4-linux, builder: tensorrt, builder_version: "10.13.3.9", compute_capability: "8.9",
     runners: {build: [sm89]}}
  - {name: l4-windows, builder: tensorrt, builder_version: "10.13.3.9", compute_capability: "8.9",
     platform: windows/x86_64, runners: {build: [sm89-win]}}
"""


def test_windows_and_linux_builds_of_one_cell_have_different_keys(tmp_path):
    _conv_model(tmp_path / "tiny.onnx")
    (tmp_path / "m.yaml").write_text(TRT_MANIFEST)
    proc = run("plan", "m.yaml", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    cells = {c["target"]: c for c in json.loads(proc.stdout)["cells"]}
    assert cells["l4-linux"]["build_key"] != cells["l4-windows"]["build_key"]
    # another platform is another cell: the default one keeps its address
    assert cells["l4-linux"]["address"] == "tiny/fp32/default@sm89+trt10.13"
    assert cells["l4-windows"]["address"] == "tiny/fp32/default@sm89-windows-x86_64+trt10.13"
    explain = run("explain", "tiny/fp32/default@sm89-windows-x86_64+trt10.13", "m.yaml", "--json", cwd=tmp_path)
    assert explain.returncode == 0, explain.stderr
    assert json.loads(explain.stdout)["build_inputs"]["target"]["platform"] == "windows/x86_64"
