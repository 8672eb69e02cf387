"""What every task plugin does first: pick the judged output of each sample and stack the samples' batches."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from orchestrator.contracts.task import SampleOutputs
from orchestrator.core.model import TaskSpec
from orchestrator.errors import GateError


def output_name(spec: TaskSpec, sample: SampleOutputs) -> str:
    """``spec.output``, or the only output there is."""
    if spec.output is not None:
        if spec.output not in sample:
            raise GateError(f"task {spec.kind}: the model has no output {spec.output!r} "
                            f"(outputs: {', '.join(sorted(sample)) or 'none'})",
                            hint="set models[].task.output to one of them")
        return spec.output
    if len(sample) != 1:
        raise GateError(f"task {spec.kind}: the model has {len(sample)} outputs "
                        f"({', '.join(sorted(sample))}); which one does the task read?",
                        hint="set models[].task.output")
    return next(iter(sample))


def stacked(spec: TaskSpec, reference: Sequence[SampleOutputs], engine: Sequence[SampleOutputs],
            ndim: int, layout: str) -> tuple[str, np.ndarray, np.ndarray]:
    """(output name, reference rows, engine rows): every sample's batch concatenated along axis 0, float64.
    ``ndim``/``layout`` (``[N, C]``): what the task needs the output to be."""
    if len(reference) != len(engine):
        raise GateError(f"task {spec.kind}: {len(reference)} reference samples but {len(engine)} engine samples")
    if not reference:
        raise GateError(f"task {spec.kind}: no samples to judge")
    name = output_name(spec, reference[0])
    refs, engs = [], []
    for n, (ref, eng) in enumerate(zip(reference, engine)):
        r = np.asarray(ref[name], dtype=np.float64)
        e = np.asarray(eng[name], dtype=np.float64)
        if r.ndim != ndim:
            raise GateError(f"task {spec.kind}: output {name!r} has shape {list(r.shape)}; the task needs {layout}",
                            hint="set models[].task.output to the output of that layout")
        if r.shape != e.shape:
            raise GateError(f"task {spec.kind}: output {name!r} of sample {n}: engine shape {list(e.shape)} != "
                            f"reference shape {list(r.shape)}")
        refs.append(r)
        engs.append(e)
    try:
        return name, np.concatenate(refs), np.concatenate(engs)
    except ValueError:  # samples of different shapes (min/opt/max are separate cases; a data set may vary)
        raise GateError(f"task {spec.kind}: output {name!r} changes shape between samples "
                        f"({sorted({tuple(r.shape[1:]) for r in refs})})") from None


def option(spec: TaskSpec, key: str, default: float) -> float:
    value = spec.options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise GateError(f"task {spec.kind}: option {key!r} must be a number, got {value!r}")
    return float(value)
