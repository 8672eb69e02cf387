"""Task metrics in the parity gate (pure): check a task plugin's thresholds, evaluate it on one case's outputs,
judge the values against ``gate.parity.task`` (``min_<metric>`` / ``max_<metric>``).

The plugin is injected (``orchestrator.run.gate`` loads it by the model's ``task.kind``); the reference and the
engine outputs are the ones the tensor comparison already computed, so a task metric costs no extra inference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from orchestrator.contracts.task import TaskMetric, threshold_metric
from orchestrator.core.model import Model, TaskSpec
from orchestrator.errors import GateError, OrchestratorError
from orchestrator.gates.verdict import TaskVerdict


def check_task_settings(model: Model, task: TaskMetric | None, thresholds: Mapping[str, float]) -> None:
    """Before any inference: a declared task has its plugin, and every threshold names a metric it reports."""
    spec = model.task
    if spec is None:
        if thresholds:
            raise GateError(f"{model.name}: gate.parity.task sets {', '.join(sorted(thresholds))} but the model "
                            "declares no task", hint="add models[].task: {kind: ..., output: ...}")
        return
    if task is None:
        raise GateError(f"{model.name}: task {spec.kind!r} is declared but no task plugin was given to the gate")
    for name in thresholds:
        parsed = threshold_metric(name)
        if parsed is None or parsed[1] not in task.metrics:
            raise GateError(f"{model.name}: gate.parity.task.{name} names no metric of task {spec.kind!r}",
                            hint=f"thresholds are min_<metric> / max_<metric> of: {', '.join(task.metrics)}")


def judge(spec: TaskSpec, metrics: Mapping[str, float], thresholds: Mapping[str, float]) -> TaskVerdict:
    """Each threshold against its metric: a violated one is a reason naming the metric, value and bound; NaN fails."""
    reasons: list[str] = []
    notes: list[str] = []
    for name, bound in sorted(thresholds.items()):
        side, metric = threshold_metric(name) or ("min", name)  # check_task_settings refused other names
        if metric not in metrics:
            notes.append(f"{name}: {metric} was not computed (it needs labels); not checked")
            continue
        value = float(metrics[metric])
        ok = value >= bound if side == "min" else value <= bound  # NaN compares False: fails
        if not ok:
            relation = "<" if side == "min" else ">"
            reasons.append(f"{metric} {value:.4g} {relation} {name} {bound:g}")
    return TaskVerdict(kind=spec.kind, output=spec.output, metrics=dict(metrics), thresholds=dict(thresholds),
                       reasons=tuple(reasons), notes=tuple(notes))


def evaluate_task(model: Model, task: TaskMetric, reference: Sequence[Mapping[str, np.ndarray]],
                  engine: Sequence[Mapping[str, np.ndarray]], thresholds: Mapping[str, float],
                  case: str, labels: Sequence[Any] | None = None) -> TaskVerdict:
    """The plugin's metrics on one case (``labels``: each row's expected answer, when the dataset is labelled),
    judged against the thresholds."""
    spec = model.task
    assert spec is not None
    try:
        metrics = task.evaluate(reference, engine, spec, labels) if labels is not None else \
            task.evaluate(reference, engine, spec)
    except OrchestratorError:
        raise
    except Exception as e:  # a plugin's own failure: name it and the case, the gate cannot judge
        raise GateError(f"{model.name}: task {spec.kind!r} failed on case {case}: {type(e).__name__}: {e}",
                        hint="a bug in the task plugin, or outputs it does not expect") from e
    return judge(spec, {k: float(v) for k, v in metrics.items()}, thresholds)
