"""What refittability costs (``targets[].weights: refittable``, docs/refit.md).

TensorRT may pick other (slower) tactics for a refittable engine, since a refittable weight cannot be folded or
reformatted at build time (NVIDIA/TensorRT#2936, "turning on refit increase the inferencing time of trt engine":
"That's expected to a refittable engine slower than a non-refittable engine"), and TensorRT 11.3
notes a REFIT case that drops a GEMM bias where REFIT_IDENTICAL does not ("Refitting an Engine", 11.3.0). The
benchmark gate of a refittable cell therefore times it against the published ``embedded`` engine of the same cell
(same address, so the same model, precision, profile set and target) timed on the same GPU model, at the gated shape
and input shapes and on the same series: ``cost_pct`` is the refittable p50 over the embedded one, and
``gate.benchmark.max_refit_cost_pct`` bounds it. Without an embedded engine published on that GPU model the cost is
not measured, and the report says so. A ``stripped`` engine runs with the very weights it was built with, put back at
deployment: it runs as built, and the report says that too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _p50(verdict: Mapping[str, Any] | None, label: str, input_shapes: Mapping[str, Sequence[int]],
         series: str) -> tuple[float, str]:
    shapes = (verdict or {}).get("shapes") or []
    match = next((s for s in shapes if s.get("label") == label), None)
    if match is None:
        return 0.0, f"the embedded engine was not timed at {label!r}: cost not measured"
    if {k: list(v) for k, v in (match.get("input_shapes") or {}).items()} != \
            {k: list(v) for k, v in input_shapes.items()}:
        return 0.0, f"the embedded engine timed {label!r} at other input shapes: cost not measured"
    stats = match.get(series) or {}
    value = float(stats.get("p50_ms") or 0.0)
    return (value, "") if value > 0 else (0.0, f"the embedded engine has no {series} p50: cost not measured")


def refit_cost(p50_ms: float, input_shapes: Mapping[str, Sequence[int]], label: str, mode: str,
               embedded: Mapping[str, Any] | None, bound: float | None, *,
               series: str = "end_to_end") -> dict[str, Any]:
    """``embedded``: {"record": {address, digest, record_key}, "verdict": its benchmark verdict} of the embedded
    engine of this cell timed on this GPU model, or None. Returns {mode, shape, p50_ms, embedded, embedded_p50_ms,
    cost_pct, threshold, status, reasons, notes}."""
    out: dict[str, Any] = {"mode": mode, "shape": label, "p50_ms": p50_ms, "embedded": None,
                           "embedded_p50_ms": None, "cost_pct": None, "threshold": bound, "reasons": [], "notes": []}
    if mode != "refittable":
        out["notes"].append("a stripped engine runs with the very weights it was built with, put back where it is "
                            "deployed (TensorRT: REFIT_IDENTICAL; onnxruntime: the optimized model with its "
                            "initializers back): it runs as built, no cost to measure")
    elif embedded is None:
        out["notes"].append("no embedded engine of this cell is published with a benchmark on this GPU model: the "
                            "cost of refittability is not measured (publish the target once with weights: embedded)")
    else:
        out["embedded"] = dict(embedded.get("record") or {})
        base, why = _p50(embedded.get("verdict"), label, input_shapes, series)
        if why:
            out["notes"].append(why)
        else:
            pct = (p50_ms - base) / base * 100.0
            out.update(embedded_p50_ms=base, cost_pct=pct)
            if bound is not None and pct > bound:
                out["reasons"].append(f"{label}: p50 {p50_ms:.4g} ms is {pct:.1f}% slower than the embedded engine "
                                      f"({base:.4g} ms) > gate.benchmark.max_refit_cost_pct {bound:g}")
    out["status"] = "failed" if out["reasons"] else "passed"
    return out
