"""The ``tensorrt-rtx`` runtime: TensorRT-RTX engines, JIT-compiled for this GPU on first load.

Everything but three steps is the ``tensorrt`` runtime's code (``TensorRTRuntime`` / ``TensorRTSession``):

1. preflight: ``Runtime.get_engine_validity(header)`` (RTX 1.1+) before deserializing, which reads only the
   header and names the cause (VERSION_MISMATCH, UNSUPPORTED_CC, OLD_CUDA_DRIVER, ...). It needs a CUDA driver
   (without one it answers ``(INVALID, 0)``), which a load needs anyway.
2. the context comes from a runtime config (``engine.create_runtime_config()``) carrying a runtime cache, so
   the JIT (typically under 15 s) is paid once per (compute capability, RTX version);
3. on close the runtime cache is saved under ``options.cache_dir`` (lock + atomic replace, as timing caches).

``can_run`` uses ``_trt.compat``: the engine's CC list must hold this GPU's CC, and RTX runtimes refuse
CC 9.0 (Hopper) outright (measured on a lent H100: "The engine cannot run on this GPU, which has compute
capability 9.0. Supported compute capabilities: 8.0 8.6 8.9 12.0 12.1 >12.0").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.contracts.runtime import RuntimeOptions
from orchestrator.core.artifact import EngineDescriptor
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.select import Compat
from orchestrator.errors import GateError
from trt_orchestrator_plugins import _cuda
from trt_orchestrator_plugins._trt import compat, install, timing_cache
from trt_orchestrator_plugins.runtimes.tensorrt import TensorRTRuntime, _RuntimeLog


def runtime_cache_path(cache_dir: Path, compute_capability: str, rtx_version: str) -> Path:
    cc = compute_capability.replace(".", "")
    return Path(cache_dir) / "rtx-runtime-cache" / f"sm{cc}-rtx{rtx_version}.cache"


def invalidity_names(trt: Any, mask: int) -> list[str]:
    """Decode the ``EngineInvalidityDiagnostics`` bitmask into member names (RTX api_usage.py L310-325)."""
    names = []
    for name, member in trt.EngineInvalidityDiagnostics.__members__.items():
        bit = int(member)
        if bit and mask & bit == bit:
            names.append(name)
    return names


class TensorRTRTXRuntime(TensorRTRuntime):
    name = "tensorrt-rtx"
    slug = "rtx"
    triton = None  # Triton's tensorrt_plan platform loads TensorRT plans, not TensorRT-RTX engines
    module = "tensorrt_rtx"
    flavour = "tensorrt-rtx"
    distributions = install.RTX_DISTRIBUTIONS
    label = "TensorRT-RTX"
    missing = "TensorRT-RTX (tensorrt_rtx) is not installed: pip install 'trt-orchestrator[rtx]'"

    def can_run(self, engine: EngineDescriptor, fingerprint: RunnerFingerprint) -> Compat:
        return compat.check_rtx(engine, fingerprint, self.name)

    def preflight(self, trt: Any, runtime: Any, data: bytes, engine_path: Path, log: _RuntimeLog) -> None:
        try:
            _cuda.device_compute_capability()
        except (_cuda.CudaCallError, _cuda.CudaUnavailable) as e:
            raise GateError(f"{engine_path}: TensorRT-RTX engines need a CUDA driver and GPU: {e}") from e
        try:
            header = data[: int(runtime.engine_header_size)]
            validity, diagnostics = runtime.get_engine_validity(header)
        except AttributeError:  # RTX 1.0 has no validity API; deserialization will tell
            return
        if validity == trt.EngineValidity.INVALID:
            causes = ", ".join(invalidity_names(trt, int(diagnostics))) or "no diagnostics"
            raise GateError(f"{engine_path}: TensorRT-RTX {trt.__version__} says this engine cannot run here "
                            f"({causes})" + (f"\n{log.tail()}" if log.lines else ""))
        if validity == trt.EngineValidity.SUBOPTIMAL:
            log.lines.append(f"engine validity SUBOPTIMAL: {', '.join(invalidity_names(trt, int(diagnostics)))}")

    def create_context(self, trt: Any, engine: Any, options: RuntimeOptions, descriptor: EngineDescriptor) -> Any:
        config = engine.create_runtime_config()
        cache = cache_file = None
        if options.cache_dir is not None:
            cache_file = runtime_cache_path(options.cache_dir, _cuda.device_compute_capability(),
                                            str(trt.__version__))
            cache = config.create_runtime_cache()
            blob = timing_cache.load(cache_file)
            if blob:
                cache.deserialize(blob)
            config.set_runtime_cache(cache)
        config.set_execution_context_allocation_strategy(trt.ExecutionContextAllocationStrategy.USER_MANAGED)
        context = engine.create_execution_context(config)  # the JIT happens here
        if context is None:
            raise GateError("TensorRT-RTX: could not create an execution context (JIT failed)")
        size = int(engine.device_memory_size_v2)
        activation = _cuda.DeviceBuffer(size)
        context.set_device_memory(activation.ptr, size)
        if cache is None or cache_file is None:
            return context, activation, None

        def save_runtime_cache(_session: Any) -> None:
            # This run's cache replaces the old one: RTX reuses a cache only for the same SM and RTX/CUDA
            # versions >= its own, which the file name pins, and the new cache holds the old one's kernels.
            blob = bytes(memoryview(cache.serialize()))
            timing_cache.merge_and_save(cache_file, lambda _previous: blob)

        return context, activation, save_runtime_cache


runtime = TensorRTRTXRuntime()
