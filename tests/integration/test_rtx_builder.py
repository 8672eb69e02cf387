"""The tensorrt-rtx builder for real: AOT engines built on this (GPU-less) machine with tensorrt-rtx."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest

from orchestrator import plugins
from orchestrator.contracts.builder import BuildRequest, OptimizationProfile, TransformRequest
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.model import BuilderOptions, PrecisionSpec, Target
from orchestrator.errors import BuildError, ManifestError
from orchestrator.manifest import load_manifest
from trt_orchestrator_plugins.builders.tensorrt_rtx import builder
from trt_orchestrator_plugins.transforms.float16 import fp16

trt = pytest.importorskip("tensorrt_rtx", reason="tensorrt-rtx is not installed (pip install 'trt-orchestrator[rtx]')")

pytestmark = pytest.mark.integration

RTX_VERSION = metadata.version("tensorrt-rtx")
NO_GPU = RunnerFingerprint(os="linux", arch="x86_64")

DET = "ch_PP-OCRv4_det_infer.onnx"
REC = "ch_PP-OCRv4_rec_infer.onnx"
# Small dynamic profiles keep the builds quick; H/W of det must be multiples of 32 (models.md).
DET_PROFILE = OptimizationProfile("default", {"x": ((1, 3, 64, 64), (1, 3, 320, 320), (2, 3, 640, 640))})
REC_PROFILES = (
    OptimizationProfile("batch", {"x": ((1, 3, 48, 64), (4, 3, 48, 320), (8, 3, 48, 320))}),
    OptimizationProfile("wide", {"x": ((1, 3, 48, 320), (1, 3, 48, 960), (1, 3, 48, 1600))}),
)
CC_SETS = {"sm86": ("8.6",), "sm89-sm120": ("8.9", "12.0")}


def target(ccs: tuple[str, ...], **options) -> Target:
    return Target(name="rtx", builder="tensorrt-rtx", builder_version=RTX_VERSION, compute_capabilities=ccs,
                  options=BuilderOptions(**options))


def request(onnx_path: Path, out_dir: Path, profiles, ccs=("8.6",), precision="fp32", **options) -> BuildRequest:
    t = target(ccs, **options)
    return BuildRequest(address=f"{onnx_path.stem}/{precision}@{'-'.join(ccs)}", build_key="test",
                        onnx_path=onnx_path, profiles=tuple(profiles), precision=PrecisionSpec(precision),
                        native_precision=False, target=t, options=t.options, out_dir=out_dir,
                        cache_dir=out_dir.parent / "cache", log=lambda line: None)


def assert_engine(result, ccs) -> bytes:
    data = result.engine_path.read_bytes()
    assert len(data) > 100_000
    assert data[:4] == b"vtrt"
    assert result.metadata["plan_header"]["version"] == RTX_VERSION
    assert result.metadata["compute_capabilities"] == list(ccs)
    assert result.metadata["strongly_typed"] is True
    assert result.builder_version == RTX_VERSION
    assert result.log_path.stat().st_size > 0
    return data


@pytest.fixture(scope="module")
def fp16_models(demo_models, tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("fp16")
    out = {}
    for name in (DET, REC):
        path = folder / name
        fp16.run(TransformRequest(kind="fp16", key=name, onnx_path=demo_models / name, out_path=path,
                                  precision=PrecisionSpec("fp16"), calibration=None, input_shapes={},
                                  input_dtypes={}, log=lambda line: None))
        out[name] = path
    return out


def build_pair(demo_models, fp16_models, out: Path, model: str, profiles, ccs) -> dict[str, int]:
    """fp32 from the original and fp16 from the converted model, same profiles and CCs; engine sizes."""
    sizes = {}
    for precision, source in (("fp32", demo_models / model), ("fp16", fp16_models[model])):
        result = builder.build(request(source, out / precision, profiles, ccs, precision))
        sizes[precision] = len(assert_engine(result, ccs))
        assert result.metadata["profile_count"] == len(profiles)
        assert result.metadata["profiles"] == [p.name for p in profiles]
        assert result.metadata["precision_via"] == ("transform" if precision == "fp16" else "none")
    assert sizes["fp16"] < 0.9 * sizes["fp32"], sizes  # the fp16 plan really holds fp16 weights
    return sizes


@pytest.mark.parametrize("ccs", CC_SETS.values(), ids=CC_SETS.keys())
def test_ppocr_det_fp32_and_fp16(demo_models, fp16_models, tmp_path, ccs):
    build_pair(demo_models, fp16_models, tmp_path, DET, (DET_PROFILE,), ccs)


def test_ppocr_rec_fp32_and_fp16_two_profiles_in_one_engine(demo_models, fp16_models, tmp_path):
    # rec builds are the slowest here (~2 s CPU each); one CC list with two profiles covers both features.
    build_pair(demo_models, fp16_models, tmp_path, REC, REC_PROFILES, CC_SETS["sm89-sm120"])


def test_several_profiles_in_one_engine_with_options(tiny_onnx, tmp_path):
    profiles = [
        OptimizationProfile("small", {"x": ((1, 3, 16, 16), (1, 3, 32, 32), (2, 3, 64, 64))}),
        OptimizationProfile("batch", {"x": ((4, 3, 32, 32), (16, 3, 32, 32), (32, 3, 32, 32))}),
        OptimizationProfile("large", {"x": ((1, 3, 128, 128), (1, 3, 256, 256), (1, 3, 512, 512))}),
    ]
    result = builder.build(request(tiny_onnx("multi"), tmp_path / "out", profiles, ("8.9",),
                                   optimization_level=1, tiling_level="fast", workspace_mib=256))
    assert_engine(result, ("8.9",))
    meta = result.metadata
    assert meta["profile_count"] == 3 and meta["profiles"] == ["small", "batch", "large"]
    assert meta["options"] == {"optimization_level": 1, "tiling_level": "fast", "workspace_mib": 256}
    assert [t["name"] for t in meta["io_tensors"]] == ["x", "y"]
    assert result.build_seconds > 0
    # Layer info: the inspector where the engine can be deserialized, else the builder's own listing; either way
    # the reason is recorded when the inspector could not run (no CUDA driver here).
    assert result.layer_info_path is not None and result.layer_info_path.stat().st_size > 0
    assert meta["layer_info"] in ("engine-inspector", "build-log")
    if meta["layer_info"] == "build-log":
        assert meta["layer_info_skipped"].startswith("engine inspector skipped")
    log = result.log_path.read_text()
    assert "[VERBOSE]" in log and "[INFO]" in log


def _ort_only_model(path: Path) -> Path:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"], name="dyn_quant_0"),
        helper.make_node("ConvInteger", ["xq", "w", "xz"], ["y"], name="conv_integer_0"),
    ]
    graph = helper.make_graph(
        nodes, "ort_only",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, ["N", 4, 6, 6])],
        [numpy_helper.from_array(np.ones((4, 3, 3, 3), np.uint8), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def test_ort_only_quantization_ops_fail_with_every_parser_error(tmp_path):
    model = _ort_only_model(tmp_path / "ort_only.onnx")
    # What the parser itself says, read straight from tensorrt_rtx, must all be in our error.
    logger = trt.Logger(trt.Logger.ERROR)
    network = trt.Builder(logger).create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    parser = trt.OnnxParser(network, logger)
    assert not parser.parse_from_file(str(model))
    expected = [(parser.get_error(i).node_name(), parser.get_error(i).node_operator(), parser.get_error(i).desc())
                for i in range(parser.num_errors)]
    assert {name for name, _, _ in expected} == {"dyn_quant_0", "conv_integer_0"}

    profile = OptimizationProfile("p", {"x": ((1, 3, 8, 8), (1, 3, 8, 8), (2, 3, 8, 8))})
    with pytest.raises(BuildError) as info:
        builder.build(request(model, tmp_path / "out", [profile]))
    text = str(info.value)
    assert "ONNX parser rejected ort_only.onnx (2 errors)" in text
    for name, op, desc in expected:
        line = next(ln for ln in text.splitlines() if repr(name) in ln)
        assert f"({op})" in line and desc in line and "UNSUPPORTED_NODE" in line
    assert "int8-qdq" in (info.value.hint or "")
    assert (tmp_path / "out" / "build.log").read_text().count("[ERROR]") >= 2


def test_unsupported_compute_capability_is_a_clear_error(tiny_onnx, tmp_path):
    profile = OptimizationProfile("p", {"x": ((1, 3, 8, 8), (1, 3, 8, 8), (1, 3, 8, 8))})
    with pytest.raises(BuildError, match=r"cannot target compute capability 9\.0 \(no ComputeCapability\.SM90\); "
                                         r"supported: .*SM86.*SM89"):
        builder.build(request(tiny_onnx("cc"), tmp_path / "out", [profile], ("8.6", "9.0")))


def test_profile_naming_an_unknown_input(tiny_onnx, tmp_path):
    profile = OptimizationProfile("p", {"images": ((1, 3, 8, 8),) * 3})
    with pytest.raises(BuildError, match=r"profile 'p' names input 'images'.*its inputs: x"):
        builder.build(request(tiny_onnx("unknown"), tmp_path / "out", [profile]))


def test_native_precision_is_refused(tiny_onnx, tmp_path):
    req = request(tiny_onnx("native"), tmp_path / "out", [], precision="fp16")
    req = BuildRequest(**{**req.__dict__, "native_precision": True})
    with pytest.raises(BuildError, match="has no FP16 builder flag"):
        builder.build(req)


def test_available_checks_the_exact_installed_version():
    assert builder.available(NO_GPU, target(("8.6",))) is None
    major_minor = ".".join(RTX_VERSION.split(".")[:2])  # a loose version names no release (issue 23.17)
    loose = builder.available(NO_GPU, Target(name="t", builder="tensorrt-rtx", builder_version=major_minor))
    assert loose == (f"installed tensorrt-rtx {RTX_VERSION} but target 't' wants {major_minor} (RTX engines load "
                     "only on the release that built them)")
    reason = builder.available(NO_GPU, Target(name="old", builder="tensorrt-rtx", builder_version="1.6.0.23"))
    assert reason == (f"installed tensorrt-rtx {RTX_VERSION} but target 'old' wants 1.6.0.23 "
                      "(RTX engines load only on the release that built them)")


def test_equally_named_dims_with_different_sizes_are_explained(demo_models, tmp_path):
    # PP-OCR cls declares H and W both as "?"; TensorRT reads them as one dim.
    profile = OptimizationProfile("cls", {"x": ((1, 3, 48, 192), (4, 3, 48, 192), (8, 3, 48, 192))})
    with pytest.raises(BuildError, match=r"dim '\?' in profile 'cls' min: x\[2\]=48, x\[3\]=192"):
        builder.build(request(demo_models / "ch_ppocr_mobile_v2.0_cls_infer.onnx", tmp_path / "out", [profile]))


# --- issue 12 --------------------------------------------------------------------------------------------------------
def test_real_aot_build_reports_no_timing_cache(tiny_onnx, tmp_path):
    profile = OptimizationProfile("p", {"x": ((1, 3, 8, 8), (1, 3, 16, 16), (2, 3, 32, 32))})
    result = builder.build(request(tiny_onnx("no_tc"), tmp_path / "out", [profile], ("8.6",)))
    assert_engine(result, ("8.6",))
    # RTX 1.2+ made the timing-cache APIs no-ops: nothing read, nothing written, no file
    assert (result.timing_cache_read, result.timing_cache_written, result.timing_cache_path) == (None, None, None)
    assert result.metadata["timing_cache"].startswith("not used: deprecated no-op since RTX 1.2")
    assert not (tmp_path / "cache").exists()  # no shared timing cache was created either


def test_extra_options_are_refused_at_build_too(tiny_onnx, tmp_path):
    profile = OptimizationProfile("p", {"x": ((1, 3, 8, 8),) * 3})
    with pytest.raises(BuildError, match=r"TensorRT-RTX applies no extra options; got \['anything'\]"):
        builder.build(request(tiny_onnx("extra"), tmp_path / "out", [profile], extra={"anything": 1}))


def test_rtx_target_with_an_extra_option_is_refused_at_validate(tiny_onnx, tmp_path):
    model = tiny_onnx("validate")
    manifest = tmp_path / "rtx.yaml"
    manifest.write_text(f"""\
manifest_version: 1
project: rtx-extra
models:
  - name: tiny
    version: "1"
    source: {{path: {model}}}
    inputs:
      x: {{shape: [N, 3, H, W], profiles: {{default: {{min: [1, 3, 8, 8], opt: [1, 3, 16, 16], max: [2, 3, 32, 32]}}}}}}
targets:
  - name: rtx
    builder: tensorrt-rtx
    builder_version: "{RTX_VERSION}"
    compute_capability: "8.6"
    options: {{extra: {{anything: 1}}}}
""")
    with pytest.raises(ManifestError) as e:
        load_manifest(manifest, capabilities=plugins.builder_capabilities,
                      builder_names=plugins.names(plugins.BUILDERS), builder_slug=plugins.builder_slug)
    (problem,) = e.value.problems
    assert problem.path == "targets[0].options.extra.anything"
    assert problem.message == f"tensorrt-rtx {RTX_VERSION} does not apply extra option 'anything'"
    assert problem.hint == "tensorrt-rtx applies no extra options: remove options.extra"
