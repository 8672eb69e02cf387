"""``detection``: object detectors (YOLOv5 / YOLOv8 / YOLO11 heads, or an exported NMS) judged by their boxes.

Decoding, by option ``layout`` (required):

- ``yolov8``: one output ``[N, 4+C, A]`` (Ultralytics YOLOv8 / YOLO11 export): per anchor cx, cy, w, h, then C
  class scores, no objectness. An anchor's score is its best class score, its class that class.
- ``yolov5``: one output ``[N, A, 5+C]``: cx, cy, w, h, objectness, C class scores. An anchor's score is the best
  of objectness x class score, its class that class (YOLOv5's ``non_max_suppression``, one label per anchor).
- ``boxes``: detections already post-NMS (an exported NMS, TensorRT's EfficientNMS): three outputs named by the
  options ``boxes`` (``[N, K, 4]``, x0, y0, x1, y1), ``scores`` (``[N, K]``) and ``classes`` (``[N, K]``, class
  indices, rounded). Padding rows (score 0) fall under the score threshold.

Post-processing, per image row: keep anchors whose score is > ``score_threshold`` (default 0.25); for the YOLO
layouts, greedy NMS — highest score first, a box whose IoU with a kept box of the same class is > ``iou_threshold``
(default 0.45) is dropped; ``class_agnostic: true`` (default false): across classes — then at most
``max_detections`` (default 300) boxes, highest score first. The ``boxes`` layout gets no NMS (the model did it),
only the threshold and the cap. Boxes stay in the coordinates the model emits (input pixels for a YOLO export;
no letterbox is undone): labels must use the same ones. IoU is the continuous one (no +1), as COCO's and
Ultralytics'.

Metrics against the reference run's detections: ``box_recall`` (reference boxes matched by an engine box of the
same class with IoU >= ``match_iou``, default 0.5; 1 when the reference has none), ``box_precision`` (engine boxes
matched, the same matching; 1 when the engine has none), and the counts ``reference_boxes`` / ``engine_boxes``.
The matching is one-to-one: candidate (reference, engine) pairs are taken by IoU, highest first, each box used
at most once.

With labels (one entry per image row, in order: a sequence of ``(x0, y0, x1, y1, class_id)`` ground-truth
boxes, see :func:`load_labels`): ``map50`` and ``map50_95`` (COCO box mAP at IoU 0.5 and averaged over 0.50:0.05:0.95)
of the engine's detections and ``reference_map50`` of the reference's, computed by faster-coco-eval's
``COCOeval_faster`` with COCO's parameters (101 recall points, at most 100 detections per image by score, all
areas). As in COCO, a class without ground-truth boxes is left out of the mean (its false positives cost
nothing); when the labels hold no box at all mAP is undefined and not reported. faster-coco-eval is the optional
extra ``trt-orchestrator[detection]``, imported only when labels are given.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from orchestrator.contracts.task import SampleOutputs
from orchestrator.core.model import TaskSpec
from orchestrator.errors import GateError
from trt_orchestrator_plugins.tasks._outputs import option, stacked
from trt_orchestrator_plugins.tasks.text_detection import box_iou  # IoU does not care which axis comes first

LAYOUTS = ("yolov8", "yolov5", "boxes")

# One ground-truth box: x0, y0, x1, y1, class index.
LabelBox = tuple[float, float, float, float, int]


class Detections(NamedTuple):
    """One image's detections, highest score first: ``boxes`` ``[K, 4]`` (x0, y0, x1, y1), ``scores`` ``[K]``,
    ``classes`` ``[K]`` (int64)."""

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray


# --- options ------------------------------------------------------------------------------------------------


def _flag(spec: TaskSpec, key: str, default: bool) -> bool:
    value = spec.options.get(key, default)
    if not isinstance(value, bool):
        raise GateError(f"task {spec.kind}: option {key!r} must be true or false, got {value!r}")
    return value


def _text(spec: TaskSpec, key: str, what: str) -> str:
    value = spec.options.get(key)
    if not isinstance(value, str) or not value:
        raise GateError(f"task {spec.kind}: option {key!r} must name {what}, got {value!r}",
                        hint=f"set models[].task.{key}")
    return value


def layout_of(spec: TaskSpec) -> str:
    value = spec.options.get("layout")
    if value not in LAYOUTS:
        raise GateError(f"task detection: option 'layout' is {value!r}; it must be one of {', '.join(LAYOUTS)}",
                        hint="models[].task.layout: yolov8 ([N, 4+C, A]), yolov5 ([N, A, 5+C]) or boxes "
                             "(post-NMS outputs named by the options boxes, scores, classes)")
    return str(value)


# --- decoding -----------------------------------------------------------------------------------------------


def xyxy(centre_size: np.ndarray) -> np.ndarray:
    """``[..., 4]`` cx, cy, w, h -> x0, y0, x1, y1."""
    cx, cy, w, h = (centre_size[..., i] for i in range(4))
    return np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=-1)


def candidates(raw: np.ndarray, layout: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every anchor of a YOLO head ``raw`` (``yolov8`` ``[N, 4+C, A]``, ``yolov5`` ``[N, A, 5+C]``) ->
    (boxes ``[N, A, 4]`` x0, y0, x1, y1, scores ``[N, A]``, classes ``[N, A]``)."""
    if layout == "yolov8":
        per_anchor = np.swapaxes(raw, 1, 2)  # [N, A, 4+C]
        class_scores = per_anchor[..., 4:]
    else:
        per_anchor = raw
        class_scores = per_anchor[..., 5:] * per_anchor[..., 4:5]
    classes = np.argmax(class_scores, axis=-1)
    scores = np.take_along_axis(class_scores, classes[..., None], axis=-1)[..., 0]
    return xyxy(per_anchor[..., :4]), scores, classes.astype(np.int64)


def nms(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, iou_threshold: float,
        class_agnostic: bool = False, max_detections: int | None = None) -> np.ndarray:
    """Greedy NMS: indices of the kept boxes, highest score first (ties: the lower index). A box is dropped when
    its IoU with a kept box (of the same class unless ``class_agnostic``) is > ``iou_threshold``. One IoU row per
    kept box, so the loop runs at most ``max_detections`` times."""
    order = np.argsort(-scores, kind="stable")
    keep: list[int] = []
    while order.size and (max_detections is None or len(keep) < max_detections):
        best, rest = int(order[0]), order[1:]
        keep.append(best)
        suppress = box_iou(boxes[best:best + 1], boxes[rest])[0] > iou_threshold
        if not class_agnostic:
            suppress &= classes[rest] == classes[best]
        order = rest[~suppress]
    return np.asarray(keep, dtype=np.int64)


def postprocess(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, *, score_threshold: float,
                iou_threshold: float | None, max_detections: int, class_agnostic: bool = False) -> list[Detections]:
    """Per row of ``[N, K, 4]`` / ``[N, K]`` / ``[N, K]``: the score threshold, NMS (``iou_threshold`` None: none,
    the detections are post-NMS already) and the cap."""
    out = []
    for b, s, c in zip(boxes, scores, classes):
        # NaN scores compare False: a broken engine's NaN anchors are no detections
        kept = np.nonzero(s > score_threshold)[0]
        b, s, c = b[kept], s[kept], c[kept]
        if iou_threshold is None:
            order = np.argsort(-s, kind="stable")[:max_detections]
        else:
            order = nms(b, s, c, iou_threshold, class_agnostic, max_detections)
        out.append(Detections(b[order], s[order], c[order]))
    return out


def _class_indices(classes: np.ndarray) -> np.ndarray:
    """Class outputs (often float) -> int64; a NaN/Inf class is -1 (a broken engine's, matching nothing)."""
    return np.rint(np.nan_to_num(classes, nan=-1.0, posinf=-1.0, neginf=-1.0)).astype(np.int64)


def _outputs_named(spec: TaskSpec, reference: Sequence[SampleOutputs], engine: Sequence[SampleOutputs],
                   key: str, ndim: int, layout: str) -> tuple[np.ndarray, np.ndarray]:
    name = _text(spec, key, f"the output of the {layout}")
    if reference and name not in reference[0]:
        raise GateError(f"task detection: option {key!r} names output {name!r}, which the model does not have "
                        f"(outputs: {', '.join(sorted(reference[0])) or 'none'})",
                        hint=f"set models[].task.{key} to the output of the {layout}")
    _, ref, eng = stacked(replace(spec, output=name), reference, engine, ndim, layout)
    return ref, eng


class Detection:
    name = "detection"

    def read_labels(self, path: str, images: Sequence[tuple[str, tuple[int, int]]],
                    input_hw: tuple[int, int]) -> list[list[LabelBox]]:
        """Ground-truth boxes per image (COCO JSON or YOLO folder) in the model input's pixels."""
        return labels_in_input(path, images, input_hw)
    metrics = ("box_recall", "box_precision", "reference_boxes", "engine_boxes", "map50", "map50_95",
               "reference_map50")

    def decode(self, reference_outputs: Sequence[SampleOutputs], engine_outputs: Sequence[SampleOutputs],
               spec: TaskSpec) -> tuple[list[Detections], list[Detections]]:
        """Each side's detections per image row (every sample's batch in order)."""
        layout = layout_of(spec)
        score_threshold = option(spec, "score_threshold", 0.25)
        max_detections = int(option(spec, "max_detections", 300))
        if max_detections < 1:
            raise GateError(f"task detection: option 'max_detections' is {max_detections}; it must be >= 1")
        if layout == "boxes":
            ref_b, eng_b = _outputs_named(spec, reference_outputs, engine_outputs, "boxes", 3,
                                          "[N, K, 4] boxes (x0, y0, x1, y1)")
            ref_s, eng_s = _outputs_named(spec, reference_outputs, engine_outputs, "scores", 2, "[N, K] scores")
            ref_c, eng_c = _outputs_named(spec, reference_outputs, engine_outputs, "classes", 2, "[N, K] classes")
            if ref_b.shape[2] != 4 or ref_b.shape[:2] != ref_s.shape or ref_s.shape != ref_c.shape:
                raise GateError(f"task detection: outputs {spec.options['boxes']!r} {list(ref_b.shape)}, "
                                f"{spec.options['scores']!r} {list(ref_s.shape)} and {spec.options['classes']!r} "
                                f"{list(ref_c.shape)} do not fit [N, K, 4], [N, K], [N, K]",
                                hint="the layout boxes reads post-NMS outputs: boxes, scores, classes")
            sides = [(ref_b, ref_s, _class_indices(ref_c)), (eng_b, eng_s, _class_indices(eng_c))]
            iou_threshold: float | None = None
        else:
            need, layout_text = (5, "[N, 4+C, A]") if layout == "yolov8" else (6, "[N, A, 5+C]")
            name, ref, eng = stacked(spec, reference_outputs, engine_outputs, 3, f"{layout_text} ({layout} head)")
            channels = ref.shape[1] if layout == "yolov8" else ref.shape[2]
            if channels < need:
                raise GateError(f"task detection: output {name!r} has shape {list(ref.shape)}: {channels} values "
                                f"per anchor; layout {layout} needs {layout_text} with at least one class",
                                hint="check models[].task.layout (yolov8: [N, 4+C, A], yolov5: [N, A, 5+C])")
            sides = [candidates(ref, layout), candidates(eng, layout)]
            iou_threshold = option(spec, "iou_threshold", 0.45)
        agnostic = _flag(spec, "class_agnostic", False)
        ref_dets, eng_dets = (postprocess(*side, score_threshold=score_threshold, iou_threshold=iou_threshold,
                                          max_detections=max_detections, class_agnostic=agnostic)
                              for side in sides)
        return ref_dets, eng_dets

    def evaluate(self, reference_outputs: Sequence[SampleOutputs], engine_outputs: Sequence[SampleOutputs],
                 spec: TaskSpec, labels: Sequence[Any] | None = None) -> dict[str, float]:
        ref_dets, eng_dets = self.decode(reference_outputs, engine_outputs, spec)
        match_iou = option(spec, "match_iou", 0.5)
        matches = sum(match_count(r, e, match_iou) for r, e in zip(ref_dets, eng_dets))
        ref_total = sum(len(d.boxes) for d in ref_dets)
        eng_total = sum(len(d.boxes) for d in eng_dets)
        out = {"box_recall": matches / ref_total if ref_total else 1.0,
               "box_precision": matches / eng_total if eng_total else 1.0,
               "reference_boxes": float(ref_total), "engine_boxes": float(eng_total)}
        if labels is not None:
            truth = ground_truth(labels, len(ref_dets))
            engine_map = coco_map(eng_dets, truth)
            if engine_map is not None:
                reference_map = coco_map(ref_dets, truth)
                assert reference_map is not None
                out["map50"], out["map50_95"] = engine_map
                out["reference_map50"] = reference_map[0]
        return out


# --- matching and mAP ---------------------------------------------------------------------------------------


def match_count(reference: Detections, engine: Detections, iou: float) -> int:
    """One-to-one matches of same-class boxes with IoU >= ``iou``: pairs by IoU, highest first, each box once."""
    if not len(reference.boxes) or not len(engine.boxes):
        return 0
    overlap = box_iou(reference.boxes, engine.boxes)
    overlap[reference.classes[:, None] != engine.classes[None, :]] = -1.0
    rows, cols = np.nonzero(overlap >= iou)
    order = np.argsort(-overlap[rows, cols], kind="stable")
    used_ref: set[int] = set()
    used_eng: set[int] = set()
    for r, e in zip(rows[order].tolist(), cols[order].tolist()):
        if r not in used_ref and e not in used_eng:
            used_ref.add(r)
            used_eng.add(e)
    return len(used_ref)


def ground_truth(labels: Sequence[Any], rows: int) -> list[np.ndarray]:
    """``labels`` as one ``[G, 5]`` float64 array per row (x0, y0, x1, y1, class)."""
    if len(labels) != rows:
        raise GateError(f"task detection: {len(labels)} label entries for {rows} image rows",
                        hint="one entry per image row, in order: a list of (x0, y0, x1, y1, class_id) boxes")
    out = []
    for n, boxes in enumerate(labels):
        try:
            array = np.asarray(list(boxes), dtype=np.float64)
        except (TypeError, ValueError):  # not a sequence, not numbers, ragged
            array = np.zeros((1, 0))
        if array.size and (array.ndim != 2 or array.shape[1] != 5):
            raise GateError(f"task detection: the labels of image row {n} are not (x0, y0, x1, y1, class_id) "
                            f"boxes: {str(boxes)[:80]}")
        out.append(array.reshape(-1, 5))
    return out


def _quiet(*_: Any, **__: Any) -> None:
    pass


def coco_map(detections: Sequence[Detections], truth: Sequence[np.ndarray]) -> tuple[float, float] | None:
    """(mAP@0.5, mAP@0.5:0.95) of ``detections`` against ``truth`` (``[G, 5]`` per image), by faster-coco-eval;
    None when the ground truth holds no box."""
    try:
        from faster_coco_eval import COCO, COCOeval_faster
    except ImportError as e:
        raise GateError("task detection: mAP against labels needs faster-coco-eval, which is not installed",
                        hint="pip install 'trt-orchestrator[detection]'") from e
    if not sum(len(t) for t in truth):
        return None
    # COCO ids start at 1 (an annotation id 0 reads as "unmatched" in its evaluator): image n -> n + 1, class c -> c + 1
    classes = sorted({int(c) for t in truth for c in t[:, 4]} | {int(c) for d in detections for c in d.classes})
    annotations: list[dict[str, Any]] = []
    for n, t in enumerate(truth):
        for x0, y0, x1, y1, c in t.tolist():
            annotations.append({"id": len(annotations) + 1, "image_id": n + 1, "category_id": int(c) + 1,
                                "iscrowd": 0, "bbox": [x0, y0, x1 - x0, y1 - y0], "area": (x1 - x0) * (y1 - y0)})
    gt = COCO({"images": [{"id": n + 1} for n in range(len(truth))], "annotations": annotations,
               "categories": [{"id": c + 1, "name": str(c)} for c in classes]}, print_function=_quiet)
    results = [{"image_id": n + 1, "category_id": int(c) + 1, "score": float(s),
                "bbox": [float(x0), float(y0), float(x1 - x0), float(y1 - y0)]}
               for n, d in enumerate(detections) for (x0, y0, x1, y1), s, c in zip(d.boxes, d.scores, d.classes)]
    evaluator = COCOeval_faster(gt, gt.loadRes(results), iouType="bbox", print_function=_quiet)
    evaluator.evaluate()
    evaluator.accumulate()
    evaluator.summarize()
    return float(evaluator.stats[1]), float(evaluator.stats[0])


# --- labels -------------------------------------------------------------------------------------------------


def load_labels(path: str | Path, image_names: Sequence[str], sizes: Mapping[str, tuple[int, int]] | None = None,
                *, contiguous: bool = True) -> list[list[LabelBox]]:
    """Ground-truth boxes of each of ``image_names``, in that order, as ``(x0, y0, x1, y1, class)`` in pixels.

    ``path`` is either
    - a COCO instances JSON (``*.json``): images matched by ``file_name`` (or its last path part) to the name (or
      its last path part); ``bbox`` x, y, w, h -> x0, y0, x1, y1; ``iscrowd`` annotations are skipped. Classes:
      ``contiguous`` (default) maps ``category_id`` to its 0-based index among the sorted ids of ``categories``
      (COCO's 80 ids 1..90 -> Ultralytics' 0..79); ``contiguous=False`` keeps ``category_id`` as it is. An image
      the JSON does not list is an error.
    - a YOLO label folder: ``<stem>.txt`` per image, one ``class cx cy w h`` line per box, normalised to the image
      (a polygon line ``class x1 y1 x2 y2 ...`` gives its bounding box); ``sizes`` maps each image name to its
      (width, height) in pixels. A missing ``.txt`` is an image without boxes (Ultralytics' convention).

    Malformed input raises ``GateError`` naming the file and the line (YOLO) or annotation (COCO).
    """
    root = Path(path)
    if root.is_dir():
        if sizes is None:
            raise GateError(f"labels {root}: YOLO labels are normalised; their image sizes are needed",
                            hint="pass sizes: image name -> (width, height)")
        return [_yolo_file(root / f"{Path(name).stem}.txt", name, sizes) for name in image_names]
    if root.suffix.lower() == ".json" and root.is_file():
        return _coco_json(root, image_names, contiguous)
    raise GateError(f"labels {root}: neither a COCO instances .json file nor a folder of YOLO .txt labels")


def _yolo_file(file: Path, name: str, sizes: Mapping[str, tuple[int, int]]) -> list[LabelBox]:
    if not file.is_file():
        return []
    if name not in sizes:
        raise GateError(f"labels {file}: no image size for {name!r}", hint="pass sizes[name] = (width, height)")
    width, height = (float(v) for v in sizes[name])
    boxes: list[LabelBox] = []
    for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        try:
            cls = int(fields[0])
            values = [float(v) for v in fields[1:]]
        except ValueError:
            cls, values = -1, []
        if cls < 0 or not (len(values) == 4 or (len(values) >= 6 and len(values) % 2 == 0)):
            raise GateError(f"labels {file}:{number}: {line.strip()!r} is not 'class cx cy w h' (normalised) "
                            "nor 'class x1 y1 x2 y2 ...' (a polygon)",
                            hint="YOLO detection labels: a class index and four numbers in [0, 1] per line")
        if len(values) == 4:
            cx, cy, w, h = values
            x0, y0, x1, y1 = cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2
        else:
            xs, ys = values[0::2], values[1::2]
            x0, y0, x1, y1 = min(xs), min(ys), max(xs), max(ys)
        boxes.append((x0 * width, y0 * height, x1 * width, y1 * height, cls))
    return boxes


def _coco_json(file: Path, image_names: Sequence[str], contiguous: bool) -> list[list[LabelBox]]:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise GateError(f"labels {file}:{e.lineno}: not valid JSON ({e.msg})") from e
    except OSError as e:
        raise GateError(f"labels {file}: cannot read it: {e.strerror or e}") from e
    if not isinstance(data, dict) or not isinstance(data.get("images"), list) \
            or not isinstance(data.get("annotations"), list):
        raise GateError(f"labels {file}: not a COCO instances file (needs 'images' and 'annotations' lists)")
    ids: dict[str, Any] = {}
    for image in data["images"]:
        if not isinstance(image, dict) or "file_name" not in image or "id" not in image:
            raise GateError(f"labels {file}: an image entry without file_name and id: {str(image)[:80]}")
        ids.setdefault(str(image["file_name"]), image["id"])
        ids.setdefault(Path(str(image["file_name"])).name, image["id"])
    category_ids = sorted({int(c["id"]) for c in data.get("categories") or []}
                          or {int(a.get("category_id", -1)) for a in data["annotations"] if isinstance(a, dict)})
    index = {c: n for n, c in enumerate(category_ids)}
    by_image: dict[Any, list[LabelBox]] = {}
    for number, ann in enumerate(data["annotations"]):
        where = f"labels {file}: annotation {number}" + (f" (id {ann['id']})" if isinstance(ann, dict)
                                                           and "id" in ann else "")
        if not isinstance(ann, dict) or "image_id" not in ann or "category_id" not in ann:
            raise GateError(f"{where}: needs image_id, category_id and bbox")
        if ann.get("iscrowd", 0):
            continue
        bbox = ann.get("bbox")
        if not isinstance(bbox, list) or len(bbox) != 4 or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in bbox):
            raise GateError(f"{where}: bbox {bbox!r} is not [x, y, width, height]")
        category = int(ann["category_id"])
        if contiguous and category not in index:
            raise GateError(f"{where}: category_id {category} is not among the file's categories")
        x, y, w, h = (float(v) for v in bbox)
        by_image.setdefault(ann["image_id"], []).append((x, y, x + w, y + h,
                                                         index[category] if contiguous else category))
    out = []
    for name in image_names:
        image_id = ids.get(name, ids.get(Path(name).name))
        if image_id is None:
            raise GateError(f"labels {file}: no image {name!r} among its {len(data['images'])} images",
                            hint="the labels must list every image of the data set (file_name)")
        out.append(by_image.get(image_id, []))
    return out


def labels_in_input(path: str, images: Sequence[tuple[str, tuple[int, int]]],
                    input_hw: tuple[int, int]) -> list[list[LabelBox]]:
    """``load_labels`` for the dataset's images, scaled from each image's pixels to the model input's (the gate's
    preprocessing resizes without letterboxing, so x scales by input width / image width, y likewise)."""
    names = [name for name, _ in images]
    sizes = {name: size for name, size in images}
    height, width = input_hw
    out = []
    for (_, (w, h)), boxes in zip(images, load_labels(path, names, sizes)):
        sx, sy = width / float(w), height / float(h)
        out.append([(x0 * sx, y0 * sy, x1 * sx, y1 * sy, cls) for x0, y0, x1, y1, cls in boxes])
    return out


detection = Detection()
