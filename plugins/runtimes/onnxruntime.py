"""The onnxruntime runtime: runs engines made by the ``onnxruntime`` builder (an ORT-optimised ONNX file).

``can_run`` decides from the engine's descriptor and the fingerprint only (nothing is imported or deserialised): a CPU
engine runs wherever onnxruntime is installed; a CUDA engine needs a GPU and ``CUDAExecutionProvider``.
It reads the engine's device (``target.device``) and builder version from its descriptor.

Timing (``Session.benchmark``):

* CPU — ``time.perf_counter_ns`` around each iteration. *compute*: ``run_with_iobinding`` with inputs and
  preallocated outputs bound once (no feed conversion, no output allocation). *end-to-end*: ``session.run`` with
  numpy feeds, outputs returned as new numpy arrays.
* CUDA EP — when torch or CuPy is importable: inputs/outputs live in device buffers bound through IOBinding, ORT
  runs on the caller's stream (``user_compute_stream``) and CUDA events bracket each iteration. *compute*:
  ``run_with_iobinding`` alone; *end-to-end*: pinned host→device copies, the run, device→host copies, all issued
  inside ONE stream context per iteration (entering torch's stream context once per copy read the end-to-end
  series ~1 % high on an H200, bench/NOTES-gpu.md). ``device_memory_bytes`` is the drop in free device memory
  from before the session was created to after warm-up (process-wide, so it includes the buffers and ORT's
  arena). Without torch/CuPy the CUDA engine is timed like CPU (perf_counter around ``session.run``, which
  includes the copies) and ``clock`` says so.

Outputs are bound to buffers of the shapes the first (untimed) run produced, never of the model's *declared*
shapes. onnxruntime checks a pre-allocated output against the declaration ("Invalid rank for output: y Got: 2
Expected: 3") although ``session.run`` of the same model works; when it refuses them, the outputs are left to
onnxruntime to allocate on every run (``bind_output(name, device)`` re-bound before each run: an output it
allocated is kept in the binding and refused the same way on the next run). ``Timing.extra["outputs"]`` says
which way a series ran.

``onnxruntime`` (and torch/CuPy) are imported inside functions only; its errors become ``GateError``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path

import numpy as np

from orchestrator.contracts.runtime import RefitRequest, RefitResult, RuntimeOptions, Timing, TritonBackend
from orchestrator.core.artifact import EngineDescriptor
from orchestrator.core.fingerprint import InstalledRuntime, RunnerFingerprint
from orchestrator.core.select import Compat
from orchestrator.core.versions import parse_version, version_text
from orchestrator.errors import GateError
from orchestrator.weights_file import DATA_NAME, reassemble

NAME = "onnxruntime"
INSTALL_HINT = "pip install 'trt-orchestrator[ort]'"


def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def probe() -> InstalledRuntime | None:
    """Version and execution providers of the onnxruntime that ``import onnxruntime`` gives.

    The CPU package's providers are known without importing it (the import costs 0.2-0.5 s on every
    `orchestrate build`). With the GPU package installed the module itself is asked: with both packages present
    the metadata names the wrong one (seen on the lent H200: metadata 1.30.0 CPU, module 1.31.1 GPU)."""
    cpu, gpu = _dist_version("onnxruntime"), _dist_version("onnxruntime-gpu")
    if cpu is None and gpu is None:
        return None
    if gpu is None:
        return InstalledRuntime(str(cpu), ("CPUExecutionProvider",))
    try:
        import onnxruntime

        return InstalledRuntime(onnxruntime.__version__, tuple(onnxruntime.get_available_providers()))
    except Exception:  # a broken install must not stop `doctor`: report the metadata version, no providers
        return InstalledRuntime(gpu, ())


def check_onnxruntime(engine: EngineDescriptor, fp: RunnerFingerprint) -> Compat:
    """An onnxruntime engine (an optimized ONNX file) on this runner: onnxruntime installed, same major.minor as
    the builder's; a CUDA engine also needs a GPU and the CUDAExecutionProvider."""
    device = engine.target.device
    installed = fp.runtime_version(NAME)
    providers = fp.runtime_features(NAME)
    if installed is None:
        return Compat.no(f"onnxruntime is not installed on this runner: {INSTALL_HINT}")
    want = parse_version(engine.builder_version)[:2]
    have = parse_version(installed)[:2]
    if want != have:
        return Compat.no(f"built for onnxruntime {version_text(want)}, this runner has {installed} "
                          "(major.minor must match)")
    if device == "cuda":
        if not fp.has_gpu:
            return Compat.no("an onnxruntime CUDA engine needs an NVIDIA GPU; this runner has none")
        if "CUDAExecutionProvider" not in providers:
            return Compat.no("an onnxruntime CUDA engine needs the CUDAExecutionProvider; this runner's "
                              f"onnxruntime offers {', '.join(providers) or 'no providers'} "
                              "(install onnxruntime-gpu)")
        return Compat.yes("onnxruntime CUDA engine on a GPU with CUDAExecutionProvider", 200)
    if device != "cpu":
        return Compat.no(f"unknown onnxruntime device {device!r} (expected cpu or cuda)")
    return Compat.yes("onnxruntime CPU engine", 300)




class OnnxRuntimeRuntime:
    name = NAME
    slug = "ort"
    # Triton's onnxruntime backend: one model.onnx for every GPU, on its CPU and CUDA execution providers
    triton = TritonBackend(platform=None, backend="onnxruntime", filename="model.onnx", per_compute_capability=False,
                           features=("CPUExecutionProvider", "CUDAExecutionProvider"))

    def probe(self) -> InstalledRuntime | None:
        return probe()

    def can_run(self, engine: EngineDescriptor, fingerprint: RunnerFingerprint) -> Compat:
        return check_onnxruntime(engine, fingerprint)

    def verify_engine(self, engine_path: Path, engine: EngineDescriptor) -> str | None:
        return None  # an ONNX file has no plan header; the store verified its digest

    def load(self, engine_path: Path, engine: EngineDescriptor, options: RuntimeOptions) -> OrtSession:
        device = "cuda" if options.device == "cuda" or engine.target.device in ("cuda", "gpu") else "cpu"
        return OrtSession(Path(engine_path), device)

    def refit(self, request: RefitRequest) -> RefitResult:
        """A stripped engine (``weights: stripped``) with its weights put back: every initializer it keeps as
        external data in the blob's ``weights.bin`` is filled from ``request.weights`` and the self-contained model
        written to ``request.out_path`` (``orchestrator.weights_file.reassemble``). An optimized model has nothing
        to refit with new weights (the builder refuses ``weights: refittable``)."""
        if request.new_weights:
            raise GateError(f"{request.engine.address}: onnxruntime engines take no new weights (an optimized "
                            "model bakes them into rewritten initializers): rebuild it",
                            hint="onnxruntime targets build weights: embedded or stripped")
        data = Path(request.weights) / DATA_NAME
        if not data.is_file():
            raise GateError(f"{request.engine.address}: the weights blob folder {request.weights} has no {DATA_NAME}")
        filled = reassemble(Path(request.engine_path), data, Path(request.out_path))
        return RefitResult(Path(request.out_path), {"how": "external data put back into the optimized model",
                                                    "tensors": filled})


class OrtSession:
    def __init__(self, path: Path, device: str):
        try:
            import onnxruntime as ort
        except ImportError as e:
            raise GateError("onnxruntime is not installed", hint="pip install 'trt-orchestrator[ort]'") from e
        self.device = device
        # onnxruntime's CUDA EP runs fp32 convolutions/GEMMs in TF32 unless use_tf32=0 (its default is on):
        # the parity gate judges fp32 engines run that way against the tf32 tolerances
        self.tf32 = device == "cuda"
        self._ort = ort
        if device == "cuda" and hasattr(ort, "preload_dlls"):
            ort.preload_dlls()  # ORT >= 1.21: load CUDA/cuDNN from pip packages or torch before the session
        self._gpu = _device_backend() if device == "cuda" else None
        self._free_before = self._gpu.free_bytes() if self._gpu else None
        if device == "cuda":
            if "CUDAExecutionProvider" not in ort.get_available_providers():
                raise GateError("onnxruntime has no CUDAExecutionProvider here",
                                hint="install onnxruntime-gpu and a matching CUDA/cuDNN")
            cuda_opts: dict = {"device_id": 0}
            if self._gpu is not None:
                cuda_opts["user_compute_stream"] = str(self._gpu.stream_handle())
            providers = [("CUDAExecutionProvider", cuda_opts), "CPUExecutionProvider"]
        else:
            providers = ["CPUExecutionProvider"]
        try:
            self._session = ort.InferenceSession(str(path), providers=providers)
        except Exception as e:  # onnxruntime raises its own pybind Fail/InvalidGraph/NoSuchFile families
            raise GateError(f"onnxruntime cannot load {path.name}: {e}",
                            hint="rebuild the engine with this onnxruntime version") from e
        if device == "cuda" and self._session.get_providers()[0] != "CUDAExecutionProvider":
            # ORT only logs a warning when the CUDA provider fails to load and quietly runs on the CPU: a
            # "CUDA" gate would then compare CPU with the CPU reference and pass an engine never run on a GPU.
            raise GateError(f"onnxruntime could not create its CUDA execution provider for {path.name} "
                            f"(session providers: {', '.join(self._session.get_providers())})",
                            hint="check that the CUDA and cuDNN libraries onnxruntime-gpu needs are loadable")
        self.input_names = tuple(i.name for i in self._session.get_inputs())
        self.output_names = tuple(o.name for o in self._session.get_outputs())

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        feeds = {k: np.ascontiguousarray(v) for k, v in inputs.items()}
        try:
            values = self._session.run(None, feeds)
        except Exception as e:
            raise GateError(f"onnxruntime run failed: {e}") from e
        return dict(zip(self.output_names, values))

    def benchmark(self, inputs: Mapping[str, np.ndarray], *, warmup: int, iterations: int,
                  time_budget_s: float | None) -> Timing:
        """``iterations`` timed runs per series, or as many as fit ``time_budget_s`` (at least one) when set."""
        feeds = {k: np.ascontiguousarray(v) for k, v in inputs.items()}
        if self.device == "cuda" and self._gpu is not None:
            return self._benchmark_cuda(feeds, warmup, iterations, time_budget_s)
        return self._benchmark_host(feeds, warmup, iterations, time_budget_s)

    # -- CPU (and CUDA without torch/CuPy): host clock ------------------------------------------------------

    def _benchmark_host(self, feeds, warmup, iterations, budget) -> Timing:
        sess = self._session
        first = sess.run(None, feeds)
        binding = sess.io_binding()
        for name, arr in feeds.items():
            binding.bind_cpu_input(name, arr)

        def preallocate() -> None:
            for name, ref in zip(self.output_names, first):
                binding.bind_ortvalue_output(name, self._ort.OrtValue.ortvalue_from_numpy(np.empty_like(ref)))

        compute_run, outputs = _bind_outputs(sess, binding, self.output_names, preallocate, ("cpu",))
        for _ in range(max(0, warmup)):
            compute_run()
            sess.run(None, feeds)
        compute = _timed(compute_run, iterations, budget)
        e2e = _timed(lambda: sess.run(None, feeds), iterations, budget)
        if self.device == "cuda":
            # Without torch/CuPy the inputs are host arrays: ORT copies them in and out on every run.
            return Timing(compute_ms=e2e, end_to_end_ms=e2e, clock="perf_counter_ns",
                          extra={"note": "cuda without torch/cupy: host clock, copies included in both series",
                                 "outputs": "allocated by onnxruntime (session.run)"})
        return Timing(compute_ms=compute, end_to_end_ms=e2e, clock="perf_counter_ns",
                      extra={"providers": list(sess.get_providers()), "outputs": outputs})

    # -- CUDA EP with device buffers and CUDA events ---------------------------------------------------------

    def _benchmark_cuda(self, feeds, warmup, iterations, budget) -> Timing:
        gpu, sess = self._gpu, self._session
        first = sess.run(None, feeds)
        binding = sess.io_binding()
        host_in, dev_in = {}, {}
        for name, arr in feeds.items():
            host_in[name] = gpu.pinned_copy(arr)
            dev_in[name] = gpu.to_device(arr)
            binding.bind_input(name, "cuda", 0, arr.dtype, arr.shape, gpu.pointer(dev_in[name]))
        host_out, dev_out = {}, {}

        def preallocate() -> None:
            for name, ref in zip(self.output_names, first):
                dev_out[name] = gpu.empty(ref.shape, ref.dtype)
                host_out[name] = gpu.pinned_copy(ref)
                binding.bind_output(name, "cuda", 0, ref.dtype, ref.shape, gpu.pointer(dev_out[name]))

        with gpu.on_stream():
            compute_run, outputs = _bind_outputs(sess, binding, self.output_names, preallocate, ("cuda", 0))
        preallocated = outputs == "preallocated"

        def end_to_end() -> None:
            with gpu.on_stream():  # once per iteration, not per copy (bench/NOTES-gpu.md, bug 3)
                for name in feeds:
                    gpu.copy_async(dev_in[name], host_in[name])
                compute_run()
                if preallocated:
                    for name in dev_out:
                        gpu.copy_async(host_out[name], dev_out[name])
                else:  # outputs onnxruntime allocated: its own (synchronous) copy to new host arrays
                    binding.copy_outputs_to_cpu()

        for _ in range(max(0, warmup)):
            end_to_end()
        gpu.synchronize()
        used = None if self._free_before is None else max(0, self._free_before - gpu.free_bytes())
        compute_ms = _timed_events(gpu, compute_run, iterations, budget)
        e2e_ms = _timed_events(gpu, end_to_end, iterations, budget)
        return Timing(compute_ms=compute_ms, end_to_end_ms=e2e_ms, clock="cuda_event", device_memory_bytes=used,
                      extra={"providers": list(sess.get_providers()), "device_buffers": gpu.name,
                             "outputs": outputs})

    def close(self) -> None:
        self._session = None


def _bind_outputs(sess, binding, names, preallocate, device: tuple) -> tuple[Callable[[], None], str]:
    """Bind the outputs and return (one run, how its outputs are held).

    First the buffers ``preallocate`` binds (the shapes of a first run); a trial run tells whether onnxruntime
    takes them. It refuses a pre-allocated output that disagrees with the model's *declared* output shape
    ("Invalid rank for output", a wrong declaration ``session.run`` tolerates): then the outputs are bound to
    ``device`` without a shape and re-bound before every run, so onnxruntime allocates them each time."""
    preallocate()
    try:
        sess.run_with_iobinding(binding)
        return (lambda: sess.run_with_iobinding(binding)), "preallocated"
    except Exception as e:  # onnxruntime's pybind RuntimeError/Fail; a broken engine fails again below
        refused = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__

    def run_allocating() -> None:
        binding.clear_binding_outputs()
        for name in names:
            binding.bind_output(name, *device)
        sess.run_with_iobinding(binding)

    run_allocating()
    return run_allocating, f"allocated by onnxruntime on every run (pre-allocated outputs refused: {refused})"


def _timed(fn, iterations: int, budget: float | None) -> tuple[float, ...]:
    out: list[float] = []
    deadline = time.perf_counter_ns() + int(budget * 1e9) if budget else None
    while True:
        t0 = time.perf_counter_ns()
        fn()
        out.append((time.perf_counter_ns() - t0) / 1e6)
        if deadline is not None:
            if time.perf_counter_ns() >= deadline:
                return tuple(out)
        elif len(out) >= max(1, iterations):
            return tuple(out)


def _timed_events(gpu, fn, iterations: int, budget: float | None) -> tuple[float, ...]:
    out: list[float] = []
    deadline = time.perf_counter_ns() + int(budget * 1e9) if budget else None
    while True:
        start, end = gpu.event(), gpu.event()
        gpu.record(start)
        fn()
        gpu.record(end)
        out.append(gpu.elapsed_ms(start, end))  # synchronises on end
        if deadline is not None:
            if time.perf_counter_ns() >= deadline:
                return tuple(out)
        elif len(out) >= max(1, iterations):
            return tuple(out)


def _device_backend():
    """torch, else CuPy, else None: the device-buffer and event API the CUDA timing path needs."""
    try:
        import torch

        if torch.cuda.is_available():
            return _TorchBackend(torch)
    except ImportError:
        pass
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            return _CupyBackend(cupy)
    except Exception:  # ImportError, or CuPy present without a usable driver
        pass
    return None


class _TorchBackend:
    name = "torch"

    def __init__(self, torch):
        self.t = torch
        # A stream of our own (not the legacy default stream, handle 0) that ORT also runs on, so the events
        # and copies recorded here order with ORT's kernels.
        self.stream = torch.cuda.Stream()

    def stream_handle(self) -> int:
        return self.stream.cuda_stream

    def free_bytes(self) -> int:
        return int(self.t.cuda.mem_get_info()[0])

    def to_device(self, arr):
        return self.t.from_numpy(np.ascontiguousarray(arr)).to("cuda")

    def empty(self, shape, dtype):
        return self.t.from_numpy(np.empty(shape, dtype)).to("cuda")

    def pinned_copy(self, arr):
        return self.t.from_numpy(np.ascontiguousarray(arr)).pin_memory()

    def pointer(self, tensor) -> int:
        return tensor.data_ptr()

    def on_stream(self):
        """Make our stream current (torch's copies go to the current stream)."""
        return self.t.cuda.stream(self.stream)

    def copy_async(self, dst, src) -> None:
        dst.copy_(src, non_blocking=True)  # inside on_stream(): entered once per iteration, not per copy

    def event(self):
        return self.t.cuda.Event(enable_timing=True)

    def record(self, ev) -> None:
        ev.record(self.stream)

    def elapsed_ms(self, start, end) -> float:
        end.synchronize()
        return float(start.elapsed_time(end))

    def synchronize(self) -> None:
        self.t.cuda.synchronize()


class _CupyBackend:
    name = "cupy"

    def __init__(self, cupy):
        self.cp = cupy
        self.stream = cupy.cuda.Stream(non_blocking=True)

    def stream_handle(self) -> int:
        return self.stream.ptr

    def free_bytes(self) -> int:
        return int(self.cp.cuda.runtime.memGetInfo()[0])

    def to_device(self, arr):
        return self.cp.asarray(arr)

    def empty(self, shape, dtype):
        return self.cp.empty(shape, dtype=dtype)

    def pinned_copy(self, arr):
        mem = self.cp.cuda.alloc_pinned_memory(arr.nbytes)
        out = np.frombuffer(mem, arr.dtype, arr.size).reshape(arr.shape)
        out[...] = arr
        return out

    def pointer(self, arr) -> int:
        return arr.data.ptr

    def on_stream(self):
        return self.stream  # a CuPy Stream is a context manager; the copies below name it explicitly anyway

    def copy_async(self, dst, src) -> None:
        if isinstance(dst, np.ndarray):
            src.get(stream=self.stream, out=dst)
        else:
            dst.set(src, stream=self.stream)

    def event(self):
        return self.cp.cuda.Event()

    def record(self, ev) -> None:
        ev.record(self.stream)

    def elapsed_ms(self, start, end) -> float:
        end.synchronize()
        return float(self.cp.cuda.get_elapsed_time(start, end))

    def synchronize(self) -> None:
        self.stream.synchronize()


runtime = OnnxRuntimeRuntime()
