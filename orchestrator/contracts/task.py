"""The task-metric port: post-process the reference's and the engine's outputs of the same samples, compare what
a user would judge (top-1 class, decoded text, detected boxes), return named numbers.

A task plugin is an object registered under the entry-point group ``trt_orchestrator.tasks`` with:

- ``name``: the ``kind`` a manifest's ``models[].task`` names (``classification``, ``ctc``, ``text-detection``)
- ``metrics``: the names of the values ``evaluate`` returns; a gate threshold ``min_<metric>`` / ``max_<metric>``
  (``gate.parity.task``) applies to the metric of that name, and naming one the plugin does not report is an error
- ``evaluate(reference_outputs, engine_outputs, spec, labels=None) -> dict[str, float]``: one output dict per
  sample on each side (output name -> array, batch first), in the same order; ``spec`` is the model's task
  declaration (``spec.output``: the output to judge, None: the model's only output; ``spec.options``: the kind's
  own decode settings, paths already absolute); ``labels``: the expected answer of each row of every sample, in
  order, when the data set is labelled (class indices, strings) — metrics against labels are reported then too.

- ``read_labels(path, images, input_hw) -> list`` (optional): a labels file (``gate.parity.data.labels``) ->
  each image's expected answer, in order, in the model input's coordinates; ``images`` are the dataset's chosen
  images as (file name, (width, height)) and ``input_hw`` the model input's (height, width). A plugin without it
  reads no labels (setting them is then a gate error).

``evaluate`` is pure numpy: no runtime, no file but the ones its options name (a charset). It raises
``orchestrator.errors.GateError`` naming the output and what is wrong with it (shape, class count) when the outputs
do not fit the task.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from orchestrator.core.model import TaskSpec

if TYPE_CHECKING:  # annotations only: numpy costs ~60 ms at start-up, and `plan` never evaluates a task
    import numpy as np

# One sample's outputs: output name -> array (batch first).
SampleOutputs = Mapping[str, "np.ndarray"]


@runtime_checkable
class TaskMetric(Protocol):
    name: str
    metrics: tuple[str, ...]

    def evaluate(self, reference_outputs: Sequence[SampleOutputs], engine_outputs: Sequence[SampleOutputs],
                 spec: TaskSpec, labels: Sequence[Any] | None = None) -> dict[str, float]: ...


def threshold_metric(threshold: str) -> tuple[str, str] | None:
    """``min_box_recall`` -> (``min``, ``box_recall``); None when the name is not ``min_``/``max_`` + a metric."""
    bound, _, metric = threshold.partition("_")
    if bound not in ("min", "max") or not metric:
        return None
    return bound, metric


__all__ = ["SampleOutputs", "TaskMetric", "TaskSpec", "threshold_metric"]
