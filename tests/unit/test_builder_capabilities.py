"""Builder capabilities and plugin loading: pure answers, no heavy library imported."""

from __future__ import annotations

import subprocess
import sys

import pytest

from orchestrator import plugins
from orchestrator.contracts.builder import Builder, Transform
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.model import Target
from trt_orchestrator_plugins.builders import onnxruntime as ort_plugin
from trt_orchestrator_plugins.builders import tensorrt_rtx as rtx_plugin

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
    ("1.7.1.116", "1.7", True),
    ("1.7.1.116", "1.7.1.115", False),
    ("1.7.1.116", "1.6.0.23", False),
    ("1.7.1.116", "1.7.10", False),
])
def test_rtx_version_match_is_exact_on_the_components_given(installed, wanted, ok):
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
