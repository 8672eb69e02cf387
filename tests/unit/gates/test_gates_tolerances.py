from __future__ import annotations

import pytest

from orchestrator.core.model import ParityGate, Tolerance
from orchestrator.gates.tolerances import DEFAULT_TOLERANCES, default_tolerance_table, resolve_tolerance


def test_defaults_get_looser_with_precision():
    order = ["fp32", "fp16", "bf16", "int8"]
    atols = [DEFAULT_TOLERANCES[p].atol for p in order]
    assert atols == sorted(atols) and atols[0] == 1e-4
    fp16 = DEFAULT_TOLERANCES["fp16"]
    # issue 11: a good fp16 conversion has a few elements beyond 1e-2/1e-2 (docs/gates.md, measured)
    assert (fp16.max_violation_fraction, fp16.min_cosine, fp16.max_rel_l2) == (1e-4, 0.99, 0.15)
    bf16 = DEFAULT_TOLERANCES["bf16"]  # never stricter than fp16
    assert bf16.max_violation_fraction >= fp16.max_violation_fraction and bf16.min_cosine <= fp16.min_cosine
    assert bf16.max_rel_l2 >= fp16.max_rel_l2
    assert (DEFAULT_TOLERANCES["int8"].min_cosine, DEFAULT_TOLERANCES["int8"].min_topk_agreement) == (0.98, 0.9)
    assert [r["precision"] for r in default_tolerance_table()] == ["fp32", "tf32", "fp16", "bf16", "int8", "fp8"]


def test_resolution_default_then_model_then_output():
    gate = ParityGate(tolerances={"fp16": Tolerance(atol=0.05, rtol=0.02)},
                      per_output={"boxes": Tolerance(atol=0.5, rtol=0.0, min_cosine=0.999)})
    t = resolve_tolerance(gate, "fp16", "scores")
    assert (t.atol, t.rtol, t.min_cosine, t.source) == (0.05, 0.02, 0.99, "default:fp16 < model:fp16")
    t = resolve_tolerance(gate, "fp16", "boxes")
    assert (t.atol, t.rtol, t.min_cosine) == (0.5, 0.0, 0.999)
    assert t.source == "default:fp16 < model:fp16 < output:boxes"
    t = resolve_tolerance(gate, "fp32", "scores")
    assert t == DEFAULT_TOLERANCES["fp32"]


def test_unknown_precision_names_the_known_ones():
    with pytest.raises(ValueError, match="no default parity tolerance for precision 'fp4' "
                                         r"\(known: fp32, tf32, fp16, bf16, int8, fp8\)"):
        resolve_tolerance(ParityGate(), "fp4", "y")


def test_fp32_on_a_tf32_runtime_starts_from_the_tf32_default():
    from orchestrator.core.model import ParityGate, Tolerance
    from orchestrator.gates.tolerances import resolve_tolerance

    cpu = resolve_tolerance(ParityGate(), "fp32", "y")
    gpu = resolve_tolerance(ParityGate(), "fp32", "y", tf32=True)
    assert (cpu.atol, cpu.rtol, cpu.source) == (1e-4, 1e-3, "default:fp32")
    assert (gpu.atol, gpu.rtol, gpu.source) == (1e-2, 1e-2, "default:tf32")
    # the manifest's fp32 override still applies on top
    gate = ParityGate(tolerances={"fp32": Tolerance(atol=2e-3, rtol=1e-2)})
    assert resolve_tolerance(gate, "fp32", "y", tf32=True).atol == 2e-3
    # other precisions are unaffected
    assert resolve_tolerance(ParityGate(), "fp16", "y", tf32=True).source == "default:fp16"


def _judge(tol, m: dict) -> list[str]:
    """Which of the tolerance's criteria a measured output breaks (the violating fraction is the one measured at the
    tolerance's own atol/rtol: ``violations_at``)."""
    broken = []
    at = m["violations_at"].get((tol.atol, tol.rtol))
    if at is None:
        raise AssertionError(f"no violating fraction measured at {tol.atol:g}/{tol.rtol:g} for {m}")
    if at > tol.max_violation_fraction:
        broken.append("violations")
    if tol.max_rel_l2 is not None and m["rel_l2"] > tol.max_rel_l2:
        broken.append("rel_l2")
    if tol.min_cosine is not None and m["cosine"] is not None and m["cosine"] < tol.min_cosine:
        broken.append("cosine")
    return broken


def test_the_gpu_fp32_default_passes_every_good_tf32_engine_measured_on_the_lent_gpu():
    """Issue 23.15: fp32 engines on onnxruntime's CUDA EP run their convolutions in TF32 (its default, as TensorRT's).
    Measured on a lent H200 (bench/gpu/tf32_parity.py, bench/NOTES-gpu.md): with TF32 off every demo model agrees with
    the CPU to ~1e-6 whatever the cuDNN algorithm search, so the engines are right; with TF32 on, real pictures move
    PP-OCRv4 det's map by up to 0.028 on 0.39 % of its elements (beyond 1e-3/5e-3) and rec's softmax by rel-L2 0.016.
    The old GPU default (1e-3/5e-3, no element allowed, rel-L2 5e-3) failed those good engines."""
    from orchestrator.gates.tolerances import TF32_MEASUREMENTS

    gpu = resolve_tolerance(ParityGate(), "fp32", "y", tf32=True)
    assert len(TF32_MEASUREMENTS) >= 8
    for m in TF32_MEASUREMENTS:
        assert _judge(gpu, m) == [], m


def test_the_gpu_fp32_default_still_fails_broken_copies():
    """The same broken copies the fp16 default was chosen against (weights x1.01 .. x1.1, docs/gates.md) fail the
    GPU fp32 default too: its rel-L2 and cosine bounds are 3x and 10x tighter than fp16's."""
    from orchestrator.gates.tolerances import MEASUREMENTS

    gpu = resolve_tolerance(ParityGate(), "fp32", "y", tf32=True)
    broken = [m for m in MEASUREMENTS if "x1.0" in str(m["variant"]) or "x1.1" in str(m["variant"])]
    assert len(broken) >= 4
    for m in broken:
        rel = m.get("min_rel_l2", m.get("rel_l2"))
        cos = m.get("max_cosine", m.get("cosine"))
        assert (rel is not None and rel > gpu.max_rel_l2) or (cos is not None and cos < gpu.min_cosine), m
