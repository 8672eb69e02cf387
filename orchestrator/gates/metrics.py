"""Parity metrics: compare one engine output with the reference output, pure numpy.

:func:`compare_output` takes every (engine, reference) pair of one output in one input case (several samples)
and returns an :class:`~orchestrator.gates.verdict.OutputVerdict`: max/mean abs error, relative L2 (reference
norm floored at ``√n·atol``), cosine similarity, top-1/top-k agreement for classifier outputs, the fraction of
elements violating ``|a−b| ≤ atol + rtol·|b|`` (the primary criterion), and the five worst elements ranked by
how much of their tolerance they use (``|a−b| / (atol + rtol·|b|)``). See ``tolerances`` for the rules.

Elementwise work runs in float32 for fp32/fp16 outputs (exact enough: ``_accumulate`` says why) and every sum
accumulates in float64; NaN/Inf and wider dtypes go through float64. Samples are aggregated exactly
(sums, not averages of averages); a worst element's index starts with the sample number.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from orchestrator.gates.tolerances import ResolvedTolerance
from orchestrator.gates.verdict import OutputVerdict, WorstElement

WORST_COUNT = 5


def violation_mask(engine: np.ndarray, reference: np.ndarray, atol: float, rtol: float) -> np.ndarray:
    """True where ``|engine − reference| > atol + rtol·|reference|``; NaN/Inf in either always violate."""
    a = np.asarray(engine, dtype=np.float64)
    b = np.asarray(reference, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        ok = np.abs(a - b) <= atol + rtol * np.abs(b)
    return ~ok  # comparisons with NaN are False, so NaN lands in the mask


def relative_l2(engine: np.ndarray, reference: np.ndarray, floor: float = 0.0) -> float:
    """``‖a−b‖₂ / max(‖b‖₂, floor)``; 0 when both are zero."""
    a = np.asarray(engine, dtype=np.float64)
    b = np.asarray(reference, dtype=np.float64)
    return _rel_l2(float(np.sum((a - b) ** 2)), float(np.sum(b * b)), floor)


def cosine_similarity(engine: np.ndarray, reference: np.ndarray) -> float:
    """Cosine of the flattened tensors; 1.0 when both are all zero, 0.0 when only one is."""
    a = np.asarray(engine, dtype=np.float64).ravel()
    b = np.asarray(reference, dtype=np.float64).ravel()
    return _cosine(float(a @ b), float(a @ a), float(b @ b))


def topk_agreement(engine: np.ndarray, reference: np.ndarray, k: int) -> float:
    """Mean over rows (all axes but the last) of ``|topk(engine) ∩ topk(reference)| / k``.

    With ``k == 1`` this is top-1 agreement: the fraction of rows whose argmax is the same. Ties go to the lower
    index, as a stable descending sort would order them; NaN ranks below every number.
    """
    a, b = _floating(engine), _floating(reference)
    if a.ndim == 0 or a.shape[-1] == 0:
        raise ValueError("top-k agreement needs a class axis (the last one)")
    k = max(1, min(int(k), a.shape[-1]))
    a2 = a.reshape(-1, a.shape[-1])
    b2 = b.reshape(-1, b.shape[-1])
    if a2.shape[0] == 0:
        return 1.0
    if k == 1 and not (_has_nan(a2) or _has_nan(b2)):
        return float(np.mean(np.argmax(a2, axis=-1) == np.argmax(b2, axis=-1)))
    hits = np.count_nonzero(_top_mask(a2, k) & _top_mask(b2, k), axis=-1)
    return float(np.mean(hits) / k)


def _floating(x: np.ndarray) -> np.ndarray:
    """Floats as they are (their order is the same in float64); other dtypes as float64, which negates safely."""
    x = np.asarray(x)
    return x if x.dtype.kind == "f" else x.astype(np.float64)


def _has_nan(x: np.ndarray) -> bool:  # x is floating (``_floating``)
    return bool(np.isnan(x).any())


def _top_mask(x: np.ndarray, k: int) -> np.ndarray:
    """Per row of ``x`` (rows × classes), which classes a stable descending sort puts among the first ``k``:
    the values above the k-th largest, then the tied ones lowest index first. A selection mask, not a sort:
    O(classes) per row."""
    if k >= x.shape[-1]:
        return np.ones(x.shape, dtype=bool)
    if _has_nan(x):  # NaN sorts after every number: rank the rows the slow, exact way
        order = np.argsort(-x, axis=-1, kind="stable")[:, :k]
        mask = np.zeros(x.shape, dtype=bool)
        np.put_along_axis(mask, order, True, axis=-1)
        return mask
    kth = -np.partition(-x, k - 1, axis=-1)[:, k - 1:k]
    above = x > kth
    tied = x == kth
    room = k - np.count_nonzero(above, axis=-1, keepdims=True)
    selected: np.ndarray = above | (tied & (np.cumsum(tied, axis=-1) <= room))
    return selected


def _rel_l2(diff_sq: float, ref_sq: float, floor: float) -> float:
    denom = max(math.sqrt(ref_sq), floor)
    if denom == 0.0:
        return 0.0 if diff_sq == 0.0 else math.inf
    return math.sqrt(diff_sq) / denom


def _cosine(dot: float, a_sq: float, b_sq: float) -> float:
    if a_sq == 0.0 and b_sq == 0.0:
        return 1.0
    if a_sq == 0.0 or b_sq == 0.0:
        return 0.0
    return max(-1.0, min(1.0, dot / math.sqrt(a_sq * b_sq)))


@dataclass
class _Sums:
    count: int = 0
    abs_sum: float = 0.0
    max_abs: float = 0.0
    diff_sq: float = 0.0
    ref_sq: float = 0.0
    eng_sq: float = 0.0
    dot: float = 0.0
    violations: int = 0
    nan: int = 0
    inf: int = 0
    ref_nonfinite: int = 0
    rows: int = 0
    top1_hits: float = 0.0
    topk_hits: float = 0.0
    gated_hits: float = 0.0
    worst: list[tuple[float, int, WorstElement]] = field(default_factory=list)  # heap: (ratio, tiebreak, element)


def _sum_of_products(x: np.ndarray, y: np.ndarray) -> float:
    """``Σ x·y`` summed in float64: the products in the arrays' own precision, the sum pairwise in float64."""
    return float(np.add.reduce(np.multiply(x, y), dtype=np.float64))


def _accumulate(s: _Sums, a: np.ndarray, b: np.ndarray, tolerance: ResolvedTolerance
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Add one sample's sums to ``s``: (|a−b|, |a−b| / (atol + rtol·|b|), the finite mask or None when every
    value is finite). ``a`` and ``b`` are float32 (fp32/fp16 outputs) or float64 (anything else).

    Exact enough in float32 (issue 24, gate overhead): ``a − b`` of two float32 values is exact when they are within
    a factor of two of each other and otherwise off by at most 2^-24 of itself, ``atol + rtol·|b|`` likewise, so an
    element is misjudged only where its error and its budget agree to about 1e-7 — nowhere near a decision on a
    violating *fraction*. Products round to 2^-24 relative and are summed in float64, so cosine and relative L2
    carry ~1e-7 relative error: 100x under the tightest default (fp32 cosine 0.99999). The float64 copies of both
    outputs this replaces were the larger part of the parity gate's own time (bench/NOTES.md)."""
    af, bf = a.ravel(), b.ravel()
    eng_sq, ref_sq = _sum_of_products(af, af), _sum_of_products(bf, bf)
    if math.isfinite(eng_sq) and math.isfinite(ref_sq):
        # The common case: finite sums of squares mean every value is finite (a NaN or Inf would carry into
        # them). One pass per figure, in place, no masks.
        diff = np.subtract(a, b)
        np.abs(diff, out=diff)
        budget = np.abs(b)
        budget *= tolerance.rtol
        budget += tolerance.atol
        s.violations += int(np.count_nonzero(diff > budget))
        flat = diff.ravel()
        s.abs_sum += float(np.add.reduce(flat, dtype=np.float64))
        s.max_abs = max(s.max_abs, float(flat.max())) if flat.size else s.max_abs
        s.diff_sq += _sum_of_products(flat, flat)
        s.ref_sq += ref_sq
        s.eng_sq += eng_sq
        s.dot += _sum_of_products(af, bf)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.divide(diff, budget, out=budget)  # budget > 0 unless atol == rtol == 0
        return diff, ratio, None
    # NaN/Inf somewhere (or float32 squares past 3.4e38): count them and judge the finite rest in float64
    a, b = a.astype(np.float64), b.astype(np.float64)
    s.nan += int(np.isnan(a).sum())
    s.inf += int(np.isinf(a).sum())
    s.ref_nonfinite += int((~np.isfinite(b)).sum())
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(a - b)
        budget = tolerance.atol + tolerance.rtol * np.abs(b)
        ratio = diff / budget
    finite = np.isfinite(diff)
    s.violations += int(np.count_nonzero(~(diff <= budget)))
    if finite.any():
        fd, fa, fb = diff[finite], a[finite], b[finite]
        s.abs_sum += float(fd.sum())
        s.max_abs = max(s.max_abs, float(fd.max()))
        s.diff_sq += float(np.sum(fd * fd))
        s.ref_sq += float(np.sum(fb * fb))
        s.eng_sq += float(np.sum(fa * fa))
        s.dot += float(np.sum(fa * fb))
    return diff, ratio, finite


_CHUNK = 4096


def _largest(flat: np.ndarray, take: int) -> np.ndarray:
    """Indices of ``take`` largest values of a 1-D array without NaN, in no order. The ``take`` largest all lie in
    the ``take`` chunks with the largest maxima (any other chunk has ``take`` bigger values elsewhere), so only
    those chunks, and the tail shorter than a chunk, are partitioned: one max-reduction over the array instead of a
    selection over all of it."""
    n = flat.size // _CHUNK * _CHUNK
    if n < 8 * _CHUNK:
        return np.argpartition(flat, flat.size - take)[flat.size - take:]
    maxima = flat[:n].reshape(-1, _CHUNK).max(axis=1)
    best = np.argpartition(maxima, maxima.size - take)[maxima.size - take:]
    candidates = np.concatenate([(best[:, None] * _CHUNK + np.arange(_CHUNK)).ravel(), np.arange(n, flat.size)])
    values = flat[candidates]
    picked: np.ndarray = candidates[np.argpartition(values, values.size - take)[values.size - take:]]
    return picked


def _work_dtype(a: np.ndarray, b: np.ndarray) -> type[np.floating]:
    """float32 for fp32/fp16 outputs (fp16 -> float32 is exact), float64 for anything wider or not a float."""
    small = all(x.dtype.kind == "f" and x.dtype.itemsize <= 4 for x in (a, b))
    return np.float32 if small else np.float64


def compare_output(name: str, pairs: Iterable[tuple[np.ndarray, np.ndarray]], tolerance: ResolvedTolerance,
                   *, classifier_k: int | None = None) -> OutputVerdict:
    """Judge one output over every sample of one case. ``pairs`` are ``(engine, reference)`` arrays."""
    s = _Sums()
    reasons: list[str] = []
    gated_k = None
    if classifier_k is not None:
        gated_k = tolerance.topk or classifier_k
    tiebreak = 0
    for sample, (engine, reference) in enumerate(pairs):
        a = np.asarray(engine)
        b = np.asarray(reference)
        if a.shape != b.shape:
            reasons.append(f"sample {sample}: engine output shape {list(a.shape)} != reference {list(b.shape)}")
            continue
        work = _work_dtype(a, b)
        a = a.astype(work, copy=False)
        b = b.astype(work, copy=False)
        s.count += a.size
        diff, ratio, finite = _accumulate(s, a, b, tolerance)
        # Rank by tolerance used; non-finite errors (and 0/0 where atol == rtol == 0) rank first.
        if finite is not None or tolerance.atol <= 0:
            bad = np.isnan(ratio) if finite is None else np.isnan(ratio) | ~finite
            if bad.any():
                ratio = np.where(bad, np.inf, ratio)
        flat = ratio.ravel()
        take = min(WORST_COUNT, flat.size)
        if take:
            idx = _largest(flat, take)
            for i in idx:
                index: tuple[int | np.integer, ...] = ((sample, *np.unravel_index(int(i), a.shape)) if a.ndim
                                                       else (sample,))
                element = WorstElement(index=tuple(int(x) for x in index), engine=float(a.flat[i]),
                                       reference=float(b.flat[i]), abs_error=float(diff.flat[i]),
                                       tolerance_ratio=float(flat[i]))
                item = (float(flat[i]), -tiebreak, element)
                tiebreak += 1
                if len(s.worst) < WORST_COUNT:
                    heapq.heappush(s.worst, item)
                else:
                    heapq.heappushpop(s.worst, item)
        if classifier_k is not None and gated_k is not None and a.ndim >= 1 and a.shape[-1] > 0:
            rows = int(np.prod(a.shape[:-1]))
            s.rows += rows
            agreement = {k: topk_agreement(a, b, k) for k in {1, classifier_k, gated_k}}
            s.top1_hits += agreement[1] * rows
            s.topk_hits += agreement[classifier_k] * rows
            s.gated_hits += agreement[gated_k] * rows

    floor = math.sqrt(s.count) * tolerance.atol
    rel_l2 = _rel_l2(s.diff_sq, s.ref_sq, floor)
    cosine = _cosine(s.dot, s.eng_sq, s.ref_sq)
    cosine_gated = max(math.sqrt(s.eng_sq), math.sqrt(s.ref_sq)) > floor
    fraction = s.violations / s.count if s.count else 0.0
    top1 = s.top1_hits / s.rows if s.rows else None
    topk = s.topk_hits / s.rows if s.rows else None
    gated = s.gated_hits / s.rows if s.rows else None

    if s.nan or s.inf:
        reasons.append(f"engine output has {s.nan} NaN and {s.inf} Inf values (always fails)")
    if s.ref_nonfinite:
        reasons.append(f"reference output has {s.ref_nonfinite} non-finite values: the fp32 model itself "
                       "overflows on these inputs; fix the inputs or the model")
    if s.count and fraction > tolerance.max_violation_fraction:
        reasons.append(
            f"{s.violations} of {s.count} elements ({fraction:.4%}) violate |a-b| <= {tolerance.atol:g} + "
            f"{tolerance.rtol:g}*|b| (allowed {tolerance.max_violation_fraction:.4%}); max abs error "
            f"{s.max_abs:.4g}")
    if tolerance.min_cosine is not None and cosine_gated and cosine < tolerance.min_cosine:
        reasons.append(f"cosine similarity {cosine:.6f} < {tolerance.min_cosine:g}")
    if tolerance.max_rel_l2 is not None and rel_l2 > tolerance.max_rel_l2:
        reasons.append(f"relative L2 {rel_l2:.4g} > {tolerance.max_rel_l2:g}")
    if tolerance.min_topk_agreement is not None and gated is not None and gated < tolerance.min_topk_agreement:
        reasons.append(f"top-{gated_k} agreement {gated:.4f} < {tolerance.min_topk_agreement:g}")
    if s.count == 0 and not reasons:
        reasons.append("no comparable samples")

    worst = [item[2] for item in sorted(s.worst, key=lambda t: (-t[0], -t[1]))]
    return OutputVerdict(
        name=name,
        status="failed" if reasons else "passed",
        elements=s.count,
        max_abs_error=s.max_abs if s.count else math.nan,
        mean_abs_error=s.abs_sum / s.count if s.count else math.nan,
        rel_l2=rel_l2,
        rel_l2_floor=floor,
        cosine=cosine,
        cosine_gated=cosine_gated,
        violations=s.violations,
        violation_fraction=fraction,
        nan_count=s.nan,
        inf_count=s.inf,
        top1_agreement=top1,
        topk=classifier_k,
        topk_agreement=topk,
        gated_topk=gated_k,
        gated_topk_agreement=gated,
        worst=tuple(worst),
        tolerance=tolerance,
        reasons=tuple(reasons),
    )


__all__: Sequence[str] = (
    "violation_mask", "relative_l2", "cosine_similarity", "topk_agreement", "compare_output", "WORST_COUNT",
)
