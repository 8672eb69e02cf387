"""Issue 23.16, the pure rules: where a parity verdict was given, what a CPU's verdict does not say about a reduced
precision, and when ``gate.require_gpu_parity`` holds a GPU engine back."""

from __future__ import annotations

import pytest

from orchestrator.core.gpu_parity import gpu_parity_hold, parity_caveat, parity_device


@pytest.mark.parametrize("device,status,where", [
    ("cpu", "passed", "cpu"), ("cpu", "failed", "cpu"), ("cuda", "passed", "gpu"), ("gpu", "failed", "gpu"),
    ("gpu", "pending", None), ("gpu", None, None), ("cpu", None, None),
])
def test_a_verdict_is_given_where_the_engine_runs(device, status, where):
    assert parity_device(device, status) == where


def test_a_reduced_precision_judged_on_a_cpu_says_it_is_no_gpu_evidence():
    text = parity_caveat("fp16", "cpu", "passed")
    assert text is not None and text.startswith("fp16 parity was judged on a CPU only (onnxruntime CPU): it is no "
                                                "evidence of fp16 numerics on a GPU")
    assert "no parity verdict on a GPU" in parity_caveat("int8", "gpu", None)
    assert parity_caveat("fp16", "gpu", "passed") is None  # judged on a GPU: nothing to add
    assert parity_caveat("fp32", "cpu", "passed") is None  # full precision: the CPU's verdict stands


@pytest.mark.parametrize("precision,device,status,held", [
    ("fp16", "gpu", None, True),  # an RTX engine built on a CPU runner: no verdict
    ("fp16", "gpu", "pending", True),
    ("fp16", "cuda", "passed", False),  # gated on a GPU
    ("fp16", "cpu", "passed", False),  # a CPU engine is judged on the CPU it runs on (and carries the caveat)
    ("fp32", "gpu", None, False),  # not listed
    ("bf16", "gpu", None, False),  # not listed either
])
def test_the_setting_holds_back_listed_gpu_engines_without_a_gpu_verdict(precision, device, status, held):
    why = gpu_parity_hold(precision, device, status, ("fp16", "int8"))
    assert (why is not None) == held
    if held:
        assert why.startswith(f"{precision} needs a parity verdict given on a GPU (gate.require_gpu_parity lists "
                              f"{precision})")
    assert gpu_parity_hold(precision, device, status, ()) is None  # off by default
