"""The detection and segmentation task metrics on synthetic arrays: YOLO decoding and NMS, box matching against
the reference, COCO mAP against labels (faster-coco-eval), the label loaders, and mask IoU / boundary F."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from orchestrator.contracts.task import TaskMetric
from orchestrator.core.model import TaskSpec
from orchestrator.errors import GateError
from orchestrator.gates.metrics import compare_output
from orchestrator.gates.tolerances import default_tolerance
from trt_orchestrator_plugins.tasks.detection import Detections, detection, load_labels, match_count, nms
from trt_orchestrator_plugins.tasks.segmentation import boundary, dilate, segmentation


def samples(name: str, *arrays: np.ndarray) -> list[dict[str, np.ndarray]]:
    return [{name: a} for a in arrays]


V8 = TaskSpec("detection", options={"layout": "yolov8"})
V5 = TaskSpec("detection", options={"layout": "yolov5"})


def yolov8_head(images: list[list[tuple[float, float, float, float, int, float]]], classes: int = 3,
                anchors: int = 12) -> np.ndarray:
    """``[N, 4+C, A]``: each object (cx, cy, w, h, class, score) on its own anchor; the other anchors are
    background boxes at 0.01."""
    raw = np.full((len(images), 4 + classes, anchors), 0.01)
    raw[:, :4, :] = np.array([[300.0], [300.0], [16.0], [16.0]])
    for n, objects in enumerate(images):
        for a, (cx, cy, w, h, c, s) in enumerate(objects):
            raw[n, :4, a] = (cx, cy, w, h)
            raw[n, 4 + c, a] = s
    return raw


def as_yolov5(v8: np.ndarray, objectness: float) -> np.ndarray:
    """The same anchors as ``[N, A, 5+C]``: class scores divided by ``objectness`` so obj x cls is unchanged."""
    per_anchor = np.swapaxes(v8, 1, 2)
    obj = np.full(per_anchor.shape[:2] + (1,), objectness)
    return np.concatenate([per_anchor[..., :4], obj, per_anchor[..., 4:] / objectness], axis=-1)


def boxes_of(dets: Detections) -> list[tuple]:
    return [(*b, int(c)) for b, c in zip(dets.boxes.tolist(), dets.classes.tolist())]


# --- decoding and NMS ---------------------------------------------------------------------------------------


def test_the_plugins_fit_the_task_port():
    for plugin, kind in ((detection, "detection"), (segmentation, "segmentation")):
        assert isinstance(plugin, TaskMetric) and plugin.name == kind
    assert {"box_recall", "box_precision", "map50", "map50_95", "reference_map50"} <= set(detection.metrics)
    assert {"mask_iou", "boundary_f", "pixel_agreement", "label_mask_iou"} <= set(segmentation.metrics)


def test_both_yolo_layouts_decode_to_the_same_boxes():
    v8 = yolov8_head([[(100, 50, 20, 40, 2, 0.9), (300, 200, 60, 30, 0, 0.6)], [(10, 10, 4, 4, 1, 0.3)]])
    v5 = as_yolov5(v8, objectness=0.8)
    assert v5.shape == (2, 12, 8)
    ref8, _ = detection.decode(samples("out", v8), samples("out", v8), V8)
    ref5, _ = detection.decode(samples("out", v5), samples("out", v5), V5)
    expected = [[(90.0, 30.0, 110.0, 70.0, 2), (270.0, 185.0, 330.0, 215.0, 0)], [(8.0, 8.0, 12.0, 12.0, 1)]]
    assert [boxes_of(d) for d in ref8] == expected
    assert [boxes_of(d) for d in ref5] == [[pytest.approx(b) for b in row] for row in expected]
    assert ref8[0].scores.tolist() == [0.9, 0.6] and ref5[0].scores == pytest.approx([0.9, 0.6])


def test_yolov5_score_is_objectness_times_class():
    v5 = as_yolov5(yolov8_head([[(100, 50, 20, 40, 2, 0.9)]]), objectness=1.0)
    v5[0, 0, 4] = 0.25  # objectness 0.25 x class 0.9 = 0.225: under the 0.25 threshold
    dets, _ = detection.decode(samples("out", v5), samples("out", v5), V5)
    assert len(dets[0].boxes) == 0


def test_nms_suppresses_overlaps_per_class():
    boxes = np.array([[0, 0, 10, 10], [1, 0, 11, 10], [1, 0, 11, 10], [30, 30, 40, 40]], dtype=np.float64)
    scores = np.array([0.9, 0.8, 0.7, 0.6])
    classes = np.array([0, 0, 1, 0])
    # box 1 overlaps box 0 with IoU 90/110 = 0.82 > 0.45, same class: dropped; box 2 is of class 1: kept
    assert nms(boxes, scores, classes, 0.45).tolist() == [0, 2, 3]
    assert nms(boxes, scores, classes, 0.45, class_agnostic=True).tolist() == [0, 3]
    assert nms(boxes, scores, classes, 0.85).tolist() == [0, 1, 2, 3]  # 0.82 is not > 0.85
    assert nms(boxes, scores, classes, 0.45, max_detections=2).tolist() == [0, 2]


def test_nms_and_options_in_evaluate():
    v8 = yolov8_head([[(100, 100, 20, 20, 0, 0.9), (101, 100, 20, 20, 0, 0.8), (101, 100, 20, 20, 1, 0.7)]])
    out = detection.evaluate(samples("o", v8), samples("o", v8), V8)
    assert out["reference_boxes"] == 2.0
    agnostic = TaskSpec("detection", options={"layout": "yolov8", "class_agnostic": True})
    assert detection.evaluate(samples("o", v8), samples("o", v8), agnostic)["reference_boxes"] == 1.0
    strict = TaskSpec("detection", options={"layout": "yolov8", "score_threshold": 0.75})
    assert detection.evaluate(samples("o", v8), samples("o", v8), strict)["reference_boxes"] == 1.0
    capped = TaskSpec("detection", options={"layout": "yolov8", "iou_threshold": 0.95, "max_detections": 2})
    assert detection.evaluate(samples("o", v8), samples("o", v8), capped)["reference_boxes"] == 2.0


# --- against the reference ----------------------------------------------------------------------------------


THREE = [(100, 100, 40, 40, 0, 0.9), (300, 100, 40, 40, 1, 0.8), (100, 300, 40, 40, 2, 0.7)]


def test_identical_outputs_recall_and_precision_1():
    v8 = yolov8_head([THREE, THREE[:1]])
    out = detection.evaluate(samples("o", v8[:1], v8[1:]), samples("o", v8[:1].copy(), v8[1:].copy()), V8)
    assert out == {"box_recall": 1.0, "box_precision": 1.0, "reference_boxes": 4.0, "engine_boxes": 4.0}


def test_a_shifted_box_and_a_wrong_class_lower_recall():
    # the second box moves 20 px right: overlap 20x40 of two 40x40 boxes, IoU 800 / 2400 = 1/3 < 0.5;
    # the third box keeps its place but changes class: matched by nothing; one extra box appears
    engine = [THREE[0], (320, 100, 40, 40, 1, 0.8), (100, 300, 40, 40, 0, 0.7), (500, 500, 20, 20, 1, 0.5)]
    out = detection.evaluate(samples("o", yolov8_head([THREE])), samples("o", yolov8_head([engine])), V8)
    assert out == {"box_recall": pytest.approx(1 / 3), "box_precision": pytest.approx(1 / 4),
                   "reference_boxes": 3.0, "engine_boxes": 4.0}
    # IoU 1/3 matches once match_iou is at most 1/3
    loose = TaskSpec("detection", options={"layout": "yolov8", "match_iou": 0.3})
    assert detection.evaluate(samples("o", yolov8_head([THREE])), samples("o", yolov8_head([engine])),
                              loose)["box_recall"] == pytest.approx(2 / 3)


def test_matching_is_one_to_one():
    ref = Detections(np.array([[0, 0, 10, 10.0]]), np.array([0.9]), np.array([0]))
    eng = Detections(np.array([[0, 0, 10, 10.0], [0, 0, 10, 9.0]]), np.array([0.9, 0.8]), np.array([0, 0]))
    assert match_count(ref, eng, 0.5) == 1 and match_count(eng, ref, 0.5) == 1
    two = Detections(np.array([[0, 0, 10, 10.0], [0, 1, 10, 11.0]]), np.array([0.9, 0.8]), np.array([0, 0]))
    assert match_count(two, eng, 0.5) == 2  # the best pairs first: (0, 0) at IoU 1, then (1, 1) at 0.8


def test_an_engine_inside_tensor_tolerances_that_loses_boxes():
    """fp16's default tensor tolerance passes an engine whose scores sag by 0.06 on 3 of 10 objects, since 3
    elements of 705,600 violate (4.3e-6 <= the allowed 1e-4); the detections lose the 3 boxes: recall 0.7."""
    rng = np.random.default_rng(7)
    objects = [(40 + 60 * i, 40 + 55 * i, 30, 30, i % 80, 0.3) for i in range(10)]
    ref = yolov8_head([objects], classes=80, anchors=8400)
    ref[0, :4, 10:] = rng.uniform(16, 624, size=(4, 8390))  # background anchors, scored 0.01
    eng = ref + rng.uniform(-0.004, 0.004, size=ref.shape)
    for a in (2, 5, 8):
        eng[0, 4 + a % 80, a] = 0.24  # 0.3 -> 0.24: under the 0.25 score threshold
    verdict = compare_output("output0", [(eng, ref)], default_tolerance("fp16"))
    assert verdict.status == "passed", verdict.reasons
    assert verdict.violations == 3 and verdict.elements == 705_600
    assert verdict.max_abs_error == pytest.approx(0.06) and verdict.cosine > 0.99999
    out = detection.evaluate(samples("output0", ref), samples("output0", eng), V8)
    assert out == {"box_recall": pytest.approx(0.7), "box_precision": 1.0, "reference_boxes": 10.0,
                   "engine_boxes": 7.0}


def test_the_boxes_layout_reads_post_nms_outputs():
    spec = TaskSpec("detection", options={"layout": "boxes", "boxes": "det_boxes", "scores": "det_scores",
                                          "classes": "det_classes"})
    boxes = np.array([[[10, 10, 50, 50], [60, 60, 90, 90], [0, 0, 0, 0]]], dtype=np.float32)
    scores = np.array([[0.9, 0.6, 0.0]], dtype=np.float32)  # the last row is padding
    classes = np.array([[3, 1, 0]], dtype=np.float32)
    ref = {"num_dets": np.array([[2]]), "det_boxes": boxes, "det_scores": scores, "det_classes": classes}
    eng = dict(ref, det_classes=np.array([[3, 2, 0]], dtype=np.float32))  # the second box changes class
    out = detection.evaluate([ref], [eng], spec)
    assert out == {"box_recall": 0.5, "box_precision": 0.5, "reference_boxes": 2.0, "engine_boxes": 2.0}
    overlapping = dict(ref, det_boxes=np.array([[[10, 10, 50, 50], [11, 10, 51, 50], [0, 0, 0, 0]]], np.float32),
                       det_classes=np.array([[3, 3, 0]], dtype=np.float32))
    # post-NMS: no NMS again, two overlapping boxes of one class both stay
    assert detection.evaluate([overlapping], [overlapping], spec)["reference_boxes"] == 2.0
    with pytest.raises(GateError, match=r"option 'scores' names output 'det_scores', which the model does not "
                                        r"have \(outputs: det_boxes, det_classes, num_dets\)"):
        bare = {k: v for k, v in ref.items() if k != "det_scores"}
        detection.evaluate([bare], [bare], spec)


def test_detection_option_and_shape_errors_name_what_is_wrong():
    v8 = yolov8_head([THREE])
    with pytest.raises(GateError, match="option 'layout' is None; it must be one of yolov8, yolov5, boxes"):
        detection.evaluate(samples("o", v8), samples("o", v8), TaskSpec("detection"))
    with pytest.raises(GateError, match=r"output 'o' has shape \[1, 4, 12\]: 4 values per anchor; layout yolov8"):
        detection.evaluate(samples("o", v8[:, :4]), samples("o", v8[:, :4]), V8)
    with pytest.raises(GateError, match=r"output 'o' has shape \[1, 7, 12, 1\]; the task needs \[N, 4\+C, A\]"):
        detection.evaluate(samples("o", v8[..., None]), samples("o", v8[..., None]), V8)
    with pytest.raises(GateError, match="option 'boxes' must name the output"):
        detection.evaluate(samples("o", v8), samples("o", v8), TaskSpec("detection", options={"layout": "boxes"}))
    with pytest.raises(GateError, match="option 'class_agnostic' must be true or false"):
        detection.evaluate(samples("o", v8), samples("o", v8),
                           TaskSpec("detection", options={"layout": "yolov8", "class_agnostic": "yes"}))


# --- mAP against labels (faster-coco-eval) ------------------------------------------------------------------


LABELS = [[(80, 80, 120, 120, 0), (280, 80, 320, 120, 1), (80, 280, 120, 320, 2)], [(80, 80, 120, 120, 0)]]


def test_perfect_detections_have_map_1():
    v8 = yolov8_head([THREE, THREE[:1]])
    out = detection.evaluate(samples("o", v8), samples("o", v8.copy()), V8, labels=LABELS)
    assert out["map50"] == 1.0 and out["map50_95"] == 1.0 and out["reference_map50"] == 1.0


def test_a_missing_box_costs_what_cocos_101_point_ap_says():
    """Class 0 has 2 ground-truth boxes and the engine finds one (score 0.9, the first in its ranking): precision
    1 up to recall 0.5. COCO interpolates precision at 101 recall points 0, 0.01, ..., 1: 1 at the 51 points
    <= 0.5, 0 above, so class 0's AP is 51/101 at every IoU threshold. Classes 1 and 2 stay at 1. The mean over
    the 3 classes: (51/101 + 2) / 3."""
    ref = yolov8_head([THREE, THREE[:1]])
    eng = yolov8_head([THREE, []])
    out = detection.evaluate(samples("o", ref), samples("o", eng), V8, labels=LABELS)
    expected = (51 / 101 + 2) / 3
    assert out["map50"] == pytest.approx(expected) and out["map50_95"] == pytest.approx(expected)
    assert out["reference_map50"] == 1.0 and out["box_recall"] == pytest.approx(3 / 4)


def test_map50_95_averages_the_ten_iou_thresholds():
    """A box 40 wide and 32.8 high on a 40x40 ground truth: IoU 0.82, a hit at thresholds 0.50 ... 0.80 (7 of
    the 10) and a miss at 0.85, 0.90, 0.95: mAP@0.5 is 1, mAP@0.5:0.95 is 7/10."""
    eng = yolov8_head([[(100, 96.4, 40, 32.8, 0, 0.9)]])
    out = detection.evaluate(samples("o", eng), samples("o", eng), V8, labels=[[(80, 80, 120, 120, 0)]])
    assert out["map50"] == pytest.approx(1.0) and out["map50_95"] == pytest.approx(0.7)


def test_labels_without_boxes_report_no_map_and_a_wrong_count_is_named():
    v8 = yolov8_head([THREE])
    out = detection.evaluate(samples("o", v8), samples("o", v8), V8, labels=[[]])
    assert "map50" not in out and "reference_map50" not in out and out["box_recall"] == 1.0
    with pytest.raises(GateError, match="2 label entries for 1 image rows"):
        detection.evaluate(samples("o", v8), samples("o", v8), V8, labels=[[], []])
    with pytest.raises(GateError, match="the labels of image row 0 are not"):
        detection.evaluate(samples("o", v8), samples("o", v8), V8, labels=[[(1, 2, 3, 4)]])


def test_map_without_faster_coco_eval_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "faster_coco_eval", None)  # `import faster_coco_eval` raises ImportError
    v8 = yolov8_head([THREE])
    assert detection.evaluate(samples("o", v8), samples("o", v8), V8)["box_recall"] == 1.0  # no labels: not needed
    with pytest.raises(GateError, match="needs faster-coco-eval") as e:
        detection.evaluate(samples("o", v8), samples("o", v8), V8, labels=[LABELS[0]])
    assert e.value.hint == "pip install 'trt-orchestrator[detection]'"


# --- label loaders ------------------------------------------------------------------------------------------


def test_coco_json_labels(tmp_path):
    path = tmp_path / "instances.json"
    path.write_text(json.dumps({
        "images": [{"id": 10, "file_name": "val/a.jpg"}, {"id": 11, "file_name": "b.jpg"}],
        "categories": [{"id": 1, "name": "person"}, {"id": 3, "name": "car"}, {"id": 7, "name": "train"}],
        "annotations": [
            {"id": 1, "image_id": 10, "category_id": 3, "bbox": [10, 20, 30, 40], "iscrowd": 0},
            {"id": 2, "image_id": 10, "category_id": 7, "bbox": [0, 0, 5, 5], "iscrowd": 1},  # crowd: skipped
            {"id": 3, "image_id": 10, "category_id": 1, "bbox": [1.5, 2, 3, 4]},
        ]}))
    assert load_labels(path, ["b.jpg", "a.jpg"]) == [[], [(10, 20, 40, 60, 1), (1.5, 2, 4.5, 6, 0)]]
    assert load_labels(path, ["a.jpg"], contiguous=False) == [[(10, 20, 40, 60, 3), (1.5, 2, 4.5, 6, 1)]]
    with pytest.raises(GateError, match=r"instances.json: no image 'c.jpg' among its 2 images"):
        load_labels(path, ["c.jpg"])


def test_coco_json_errors_name_file_and_place(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"images": [],\n "annotations": [\n  {"id": 1,}\n]}')
    with pytest.raises(GateError, match=r"bad.json:3: not valid JSON"):
        load_labels(bad, [])
    bbox = tmp_path / "bbox.json"
    bbox.write_text(json.dumps({"images": [{"id": 1, "file_name": "a.jpg"}], "categories": [{"id": 1}],
                                "annotations": [{"id": 5, "image_id": 1, "category_id": 1, "bbox": [1, 2, 3]}]}))
    with pytest.raises(GateError, match=r"bbox.json: annotation 0 \(id 5\): bbox \[1, 2, 3\] is not \[x, y, w"):
        load_labels(bbox, ["a.jpg"])
    with pytest.raises(GateError, match="neither a COCO instances .json file nor a folder"):
        load_labels(tmp_path / "missing.json", ["a.jpg"])


def test_yolo_txt_labels(tmp_path):
    (tmp_path / "a.txt").write_text("0 0.5 0.5 0.25 0.5\n\n2 0.1 0.1 0.3 0.1 0.2 0.4\n")
    sizes = {"imgs/a.jpg": (640, 480), "imgs/b.jpg": (100, 100)}
    labels = load_labels(tmp_path, ["imgs/b.jpg", "imgs/a.jpg"], sizes)
    assert labels[0] == []  # no b.txt: an image without boxes
    assert labels[1] == [(240.0, 120.0, 400.0, 360.0, 0), pytest.approx((64.0, 48.0, 192.0, 192.0, 2))]
    (tmp_path / "b.txt").write_text("1 0.5 0.5 0.2 0.2\n1 0.5 0.5 0.2\n")
    with pytest.raises(GateError, match=r"b.txt:2: '1 0.5 0.5 0.2' is not 'class cx cy w h'"):
        load_labels(tmp_path, ["imgs/b.jpg"], sizes)
    (tmp_path / "b.txt").write_text("car 0.5 0.5 0.2 0.2\n")
    with pytest.raises(GateError, match=r"b.txt:1: 'car 0.5 0.5 0.2 0.2' is not"):
        load_labels(tmp_path, ["imgs/b.jpg"], sizes)
    with pytest.raises(GateError, match="their image sizes are needed"):
        load_labels(tmp_path, ["imgs/a.jpg"])


def test_loaded_labels_feed_the_map(tmp_path):
    (tmp_path / "a.txt").write_text("0 0.15625 0.15625 0.0625 0.0625\n")  # (80, 80, 120, 120) on 640x640
    labels = load_labels(tmp_path, ["a.jpg"], {"a.jpg": (640, 640)})
    v8 = yolov8_head([THREE[:1]])
    assert detection.evaluate(samples("o", v8), samples("o", v8), V8, labels=labels)["map50_95"] == 1.0


# --- segmentation -------------------------------------------------------------------------------------------


def square(top: int, left: int, side: int = 6, shape=(16, 20)) -> np.ndarray:
    mask = np.zeros((1, 1, *shape), dtype=np.float32)
    mask[0, 0, top:top + side, left:left + side] = 1.0
    return mask


def seg(ref: np.ndarray, eng: np.ndarray, **options) -> dict[str, float]:
    return segmentation.evaluate(samples("mask", ref), samples("mask", eng), TaskSpec("segmentation",
                                                                                      options=options))


def test_boundary_is_the_mask_minus_its_erosion():
    mask = square(4, 4)[0, 0] > 0.5
    ring = boundary(mask[None])[0]
    assert int(ring.sum()) == 20 and not ring[5:9, 5:9].any() and ring[4, 4:10].all()
    full = np.ones((1, 5, 5), dtype=bool)
    assert not boundary(full).any()  # the image edge is no boundary
    dot = np.zeros((1, 7, 7), dtype=bool)
    dot[0, 3, 3] = True
    assert int(dilate(dot, 2).sum()) == 25 and dilate(dot, 2)[0, 1:6, 1:6].all()


def test_identical_masks():
    assert seg(square(4, 4), square(4, 4)) == {"mask_iou": 1.0, "boundary_f": 1.0, "pixel_agreement": 1.0}


def test_a_one_pixel_shift_is_within_the_boundary_tolerance():
    # 6x6 squares one column apart: overlap 6x5 = 30, union 42; every boundary pixel is 1 px from the other's
    out = seg(square(4, 4), square(4, 5))
    assert out == {"mask_iou": pytest.approx(30 / 42), "boundary_f": 1.0,
                   "pixel_agreement": pytest.approx(1 - 12 / 320)}
    # without tolerance only the shared parts of the top and bottom rows (5 + 5 of 20 boundary pixels) agree
    assert seg(square(4, 4), square(4, 5), boundary_tolerance=0)["boundary_f"] == pytest.approx(0.5)


def test_a_shift_beyond_the_tolerance_lowers_boundary_f():
    """Squares 4 px apart, tolerance 2: of the engine's 20 boundary pixels its left column (4, 1 px from the
    reference's right column) and 4 of 6 in each of its top and bottom rows (x 8..11, at most 2 px from the
    reference's corner at x 9) are near a reference boundary: precision 12/20, recall the same by symmetry."""
    out = seg(square(4, 4), square(4, 8))
    assert out["boundary_f"] == pytest.approx(0.6)
    assert out["mask_iou"] == pytest.approx(12 / 60) and out["pixel_agreement"] == pytest.approx(1 - 48 / 320)
    assert seg(square(4, 4), square(4, 8), boundary_tolerance=4)["boundary_f"] == 1.0


def test_empty_masks():
    empty = square(0, 0, side=0)
    assert seg(empty, empty) == {"mask_iou": 1.0, "boundary_f": 1.0, "pixel_agreement": 1.0}
    out = seg(square(4, 4), empty)
    assert out["mask_iou"] == 0.0 and out["boundary_f"] == 0.0 and out["pixel_agreement"] == pytest.approx(
        1 - 36 / 320)


def test_mask_layouts_threshold_and_sigmoid():
    ref, eng = square(4, 4), square(4, 5)
    assert seg(ref[:, 0], eng[:, 0]) == seg(ref, eng)  # [N, H, W] reads as [N, 1, H, W]
    logits = lambda m: np.where(m > 0.5, 0.3, -0.3)  # noqa: E731  (sigmoid: 0.574 / 0.426)
    assert seg(logits(ref), logits(eng), sigmoid=True) == seg(ref, eng)
    assert seg(logits(ref), logits(eng))["mask_iou"] == 1.0  # read as probabilities 0.3 is never > 0.5: both empty
    half = ref.copy()
    half[0, 0, 4:10, 4:7] = 0.4
    assert seg(ref, half, threshold=0.3)["mask_iou"] == 1.0
    assert seg(ref, half)["mask_iou"] == pytest.approx(0.5)


def test_class_maps_take_the_argmax():
    labels = np.array([[0, 0, 1, 1], [0, 0, 1, 1], [2, 2, 2, 2], [2, 2, 2, 2]])
    changed = labels.copy()
    changed[0, 0] = 1
    scores = lambda m: (np.eye(3)[m].transpose(2, 0, 1)[None] * 5.0).astype(np.float32)  # noqa: E731
    same = seg(scores(labels), scores(labels))
    assert same == {"mask_iou": 1.0, "boundary_f": 1.0, "pixel_agreement": 1.0}
    out = seg(scores(labels), scores(changed))
    # class 0: 3 of 4 pixels (IoU 3/4); class 1: 4 in 5 (4/5); class 2: 1 -> mean 0.85
    assert out["mask_iou"] == pytest.approx((3 / 4 + 4 / 5 + 1) / 3)
    assert out["pixel_agreement"] == pytest.approx(15 / 16)
    assert out["boundary_f"] == 1.0  # every pixel of a 4x4 map is within 2 px of every boundary
    # tolerance 0: class 0's boundary is (0,1) (1,0) (1,1) on both sides ((0,0) is interior: the image edge
    # extends the mask); class 1's reference boundary is (0,2) (1,2) (1,3), the engine's adds (0,0): P 3/4, R 1,
    # F 6/7; class 2 is unchanged. Mean (1 + 6/7 + 1) / 3
    assert seg(scores(labels), scores(changed), boundary_tolerance=0)["boundary_f"] == pytest.approx(20 / 21)
    with_labels = segmentation.evaluate(samples("m", scores(labels)), samples("m", scores(changed)),
                                        TaskSpec("segmentation"), labels=[labels])
    assert with_labels["label_mask_iou"] == pytest.approx(0.85) and with_labels["reference_label_mask_iou"] == 1.0


def test_segmentation_against_label_masks():
    truth = (square(4, 4)[0, 0] * 255).astype(np.uint8)  # a 0/255 PNG-style mask
    out = segmentation.evaluate(samples("m", square(4, 4)), samples("m", square(4, 5)), TaskSpec("segmentation"),
                                labels=[truth])
    assert out["label_mask_iou"] == pytest.approx(30 / 42) and out["reference_label_mask_iou"] == 1.0
    with pytest.raises(GateError, match=r"the label mask of row 0 has shape \[4, 4\]; output 'm' masks are \[16, 20\]"):
        segmentation.evaluate(samples("m", square(4, 4)), samples("m", square(4, 4)), TaskSpec("segmentation"),
                              labels=[np.zeros((4, 4))])


def test_segmentation_errors():
    with pytest.raises(GateError, match=r"output 'mask' has shape \[1, 16\]; the task needs \[N, H, W\]"):
        seg(np.zeros((1, 16)), np.zeros((1, 16)))
    with pytest.raises(GateError, match="option 'boundary_tolerance' is -1"):
        seg(square(4, 4), square(4, 4), boundary_tolerance=-1)
    with pytest.raises(GateError, match="option 'sigmoid' must be true or false"):
        seg(square(4, 4), square(4, 4), sigmoid=1)
