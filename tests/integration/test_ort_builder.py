"""The onnxruntime builder for real: optimize + serialize for the CPU execution provider, then run it."""

from __future__ import annotations

from dataclasses import replace
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

from orchestrator.contracts.builder import BuildRequest, OptimizationProfile
from orchestrator.core.fingerprint import InstalledRuntime, RunnerFingerprint
from orchestrator.core.model import BuilderOptions, PrecisionSpec, Target
from orchestrator.errors import BuildError
from trt_orchestrator_plugins.builders.onnxruntime import builder

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (pip install 'trt-orchestrator[ort]')")

pytestmark = pytest.mark.integration

ORT_VERSION = metadata.version("onnxruntime")
ORT_FAMILY = ".".join(ORT_VERSION.split(".")[:2])
CPU_ONLY = RunnerFingerprint(os="linux", arch="x86_64", runtimes={
    "onnxruntime": InstalledRuntime(ORT_VERSION, ("CPUExecutionProvider",))})


def target(device: str = "cpu", level: str = "all", version: str = ORT_FAMILY) -> Target:
    return Target(name=f"ort-{device}", builder="onnxruntime", builder_version=version, device=device,
                  options=BuilderOptions(ort_optimization=level))


def request(onnx_path: Path, out_dir: Path, profiles=(), level: str = "all") -> BuildRequest:
    t = target(level=level)
    return BuildRequest(address=f"{onnx_path.stem}/fp32@cpu", build_key="test", onnx_path=onnx_path,
                        profiles=tuple(profiles), precision=PrecisionSpec("fp32"), native_precision=False,
                        target=t, options=t.options, out_dir=out_dir, cache_dir=out_dir.parent / "cache",
                        log=lambda line: None)


def run(path: Path, feed: dict) -> list[np.ndarray]:
    options = ort.SessionOptions()
    # The optimized model runs as saved: no second round of optimization hides what the builder wrote.
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, feed)


@pytest.mark.parametrize("level", ["basic", "extended", "all"])
def test_optimized_tiny_model_matches_the_original(tiny_onnx, tmp_path, level):
    model = tiny_onnx(f"tiny_{level}", softmax=True)
    profile = OptimizationProfile("default", {"x": ((1, 3, 16, 16), (2, 3, 32, 32), (4, 3, 64, 64))})
    result = builder.build(request(model, tmp_path / "out", [profile], level))
    assert result.engine_path == tmp_path / "out" / "engine.onnx" and result.engine_path.stat().st_size > 0
    meta = result.metadata
    assert (meta["provider"], meta["onnxruntime_version"], meta["optimization_level"]) == \
        ("CPUExecutionProvider", ORT_VERSION, level)
    assert meta["run_only_with"] == {"provider": "CPUExecutionProvider", "onnxruntime": ORT_FAMILY}
    assert result.builder_version == ORT_VERSION and result.log_path.stat().st_size > 0
    rng = np.random.default_rng(7)
    for shape in [(1, 3, 16, 16), (3, 3, 40, 24)]:  # dynamic batch/H/W
        x = rng.standard_normal(shape, dtype=np.float32)
        expected, got = run(model, {"x": x})[0], run(result.engine_path, {"x": x})[0]
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)


def test_optimized_real_model_matches_the_original(demo_models, tmp_path):
    model = demo_models / "ch_ppocr_mobile_v2.0_cls_infer.onnx"
    result = builder.build(request(model, tmp_path / "out"))
    assert result.metadata["nodes_after"] < result.metadata["nodes_before"]  # "all" really fused something
    x = np.random.default_rng(3).random((2, 3, 48, 192), dtype=np.float32)
    np.testing.assert_allclose(run(result.engine_path, {"x": x})[0], run(model, {"x": x})[0], rtol=0, atol=1e-5)


def test_profile_naming_an_unknown_input(tiny_onnx, tmp_path):
    profile = OptimizationProfile("p", {"images": ((1, 3, 8, 8),) * 3})
    with pytest.raises(BuildError, match=r"profile 'p' names inputs \['images'\].*its inputs: x"):
        builder.build(request(tiny_onnx("unknown_input"), tmp_path / "out", [profile]))


def test_broken_model_is_a_build_error(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not an onnx model")
    with pytest.raises(BuildError, match=f"onnxruntime {ORT_VERSION} could not optimize bad.onnx for "
                                         "CPUExecutionProvider"):
        builder.build(request(bad, tmp_path / "out"))


def test_available_checks_version_family_and_provider():
    assert builder.available(CPU_ONLY, target()) is None
    assert builder.available(CPU_ONLY, target(version=ORT_VERSION)) is None
    assert builder.available(CPU_ONLY, target(version="1.17.3")) == (
        f"installed onnxruntime {ORT_VERSION} but target 'ort-cpu' wants 1.17.x (a level-'all' optimized model "
        "is tied to the ORT version that wrote it)")
    reason = builder.available(CPU_ONLY, target("cuda"))
    assert reason.startswith("CUDAExecutionProvider is not available in this onnxruntime (has: CPUExecutionProvider)")
    assert builder.available(CPU_ONLY, target("gpu")) == "onnxruntime targets need device 'cpu' or 'cuda', not 'gpu'"


def test_available_refuses_another_platform():
    # ORT docs, offline mode: a saved optimized model needs hardware compatible with where it was optimized
    arm = replace(target(), platform="linux/aarch64")
    assert builder.available(CPU_ONLY, arm) == (
        "target 'ort-cpu' is for linux/aarch64, this runner is linux/x86_64; an optimized model is saved for the "
        "hardware it was optimized on (ORT docs, offline mode: layout optimizations need compatible CPUs), so it is "
        "built on the platform it runs on")
    assert builder.available(replace(CPU_ONLY, arch="AMD64"), target()) is None  # spelled as Windows reports it


def test_extra_options_and_caches_are_refused_at_build(tiny_onnx, tmp_path):
    req = request(tiny_onnx("extra_refused"), tmp_path / "out")
    with pytest.raises(BuildError, match=r"onnxruntime applies no extra options; got \['max_aux_streams'\]"):
        builder.build(replace(req, options=BuilderOptions(extra={"max_aux_streams": 2})))
    with pytest.raises(BuildError, match="onnxruntime was given a pinned timing cache, which it has no use for"):
        builder.build(replace(req, timing_cache=tmp_path / "tc.cache"))
    result = builder.build(req)
    assert (result.timing_cache_read, result.timing_cache_written, result.timing_cache_path) == (None, None, None)
