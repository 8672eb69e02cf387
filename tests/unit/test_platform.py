"""Platforms (issue 12): ``core.platform`` reading and comparing ``os/arch[/variant]``, and the runner fingerprint
carrying its platform (the L4T release of a Jetson) through its JSON, as published metadata records it."""

from __future__ import annotations

import pytest

from orchestrator.core.fingerprint import GpuInfo, RunnerFingerprint, same_gpu_model
from orchestrator.core.platform import PlatformError, normalize_platform, platform_mismatch, platform_text
from orchestrator.core.select import Compat, rank_candidates
from orchestrator.errors import UsageError


@pytest.mark.parametrize("text,expected", [
    ("linux/x86_64", "linux/x86_64"),
    ("Linux/AMD64", "linux/x86_64"),
    ("linux/arm64", "linux/aarch64"),
    ("win64/x64", "windows/x86_64"),
    (" windows/x86-64 ", "windows/x86_64"),
    ("linux/aarch64/l4t36.4", "linux/aarch64/l4t36.4"),
    ("linux/arm64/L4T35.4.1", "linux/aarch64/l4t35.4.1"),
])
def test_normalize_platform(text, expected):
    assert normalize_platform(text) == expected


@pytest.mark.parametrize("text,problem", [
    ("linux", "unknown platform 'linux'"),
    ("linux/x86_64/", "unknown platform"),
    ("darwin/arm64", "unknown OS 'darwin'"),
    ("linux/riscv64", "unknown CPU architecture 'riscv64'"),
    ("linux/x86_64/l4t36.4", "the only variant is an L4T release on linux/aarch64"),
    ("linux/aarch64/jetson", "the only variant is an L4T release"),
    ("windows/aarch64/l4t36.4", "the only variant is an L4T release"),
])
def test_normalize_platform_refuses_with_a_hint(text, problem):
    with pytest.raises(PlatformError) as e:
        normalize_platform(text)
    assert problem in str(e.value)
    assert "linux/aarch64/l4t36.4" in e.value.hint


@pytest.mark.parametrize("engine,runner,why", [
    ("linux/x86_64", "linux/x86_64", None),
    ("linux/aarch64/l4t36.4", "linux/aarch64/l4t36.4", None),
    ("windows/x86_64", "linux/x86_64", "built for windows/x86_64, this deployment is linux/x86_64"),
    ("linux/x86_64", "windows/x86_64", "OS and CPU architecture must match"),
    ("linux/x86_64", "linux/aarch64", "built for linux/x86_64, this deployment is linux/aarch64"),
    ("linux/x86_64", "linux/aarch64/l4t36.4", "this deployment is linux/aarch64/l4t36.4"),
    # SBSA (aarch64 servers, e.g. GH200) and Jetson are both linux/aarch64, and their engines are not interchangeable
    ("linux/aarch64", "linux/aarch64/l4t36.4", "built for linux/aarch64 servers (SBSA); this deployment is a Jetson"),
    ("linux/aarch64/l4t36.4", "linux/aarch64", "built for a Jetson (L4T 36.4); this deployment is linux/aarch64"),
    ("linux/aarch64/l4t36.4", "linux/aarch64/l4t35.4.1", "built for L4T 36.4, this Jetson runs L4T 35.4.1"),
])
def test_platform_mismatch_table(engine, runner, why):
    got = platform_mismatch(engine, runner)
    if why is None:
        assert got is None
    else:
        assert got is not None and why in got


def test_platform_text_keeps_an_unknown_os_so_it_matches_nothing():
    assert platform_text("Linux", "AMD64") == "linux/x86_64"
    assert platform_text("Darwin", "arm64") == "darwin/aarch64"
    assert platform_mismatch("linux/aarch64", platform_text("Darwin", "arm64")) is not None


def test_fingerprint_platform_and_json_round_trip():
    orin = GpuInfo(0, "NVIDIA Jetson AGX Orin Developer Kit", "8.7", 62841)
    fp = RunnerFingerprint(os="linux", arch="aarch64", gpus=(orin,), l4t="36.4")
    assert fp.platform == "linux/aarch64/l4t36.4"
    data = fp.to_json()
    assert data["l4t"] == "36.4"
    again = RunnerFingerprint.from_json(data)
    assert again == fp and again.platform == "linux/aarch64/l4t36.4"
    assert fp.describe().startswith("NVIDIA Jetson AGX Orin Developer Kit (CC 8.7) on linux/aarch64/l4t36.4; ")


def test_fingerprint_json_from_before_platforms_still_reads():
    old = {"os": "Linux", "arch": "x86_64", "gpus": [{"index": 0, "name": "NVIDIA L4", "compute_capability": "8.9",
                                                      "memory_mib": 23034, "uuid": None}],
           "driver_version": "580.65.06", "cuda_driver_version": "13.0", "runtimes": {}, "labels": []}
    fp = RunnerFingerprint.from_json(old)
    assert fp.l4t is None and fp.platform == "linux/x86_64" and fp.gpu_model == "NVIDIA L4"


def test_a_declared_gpu_has_no_model_until_one_is_declared():
    fp = RunnerFingerprint.parse_gpu_spec("sm86", RunnerFingerprint(os="linux", arch="x86_64"))
    assert fp.compute_capability == "8.6" and fp.gpu_model is None
    named = fp.with_gpu_model("  NVIDIA   A10 ")
    assert named.gpu_model == "NVIDIA A10" and named.compute_capability == "8.6"
    with pytest.raises(UsageError) as e:
        fp.with_gpu_model("NVIDIA L4")  # an 8.9 GPU declared as sm86: refused, never a wrong pick
    assert "compute capability 8.9, not the declared 8.6" in e.value.message and "sm89" in (e.value.hint or "")
    with pytest.raises(UsageError):
        RunnerFingerprint(os="linux", arch="x86_64").with_gpu_model("NVIDIA A10")


def test_same_gpu_model_ignores_case_and_spacing_only():
    assert same_gpu_model("NVIDIA L4", "nvidia  l4")
    assert not same_gpu_model("NVIDIA L4", "NVIDIA L40S")
    assert not same_gpu_model(None, "NVIDIA L4") and not same_gpu_model(None, None)


def test_preference_orders_within_a_rank_never_across_ranks():
    judged = {"other-model": Compat.yes("other", 10, preference=1), "this-model": Compat.yes("this", 10),
              "better-rank-other-model": Compat.yes("exact cc", 0, preference=1), "no": Compat.no("nope")}
    ranking = rank_candidates([(k, k) for k in ("other-model", "this-model", "no")], judged.__getitem__)
    assert ranking.best is not None and ranking.best.id == "this-model"
    assert [c.id for c in ranking.runners_up] == ["other-model"]
    ranking = rank_candidates([(k, k) for k in ("this-model", "better-rank-other-model")], judged.__getitem__)
    assert ranking.best is not None and ranking.best.id == "better-rank-other-model"
