"""Real-hardware tests of the ``tensorrt`` builder and runtime, and of the ``tensorrt-rtx`` runtime.

They need an NVIDIA GPU, cuda-python and (for TensorRT proper) the ``tensorrt`` wheels, which come only from
NVIDIA's index. Where any of those is missing they SKIP, naming what is missing; nothing here is faked.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from orchestrator import plugins
from orchestrator.contracts.builder import BuildRequest, OptimizationProfile
from orchestrator.contracts.runtime import RuntimeOptions
from orchestrator.core.artifact import EngineDescriptor, EngineTarget
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.model import BuilderOptions, PrecisionSpec, Target
from orchestrator.errors import GateError
from trt_orchestrator_plugins._trt import plan_header as engine_header

pytestmark = [pytest.mark.integration, pytest.mark.gpu]


def _fingerprint() -> RunnerFingerprint:
    return plugins.fingerprint()


def _missing_for_tensorrt() -> list[str]:
    """Everything these hardware tests need that this machine lacks, named at once."""
    missing = []
    if not _fingerprint().has_gpu:
        missing.append("an NVIDIA GPU (NVML found no driver or device)")
    else:
        try:
            from trt_orchestrator_plugins import _cuda

            _cuda.cudart()
        except Exception as e:  # CudaUnavailable
            missing.append(f"cuda-python (pip install 'trt-orchestrator[gpu]'; {e})")
    try:
        import tensorrt  # noqa: F401
    except (ImportError, OSError):
        missing.append("TensorRT (`tensorrt`; its wheels come only from NVIDIA's index)")
    return missing


def _need_gpu() -> RunnerFingerprint:
    missing = [m for m in _missing_for_tensorrt() if not m.startswith("TensorRT")]
    if missing:
        pytest.skip("needs " + " and ".join(missing))
    return _fingerprint()


def _need_tensorrt():
    missing = _missing_for_tensorrt()
    if missing:
        pytest.skip("needs " + " and ".join(missing))
    import tensorrt

    return tensorrt


def _tiny_onnx(path: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu0")], "tiny", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


PROFILE = OptimizationProfile("default", {"x": ((1, 4), (2, 4), (8, 4))})


def _metadata(builder: str, version: str, cc: str) -> EngineDescriptor:
    return EngineDescriptor(address="tiny/fp32/default", precision="fp32", builder=builder, builder_version=version,
                            runtime=builder, target=EngineTarget("t", compute_capabilities=(cc,)))


@pytest.fixture(scope="module")
def tensorrt_engine(tmp_path_factory):
    trt = _need_tensorrt()  # names every missing piece: GPU, cuda-python, TensorRT
    fp = _fingerprint()
    from trt_orchestrator_plugins.builders.tensorrt import builder

    tmp = tmp_path_factory.mktemp("trt")
    target = Target(name="local", builder="tensorrt", builder_version=trt.__version__,
                    compute_capabilities=(fp.compute_capability,))
    assert builder.available(fp, target) is None
    request = BuildRequest(address="tiny/fp32/default", build_key="k", onnx_path=_tiny_onnx(tmp / "m.onnx"),
                           profiles=(PROFILE,), precision=PrecisionSpec("fp32"), native_precision=False,
                           target=target, options=BuilderOptions(), out_dir=tmp / "out", cache_dir=tmp / "cache",
                           log=lambda _line: None)
    result = builder.build(request)
    return result, fp, trt.__version__


def test_tensorrt_builder_writes_engine_log_layer_info_and_timing_cache(tensorrt_engine):
    result, fp, version = tensorrt_engine
    assert result.builder_version == version
    header = engine_header.read_header_file(result.engine_path)
    assert header.flavour == "tensorrt"
    assert engine_header.check_header(header, _metadata("tensorrt", version, fp.compute_capability)) is None
    assert result.layer_info_path is not None and result.layer_info_path.read_text().strip()
    assert result.log_path.read_text()
    caches = list((result.engine_path.parent.parent / "cache" / "timing-cache").glob("*.cache"))
    assert len(caches) == 1 and caches[0].stat().st_size > 0


def test_tensorrt_runtime_runs_and_times_with_cuda_events(tensorrt_engine, tmp_path):
    result, fp, version = tensorrt_engine
    from trt_orchestrator_plugins.runtimes.tensorrt import runtime

    meta = _metadata("tensorrt", version, fp.compute_capability)
    assert runtime.can_run(meta, fp).ok
    session = runtime.load(result.engine_path, meta, RuntimeOptions(device="cuda"))
    try:
        x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
        out = session.run({"x": x})
        np.testing.assert_array_equal(out["y"], np.maximum(x, 0))
        timing = session.benchmark({"x": x}, warmup=3, iterations=10, time_budget_s=None)
        assert timing.clock == "cuda_event" and len(timing.compute_ms) == 10 and len(timing.end_to_end_ms) == 10
        assert all(e >= c for c, e in zip(timing.compute_ms, timing.end_to_end_ms))
        with pytest.raises(GateError, match="outside the engine's optimization profile"):
            session.run({"x": np.zeros((9, 4), np.float32)})
    finally:
        session.close()


@pytest.fixture(scope="module")
def rtx_engine(tmp_path_factory):
    fp = _need_gpu()
    try:
        import tensorrt_rtx as trt
    except (ImportError, OSError) as e:
        pytest.skip(f"TensorRT-RTX (tensorrt_rtx) is not installed: pip install 'trt-orchestrator[rtx]' ({e})")
    tmp = tmp_path_factory.mktemp("rtx")
    logger = trt.Logger(trt.Logger.ERROR)
    b = trt.Builder(logger)
    network = b.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    parser = trt.OnnxParser(network, logger)
    assert parser.parse_from_file(str(_tiny_onnx(tmp / "m.onnx")))
    config = b.create_builder_config()
    config.num_compute_capabilities = 1
    config.set_compute_capability(trt.ComputeCapability.SM86, 0)
    p = b.create_optimization_profile()
    p.set_shape("x", *PROFILE.shapes["x"])
    config.add_optimization_profile(p)
    plan = b.build_serialized_network(network, config)
    path = tmp / "engine.plan"
    path.write_bytes(bytes(plan))
    return path, fp, trt.__version__, tmp


def test_rtx_runtime_on_this_gpu(rtx_engine):
    """On an SM86 GPU the engine JITs and runs; elsewhere the refusal comes before deserialization."""
    path, fp, version, tmp = rtx_engine
    from trt_orchestrator_plugins.runtimes.tensorrt_rtx import runtime

    meta = _metadata("tensorrt-rtx", version, "8.6")
    compat = runtime.can_run(meta, fp)
    why = None if compat.ok else compat.reason
    if fp.compute_capability != "8.6":
        assert why is not None
        if fp.compute_capability == "9.0":
            assert "do not support compute capability 9.0 (Hopper)" in why
        # The RTX runtime's own header check agrees (get_engine_validity), before any deserialization.
        with pytest.raises(GateError, match="cannot run here"):
            runtime.load(path, meta, RuntimeOptions(device="cuda", cache_dir=tmp / "cache"))
        return
    assert why is None
    session = runtime.load(path, meta, RuntimeOptions(device="cuda", cache_dir=tmp / "cache"))
    try:
        x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
        np.testing.assert_array_equal(session.run({"x": x})["y"], np.maximum(x, 0))
    finally:
        session.close()
    assert list((tmp / "cache" / "rtx-runtime-cache").glob("sm86-rtx*.cache"))
