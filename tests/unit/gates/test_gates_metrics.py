"""Parity metrics on literal arrays: exact numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from orchestrator.core.tolerances import DEFAULT_TOLERANCES
from orchestrator.gates.metrics import (
    compare_output,
    cosine_similarity,
    relative_l2,
    topk_agreement,
    violation_mask,
)
from orchestrator.gates.tolerances import ResolvedTolerance

TOL = ResolvedTolerance(atol=0.1, rtol=0.1, source="test")


def test_violation_mask_uses_reference_on_the_right():
    eng = np.array([1.0, 2.25, 0.0, np.nan])
    ref = np.array([1.1, 2.0, 0.2, 0.0])
    # budgets: 0.1+0.11=0.21 (err 0.1 ok), 0.1+0.2=0.3 (0.25 ok), 0.1+0.02=0.12 (0.2 bad), NaN bad
    assert violation_mask(eng, ref, 0.1, 0.1).tolist() == [False, False, True, True]


def test_relative_l2_and_its_floor():
    assert relative_l2([3.0, 4.0], [0.0, 0.0], floor=0.0) == math.inf
    assert relative_l2([0.0, 0.0], [0.0, 0.0]) == 0.0
    assert relative_l2([1.0, 1.0], [1.0, 0.0]) == pytest.approx(1.0)
    # near-zero reference: the floor keeps the number meaningful
    assert relative_l2([1e-7, 0.0], [0.0, 1e-9], floor=1.0) == pytest.approx(1e-7, rel=1e-3)


def test_cosine_similarity():
    assert cosine_similarity([1.0, 0.0], [0.0, 1.0]) == 0.0
    assert cosine_similarity([1.0, 2.0], [2.0, 4.0]) == pytest.approx(1.0)
    assert cosine_similarity([0.0, 0.0], [0.0, 0.0]) == 1.0
    assert cosine_similarity([1.0, 0.0], [0.0, 0.0]) == 0.0


def test_topk_agreement_over_rows():
    ref = np.array([[0.1, 0.5, 0.3, 0.2], [0.9, 0.0, 0.05, 0.05]])
    eng = np.array([[0.1, 0.3, 0.5, 0.2], [0.9, 0.0, 0.05, 0.05]])
    assert topk_agreement(eng, ref, 1) == 0.5  # row 0 argmax 2 vs 1
    assert topk_agreement(eng, ref, 2) == 1.0  # {1, 2} both
    assert topk_agreement(eng, ref, 99) == 1.0  # k clipped to the class count


def test_compare_output_exact_numbers_and_worst_elements():
    ref = np.array([[1.0, 2.0], [3.0, 4.0]])
    eng = np.array([[1.0, 2.5], [3.0, 4.1]])
    v = compare_output("y", [(eng, ref)], TOL)
    assert v.status == "failed"
    assert v.elements == 4 and v.violations == 1 and v.violation_fraction == 0.25
    assert v.max_abs_error == pytest.approx(0.5)
    assert v.mean_abs_error == pytest.approx(0.15)
    assert v.rel_l2 == pytest.approx(math.sqrt(0.26) / math.sqrt(30))
    assert v.rel_l2_floor == pytest.approx(0.2)
    w = v.worst[0]
    assert w.index == (0, 0, 1) and w.engine == 2.5 and w.reference == 2.0
    assert w.abs_error == pytest.approx(0.5) and w.tolerance_ratio == pytest.approx(0.5 / 0.3)
    assert [x.index for x in v.worst] == [(0, 0, 1), (0, 1, 1), (0, 0, 0), (0, 1, 0)]
    assert v.reasons == ("1 of 4 elements (25.0000%) violate |a-b| <= 0.1 + 0.1*|b| (allowed 0.0000%); "
                         "max abs error 0.5",)


def test_worst_elements_top_five_across_samples():
    ref = np.zeros((3, 4))
    eng = np.arange(12, dtype=float).reshape(3, 4) / 100
    v = compare_output("y", zip(eng, ref), ResolvedTolerance(atol=1.0, rtol=0.0))
    assert v.status == "passed" and v.reasons == ()
    assert [w.index for w in v.worst] == [(2, 3), (2, 2), (2, 1), (2, 0), (1, 3)]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_engine_output_always_fails(bad):
    ref = np.ones(4)
    eng = np.ones(4)
    eng[2] = bad
    v = compare_output("y", [(eng, ref)], ResolvedTolerance(atol=1e9, rtol=1e9, max_violation_fraction=1.0))
    assert v.status == "failed"
    assert v.nan_count + v.inf_count == 1
    assert v.reasons[0].startswith("engine output has ")
    assert v.worst[0].index == (0, 2) and math.isinf(v.worst[0].tolerance_ratio)


def test_secondary_checks_and_cosine_floor():
    ref = np.array([1.0, -1.0, 1.0, -1.0])
    eng = np.array([1.0, 1.0, 1.0, 1.0])
    tol = ResolvedTolerance(atol=10.0, rtol=0.0, min_cosine=0.99, max_rel_l2=0.5)
    v = compare_output("y", [(eng, ref)], tol)
    # every element within atol=10, but the norms (2) are under the floor √4·10 = 20: cosine not gated
    assert v.violations == 0 and v.cosine == 0.0 and not v.cosine_gated
    assert v.rel_l2 == pytest.approx(math.sqrt(8) / 20)
    assert v.status == "passed"
    tight = ResolvedTolerance(atol=0.01, rtol=0.0, max_violation_fraction=1.0, min_cosine=0.99, max_rel_l2=0.5)
    v = compare_output("y", [(eng, ref)], tight)
    assert v.cosine_gated
    assert v.reasons == ("cosine similarity 0.000000 < 0.99", "relative L2 1.414 > 0.5")


def test_topk_gate_on_classifier_outputs():
    ref = np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    eng = np.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    tol = ResolvedTolerance(atol=1.0, rtol=0.0, topk=1, min_topk_agreement=0.9)
    v = compare_output("p", [(eng, ref)], tol, classifier_k=2)
    assert v.top1_agreement == 0.75 and v.topk == 2 and v.topk_agreement == 1.0
    assert v.gated_topk == 1 and v.gated_topk_agreement == 0.75
    assert v.reasons == ("top-1 agreement 0.7500 < 0.9",)
    assert compare_output("p", [(eng, ref)], tol).top1_agreement is None  # not a classifier output


def test_shape_mismatch_fails():
    v = compare_output("y", [(np.zeros((2, 3)), np.zeros((3, 2)))], TOL)
    assert v.status == "failed" and v.reasons[0] == "sample 0: engine output shape [2, 3] != reference [3, 2]"


def _sorted_topk(engine: np.ndarray, reference: np.ndarray, k: int) -> float:
    """The definition, spelled out: a stable descending sort per row (NaN last), the first k, set overlap."""
    a = np.asarray(engine, dtype=np.float64).reshape(-1, np.shape(engine)[-1])
    b = np.asarray(reference, dtype=np.float64).reshape(-1, np.shape(reference)[-1])
    k = max(1, min(k, a.shape[-1]))
    top_a = np.argsort(-a, axis=-1, kind="stable")[:, :k]
    top_b = np.argsort(-b, axis=-1, kind="stable")[:, :k]
    return float(np.mean([len(set(x.tolist()) & set(y.tolist())) for x, y in zip(top_a, top_b)]) / k)


@pytest.mark.parametrize("seed", range(40))
def test_topk_agreement_is_the_stable_sorts_overlap_with_ties_nan_and_integer_classes(seed):
    # small integer values make ties the rule; NaN, -0.0, Inf and non-float dtypes take the other branches
    rng = np.random.default_rng(seed)
    shape = (int(rng.integers(1, 5)), int(rng.integers(1, 4)), int(rng.integers(1, 12)))
    eng = rng.integers(-3, 4, size=shape).astype(np.float32)
    ref = rng.integers(-3, 4, size=shape).astype([np.float16, np.float64, np.int64, np.uint8][seed % 4])
    if seed % 3 == 0:
        eng[rng.random(shape) < 0.2] = np.nan
    if seed % 5 == 0:
        eng[rng.random(shape) < 0.2] = -0.0
        eng[rng.random(shape) < 0.1] = np.inf
    for k in (1, 2, 3, 5, 50):
        assert topk_agreement(eng, ref, k) == pytest.approx(_sorted_topk(eng, ref, k), abs=1e-12), k


def test_compare_output_all_finite_fast_path_equals_the_masked_path():
    # one non-finite element sends a sample down the masked path; the same finite values summed by both agree
    rng = np.random.default_rng(3)
    ref = rng.random((3, 50), dtype=np.float32)
    eng = (ref + rng.normal(0, 0.05, ref.shape)).astype(np.float32)
    fast = compare_output("y", [(eng, ref)], TOL)
    eng_nan, ref_nan = np.concatenate([eng, [[np.nan] * 50]]), np.concatenate([ref, np.ones((1, 50), np.float32)])
    masked = compare_output("y", [(eng_nan, ref_nan)], TOL)
    assert masked.nan_count == 50 and fast.nan_count == 0
    assert masked.violations == fast.violations + 50
    # the fast path works in float32 (|a-b| rounds to 2^-24 of itself), the masked one in float64
    assert masked.max_abs_error == pytest.approx(fast.max_abs_error, rel=2 ** -23)
    assert masked.mean_abs_error * masked.elements == pytest.approx(fast.mean_abs_error * fast.elements, rel=1e-6)
    assert (masked.rel_l2, masked.cosine) == pytest.approx((fast.rel_l2, fast.cosine), rel=1e-6)
    # the worst elements: the NaNs first (they use every tolerance), then the fast path's own worst
    assert [w.index[1] for w in masked.worst] == [3] * 5 and all(math.isnan(w.engine) for w in masked.worst)
    assert fast.worst[0].tolerance_ratio == pytest.approx(
        float(np.max(np.abs(eng.astype(np.float64) - ref) / (0.1 + 0.1 * np.abs(ref.astype(np.float64))))))


@pytest.mark.parametrize("size", [7, 4096 * 8 - 1, 4096 * 40 + 123])
def test_worst_elements_of_large_outputs_are_the_largest_tolerance_ratios(size):
    # above 8 chunks of 4096 the worst five are searched chunk-wise; the tail past the last whole chunk counts too
    rng = np.random.default_rng(size)
    ref = rng.random(size)
    eng = ref + rng.normal(0, 0.01, size)
    eng[-1] += 5.0  # the biggest error sits in the tail
    v = compare_output("y", [(eng, ref)], TOL)
    ratio = np.abs(eng - ref) / (0.1 + 0.1 * np.abs(ref))
    want = np.argsort(-ratio, kind="stable")[:min(5, size)]
    assert [w.index for w in v.worst] == [(0, int(i)) for i in want]
    assert v.worst[0].index == (0, size - 1)


def test_float32_metrics_agree_with_float64_to_far_under_every_default():
    """Issue 24 (gate overhead): fp32/fp16 outputs are compared in float32 with float64 sums. On a detector-sized
    output (4x1x960x960) close to its reference, every figure agrees with an all-float64 computation to ~1e-7
    relative — 100x under the tightest default (fp32 cosine 0.99999) — and the violation count exactly."""
    rng = np.random.default_rng(11)
    ref = rng.random((4, 1, 960, 960), dtype=np.float32)
    eng = (ref + rng.normal(0, 2e-4, ref.shape)).astype(np.float32)
    for tol in (DEFAULT_TOLERANCES["fp32"], DEFAULT_TOLERANCES["fp16"]):
        fast = compare_output("y", [(eng, ref)], tol)
        a, b = eng.astype(np.float64), ref.astype(np.float64)
        diff = np.abs(a - b)
        assert fast.violations == int(np.count_nonzero(diff > tol.atol + tol.rtol * np.abs(b)))
        assert fast.cosine == pytest.approx(float(a.ravel() @ b.ravel()) / math.sqrt(
            float(a.ravel() @ a.ravel()) * float(b.ravel() @ b.ravel())), abs=1e-9)
        assert fast.rel_l2 == pytest.approx(math.sqrt(float((diff * diff).sum())) / max(
            math.sqrt(float((b * b).sum())), math.sqrt(b.size) * tol.atol), rel=1e-6)
        assert fast.mean_abs_error == pytest.approx(float(diff.mean()), rel=1e-6)
        assert fast.max_abs_error == pytest.approx(float(diff.max()), rel=2 ** -23)


def test_fp32_outputs_are_compared_without_float64_copies():
    """Issue 24 (gate overhead): the comparison of two float32 outputs allocates float32 work arrays only — about
    three output-sized buffers (|a-b|, the budget, one product at a time) — where float64 copies of both outputs and
    float64 work arrays took over eight (memory, not time: the same on any machine)."""
    import tracemalloc

    rng = np.random.default_rng(0)
    ref = rng.random((4, 1, 480, 480), dtype=np.float32)
    eng = ref + np.float32(1e-4)
    tracemalloc.start()
    try:
        compare_output("y", [(eng, ref)], DEFAULT_TOLERANCES["fp16"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * ref.nbytes, peak / ref.nbytes
