"""Labelled parity data (issue 15, gate.parity.data.labels): the orientation classifier's onnxruntime engine gated on
the five real pictures with a labels file (name -> class index) reports accuracy against the labels for the engine
and the reference, judges `min_accuracy` with them, keys the labels by content (a changed labels file re-gates, the
build stays), and refuses a labels file that misses an image, naming it. The label readers (JSON, PP-OCR's
name<TAB>text, COCO/YOLO scaled to the model input) are unit-tested in tests/unit/test_task_labels.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import PICTURES, run_json
from .test_task_gates import _case, _report, manifest, write_charset

pytestmark = pytest.mark.integration

CELL = "orientation/fp32/default@cpu+ort1.31"


def _labelled(root: Path, pictures: Path, labels: dict, task: dict) -> Path:
    (root / "labels.json").parent.mkdir(parents=True, exist_ok=True)
    (root / "labels.json").write_text(json.dumps(labels))
    path = manifest(root / "manifests", pictures, write_charset(root),
                    only_orientation_gate={"task": task, "task_by_precision": {}})
    data = json.loads(path.read_text())
    orientation = data["models"][0]
    orientation["gate"]["parity"]["data"]["labels"] = str(root / "labels.json")
    path.write_text(json.dumps(data, indent=1))
    return path


def test_accuracy_against_labels_on_real_pictures(tmp_path, pictures):
    upright = {name: 0 for name in PICTURES}  # every picture is upright: class 0 (0 degrees)
    path = _labelled(tmp_path, pictures, upright, {"min_accuracy": 0.0})
    cache = tmp_path / "cache"
    explained, _ = run_json("explain", CELL, str(path), cache=cache)
    first_labels = explained["gate_inputs"]["parity"]["data"]["labels"]
    assert first_labels.startswith("sha256:")
    run_json("build", str(path), "--only", CELL, cache=cache)
    summary, proc = run_json("gate", str(path), "--only", CELL, cache=cache, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    metrics = _case(_report(summary, CELL))["task"]["metrics"]
    print(metrics)
    assert {"accuracy", "reference_accuracy", "top1_disagreement"} <= set(metrics)
    assert metrics["accuracy"] == metrics["reference_accuracy"]  # fp32: the engine answers as the reference does
    upright_accuracy = metrics["accuracy"]
    assert upright_accuracy * len(PICTURES) == round(upright_accuracy * len(PICTURES))  # a count of 5 pictures

    # the opposite labels (180 degrees) with a bound the upright answers meet: a changed labels file re-gates the
    # same engine (no rebuild) and the metric follows the labels
    flipped = _labelled(tmp_path, pictures, {name: 2 for name in PICTURES}, {"min_accuracy": 0.0})
    explained, _ = run_json("explain", CELL, str(flipped), cache=cache)
    assert explained["gate_inputs"]["parity"]["data"]["labels"] != first_labels
    plan, _ = run_json("plan", str(flipped), cache=cache)
    (cell,) = [c for c in plan["cells"] if c["address"] == CELL]
    assert cell["status"] != "rebuild", cell
    summary, proc = run_json("gate", str(flipped), "--only", CELL, cache=cache, check=False)
    flipped_metrics = _case(_report(summary, CELL))["task"]["metrics"]
    assert flipped_metrics["top1_disagreement"] == metrics["top1_disagreement"]
    assert flipped_metrics["accuracy"] + upright_accuracy <= 1.0  # an answer is 0 or 2, not both

    # min_accuracy judged against the labels: a bound above what the engine scores fails the gate, naming it
    strict = _labelled(tmp_path, pictures, upright, {"min_accuracy": min(1.0, upright_accuracy + 0.2)})
    summary, proc = run_json("gate", str(strict), "--only", CELL, cache=cache, check=False)
    assert upright_accuracy <= 0.8  # measured 0.6: three of the five pictures come out upright
    assert proc.returncode == 3, proc.stdout[-3000:]
    reasons = _case(_report(summary, CELL))["task"]["reasons"]
    assert any(r.startswith(f"accuracy {upright_accuracy:.4g} < min_accuracy") for r in reasons), reasons


def test_a_labels_file_missing_an_image_is_a_gate_error_naming_it(tmp_path, pictures):
    partial = {name: 0 for name in PICTURES[1:]}
    path = _labelled(tmp_path, pictures, partial, {})
    cache = tmp_path / "cache"
    run_json("build", str(path), "--only", CELL, cache=cache)
    summary, proc = run_json("gate", str(path), "--only", CELL, cache=cache, check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    text = json.dumps(summary)
    assert f"no label for 1 of the 5 images ({PICTURES[0]})" in text, text[-3000:]
