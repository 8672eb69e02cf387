"""The ``tensorrt`` runtime, and the session code it shares with ``tensorrt-rtx``.

Order of a load: compatibility is decided from the descriptor first
(``_trt.compat``), then the plan's own header is checked (``_trt.plan_header``), and only then are the bytes
deserialized. The session uses the tensor-name API (8.5+): ``num_io_tensors``,
``get_tensor_name/mode/dtype``, ``set_input_shape``, ``set_tensor_address``, ``execute_async_v3(int stream)``;
device memory is user-managed, version-aware: 10.1+ ``USER_MANAGED`` + ``device_memory_size_v2`` +
``set_device_memory``; 8.6 ``create_execution_context_without_device_memory`` + ``device_memory``
(Polygraphy gates these at 10.1: NVIDIA/TensorRT tools/Polygraphy/polygraphy/backend/trt/runner.py; the 10.x and
11.x surfaces in tests/conformance/data say which release has which). Host buffers are pinned; timing uses CUDA
events. ``refit`` puts weights into stripped and refittable plans (``_trt.refit``; the RTX runtime inherits it).

The benchmark's device series replays the enqueue as a CUDA graph, as trtexec ``--useCudaGraph`` does and NVIDIA's
Developer Guide ("CUDA Graphs") shows: one ``execute_async_v3`` outside capture after the shapes are set (it updates
the context's internal state), then capture one enqueue on the session's stream, instantiate, and time
``cudaGraphLaunch`` between CUDA events. A short engine is launch-bound: replaying one graph keeps the host's
per-kernel launch jitter out of the device time. A graph is captured per set of bound buffers (shapes and
addresses); when capture is refused (an engine with work that cannot be captured) the series is timed eagerly and
``Timing.extra["cuda_graph"]`` says why, as trtexec falls back after "The CUDA graph capture on the stream has failed".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.atomic import write_bytes_atomic
from orchestrator.contracts.runtime import RefitRequest, RefitResult, RuntimeOptions, Timing, TritonBackend
from orchestrator.core.artifact import EngineDescriptor
from orchestrator.core.fingerprint import InstalledRuntime, RunnerFingerprint
from orchestrator.core.select import Compat
from orchestrator.errors import GateError
from orchestrator.weights_file import GRAPH_NAME
from trt_orchestrator_plugins import _cuda
from trt_orchestrator_plugins._trt import compat, install, plan_header
from trt_orchestrator_plugins._trt.config import memory_api
from trt_orchestrator_plugins._trt.refit import refit_plan


class _RuntimeLog:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def tail(self, n: int = 20) -> str:
        return "\n".join(self.lines[-n:])


def _logger(trt: Any, sink: _RuntimeLog) -> Any:
    class _Logger(trt.ILogger):
        def __init__(self) -> None:
            trt.ILogger.__init__(self)

        def log(self, sev: Any, msg: str) -> None:
            if int(sev) <= int(trt.ILogger.Severity.WARNING):
                sink.lines.append(f"[{getattr(sev, 'name', sev)}] {msg}")

    return _Logger()


class _Io:
    """Pinned host + device buffer of one I/O tensor at one shape."""

    def __init__(self, name: str, shape: tuple[int, ...], dtype: np.dtype):
        self.name, self.shape, self.dtype = name, shape, dtype
        self.host = _cuda.PinnedBuffer(shape, dtype)
        self.device = _cuda.DeviceBuffer(self.host.nbytes)

    def free(self) -> None:
        self.host.free()
        self.device.free()


class TensorRTSession:
    """One engine, one execution context, one stream. Shared by the tensorrt and tensorrt-rtx runtimes."""

    def __init__(self, trt: Any, engine: Any, context: Any, activation: _cuda.DeviceBuffer, stream: _cuda.Stream,
                 label: str, on_close: Any = None):
        self.trt, self.engine, self.context = trt, engine, context
        self.activation, self.stream, self.label = activation, stream, label
        self._on_close = on_close
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        is_input = {n: engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT for n in names}
        self.tf32 = True  # TensorRT enables BuilderFlag.TF32 by default: fp32 layers may run in TF32
        self.input_names = tuple(n for n in names if is_input[n])
        self.output_names = tuple(n for n in names if not is_input[n])
        self.dtypes = {n: self._np_dtype(n) for n in names}
        self._io: dict[str, _Io] = {}
        self._graphs: dict[tuple, _cuda.CudaGraph] = {}  # per bound buffers (names, shapes, device addresses)
        self._graph_refused: str | None = None

    def _np_dtype(self, name: str) -> np.dtype:
        dt = self.engine.get_tensor_dtype(name)
        try:
            return np.dtype(self.trt.nptype(dt))
        except TypeError as e:  # BF16 / FP8 / INT4 have no numpy type (common_runtime.py)
            raise GateError(f"{self.label}: tensor {name!r} has type {dt}, which has no numpy equivalent; "
                            "keep model I/O in fp32 (keep_io_types)") from e

    # -- buffers ---------------------------------------------------------------------------------------------
    def _buffer(self, name: str, shape: tuple[int, ...]) -> _Io:
        io = self._io.get(name)
        if io is None or io.shape != shape:
            if io is not None:
                self._drop_graphs()  # a graph holds the old addresses
                io.free()
            io = _Io(name, shape, self.dtypes[name])
            self._io[name] = io
        self.context.set_tensor_address(name, io.device.ptr)
        return io

    def _prepare(self, inputs: Mapping[str, np.ndarray]) -> tuple[list[_Io], list[_Io]]:
        missing = set(self.input_names) - set(inputs)
        if missing:
            raise GateError(f"{self.label}: missing inputs {sorted(missing)}")
        ins = []
        for name in self.input_names:
            arr = np.asarray(inputs[name])
            shape = tuple(int(d) for d in arr.shape)
            if not self.context.set_input_shape(name, shape):
                raise GateError(f"{self.label}: input {name!r} shape {list(shape)} is outside the engine's "
                                "optimization profile")
            io = self._buffer(name, shape)
            np.copyto(io.host.array, arr.astype(io.dtype, copy=False))
            ins.append(io)
        try:
            unresolved = self.context.infer_shapes()
        except AttributeError:
            unresolved = []
        if unresolved:
            raise GateError(f"{self.label}: TensorRT could not infer the shapes of {list(unresolved)}")
        outs = []
        for name in self.output_names:
            shape = tuple(int(d) for d in self.context.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                raise GateError(f"{self.label}: output {name!r} has an unresolved shape {list(shape)}")
            outs.append(self._buffer(name, shape))
        return ins, outs

    def _enqueue(self) -> None:
        if not self.context.execute_async_v3(self.stream.handle):
            raise GateError(f"{self.label}: execute_async_v3 returned False")

    def _drop_graphs(self) -> None:
        for graph in self._graphs.values():
            graph.destroy()
        self._graphs.clear()

    def _launcher(self, ins: list[_Io], outs: list[_Io]) -> tuple[Callable[[], None], str]:
        """(one run of the engine, how it runs): a captured CUDA graph's launch, or the eager enqueue where capture
        was refused (the reason is kept: the engine will not become capturable in this session)."""
        key = tuple((io.name, io.shape, io.device.ptr) for io in ins + outs)
        graph = self._graphs.get(key)
        if graph is None and self._graph_refused is None:
            self._enqueue()  # outside capture first: the context sets up its shape-dependent state
            self.stream.synchronize()
            graph = _cuda.CudaGraph()
            try:
                graph.capture(self.stream, self._enqueue)
                self._graphs[key] = graph
            except (_cuda.CudaCallError, GateError) as e:
                graph.destroy()
                graph = None
                self._graph_refused = f"refused, timed eagerly: {e}"
        if graph is None:
            return self._enqueue, self._graph_refused or "refused"
        return (lambda: graph.launch(self.stream)), "replayed"

    # -- Session protocol ------------------------------------------------------------------------------------
    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            ins, outs = self._prepare(inputs)
            for io in ins:
                _cuda.copy_htod_async(io.device.ptr, io.host, self.stream)
            self._enqueue()
            for io in outs:
                _cuda.copy_dtoh_async(io.host, io.device.ptr, self.stream)
            self.stream.synchronize()
        except _cuda.CudaCallError as e:
            raise GateError(f"{self.label}: {e}") from e
        return {io.name: io.host.array.copy() for io in outs}

    def benchmark(self, inputs: Mapping[str, np.ndarray], *, warmup: int, iterations: int,
                  time_budget_s: float | None) -> Timing:
        """CUDA-event timing: compute-only (between H2D and D2H: a CUDA-graph replay where capture works) and
        end-to-end (H2D + compute + D2H)."""
        try:
            ins, outs = self._prepare(inputs)
            for io in ins:
                _cuda.copy_htod_async(io.device.ptr, io.host, self.stream)
            launch, graph_note = self._launcher(ins, outs)
            events = [_cuda.Event() for _ in range(4)]
            try:
                compute: list[float] = []
                e2e: list[float] = []
                deadline = time.monotonic() + time_budget_s if time_budget_s else None
                i = 0
                while True:
                    timed = i >= warmup
                    if timed and len(compute) >= iterations and deadline is None:
                        break
                    if timed and deadline is not None and time.monotonic() >= deadline and compute:
                        break
                    events[0].record(self.stream)
                    for io in ins:
                        _cuda.copy_htod_async(io.device.ptr, io.host, self.stream)
                    events[1].record(self.stream)
                    launch()
                    events[2].record(self.stream)
                    for io in outs:
                        _cuda.copy_dtoh_async(io.host, io.device.ptr, self.stream)
                    events[3].record(self.stream)
                    events[3].synchronize()
                    if timed:
                        compute.append(events[2].elapsed_ms_since(events[1]))
                        e2e.append(events[3].elapsed_ms_since(events[0]))
                    i += 1
            finally:
                for e in events:
                    e.destroy()
        except _cuda.CudaCallError as e:
            raise GateError(f"{self.label}: {e}") from e
        io_bytes = sum(io.device.nbytes for io in ins + outs)
        return Timing(
            compute_ms=tuple(compute),
            end_to_end_ms=tuple(e2e),
            clock="cuda_graph" if graph_note == "replayed" else "cuda_event",
            device_memory_bytes=self.activation.nbytes + io_bytes,
            extra={"activation_bytes": self.activation.nbytes, "io_bytes": io_bytes, "warmup": warmup,
                   "cuda_graph": graph_note},
        )

    def close(self) -> None:
        if self._on_close is not None:
            self._on_close(self)
            self._on_close = None
        self._drop_graphs()
        for io in self._io.values():
            io.free()
        self._io.clear()
        self.context = None
        self.engine = None
        self.activation.free()
        self.stream.destroy()


class TensorRTRuntime:
    """Loads TensorRT plans. Subclasses change the module, the preflight and the context creation."""

    name = "tensorrt"
    slug = "trt"
    # Triton's tensorrt_plan platform: one plan per compute capability (cc_model_filenames)
    triton: TritonBackend | None = TritonBackend(platform="tensorrt_plan", backend=None, filename="model.plan",
                                                 per_compute_capability=True)
    module = "tensorrt"
    flavour: plan_header.Flavour = "tensorrt"
    label = "TensorRT"
    missing = "TensorRT (tensorrt) is not installed: its wheels come only from NVIDIA's index"
    distributions: tuple[str, ...] = install.TENSORRT_DISTRIBUTIONS

    def probe(self) -> InstalledRuntime | None:
        """What ``import tensorrt`` (``tensorrt_rtx`` for RTX) would load and its ``__version__``, read without
        importing it (TensorRT's import loads CUDA): ``_trt.install.find_install``. None when that import would
        fail (a bindings-only install has ``tensorrt_bindings`` but no ``tensorrt``). The features say which module
        loads, where the version came from (``__version__``: the literal in the module or the one it re-exports,
        ``via``), which distribution holds the module, and where its own metadata disagrees."""
        found = install.find_install(install.MODULES_OF.get(self.module, (self.module,)), self.distributions)
        if found is None:
            return None
        return InstalledRuntime(found.version, found.features())

    def can_run(self, engine: EngineDescriptor, fingerprint: RunnerFingerprint) -> Compat:
        return compat.check_tensorrt(engine, fingerprint, self.name)

    def verify_engine(self, engine_path: Path, engine: EngineDescriptor) -> str | None:
        header = plan_header.read_header_file(engine_path)
        return plan_header.check_header(header, self.flavour, engine.builder_version)

    def import_module(self) -> Any:
        try:
            return __import__(self.module)
        except (ImportError, OSError) as e:
            raise GateError(f"{self.missing} ({type(e).__name__}: {e})") from e

    def load(self, engine_path: Path, engine: EngineDescriptor, options: RuntimeOptions) -> TensorRTSession:
        data = Path(engine_path).read_bytes()
        why = plan_header.check_header(plan_header.read_header(data[: plan_header.HEADER_BYTES]), self.flavour,
                                       engine.builder_version)
        if why:
            raise GateError(f"{engine_path}: {why}")
        trt = self.import_module()
        log = _RuntimeLog()
        runtime = trt.Runtime(_logger(trt, log))
        self.preflight(trt, runtime, data, engine_path, log)
        if engine.target.version_compatible:
            # VC engines carry their lean runtime as host code; allowed only for plans we published ourselves.
            runtime.engine_host_code_allowed = True
        plan = runtime.deserialize_cuda_engine(data)
        if plan is None:
            raise GateError(f"{self.label} {trt.__version__} could not deserialize {engine_path}:\n{log.tail()}")
        try:
            stream = _cuda.Stream()
            context, activation, on_close = self.create_context(trt, plan, options, engine)
            if plan.num_optimization_profiles > 1 or options.profile_index:
                if not context.set_optimization_profile_async(options.profile_index, stream.handle):
                    raise GateError(f"{engine_path}: cannot select optimization profile {options.profile_index} "
                                    f"(engine has {plan.num_optimization_profiles})")
                stream.synchronize()
        except (_cuda.CudaCallError, _cuda.CudaUnavailable) as e:
            raise GateError(f"{engine_path}: {e}") from e
        return TensorRTSession(trt, plan, context, activation, stream,
                               label=f"{self.label} {engine_path.name}", on_close=on_close)

    def refit(self, request: RefitRequest) -> RefitResult:
        """A stripped or refittable plan with the weights of the blob folder ``request.weights`` (its
        ``model.onnx`` beside ``weights.bin``), written to ``request.out_path`` atomically (``_trt.refit``: the
        header checked first, the runtime's preflight, then Refitter / OnnxParserRefitter, the missing-weights
        check, refit_cuda_engine, serialization with the weights)."""
        path = Path(request.engine_path)
        data = path.read_bytes()
        why = plan_header.check_header(plan_header.read_header(data[: plan_header.HEADER_BYTES]), self.flavour,
                                       request.engine.builder_version)
        if why:
            raise GateError(f"{path}: {why}")
        trt = self.import_module()
        log = _RuntimeLog()
        logger = _logger(trt, log)
        runtime = trt.Runtime(logger)
        self.preflight(trt, runtime, data, path, log)
        plan, facts = refit_plan(trt, runtime, logger, data, Path(request.weights) / GRAPH_NAME,
                                 label=f"{self.label} {trt.__version__} refit of {request.engine.address}",
                                 keep_refittable=request.keep_refittable,
                                 host_code_allowed=request.engine.target.version_compatible, errors=log.tail)
        write_bytes_atomic(request.out_path, plan)
        return RefitResult(Path(request.out_path), facts)

    # -- hooks -------------------------------------------------------------------------------------------------
    def preflight(self, trt: Any, runtime: Any, data: bytes, engine_path: Path, log: _RuntimeLog) -> None:
        """TensorRT proper has no pre-load validity API (none in the 8.6-11.4 binding surfaces; TensorRT-RTX
        added ``get_engine_validity`` in its 1.1): the header check above is all."""

    def create_context(self, trt: Any, engine: Any, options: RuntimeOptions,
                       descriptor: EngineDescriptor) -> tuple[Any, _cuda.DeviceBuffer, Callable[[Any], None] | None]:
        """(context, activation memory we own, what to do when the session closes)."""
        api = memory_api(trt.__version__, self.flavour)  # type: ignore[arg-type]
        if api == "device_memory_size_v2":
            context = engine.create_execution_context(trt.ExecutionContextAllocationStrategy.USER_MANAGED)
            size = int(engine.device_memory_size_v2)
            activation = _cuda.DeviceBuffer(size)
            context.set_device_memory(activation.ptr, size)
        else:  # 8.6 - 10.0
            context = engine.create_execution_context_without_device_memory()
            activation = _cuda.DeviceBuffer(int(engine.device_memory_size))
            context.device_memory = activation.ptr
        if context is None:
            raise GateError(f"{self.label}: could not create an execution context")
        return context, activation, None


runtime = TensorRTRuntime()
