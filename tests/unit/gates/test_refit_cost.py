"""The cost of refittability (issue 25.4): a refittable engine's p50 against the embedded engine of the same cell on the
same GPU model; the bound fails it exactly when the cost is above it; what cannot be compared is said."""

from __future__ import annotations

from orchestrator.gates.refit_cost import refit_cost

SHAPES = {"x": [8, 3, 224, 224]}


def _verdict(p50: float, shapes=SHAPES, label="opt") -> dict:
    return {"shapes": [{"label": label, "input_shapes": shapes, "end_to_end": {"p50_ms": p50},
                        "compute": {"p50_ms": p50 / 2}}]}


def test_the_cost_is_the_p50_over_the_embedded_engines_and_the_bound_fails_above_it():
    embedded = {"record": {"address": "m/fp16/default@sm89+trt10.13"}, "verdict": _verdict(2.0)}
    for p50, bound in ((2.2, 5.0), (2.2, 15.0), (1.8, 0.0), (2.0, None)):
        out = refit_cost(p50, SHAPES, "opt", "refittable", embedded, bound)
        assert abs(out["cost_pct"] - (p50 - 2.0) / 2.0 * 100) < 1e-9
        assert (out["status"] == "failed") == (bound is not None and out["cost_pct"] > bound), out
        assert out["embedded"] == embedded["record"] and out["embedded_p50_ms"] == 2.0
    compute = refit_cost(1.5, SHAPES, "opt", "refittable", embedded, 10.0, series="compute")
    assert compute["embedded_p50_ms"] == 1.0 and compute["status"] == "failed"


def test_what_cannot_be_compared_is_said_and_never_fails():
    none = refit_cost(2.0, SHAPES, "opt", "refittable", None, 0.0)
    assert none["cost_pct"] is None and none["status"] == "passed" and "not measured" in none["notes"][0]
    other = refit_cost(2.0, SHAPES, "opt", "refittable", {"record": {}, "verdict": _verdict(1.0, {"x": [1, 3]})}, 0.0)
    assert other["cost_pct"] is None and "other input shapes" in other["notes"][0]
    stripped = refit_cost(2.0, SHAPES, "opt", "stripped", {"record": {}, "verdict": _verdict(1.0)}, 0.0)
    assert stripped["cost_pct"] is None and "runs as built" in stripped["notes"][0]
