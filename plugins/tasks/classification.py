"""``classification``: top-1 / top-5 of an ``[N, C]`` output against the reference's (and accuracy against labels).

Metrics: ``top1_disagreement`` (rows whose argmax differs from the reference's), ``top1_agreement``,
``top5_agreement`` (mean ``|top5(engine) ∩ top5(reference)| / 5``, k capped at C, as the tensor gate's top-k);
with labels (one class index per row): ``accuracy`` (engine) and ``reference_accuracy``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from orchestrator.contracts.task import SampleOutputs
from orchestrator.core.model import TaskSpec
from orchestrator.errors import GateError
from trt_orchestrator_plugins.tasks._labels import read_answers
from trt_orchestrator_plugins.tasks._outputs import stacked


def _topk(rows: np.ndarray, k: int) -> np.ndarray:
    # negate so the largest come first; stable: ties keep the lower index on both sides
    return np.argsort(-rows, axis=-1, kind="stable")[:, :k]


class Classification:
    name = "classification"
    metrics = ("top1_disagreement", "top1_agreement", "top5_agreement", "accuracy", "reference_accuracy")

    def evaluate(self, reference_outputs: Sequence[SampleOutputs], engine_outputs: Sequence[SampleOutputs],
                 spec: TaskSpec, labels: Sequence[Any] | None = None) -> dict[str, float]:
        name, ref, eng = stacked(spec, reference_outputs, engine_outputs, 2, "[N, C] class scores")
        k = min(5, ref.shape[1])
        ref_top, eng_top = _topk(ref, k), _topk(eng, k)
        same = ref_top[:, 0] == eng_top[:, 0]
        hits = [len(set(a.tolist()) & set(b.tolist())) for a, b in zip(ref_top, eng_top)]
        out = {"top1_disagreement": float(np.mean(~same)) if len(ref) else 0.0,
               "top1_agreement": float(np.mean(same)) if len(ref) else 1.0,
               "top5_agreement": float(np.mean(hits) / k) if hits else 1.0}
        if labels is not None:
            truth = np.asarray([int(x) for x in labels])
            if truth.shape != (len(ref),):
                raise GateError(f"task classification: {len(truth)} labels for {len(ref)} rows of output {name!r}")
            out["accuracy"] = float(np.mean(eng_top[:, 0] == truth))
            out["reference_accuracy"] = float(np.mean(ref_top[:, 0] == truth))
        return out


    def read_labels(self, path: str, images: Sequence[tuple[str, tuple[int, int]]],
                    input_hw: tuple[int, int]) -> list[int]:
        """A class index per image (``_labels``: a JSON object or name<TAB>index lines)."""
        out = []
        for (name, _), answer in zip(images, read_answers(path, images)):
            try:
                out.append(int(str(answer).strip()))
            except ValueError:
                raise GateError(f"labels {path}: {name}: the class {answer!r} is not an index",
                                hint="classification labels are class indices (0-based)") from None
        return out


classification = Classification()
