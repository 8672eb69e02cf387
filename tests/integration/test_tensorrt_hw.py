"""Real-hardware tests of the ``tensorrt`` builder and runtime, and of the ``tensorrt-rtx`` runtime.

They need an NVIDIA GPU, cuda-python and (for TensorRT proper) the ``tensorrt`` wheels, which come only from
NVIDIA's index. Where any of those is missing they SKIP, naming what is missing; nothing here is faked.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from orchestrator import plugins
from orchestrator.contracts.builder import BuildRequest, CalibrateRequest, OptimizationProfile
from orchestrator.contracts.runtime import RuntimeOptions
from orchestrator.core.artifact import EngineDescriptor, EngineTarget
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.model import BuilderOptions, DataSource, PrecisionSpec, Target
from orchestrator.core.versions import parse_version
from orchestrator.errors import GateError
from trt_orchestrator_plugins._trt import plan_header as engine_header
from trt_orchestrator_plugins._trt import timing_cache

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
                    compute_capabilities=(fp.compute_capability,), platform=fp.platform)
    assert builder.available(fp, target) is None
    request = BuildRequest(address="tiny/fp32/default", build_key="k", onnx_path=_tiny_onnx(tmp / "m.onnx"),
                           profiles=(PROFILE,), precision=PrecisionSpec("fp32"), native_precision=False,
                           target=target, options=BuilderOptions(), out_dir=tmp / "out", cache_dir=tmp / "cache",
                           log=lambda _line: None)
    result = builder.build(request)
    return result, fp, trt.__version__, request


def test_tensorrt_builder_writes_engine_log_layer_info_and_timing_cache(tensorrt_engine):
    result, fp, version, _request = tensorrt_engine
    assert result.builder_version == version
    header = engine_header.read_header_file(result.engine_path)
    assert header.flavour == "tensorrt"
    assert engine_header.check_header(header, _metadata("tensorrt", version, fp.compute_capability)) is None
    assert result.layer_info_path is not None and result.layer_info_path.read_text().strip()
    assert result.log_path.read_text()
    caches = list((result.engine_path.parent.parent / "cache" / "timing-cache").glob("*.cache"))
    assert len(caches) == 1 and caches[0].stat().st_size > 0
    # a fresh cache dir: nothing read; what was written is that file
    assert result.timing_cache_read is None and result.timing_cache_path == caches[0]
    assert result.timing_cache_written == timing_cache.digest_of_file(caches[0])


def test_tensorrt_pinned_rebuild_from_the_cache_it_wrote(tensorrt_engine, tmp_path):
    """The same network on the same GPU, pinned to the cache the first build wrote: every tactic is in it, so even
    with ERROR_ON_TIMING_CACHE_MISS (10.0+) the build succeeds, and the shared cache is not touched."""
    result, _fp, _version, request = tensorrt_engine
    from trt_orchestrator_plugins.builders.tensorrt import builder

    pinned = tmp_path / "published.cache"
    pinned.write_bytes(Path(result.timing_cache_path).read_bytes())
    shared_before = Path(result.timing_cache_path).read_bytes()
    again = builder.build(replace(request, out_dir=tmp_path / "out", timing_cache=pinned,
                                  options=replace(request.options, timing_cache_pin=True)))
    assert again.timing_cache_read == timing_cache.digest(pinned.read_bytes())
    assert again.timing_cache_path == tmp_path / "out" / timing_cache.PINNED_WORK_FILE
    assert again.metadata["timing_cache"]["mode"] == "pinned"
    assert Path(result.timing_cache_path).read_bytes() == shared_before


def test_tensorrt_int8_calibration_cache_then_a_build_that_reads_it(tensorrt_engine, tmp_path):
    result, _fp, version, request = tensorrt_engine
    if parse_version(version) >= (11,):
        pytest.skip(f"TensorRT {version} has no int8 calibrators (removed in 11.0): nothing to calibrate natively")
    from trt_orchestrator_plugins.builders.tensorrt import builder

    cache = tmp_path / "calibration.cache"
    facts = builder.calibrate(CalibrateRequest(
        key="ck", onnx_path=request.onnx_path, out_path=cache, precision=PrecisionSpec("int8"),
        calibration=DataSource(samples=4), input_shapes={"x": (2, 4)}, input_dtypes={"x": "float32"},
        log=lambda _line: None))
    assert cache.read_bytes().startswith(f"{facts['header']}\n".encode()) and facts["batches"] == 4
    assert facts["header"].endswith("-EntropyCalibration2")
    built = builder.build(replace(request, out_dir=tmp_path / "int8", precision=PrecisionSpec("int8"),
                                  native_precision=True, calibration_cache=cache))
    assert built.metadata["calibration"]["source"] == "cache"
    assert built.engine_path.stat().st_size > 0


def test_tensorrt_runtime_runs_and_times_with_cuda_events(tensorrt_engine, tmp_path):
    result, fp, version, _request = tensorrt_engine
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
