"""Builder capabilities and plugin loading: pure answers, no heavy library imported."""

from __future__ import annotations

import subprocess
import sys

import onnx
import pytest
from onnx import TensorProto, helper

from orchestrator import plugins
from orchestrator.contracts.builder import Builder, Transform
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.model import BuilderOptions, Target
from orchestrator.errors import ManifestError
from orchestrator.manifest import load_manifest
from trt_orchestrator_plugins.builders import onnxruntime as ort_plugin
from trt_orchestrator_plugins.builders import tensorrt as trt_plugin
from trt_orchestrator_plugins.builders import tensorrt_rtx as rtx_plugin
from trt_orchestrator_plugins.builders import trtexec as trtexec_plugin

HEAVY = ("tensorrt_rtx", "onnxruntime", "onnxconverter_common")


def test_loading_plugins_capabilities_and_settings_import_no_heavy_library():
    code = (
        "import sys\n"
        "from orchestrator import plugins\n"
        "for name in ('tensorrt-rtx', 'onnxruntime'):\n"
        "    b = plugins.builder(name); b.capabilities('1.7.1.116')\n"
        "from orchestrator.core.model import PrecisionSpec\n"
        "for kind, p in (('fp16', 'fp16'), ('bf16', 'bf16'), ('int8-qdq', 'int8')):\n"
        "    plugins.transform(kind).settings(PrecisionSpec(p))\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]"


@pytest.mark.parametrize("name", ["tensorrt-rtx", "onnxruntime"])
def test_builders_load_through_entry_points(name):
    builder = plugins.builder(name)
    assert builder.name == name and isinstance(builder, Builder)


@pytest.mark.parametrize("kind", ["fp16", "bf16", "int8-qdq"])
def test_transforms_load_through_entry_points(kind):
    transform = plugins.transform(kind)
    assert transform.kind == kind and isinstance(transform, Transform)


def test_rtx_capabilities():
    caps = rtx_plugin.builder.capabilities("1.7.1.116")
    assert caps.native == frozenset()
    assert caps.via_transform == {"fp16", "bf16", "int8", "fp8"}
    assert caps.target_kinds == {"compute_capability", "compute_capability_list"}
    assert caps.needs_gpu is False and caps.supports_calibrator is False and caps.engine_suffix == ".plan"
    assert caps.runs_on == "RTX/Ampere+ GPUs with CC in the engine's list (8.0, 8.6, 8.9, 12.x); not 9.0/10.0"
    assert all(caps.can(p) for p in ("fp32", "fp16", "bf16", "int8", "fp8"))
    assert caps.native_missing_reason["fp16"].startswith(
        "TensorRT-RTX 1.7.1.116 has no FP16 builder flag: RTX networks are strongly typed only")
    assert set(caps.native_missing_reason) == {"fp16", "bf16", "int8", "fp8"}


def test_ort_capabilities():
    caps = ort_plugin.builder.capabilities("1.31.1")
    assert caps.native == frozenset() and caps.via_transform == {"fp16", "bf16", "int8"}
    assert caps.target_kinds == {"cpu", "cuda"} and caps.needs_gpu is False and caps.engine_suffix == ".onnx"
    assert not caps.can("fp8")
    assert "onnxruntime 1.31" in caps.runs_on


@pytest.mark.parametrize("installed,wanted,ok", [
    ("1.7.1.116", "1.7.1.116", True),
    ("1.7.1.116", "1.7", False),  # a loose target names no release (issue 23.17): validate refuses it
    ("1.7.1", "1.7.1.116", True),  # an installed version without a build number cannot tell builds apart
    ("1.7.1.116", "1.7.1.115", False),
    ("1.7.1.116", "1.6.0.23", False),
    ("1.7.1.116", "1.7.10", False),
])
def test_rtx_version_match_is_exact(installed, wanted, ok):
    assert rtx_plugin._version_matches(installed, wanted) is ok


def test_rtx_not_installed_reason(monkeypatch):
    monkeypatch.setattr(rtx_plugin, "_installed_version", lambda: None)
    target = Target(name="rtx", builder="tensorrt-rtx", builder_version="1.7.1.116")
    assert rtx_plugin.builder.available(RunnerFingerprint(os="linux", arch="x86_64"), target) == (
        "tensorrt-rtx 1.7.1.116 is not installed (pip install 'trt-orchestrator[rtx]')")


def test_ort_not_installed_reason():
    # the runner's fingerprint decides, not the machine asking (a shard's runner check runs elsewhere)
    target = Target(name="ort", builder="onnxruntime", builder_version="1.31", device="cpu")
    assert ort_plugin.builder.available(RunnerFingerprint(os="linux", arch="x86_64"), target) == (
        "onnxruntime 1.31 is not installed (pip install 'trt-orchestrator[ort]')")


def test_vendored_fp16_block_list_matches_the_installed_converter():
    float16 = pytest.importorskip("onnxconverter_common.float16")
    from trt_orchestrator_plugins.transforms.float16 import CONVERTER_DEFAULT_OP_BLOCK_LIST

    assert sorted(CONVERTER_DEFAULT_OP_BLOCK_LIST) == sorted(float16.DEFAULT_OP_BLOCK_LIST)


# --- issue 12: what each builder reads, applies, ties to a platform, calibrates and pins ---------------------------
def test_capabilities_per_builder_issue12():
    rtx = rtx_plugin.builder.capabilities("1.7.1.116")
    assert rtx.reads_options == {"optimization_level", "tiling_level", "workspace_mib"}
    assert rtx.extra_options == {} and rtx.platform_specific is False
    assert rtx.calibration_family is None and rtx.pins_timing_cache is False
    ort = ort_plugin.builder.capabilities("1.31.1")
    assert ort.reads_options == {"ort_optimization"}
    assert ort.extra_options == {} and ort.platform_specific is True
    assert ort.calibration_family is None and ort.pins_timing_cache is False
    trt = trt_plugin.builder.capabilities("10.13.3.9")
    assert "ort_optimization" not in trt.reads_options and {"extra", "timing_cache_pin"} <= trt.reads_options
    assert set(trt.extra_options) == {"avg_timing_iterations", "max_aux_streams", "sparse_weights", "tf32",
                                      "max_num_tactics"}
    assert trt.platform_specific and trt.calibration_family == "tensorrt" and trt.pins_timing_cache
    exe = trtexec_plugin.builder.capabilities("8.6.1.6")
    assert exe.calibration_family == "tensorrt" and not exe.pins_timing_cache and not exe.supports_calibrator


def test_a_tensorrt_option_no_longer_changes_an_onnxruntime_build_key():
    reads = ort_plugin.builder.capabilities("1.31.1").reads_options
    plain = BuilderOptions(ort_optimization="extended")
    tuned = BuilderOptions(ort_optimization="extended", optimization_level=5, workspace_mib=512,
                           version_compatible=True, timing_cache=False)
    assert plain.to_key(reads) == tuned.to_key(reads) == {"ort_optimization": "extended"}
    assert BuilderOptions(ort_optimization="basic").to_key(reads) != plain.to_key(reads)
    rtx_reads = rtx_plugin.builder.capabilities("1.7.1.116").reads_options
    # version_compatible / timing cache / ort_optimization do not rebuild RTX engines either
    assert tuned.to_key(rtx_reads) == {"optimization_level": 5, "tiling_level": None, "workspace_mib": 512}


MANIFEST = """\
manifest_version: 1
project: extras
models:
  - name: tiny
    version: "1"
    source: {path: ../tiny.onnx}
    inputs:
      x: {shape: [N, 4], profiles: {default: {min: [1, 4], opt: [2, 4], max: [4, 4]}}}
targets:
  - name: rtx
    builder: tensorrt-rtx
    builder_version: "1.7.1.116"
    compute_capability: "8.6"
    options: {extra: {anything: 1}}
  - name: cpu
    builder: onnxruntime
    builder_version: "1.31"
    device: cpu
    options: {extra: {max_aux_streams: 2}}
  - name: trt
    builder: tensorrt
    builder_version: "10.13.3.9"
    compute_capability: "8.9"
    options: {extra: {max_aux_streams: 2, max_aux_stream: 2}}
  - name: old-trtexec
    builder: trtexec
    builder_version: "10.1.0.27"
    compute_capability: "8.9"
    options: {extra: {max_num_tactics: 4}}
  - name: pinned-rtx
    builder: tensorrt-rtx
    builder_version: "1.7.1.116"
    compute_capability: "8.9"
    options: {timing_cache: {pin: true}}
"""


def test_unknown_extra_options_are_refused_at_validate_by_the_real_loader(tmp_path):
    """Through the manifest loader with the installed plugins' capabilities (what `orchestrate validate` runs)."""
    (tmp_path / "m").mkdir()
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "tiny", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "tiny.onnx"))
    path = tmp_path / "m" / "extras.yaml"
    path.write_text(MANIFEST)
    with pytest.raises(ManifestError) as e:
        load_manifest(path, capabilities=plugins.builder_capabilities, builder_names=plugins.names(plugins.BUILDERS),
                      builder_slug=plugins.builder_slug)
    found = {(p.path, p.message): p.hint for p in e.value.problems}
    assert found.pop(("targets[0].options.extra.anything",
                      "tensorrt-rtx 1.7.1.116 does not apply extra option 'anything'")) == \
        "tensorrt-rtx applies no extra options: remove options.extra"
    assert found.pop(("targets[1].options.extra.max_aux_streams",
                      "onnxruntime 1.31 does not apply extra option 'max_aux_streams'")) == \
        "onnxruntime applies no extra options: remove options.extra"
    hint = found.pop(("targets[2].options.extra.max_aux_stream",
                      "tensorrt 10.13.3.9 does not apply extra option 'max_aux_stream'"))
    assert hint.startswith("did you mean 'max_aux_streams'?") and "avg_timing_iterations: int >= 1" in hint
    hint = found.pop(("targets[3].options.extra.max_num_tactics",
                      "trtexec 10.1.0.27 does not apply extra option 'max_num_tactics'"))
    assert "max_aux_streams" in hint and "max_num_tactics" not in hint.split("applies:")[1]
    assert found.pop(("targets[4].options.timing_cache",
                      "tensorrt-rtx 1.7.1.116 keeps no timing cache to pin")) == \
        "remove timing_cache: {pin: true} from this target"
    assert found == {}  # max_aux_streams on tensorrt 10.13 is accepted
