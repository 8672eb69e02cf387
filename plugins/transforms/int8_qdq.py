"""int8 by static calibration into explicit Q/DQ nodes: the form strongly typed builders (TensorRT-RTX,
TensorRT 10.12+/11) and onnxruntime both take (TensorRT 11 replaces BuilderFlag.INT8 and the calibrators with
"Explicit quantization with Q/DQ nodes": NVIDIA's 10.x-to-11.x migration reference,
https://docs.nvidia.com/deeplearning/tensorrt/latest/api/migration/tensorrt-10x-to-11x-python-api-reference.html).

``onnxruntime.quantization.quantize_static`` with QDQ format, per-channel symmetric int8 weights and
symmetric int8 activations; ``QuantizeBias: False`` because ORT otherwise quantizes biases to int32 and
TensorRT's DequantizeLinear rejects Int32 inputs (measured with the TensorRT-RTX 1.7 ONNX parser: "input has type
Int32 but must have type ..."; with ``QuantizeBias: False`` the same model builds).
``quant_pre_process`` runs first with ``skip_symbolic_shape=True`` (symbolic shape inference needs sympy).

Calibration feeds come from the manifest's DataSource at ``request.input_shapes`` (``_data.py``); random feeds
calibrate badly (measured: an int8 classifier calibrated on random data agreed with fp32 on 62-88% of top-1
labels) and the parity gate is what catches that.

Calibration caches. ``calibrate()`` computes the activation ranges once and writes them as onnxruntime's own
calibration cache (``quantize_static(calibration_cache_path=...)``, JSON of tensor ranges with the method it was
made with); ``run()`` with ``request.calibration_cache`` quantizes from that cache and reads no data. Both run the
same pre-processing, so the cache's tensor names are the ones the quantizer looks up. onnxruntime versions
without ``calibration_cache_path`` are refused with the version to install.
"""

from __future__ import annotations

import inspect
import tempfile
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from orchestrator.contracts.builder import CalibrateRequest, TransformRequest
from orchestrator.core.model import PrecisionSpec
from orchestrator.errors import BuildError
from trt_orchestrator_plugins._onnx.data import iter_samples
from trt_orchestrator_plugins._onnx.io import (
    EXTERNAL_DATA_THRESHOLD,
    check_loadable,
    load_model,
    model_bytes,
    raise_if_no_space,
    save_model,
)
from trt_orchestrator_plugins._onnx.qdq import require_quantized

EXTRA_OPTIONS = {"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False}
# Only the weighted ops TensorRT runs in int8 get Q/DQ (what NVIDIA ModelOpt's int8 ONNX path quantizes first).
# Quantizing everything ORT can (Add, Mul, ...) also turns scalar constants such as HardSwish's "+3" into int8
# initializers shared by many Adds, which TensorRT-RTX 1.7 rejects: "Quantized constant (Constant@81_quantized)
# is only allowed before DQ or PLUGIN_V2 or kPLUGIN_V3 node" (measured on PP-OCR cls).
OP_TYPES_TO_QUANTIZE = ("Conv", "ConvTranspose", "Gemm", "MatMul")
PER_CHANNEL_OPSET = 13
# The share of the nodes of OP_TYPES_TO_QUANTIZE that must come out with Q/DQ inputs, unless the manifest says
# (precisions[].min_quantized_share): onnxruntime quantizes every such node it can (all of them in the four demo
# models), so fewer than half means the model is not one int8 helps (_onnx/qdq.py).
DEFAULT_MIN_QUANTIZED_SHARE = 0.5
CALIBRATION_METHODS = {"entropy": "Entropy", "percentile": "Percentile", "minmax": "MinMax"}


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _at_least_opset13(path: Path, tmp: Path, large: bool) -> tuple[Path, int | None]:
    """Per-channel DequantizeLinear needs its ``axis`` attribute, added in opset 13; ORT writes it regardless of
    the model's opset, giving "Unrecognized attribute: axis" on opset-11 models (PP-OCR cls). Upgrade first with
    the ONNX version converter (it rewrites ops whose signature changed, e.g. Squeeze/ReduceSum axes)."""
    import onnx
    from onnx import version_converter

    model = onnx.load(str(path), load_external_data=False)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None or opset >= PER_CHANNEL_OPSET:
        return path, None
    upgraded = version_converter.convert_version(load_model(path), PER_CHANNEL_OPSET)
    out = tmp / "opset13.onnx"
    save_model(upgraded, out)
    return out, opset


def _reader(samples: list[dict]):
    """A CalibrationDataReader over already-read feeds (the ORT base class is imported lazily)."""
    from onnxruntime.quantization import CalibrationDataReader

    class _Feeds(CalibrationDataReader):
        def __init__(self) -> None:
            self._it = iter(samples)

        def get_next(self):
            return next(self._it, None)

        def rewind(self) -> None:
            self._it = iter(samples)

    return _Feeds()


def _ort_quantization() -> tuple[Callable[..., Any], Any, Any, Any, Callable[..., Any]]:
    try:
        from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
        from onnxruntime.quantization.shape_inference import quant_pre_process
    except ImportError as e:
        raise BuildError(f"cannot import onnxruntime.quantization: {e}",
                         hint="pip install 'trt-orchestrator[transforms]'") from e
    return quantize_static, CalibrationMethod, QuantFormat, QuantType, quant_pre_process


class Int8QdqTransform:
    kind = "int8-qdq"
    # distributions whose versions change this transform's output (they go into transform keys)
    tools = ("onnx", "onnxruntime")
    # the recipe version (a build-key input): bump it in the change that makes this plugin build other bytes
    recipe = "1"

    def settings(self, precision: PrecisionSpec) -> dict:
        return {
            "kind": self.kind,
            "method": "onnxruntime.quantization.quantize_static",
            "pre_process": "quant_pre_process(skip_symbolic_shape=True)",
            "quant_format": "QDQ",
            "per_channel": True,
            "op_types_to_quantize": list(OP_TYPES_TO_QUANTIZE),
            "activation_type": "QInt8",
            "weight_type": "QInt8",
            "calibrate_method": precision.calibration_method,
            "extra_options": dict(EXTRA_OPTIONS),
            "onnxruntime": _version("onnxruntime") or _version("onnxruntime-gpu"),
            "onnx": _version("onnx"),
        }

    def run(self, request: TransformRequest) -> dict:
        started = time.perf_counter()
        out_path = Path(request.out_path)
        cache = Path(request.calibration_cache) if request.calibration_cache is not None else None
        samples: list[dict] = []
        if cache is None:
            samples = list(iter_samples(request.calibration, request.input_shapes, request.input_dtypes))
        opset_from = self._quantize(request.onnx_path, out_path, request.precision, samples, cache, read_cache=True)
        check_loadable(out_path, f"int8 Q/DQ calibration of {request.onnx_path.name}")
        share = request.precision.min_quantized_share
        facts: dict[str, Any] = require_quantized(
            out_path, what=f"int8-qdq of {request.onnx_path.name}", op_types=OP_TYPES_TO_QUANTIZE,
            min_share=DEFAULT_MIN_QUANTIZED_SHARE if share is None else share).to_facts()
        if opset_from is not None:
            facts["opset_upgraded"] = [opset_from, PER_CHANNEL_OPSET]
        facts.update(samples=len(samples), calibrate_method=request.precision.calibration_method,
                     input_shapes={k: list(v) for k, v in request.input_shapes.items()},
                     seconds=round(time.perf_counter() - started, 3))
        source = (f"the calibration cache {cache.name} (no data read)" if cache is not None
                  else f"{len(samples)} calibration samples ({facts['calibrate_method']})")
        request.log(f"int8-qdq: {facts['quantize_nodes']} Q / {facts['dequantize_nodes']} DQ nodes from "
                    f"{source} in {facts['seconds']}s")
        return facts

    def calibrate(self, request: CalibrateRequest) -> dict[str, Any]:
        """Compute the activation ranges over the calibration data and write them to ``request.out_path``."""
        started = time.perf_counter()
        samples = list(iter_samples(request.calibration, request.input_shapes, request.input_dtypes))
        out = Path(request.out_path)
        with tempfile.TemporaryDirectory(dir=out.parent, prefix=".calib-") as tmp:
            self._quantize(request.onnx_path, Path(tmp) / "discarded.onnx", request.precision, samples, out,
                           read_cache=False)
        if not out.is_file():
            raise BuildError(f"onnxruntime wrote no calibration cache for {request.onnx_path.name}")
        facts = {"samples": len(samples), "calibrate_method": request.precision.calibration_method,
                 "input_shapes": {k: list(v) for k, v in request.input_shapes.items()},
                 "seconds": round(time.perf_counter() - started, 3)}
        request.log(f"int8-qdq calibration: ranges of {request.onnx_path.name} from {len(samples)} samples "
                    f"({facts['calibrate_method']}) in {facts['seconds']}s")
        return facts

    def _quantize(self, onnx_path: Path, out_path: Path, precision: PrecisionSpec, samples: list[dict],
                  cache: Path | None, *, read_cache: bool) -> int | None:
        """quant_pre_process, then quantize_static from ``samples`` or (``read_cache``) from ``cache`` alone;
        with ``cache`` and not ``read_cache`` the computed ranges are written there. The opset upgraded from."""
        quantize_static, CalibrationMethod, QuantFormat, QuantType, quant_pre_process = _ort_quantization()
        method = CALIBRATION_METHODS.get(precision.calibration_method)
        if method is None:
            raise BuildError(f"unknown calibration method {precision.calibration_method!r}; "
                             f"use one of {', '.join(CALIBRATION_METHODS)}")
        cache_args: dict[str, Any] = {}
        if cache is not None:
            if "calibration_cache_path" not in inspect.signature(quantize_static).parameters:
                raise BuildError(f"onnxruntime {_version('onnxruntime') or _version('onnxruntime-gpu')} cannot "
                                 "read or write calibration caches (quantize_static has no calibration_cache_path)",
                                 hint="install onnxruntime 1.31 or newer (the demo extra pins it)")
            cache_args["calibration_cache_path"] = str(cache)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        large = model_bytes(onnx_path) > EXTERNAL_DATA_THRESHOLD
        with tempfile.TemporaryDirectory(dir=out_path.parent, prefix=".int8-") as tmp:
            prepared = Path(tmp) / "prepared.onnx"
            try:
                source, opset_from = _at_least_opset13(Path(onnx_path), Path(tmp), large)
                quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True,
                                  save_as_external_data=large, all_tensors_to_one_file=True)
                quantize_static(
                    str(prepared), str(out_path), None if read_cache and cache is not None else _reader(samples),
                    quant_format=QuantFormat.QDQ,
                    op_types_to_quantize=list(OP_TYPES_TO_QUANTIZE),
                    per_channel=True,
                    activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8,
                    calibrate_method=getattr(CalibrationMethod, method),
                    use_external_data_format=large,
                    extra_options=dict(EXTRA_OPTIONS),
                    **cache_args,
                )
            except BuildError:
                raise
            except Exception as e:  # ORT raises Fail/InvalidArgument/ValueError from calibration sessions
                raise_if_no_space(e, out_path, "the int8 Q/DQ model")
                what = "quantization from the calibration cache" if read_cache and cache else "calibration"
                raise BuildError(f"int8 Q/DQ {what} of {Path(onnx_path).name} failed: "
                                 f"{type(e).__name__}: {e}") from e
        return opset_from


int8_qdq = Int8QdqTransform()
