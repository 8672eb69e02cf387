"""Build on miss as data (``core.ondevice``, ``core.tolerances.through_recorded``; issue 26.1): which declared target
is nearest, the on-device target and its manifest form (read back by the manifest loader into the same target), and
the tolerance against another engine's recorded outputs."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from orchestrator.core.model import BuilderOptions, Target
from orchestrator.core.ondevice import NEAREST_RULE, device_target, manifest_entry, nearest_target, target_name
from orchestrator.core.tolerances import DEFAULT_TOLERANCES, ResolvedTolerance, through_recorded
from orchestrator.manifest.convert import _target


def _t(name: str, builder: str = "tensorrt", version: str = "10.13.3.9", ccs: tuple[str, ...] = (),
       device: str = "gpu", **options: object) -> Target:
    return Target(name=name, builder=builder, builder_version=version, compute_capabilities=ccs,
                  device=device, options=BuilderOptions(**options), builder_slug={"tensorrt": "trt",
                                                                                   "onnxruntime": "ort",
                                                                                   "tensorrt-rtx": "rtx"}[builder])


def test_nearest_is_same_builder_then_device_kind_then_cc_then_newest_then_order():
    probe = _t("probe", ccs=("8.9",))
    declared = [
        _t("rtx", "tensorrt-rtx", "1.7.1.116", ("8.9",)),  # another builder: never nearest
        _t("t4", ccs=("7.5",), optimization_level=1),
        _t("a10", ccs=("8.6",), optimization_level=2),
        _t("l4-old", version="10.8.0.43", ccs=("8.9",), optimization_level=3),
        _t("l4", ccs=("8.9",), optimization_level=4),
        _t("l4-again", ccs=("8.9",), optimization_level=5),
    ]
    assert nearest_target(declared, probe).name == "l4"  # same CC, newest version, first declared
    assert nearest_target(declared[:3], probe).name == "a10"  # 8.6 is closer to 8.9 than 7.5
    assert nearest_target(declared[:1], probe) is None  # no target of this builder
    ort = [_t("cuda", "onnxruntime", "1.31", device="cuda", ort_optimization="basic"),
           _t("cpu", "onnxruntime", "1.22", device="cpu", ort_optimization="extended")]
    assert nearest_target(ort, _t("probe", "onnxruntime", "1.31.1", device="cpu")).name == "cpu"  # device kind first
    assert nearest_target(ort[:1], _t("probe", "onnxruntime", "1.31.1", device="cpu")).name == "cuda"
    assert "closest compute capability" in NEAREST_RULE


def test_device_target_takes_the_probe_place_and_version_and_the_nearest_options():
    probe = _t("probe", "tensorrt-rtx", "1.7.1.116", ("8.9",))
    nearest = _t("rtx-sm86", "tensorrt-rtx", "1.7.0.1", ("8.6",), tiling_level="fast", timing_cache_pin=True)
    built = device_target(probe, nearest, platform="linux/x86_64")
    assert (built.builder_version, built.compute_capabilities, built.options) == ("1.7.1.116", ("8.9",),
                                                                                 nearest.options)
    assert (built.weights, built.gpu_match, built.hardware_compatibility) == ("embedded", "cc", "none")
    assert built.name == target_name(built) == "device-sm89-rtx1.7"
    assert device_target(probe, None, platform="linux/x86_64").options == BuilderOptions()
    cpu = device_target(_t("probe", "onnxruntime", "1.31.1", device="cpu"), None, platform="linux/aarch64")
    assert cpu.name == "device-cpu-linux-aarch64-ort1.31"


@pytest.mark.parametrize("target", [
    device_target(_t("p", "tensorrt-rtx", "1.7.1.116", ("8.9",)),
                  _t("n", "tensorrt-rtx", "1.7.1.116", ("8.6",), tiling_level="fast", timing_cache_pin=True,
                     extra={"b": 1, "a": True}), platform="linux/x86_64"),
    device_target(_t("p", "onnxruntime", "1.31.1", device="cpu"),
                  _t("n", "onnxruntime", "1.31", device="cuda", ort_optimization="basic", timing_cache=False),
                  platform="linux/aarch64"),
    device_target(_t("p", "onnxruntime", "1.31.1", device="cpu"),
                  replace(_t("n", "onnxruntime", "1.31", device="cpu"), cpu_match="isa"), platform="linux/x86_64"),
], ids=["rtx", "ort-cpu", "ort-cpu-isa"])
def test_manifest_entry_reads_back_into_the_same_target(target):
    """What a deployment prints is what a manifest declares: the manifest loader's conversion of the entry is this
    target (the builder's slug is filled in by the loader from the plugin, as for any target)."""
    findings: list = []
    read = _target(manifest_entry(target), 0, {}, findings)
    assert not findings and read is not None
    assert replace(read, builder_slug=target.builder_slug) == target


def test_through_recorded_adds_each_side_as_the_triangle_inequality_allows():
    fp16, fp32 = DEFAULT_TOLERANCES["fp16"], DEFAULT_TOLERANCES["fp32"]
    both = through_recorded(fp16, fp32)
    assert both.atol == pytest.approx(fp16.atol + fp32.atol) and both.rtol == pytest.approx(fp16.rtol + fp32.rtol)
    assert both.max_violation_fraction == pytest.approx(fp16.max_violation_fraction + fp32.max_violation_fraction)
    assert both.max_rel_l2 == pytest.approx(fp16.max_rel_l2 + fp32.max_rel_l2)
    angle = math.acos(fp16.min_cosine) + math.acos(fp32.min_cosine)
    assert both.min_cosine == pytest.approx(math.cos(angle)) and both.min_cosine < min(fp16.min_cosine,
                                                                                        fp32.min_cosine)
    int8 = DEFAULT_TOLERANCES["int8"]
    assert through_recorded(int8, int8).min_topk_agreement == pytest.approx(2 * int8.min_topk_agreement - 1)
    assert through_recorded(ResolvedTolerance(1, 1, 0.9), ResolvedTolerance(1, 1, 0.9)).max_violation_fraction == 1
    assert "recorded" in both.source
