"""Literal builder knowledge for the manifest tests: what the real plugins are expected to say, written out,
so the checks are tested without any plugin installed."""

from __future__ import annotations

from orchestrator.contracts.builder import BuilderCapabilities

BUILDER_NAMES = ("onnxruntime", "tensorrt", "tensorrt-rtx", "trtexec")
_QDQ = frozenset({"fp16", "bf16", "int8", "fp8"})
_WEAK_TYPING_GONE = "TensorRT 11.0 removed BuilderFlag.FP16/INT8/BF16/FP8: strongly typed only"


def _version_problem(name: str, version: str) -> tuple[str, str] | None:
    """TensorRT-family builders name one release exactly (major.minor.patch.build), as the real plugins say."""
    if name in ("tensorrt", "trtexec", "tensorrt-rtx") and len(version.split(".")) < 4:
        return f"builder_version {version!r} is not an exact release", "name it as major.minor.patch.build"
    return None


def capabilities(name: str, version: str) -> BuilderCapabilities | None:
    caps = _capabilities(name, version)
    if caps is None or _version_problem(name, version) is None:
        return caps
    return BuilderCapabilities(**{**caps.__dict__, "version_problem": _version_problem(name, version)})


def _capabilities(name: str, version: str) -> BuilderCapabilities | None:
    major = int(version.split(".")[0]) if version.split(".")[0].isdigit() else 0
    if name == "tensorrt-rtx":
        return BuilderCapabilities(
            native=frozenset(), via_transform=_QDQ,
            target_kinds=frozenset({"compute_capability", "compute_capability_list"}), needs_gpu=False,
            runs_on="RTX/Ampere+ GPUs of the AOT compute capabilities",
            native_missing_reason={p: "TensorRT-RTX builds strongly typed networks only" for p in _QDQ})
    if name in ("tensorrt", "trtexec"):
        if major >= 11:
            return BuilderCapabilities(
                native=frozenset(), via_transform=_QDQ,
                target_kinds=frozenset({"compute_capability", "hardware_compatible"}), needs_gpu=True,
                runs_on="the same compute capability and TensorRT version",
                native_missing_reason={p: _WEAK_TYPING_GONE for p in _QDQ})
        return BuilderCapabilities(
            native=frozenset({"fp16", "bf16", "int8", "fp8"}), via_transform=_QDQ,
            target_kinds=frozenset({"compute_capability", "hardware_compatible"}), needs_gpu=True,
            runs_on="the same compute capability and TensorRT version", supports_calibrator=True,
            extra_options={"max_aux_streams": "config.max_aux_streams"}, calibration_family="tensorrt")
    if name == "onnxruntime":
        return BuilderCapabilities(
            native=frozenset(), via_transform=frozenset({"fp16", "int8"}),
            target_kinds=frozenset({"cpu", "cuda"}), needs_gpu=False, runs_on="anywhere (CPU EP)",
            engine_suffix=".onnx", reads_options=frozenset({"ort_optimization"}))
    return None


SLUGS = {"tensorrt": "trt", "trtexec": "trtexec", "tensorrt-rtx": "rtx", "onnxruntime": "ort"}


def slug(builder: str) -> str:
    """The address slugs the first-party builders declare."""
    return SLUGS.get(builder, builder)
