"""Parity tolerances as data (pure): the documented defaults per precision and how manifest overrides resolve.
Why these numbers, and the measurements they were chosen from: ``orchestrator.gates.tolerances``. They live in
the core because gate keys hold the tolerance a verdict was judged with after resolution: a changed default
re-gates, exactly as a changed manifest override does."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.core.model import ParityGate, Tolerance


@dataclass(frozen=True)
class ResolvedTolerance:
    """The tolerance one output is judged with, and where each layer came from."""

    atol: float
    rtol: float
    max_violation_fraction: float = 0.0
    min_cosine: float | None = None
    max_rel_l2: float | None = None
    topk: int | None = None  # None: k from model.classifier_outputs
    min_topk_agreement: float | None = None
    source: str = "default"  # e.g. "default:fp16 < model:fp16 < output:logits"

    def to_json(self) -> dict[str, Any]:
        # asdict(self), field for field (every value is immutable), without its recursive copy: gate keys of a
        # million cells resolve these
        return {"atol": self.atol, "rtol": self.rtol, "max_violation_fraction": self.max_violation_fraction,
                "min_cosine": self.min_cosine, "max_rel_l2": self.max_rel_l2, "topk": self.topk,
                "min_topk_agreement": self.min_topk_agreement, "source": self.source}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ResolvedTolerance:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


DEFAULT_TOLERANCES: dict[str, ResolvedTolerance] = {
    "fp32": ResolvedTolerance(atol=1e-4, rtol=1e-3, max_violation_fraction=0.0, min_cosine=0.99999,
                              max_rel_l2=1e-3, source="default:fp32"),
    # fp32 engines on CUDA GPUs compute convolutions and GEMMs in TF32 by default (TensorRT's TF32 builder flag,
    # onnxruntime's CUDA EP use_tf32=1): fp16's 10-bit mantissa. Measured on a lent H200 (issue 23.15,
    # gates.tolerances.TF32_MEASUREMENTS): on real pictures PP-OCRv4 det's map moves up to 0.028 (5.6e-4 of its
    # elements beyond 1e-2/1e-2), rec's softmax rel-L2 0.016; with TF32 off both agree with the CPU to ~1e-5.
    "tf32": ResolvedTolerance(atol=1e-2, rtol=1e-2, max_violation_fraction=1e-3, min_cosine=0.999,
                              max_rel_l2=5e-2, source="default:tf32"),
    # fp16: a few elements of a good conversion fall outside 1e-2/1e-2 (PP-OCRv4 rec: up to 1.6e-5 of them), so
    # 1e-4 of an output's elements may; measured in docs/gates.md ("Why these values") and MEASUREMENTS below
    "fp16": ResolvedTolerance(atol=1e-2, rtol=1e-2, max_violation_fraction=1e-4, min_cosine=0.99,
                              max_rel_l2=0.15, source="default:fp16"),
    "bf16": ResolvedTolerance(atol=5e-2, rtol=5e-2, max_violation_fraction=0.001, min_cosine=0.99,
                              max_rel_l2=0.15, source="default:bf16"),
    "int8": ResolvedTolerance(atol=1e-1, rtol=1e-1, max_violation_fraction=0.05, min_cosine=0.98,
                              max_rel_l2=2e-1, topk=1, min_topk_agreement=0.9, source="default:int8"),
    "fp8": ResolvedTolerance(atol=1e-1, rtol=1e-1, max_violation_fraction=0.05, min_cosine=0.98,
                             max_rel_l2=2e-1, topk=1, min_topk_agreement=0.9, source="default:fp8"),
}

def default_tolerance(precision: str) -> ResolvedTolerance:
    try:
        return DEFAULT_TOLERANCES[precision]
    except KeyError:
        known = ", ".join(DEFAULT_TOLERANCES)
        raise ValueError(f"no default parity tolerance for precision {precision!r} (known: {known})") from None


def apply_override(base: ResolvedTolerance, override: Tolerance, label: str) -> ResolvedTolerance:
    """``override`` on top of ``base``: each field the override sets (not None); the others inherit ``base``'s."""
    changes: dict[str, Any] = {"source": f"{base.source} < {label}"}
    for name in ("atol", "rtol"):
        value = getattr(override, name)
        if value is not None:
            changes[name] = float(value)
    for name in ("min_cosine", "max_rel_l2", "topk", "min_topk_agreement"):
        value = getattr(override, name)
        if value is not None:
            changes[name] = value
    return replace(base, **changes)


def resolve_tolerance(gate: ParityGate, precision: str, output: str, *, tf32: bool = False) -> ResolvedTolerance:
    """The tolerance for ``output`` of an engine built at ``precision``: default < model < output. ``tf32``: the
    engine's runtime computes fp32 math in TF32 (GPU runtimes by default), so fp32 starts from the tf32 default."""
    tol = default_tolerance("tf32" if precision == "fp32" and tf32 else precision)
    if precision in gate.tolerances:
        tol = apply_override(tol, gate.tolerances[precision], gate.layers.get(precision, f"model:{precision}"))
    if output in gate.per_output:
        key = f"output:{output}"
        tol = apply_override(tol, gate.per_output[output], gate.layers.get(key, key))
    return tol


def override_layers(own: Mapping[str, Iterable[str]],
                    chain: Sequence[tuple[str, Mapping[str, Iterable[str]]]]) -> dict[str, str]:
    """``ParityGate.layers`` of a cell's merged parity gate, from the override keys each layer writes
    (``{"tolerances": precisions, "per_output": outputs}``): the model's own (``own``, defaults included), then each
    ``(label, keys)`` of ``chain`` (a target's ``gate:`` as written, then a matrix rule's). A key some layer of
    ``chain`` writes is named with every layer that writes it, e.g. ``{"fp16": "model:fp16 < target:cpu:fp16"}``;
    keys only the model writes are left out (they read ``model:fp16``). By who writes a key, never by its value:
    a layer repeating the value below is still that layer's."""
    out: dict[str, str] = {}
    for field, prefix in (("tolerances", ""), ("per_output", "output:")):
        mine = set(own.get(field, ()))
        keys = set(mine).union(*(set(layer.get(field, ())) for _, layer in chain))
        for key in sorted(keys):
            written = [label for label, layer in chain if key in set(layer.get(field, ()))]
            if not written:
                continue
            below = [f"model:{key}" if not prefix else f"{prefix}{key}"] if key in mine else []
            out[f"{prefix}{key}"] = " < ".join(below + [f"{label}:{prefix}{key}" for label in written])
    return out


def through_recorded(mine: ResolvedTolerance, recorded: ResolvedTolerance) -> ResolvedTolerance:
    """The tolerance an engine is held to against another engine's recorded outputs, when each is held to its own
    against the same reference (``pull --build-on-miss``: the recorded outputs are a published engine's, not the
    reference's). Each bound adds as the triangle inequality allows: ``|new - rec| <= |new - ref| + |ref - rec|``
    (atol, rtol, rel-L2 add; the share of elements out of tolerance adds; angles add, so cosines compose as
    ``cos(acos a + acos b)``; top-k agreement loses what each side may disagree with the reference)."""
    return ResolvedTolerance(
        atol=mine.atol + recorded.atol, rtol=mine.rtol + recorded.rtol,
        max_violation_fraction=min(1.0, mine.max_violation_fraction + recorded.max_violation_fraction),
        min_cosine=_compose_cosine(mine.min_cosine, recorded.min_cosine),
        max_rel_l2=(mine.max_rel_l2 + recorded.max_rel_l2
                    if mine.max_rel_l2 is not None and recorded.max_rel_l2 is not None else None),
        topk=mine.topk,
        min_topk_agreement=(max(0.0, mine.min_topk_agreement + recorded.min_topk_agreement - 1.0)
                            if mine.min_topk_agreement is not None and recorded.min_topk_agreement is not None
                            else None),
        source=f"{mine.source} + recorded {recorded.source}")


def _compose_cosine(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    angle = math.acos(max(-1.0, min(1.0, a))) + math.acos(max(-1.0, min(1.0, b)))
    return math.cos(angle) if angle < math.pi else -1.0
