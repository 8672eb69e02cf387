"""The gates' edge: drive injected sessions, hand the arrays and timings to the pure metrics.

Sessions are the ``orchestrator.contracts.runtime.Session`` protocol; the caller loads them (engine: the target's
runtime plugin; reference: onnxruntime CPU fp32 on the original ONNX) and closes them.

* A reference session that fails to run is a :class:`~orchestrator.errors.GateError` (the gate cannot judge).
* An engine session that fails on an input inside its profile is a *failed case* — the engine is broken there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from orchestrator.contracts.runtime import Session
from orchestrator.core.model import BenchmarkGate, Model
from orchestrator.errors import GateError
from orchestrator.gates.inputs import InputCase
from orchestrator.gates.metrics import compare_output
from orchestrator.gates.stats import latency_stats
from orchestrator.gates.tolerances import resolve_tolerance
from orchestrator.gates.verdict import BenchmarkVerdict, CaseVerdict, OutputVerdict, ParityVerdict, ShapeBenchmark


def run_parity(model: Model, engine_session: Session, reference_session: Session, inputs: Sequence[InputCase],
               precision: str) -> ParityVerdict:
    """Run every case through both sessions and judge each reference output with its resolved tolerance."""
    cases = [_parity_case(model, engine_session, reference_session, case, precision) for case in inputs]
    return ParityVerdict(precision=precision, cases=tuple(cases))


def _parity_case(model: Model, engine: Session, reference: Session, case: InputCase,
                 precision: str) -> CaseVerdict:
    ref_outputs: list[dict[str, np.ndarray]] = []
    eng_outputs: list[dict[str, np.ndarray]] = []
    reasons: list[str] = []
    for n, sample in enumerate(case.samples):
        try:
            ref_outputs.append(dict(reference.run(sample)))
        except Exception as e:  # any runtime's failure: the reference cannot run these inputs
            raise GateError(f"{model.name}: reference run failed on case {case.label} sample {n}: {e}",
                            hint="the inputs do not fit the original ONNX model; check profiles/dataset") from e
        try:
            eng_outputs.append(dict(engine.run(sample)))
        except Exception as e:  # the engine is judged: failing inside its profile fails the gate
            reasons.append(f"engine run failed on sample {n}: {type(e).__name__}: {e}")
            return CaseVerdict(case.label, case.shapes, len(case.samples), (), tuple(reasons))
    outputs: list[OutputVerdict] = []
    for name in reference.output_names:
        missing = [i for i, out in enumerate(eng_outputs) if name not in out]
        if missing:
            reasons.append(f"engine did not return output {name!r}")
            continue
        tol = resolve_tolerance(model.gate.parity, precision, name, tf32=bool(getattr(engine, "tf32", False)))
        pairs = ((eng[name], ref[name]) for eng, ref in zip(eng_outputs, ref_outputs))
        outputs.append(compare_output(name, pairs, tol, classifier_k=model.classifier_outputs.get(name)))
    return CaseVerdict(case.label, case.shapes, len(case.samples), tuple(outputs), tuple(reasons))


def _batch_of(inputs: Mapping[str, np.ndarray]) -> int:
    first = next(iter(inputs.values()), None)
    return int(first.shape[0]) if first is not None and first.ndim else 1


def _baseline_p50(baseline: BenchmarkVerdict | Mapping | None) -> dict[str, tuple[float, dict]]:
    """label -> (gated p50 ms, input shapes) of a baseline verdict (object or its JSON)."""
    if baseline is None:
        return {}
    verdict = baseline if isinstance(baseline, BenchmarkVerdict) else BenchmarkVerdict.from_json(dict(baseline))
    return {s.label: (s.gated.p50_ms, s.input_shapes) for s in verdict.shapes}


def run_benchmark(session: Session, inputs_by_shape: Mapping[str, Mapping[str, np.ndarray]],
                  settings: BenchmarkGate, baseline: BenchmarkVerdict | Mapping | None = None) -> BenchmarkVerdict:
    """Time each shape (``opt``, ``min``, ``max`` as given) and apply the thresholds.

    ``inputs_by_shape`` maps a label to one sample; its batch is the leading dim of the first input.
    Thresholds apply to the gated series (end-to-end when the runtime measured it, else compute):
    ``max_p95_ms`` and ``min_throughput`` (samples/s) to the ``opt`` shape (the first shape if there is no
    ``opt``), ``max_regression_pct`` to the p50 of every shape the baseline also has at the same input shapes.
    """
    if not inputs_by_shape:
        raise GateError("benchmark gate has no shapes to time", hint="set gate.benchmark.shapes")
    base = _baseline_p50(baseline)
    shapes: list[ShapeBenchmark] = []
    reasons: list[str] = []
    notes: list[str] = []
    for label, feeds in inputs_by_shape.items():
        try:
            timing = session.benchmark(feeds, warmup=settings.warmup, iterations=settings.iterations,
                                       time_budget_s=settings.time_budget_s)
        except Exception as e:
            reasons.append(f"{label}: engine failed while benchmarking: {type(e).__name__}: {e}")
            continue
        if not timing.compute_ms:
            raise GateError(f"{label}: the runtime returned no timed iterations",
                            hint="raise gate.benchmark.iterations or time_budget_s")
        batch = _batch_of(feeds)
        compute = latency_stats(timing.compute_ms, batch=batch)
        e2e = latency_stats(timing.end_to_end_ms, batch=batch) if timing.end_to_end_ms else None
        input_shapes = {k: tuple(int(d) for d in np.shape(v)) for k, v in feeds.items()}
        regression = None
        if label in base:
            base_p50, base_shapes = base[label]
            if {k: tuple(v) for k, v in base_shapes.items()} != input_shapes:
                notes.append(f"{label}: baseline was timed at other input shapes {base_shapes}; "
                             "regression not checked")
            elif base_p50 > 0:
                regression = ((e2e or compute).p50_ms - base_p50) / base_p50 * 100.0
        elif base:
            notes.append(f"{label}: baseline has no {label!r} shape; regression not checked")
        shapes.append(ShapeBenchmark(
            label=label, input_shapes=input_shapes, batch=batch, clock=timing.clock, compute=compute,
            end_to_end=e2e, compute_samples_ms=tuple(timing.compute_ms),
            end_to_end_samples_ms=tuple(timing.end_to_end_ms), device_memory_bytes=timing.device_memory_bytes,
            regression_pct=regression, extra=dict(timing.extra)))

    gated_shape = next((s for s in shapes if s.label == "opt"), shapes[0] if shapes else None)
    if gated_shape is not None:
        series = gated_shape.gated
        which = "end-to-end" if gated_shape.end_to_end else "compute"
        if settings.max_p95_ms is not None and series.p95_ms > settings.max_p95_ms:
            reasons.append(f"{gated_shape.label}: {which} p95 {series.p95_ms:.3f} ms > max_p95_ms "
                           f"{settings.max_p95_ms:g} ms")
        if settings.min_throughput is not None and series.throughput_per_s < settings.min_throughput:
            reasons.append(f"{gated_shape.label}: throughput {series.throughput_per_s:.1f}/s < min_throughput "
                           f"{settings.min_throughput:g}/s (batch {series.batch} / mean {series.mean_ms:.3f} ms)")
    if settings.max_regression_pct is not None:
        if baseline is None:
            notes.append("no baseline engine published for this address; regression not checked")
        for s in shapes:
            if s.regression_pct is not None and s.regression_pct > settings.max_regression_pct:
                reasons.append(f"{s.label}: p50 {s.gated.p50_ms:.3f} ms is {s.regression_pct:.1f}% slower than the "
                               f"baseline {base[s.label][0]:.3f} ms (allowed {settings.max_regression_pct:g}%)")
    thresholds = {"max_p95_ms": settings.max_p95_ms, "min_throughput": settings.min_throughput,
                  "max_regression_pct": settings.max_regression_pct, "gated_shape":
                  gated_shape.label if gated_shape else None,
                  "gated_series": ("end_to_end" if gated_shape and gated_shape.end_to_end else "compute"),
                  "percentile_method": "linear"}
    baseline_json = {"p50_ms": {k: v[0] for k, v in base.items()}} if base else None
    return BenchmarkVerdict(tuple(shapes), tuple(reasons), thresholds, baseline_json, tuple(notes))
