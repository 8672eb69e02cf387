"""``segmentation``: a mask or class-map output judged as masks: overlap, boundaries, pixels.

Post-processing, by the output's shape:

- ``[N, H, W]`` or ``[N, 1, H, W]``: one mask / saliency map per row, probabilities, or logits with option
  ``sigmoid: true`` (default false); foreground where the probability is > ``threshold`` (default 0.5).
- ``[N, K, H, W]`` with K > 1: per-pixel class scores; the class map is the argmax over K (ties: the lower
  class). ``threshold`` and ``sigmoid`` do not apply.

Metrics against the reference run, over all rows together (pixel counts summed, not averaged per row):

- ``mask_iou``: intersection over union of the foreground masks, 1 when both are empty. Class maps: the mean over
  the classes present in either map of each class's IoU.
- ``boundary_f``: the boundary F-score. A mask's boundary is the mask minus its 3x3 erosion (the image edge
  extends the mask: a mask cut by the border has no boundary there); precision = engine boundary pixels within
  ``boundary_tolerance`` pixels (default 2, chessboard distance: a (2t+1)x(2t+1) square) of a reference boundary
  pixel / engine boundary pixels, recall the same the other way, F = 2PR / (P + R); 1 when neither has a
  boundary, 0 when only one has. Class maps: the mean over the classes present in either map of each class's F.
  Erosion and dilation are numpy shifts (no scipy/OpenCV).
- ``pixel_agreement``: the fraction of pixels whose mask value (class) is the same.

With labels (one ``[H, W]`` mask per row, in order; nonzero = foreground, or class indices for a class map):
``label_mask_iou`` of the engine (the same IoU as ``mask_iou``, against the label) and ``reference_label_mask_iou``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from orchestrator.contracts.task import SampleOutputs
from orchestrator.core.model import TaskSpec
from orchestrator.errors import GateError
from trt_orchestrator_plugins.tasks._outputs import option, output_name, stacked


def _flag(spec: TaskSpec, key: str, default: bool) -> bool:
    value = spec.options.get(key, default)
    if not isinstance(value, bool):
        raise GateError(f"task {spec.kind}: option {key!r} must be true or false, got {value!r}")
    return value


def _shifted(mask: np.ndarray, dy: int, dx: int, edge: bool) -> np.ndarray:
    """``mask`` ``[N, H, W]`` moved so that out[y, x] = mask[y + dy, x + dx]; outside the image: the nearest
    edge pixel (``edge``) or False."""
    h, w = mask.shape[1:]
    pad = max(abs(dy), abs(dx))
    padded = np.pad(mask, ((0, 0), (pad, pad), (pad, pad)), mode="edge" if edge else "constant")
    return padded[:, pad + dy:pad + dy + h, pad + dx:pad + dx + w]


def erode3(mask: np.ndarray) -> np.ndarray:
    """3x3 erosion of ``[N, H, W]`` booleans, the image edge extending the mask."""
    out = mask.copy()
    for dy in (-1, 0, 1):
        for dx in (-1, 0, 1):
            if dy or dx:
                out &= _shifted(mask, dy, dx, edge=True)
    return out


def boundary(mask: np.ndarray) -> np.ndarray:
    """The mask's boundary pixels: the mask minus its 3x3 erosion."""
    return mask & ~erode3(mask)


def dilate(mask: np.ndarray, radius: int) -> np.ndarray:
    """Dilation of ``[N, H, W]`` booleans by a (2r+1)x(2r+1) square, separably: rows, then columns."""
    rows = mask.copy()
    for s in range(1, radius + 1):
        rows |= _shifted(mask, 0, s, edge=False) | _shifted(mask, 0, -s, edge=False)
    out = rows.copy()
    for s in range(1, radius + 1):
        out |= _shifted(rows, s, 0, edge=False) | _shifted(rows, -s, 0, edge=False)
    return out


def iou(a: np.ndarray, b: np.ndarray) -> float:
    union = int(np.count_nonzero(a | b))
    return int(np.count_nonzero(a & b)) / union if union else 1.0


def boundary_f(reference: np.ndarray, engine: np.ndarray, tolerance: int) -> float:
    """Boundary F-score of two ``[N, H, W]`` boolean masks (see the module docstring)."""
    ref_edge, eng_edge = boundary(reference), boundary(engine)
    ref_count, eng_count = int(np.count_nonzero(ref_edge)), int(np.count_nonzero(eng_edge))
    if not ref_count and not eng_count:
        return 1.0
    if not ref_count or not eng_count:
        return 0.0
    precision = int(np.count_nonzero(eng_edge & dilate(ref_edge, tolerance))) / eng_count
    recall = int(np.count_nonzero(ref_edge & dilate(eng_edge, tolerance))) / ref_count
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def mean_class_iou(a: np.ndarray, b: np.ndarray) -> float:
    """Mean over the classes present in either class map of their IoU."""
    classes = np.union1d(np.unique(a), np.unique(b))
    return float(np.mean([iou(a == c, b == c) for c in classes])) if classes.size else 1.0


def mean_class_boundary_f(a: np.ndarray, b: np.ndarray, tolerance: int) -> float:
    classes = np.union1d(np.unique(a), np.unique(b))
    return float(np.mean([boundary_f(a == c, b == c, tolerance) for c in classes])) if classes.size else 1.0


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # no overflow for large |x|


class Segmentation:
    name = "segmentation"
    metrics = ("mask_iou", "boundary_f", "pixel_agreement", "label_mask_iou", "reference_label_mask_iou")

    def masks(self, reference_outputs: Sequence[SampleOutputs], engine_outputs: Sequence[SampleOutputs],
              spec: TaskSpec) -> tuple[str, np.ndarray, np.ndarray, bool]:
        """(output name, reference ``[N, H, W]``, engine ``[N, H, W]``, class maps?): boolean masks, or int64 class
        maps when the output has K > 1 channels."""
        if not reference_outputs:
            raise GateError(f"task {spec.kind}: no samples to judge")
        first = reference_outputs[0][output_name(spec, reference_outputs[0])]
        ndim = 3 if np.ndim(first) == 3 else 4
        name, ref, eng = stacked(spec, reference_outputs, engine_outputs, ndim,
                                 "[N, H, W], [N, 1, H, W] (a mask) or [N, K, H, W] (class scores)")
        if ndim == 4 and ref.shape[1] > 1:
            return name, np.argmax(ref, axis=1), np.argmax(eng, axis=1), True
        if ndim == 4:
            ref, eng = ref[:, 0], eng[:, 0]
        if _flag(spec, "sigmoid", False):
            ref, eng = _sigmoid(ref), _sigmoid(eng)
        threshold = option(spec, "threshold", 0.5)
        return name, ref > threshold, eng > threshold, False

    def evaluate(self, reference_outputs: Sequence[SampleOutputs], engine_outputs: Sequence[SampleOutputs],
                 spec: TaskSpec, labels: Sequence[Any] | None = None) -> dict[str, float]:
        name, ref, eng, classes = self.masks(reference_outputs, engine_outputs, spec)
        tolerance = option(spec, "boundary_tolerance", 2)
        if tolerance < 0 or tolerance != int(tolerance):
            raise GateError(f"task segmentation: option 'boundary_tolerance' is {tolerance:g}; it must be a whole "
                            "number of pixels >= 0")
        overlap = mean_class_iou if classes else iou
        out = {"mask_iou": float(overlap(ref, eng)),
               "boundary_f": (mean_class_boundary_f(ref, eng, int(tolerance)) if classes
                              else boundary_f(ref, eng, int(tolerance))),
               "pixel_agreement": float(np.mean(ref == eng)) if ref.size else 1.0}
        if labels is not None:
            if len(labels) != len(ref):
                raise GateError(f"task segmentation: {len(labels)} label masks for {len(ref)} rows of output {name!r}")
            truth = []
            for n, label in enumerate(labels):
                mask = np.asarray(label)
                if mask.shape != ref.shape[1:]:
                    raise GateError(f"task segmentation: the label mask of row {n} has shape {list(mask.shape)}; "
                                    f"output {name!r} masks are {list(ref.shape[1:])} [H, W]",
                                    hint="labels: one [H, W] mask per row, at the output's resolution")
                truth.append(mask.astype(np.int64) if classes else mask != 0)
            stacked_truth = np.stack(truth) if truth else np.zeros_like(ref)
            out["label_mask_iou"] = float(overlap(stacked_truth, eng))
            out["reference_label_mask_iou"] = float(overlap(stacked_truth, ref))
        return out


segmentation = Segmentation()
