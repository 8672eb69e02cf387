"""``text-detection``: a text probability map ``[N, 1, H, W]`` (PP-OCR's DB detector) judged as a mask and as boxes.

Post-processing, as PP-OCR's ``DBPostProcess`` up to its box step: binarize at ``threshold`` (default 0.3), label
8-connected components, keep those whose box is at least ``min_box_side`` pixels (default 3) on both sides, and
take each one's axis-aligned box (PP-OCR fits rotated rectangles and unclips them; an axis-aligned box moves
exactly when the component does, which is what a parity gate asks).

Metrics: ``mask_iou`` (the binarized masks' intersection over union, over every row; 1 when both are empty),
``box_recall`` (reference boxes some engine box of the same image overlaps with IoU >= ``box_iou``, default 0.5;
1 when the reference has none), ``box_precision`` (the same, engine boxes against reference ones), and the box
counts ``reference_boxes`` / ``engine_boxes``.

Connected components are found on row runs with a union-find (no scipy/OpenCV): a 640x640 map of text has a few
thousand runs, labelled in milliseconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from orchestrator.contracts.task import SampleOutputs
from orchestrator.core.model import TaskSpec
from orchestrator.errors import GateError
from trt_orchestrator_plugins.tasks._outputs import option, stacked


def _runs(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Horizontal runs of True: (row, start, end) arrays, end exclusive, ordered by row then start."""
    padded = np.zeros((mask.shape[0], mask.shape[1] + 2), dtype=np.int8)
    padded[:, 1:-1] = mask
    edges = np.diff(padded, axis=1)
    rows, starts = np.nonzero(edges == 1)
    _, ends = np.nonzero(edges == -1)
    return rows, starts, ends


def component_boxes(mask: np.ndarray, min_side: int = 1) -> np.ndarray:
    """8-connected components of a 2-D boolean mask -> their boxes ``[K, 4]`` as (y0, x0, y1, x1), ends
    exclusive; components whose box is under ``min_side`` pixels high or wide are dropped."""
    rows, starts, ends = _runs(np.asarray(mask, dtype=bool))
    parent = list(range(len(rows)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    # runs of each row: [first, last) indices into the run arrays
    bounds = np.searchsorted(rows, np.arange(mask.shape[0] + 1))
    for y in range(1, mask.shape[0]):
        a, a_end = int(bounds[y - 1]), int(bounds[y])
        b, b_end = a_end, int(bounds[y + 1])
        while a < a_end and b < b_end:
            # 8-connected: the runs overlap or touch diagonally
            if starts[a] <= ends[b] and starts[b] <= ends[a]:
                ra, rb = find(a), find(b)
                if ra != rb:
                    parent[rb] = ra
            if ends[a] < ends[b]:
                a += 1
            else:
                b += 1
    if not len(rows):
        return np.zeros((0, 4), dtype=np.int64)
    roots = np.array([find(i) for i in range(len(rows))])
    _, label = np.unique(roots, return_inverse=True)
    count = int(label.max()) + 1
    boxes = np.empty((count, 4), dtype=np.int64)
    boxes[:, 0] = np.iinfo(np.int64).max
    boxes[:, 1] = np.iinfo(np.int64).max
    boxes[:, 2] = -1
    boxes[:, 3] = -1
    np.minimum.at(boxes[:, 0], label, rows)
    np.minimum.at(boxes[:, 1], label, starts)
    np.maximum.at(boxes[:, 2], label, rows + 1)
    np.maximum.at(boxes[:, 3], label, ends)
    keep = ((boxes[:, 2] - boxes[:, 0]) >= min_side) & ((boxes[:, 3] - boxes[:, 1]) >= min_side)
    return boxes[keep]


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of ``a`` ``[K, 4]`` with every box of ``b`` ``[M, 4]`` -> ``[K, M]``."""
    a = a.astype(np.float64)[:, None, :]
    b = b.astype(np.float64)[None, :, :]
    h = np.clip(np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0]), 0, None)
    w = np.clip(np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1]), 0, None)
    inter = h * w
    area = lambda x: (x[..., 2] - x[..., 0]) * (x[..., 3] - x[..., 1])  # noqa: E731
    union = area(a) + area(b) - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def matched(found: np.ndarray, against: np.ndarray, iou: float) -> int:
    """How many boxes of ``found`` some box of ``against`` overlaps with IoU >= ``iou``."""
    if not len(found) or not len(against):
        return 0
    return int(np.sum(box_iou(found, against).max(axis=1) >= iou))


class TextDetection:
    name = "text-detection"
    metrics = ("mask_iou", "box_recall", "box_precision", "reference_boxes", "engine_boxes")

    def evaluate(self, reference_outputs: Sequence[SampleOutputs], engine_outputs: Sequence[SampleOutputs],
                 spec: TaskSpec, labels: Sequence[Any] | None = None) -> dict[str, float]:
        name, ref, eng = stacked(spec, reference_outputs, engine_outputs, 4, "[N, 1, H, W] probability map")
        if ref.shape[1] != 1:
            raise GateError(f"task text-detection: output {name!r} has {ref.shape[1]} channels; the task needs "
                            "one probability map [N, 1, H, W]")
        threshold = option(spec, "threshold", 0.3)
        iou = option(spec, "box_iou", 0.5)
        min_side = int(option(spec, "min_box_side", 3))
        ref_mask, eng_mask = ref[:, 0] > threshold, eng[:, 0] > threshold
        union = int(np.sum(ref_mask | eng_mask))
        mask_iou = float(np.sum(ref_mask & eng_mask)) / union if union else 1.0
        ref_total = eng_total = recalled = precise = 0
        for r, e in zip(ref_mask, eng_mask):
            ref_boxes, eng_boxes = component_boxes(r, min_side), component_boxes(e, min_side)
            ref_total += len(ref_boxes)
            eng_total += len(eng_boxes)
            recalled += matched(ref_boxes, eng_boxes, iou)
            precise += matched(eng_boxes, ref_boxes, iou)
        return {"mask_iou": mask_iou, "box_recall": recalled / ref_total if ref_total else 1.0,
                "box_precision": precise / eng_total if eng_total else 1.0,
                "reference_boxes": float(ref_total), "engine_boxes": float(eng_total)}


text_detection = TextDetection()
