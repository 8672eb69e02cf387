"""The onnxruntime runtime on the CUDA execution provider: device buffers, CUDA events, and CUDA-graph replay.

**Device buffers and events** come from cuda-python (``trt_orchestrator_plugins._cuda``, the ``gpu`` extra), else
torch, else CuPy (whichever is importable; ``Timing.extra["device_buffers"]`` names it). Inputs and outputs live in
device buffers bound through IOBinding, onnxruntime runs on our stream (``user_compute_stream``) and CUDA events on
that stream bracket each iteration.

**Device series, replayed as a CUDA graph.** The 1-3 ms engines of the demo are launch-bound: dozens of small kernels
each launched by the host, so the host's launch jitter lands in the device time (on a lent H200 the p50 of such an
engine moved x0.93-x1.32 between two gate runs, bench/NOTES-gpu.md). onnxruntime can capture a session's kernels as
one CUDA graph and replay it with a single launch (provider option ``enable_cuda_graph``; onnxruntime docs, CUDA
Execution Provider, "Using CUDA Graphs"). Its conditions: every compute node on the CUDA EP, no control flow, inputs
and outputs bound through IOBinding at the **same device addresses** on every run, and fixed shapes per captured
graph. So the benchmark opens, per benchmarked shape, a second session of the engine with ``enable_cuda_graph`` and
the model's symbolic input dims fixed to that shape (the parity session keeps plain ``session.run``), binds one set
of buffers, runs it three times (onnxruntime runs normally first, captures on a later run, then replays), checks the
replayed outputs against the plain session's, and times the replays. When onnxruntime refuses (at session
creation: "... cannot use the CUDA Graph feature ...", or a run fails, or the replay disagrees) the device series is
timed eagerly on the plain session and ``Timing.extra["cuda_graph"]`` says why; ``Timing.clock`` is
``cuda_graph`` only when replays were timed.

*End-to-end* is its own figure: pinned host->device copies, the run (replay or eager), device->host copies, timed
with the same events, issued inside one stream context per iteration (entering torch's stream context once per copy
read the series ~1 % high on an H200, bench/NOTES-gpu.md).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from orchestrator.contracts.runtime import Timing
from trt_orchestrator_plugins import _cuda  # imports cuda-python only on first use

GRAPH_RUNS_TO_CAPTURE = 3  # onnxruntime: regular run(s) first, the capture on a later run, then replays


def device_backend() -> Any:
    """cuda-python, else torch, else CuPy, else None: the device-buffer and event API the CUDA timing path needs."""
    try:
        _cuda.cudart()
        _cuda.free_device_bytes()  # a driver and a device are there
        return CudaPythonBackend(_cuda)
    except Exception:  # CudaUnavailable, or cuda-python present without a usable driver
        pass
    try:
        import torch

        if torch.cuda.is_available():
            return TorchBackend(torch)
    except ImportError:
        pass
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            return CupyBackend(cupy)
    except Exception:  # ImportError, or CuPy present without a usable driver
        pass
    return None


class CudaPythonBackend:
    name = "cuda-python"

    def __init__(self, cuda: Any):
        self.cuda = cuda
        # A stream of our own (not the legacy default stream) that onnxruntime also runs on, so the events and
        # copies recorded here order with its kernels.
        self.stream = cuda.Stream()
        self._owned: list[Any] = []

    def stream_handle(self) -> int:
        return int(self.stream.handle)

    def free_bytes(self) -> int:
        return self.cuda.free_device_bytes()

    def to_device(self, arr: np.ndarray) -> Any:
        arr = np.ascontiguousarray(arr)
        buf = self.cuda.DeviceBuffer(arr.nbytes)
        self._owned.append(buf)
        self.cuda.copy_htod(buf.ptr, arr)
        return buf

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        buf = self.cuda.DeviceBuffer(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize)
        self._owned.append(buf)
        return buf

    def pinned_copy(self, arr: np.ndarray) -> Any:
        buf = self.cuda.PinnedBuffer(arr.shape, arr.dtype)
        self._owned.append(buf)
        np.copyto(buf.array, arr)
        return buf

    def host_array(self, pinned: Any) -> np.ndarray:
        return pinned.array

    def pointer(self, buf: Any) -> int:
        return int(buf.ptr)

    def on_stream(self) -> Any:
        return contextlib.nullcontext()  # every copy names the stream explicitly

    def copy_async(self, dst: Any, src: Any) -> None:
        if isinstance(dst, self.cuda.PinnedBuffer):
            self.cuda.copy_dtoh_async(dst, src.ptr, self.stream)
        else:
            self.cuda.copy_htod_async(dst.ptr, src, self.stream)

    def event(self) -> Any:
        ev = self.cuda.Event()
        self._owned.append(ev)
        return ev

    def record(self, ev: Any) -> None:
        ev.record(self.stream)

    def elapsed_ms(self, start: Any, end: Any) -> float:
        end.synchronize()
        return float(end.elapsed_ms_since(start))

    def synchronize(self) -> None:
        self.stream.synchronize()

    def close(self) -> None:
        self.stream.synchronize()
        for obj in reversed(self._owned):
            (obj.destroy if hasattr(obj, "destroy") else obj.free)()
        self._owned.clear()
        self.stream.destroy()


class TorchBackend:
    name = "torch"

    def __init__(self, torch: Any):
        self.t = torch
        self.stream = torch.cuda.Stream()

    def stream_handle(self) -> int:
        return int(self.stream.cuda_stream)

    def free_bytes(self) -> int:
        return int(self.t.cuda.mem_get_info()[0])

    def to_device(self, arr: np.ndarray) -> Any:
        return self.t.from_numpy(np.ascontiguousarray(arr)).to("cuda")

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        return self.t.from_numpy(np.empty(shape, dtype)).to("cuda")

    def pinned_copy(self, arr: np.ndarray) -> Any:
        return self.t.from_numpy(np.ascontiguousarray(arr)).pin_memory()

    def host_array(self, pinned: Any) -> np.ndarray:
        return pinned.numpy()

    def pointer(self, tensor: Any) -> int:
        return int(tensor.data_ptr())

    def on_stream(self) -> Any:
        """Make our stream current (torch's copies go to the current stream)."""
        return self.t.cuda.stream(self.stream)

    def copy_async(self, dst: Any, src: Any) -> None:
        dst.copy_(src, non_blocking=True)  # inside on_stream(): entered once per iteration, not per copy

    def event(self) -> Any:
        return self.t.cuda.Event(enable_timing=True)

    def record(self, ev: Any) -> None:
        ev.record(self.stream)

    def elapsed_ms(self, start: Any, end: Any) -> float:
        end.synchronize()
        return float(start.elapsed_time(end))

    def synchronize(self) -> None:
        self.stream.synchronize()

    def close(self) -> None:
        self.stream.synchronize()


class CupyBackend:
    name = "cupy"

    def __init__(self, cupy: Any):
        self.cp = cupy
        self.stream = cupy.cuda.Stream(non_blocking=True)

    def stream_handle(self) -> int:
        return int(self.stream.ptr)

    def free_bytes(self) -> int:
        return int(self.cp.cuda.runtime.memGetInfo()[0])

    def to_device(self, arr: np.ndarray) -> Any:
        return self.cp.asarray(arr)

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        return self.cp.empty(shape, dtype=dtype)

    def pinned_copy(self, arr: np.ndarray) -> Any:
        mem = self.cp.cuda.alloc_pinned_memory(arr.nbytes)
        out = np.frombuffer(mem, arr.dtype, arr.size).reshape(arr.shape)
        out[...] = arr
        return out

    def host_array(self, pinned: Any) -> np.ndarray:
        return pinned

    def pointer(self, arr: Any) -> int:
        return int(arr.data.ptr)

    def on_stream(self) -> Any:
        return self.stream  # a CuPy Stream is a context manager; the copies below name it explicitly anyway

    def copy_async(self, dst: Any, src: Any) -> None:
        if isinstance(dst, np.ndarray):
            src.get(stream=self.stream, out=dst)
        else:
            dst.set(src, stream=self.stream)

    def event(self) -> Any:
        return self.cp.cuda.Event()

    def record(self, ev: Any) -> None:
        ev.record(self.stream)

    def elapsed_ms(self, start: Any, end: Any) -> float:
        end.synchronize()
        return float(self.cp.cuda.get_elapsed_time(start, end))

    def synchronize(self) -> None:
        self.stream.synchronize()

    def close(self) -> None:
        self.stream.synchronize()


def timed_events(gpu: Any, fn: Callable[[], None], iterations: int, budget: float | None) -> tuple[float, ...]:
    """``iterations`` runs of ``fn`` (or as many as fit ``budget`` seconds), each between two events on our stream.
    One event pair serves the whole series (re-recorded after each synchronize)."""
    out: list[float] = []
    deadline = time.perf_counter_ns() + int(budget * 1e9) if budget else None
    start, end = gpu.event(), gpu.event()
    while True:
        gpu.record(start)
        fn()
        gpu.record(end)
        out.append(gpu.elapsed_ms(start, end))  # synchronises on end
        if deadline is not None:
            if time.perf_counter_ns() >= deadline:
                return tuple(out)
        elif len(out) >= max(1, iterations):
            return tuple(out)


class ShapeBuffers:
    """One shape's pinned host copies and device buffers of the inputs and outputs, bound to one IOBinding."""

    def __init__(self, gpu: Any, sess: Any, feeds: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray]):
        self.binding = sess.io_binding()
        self.host_in = {k: gpu.pinned_copy(v) for k, v in feeds.items()}
        self.dev_in = {k: gpu.to_device(v) for k, v in feeds.items()}
        self.host_out = {k: gpu.pinned_copy(v) for k, v in outputs.items()}
        self.dev_out = {k: gpu.empty(v.shape, v.dtype) for k, v in outputs.items()}
        for name, arr in feeds.items():
            self.binding.bind_input(name, "cuda", 0, arr.dtype, arr.shape, gpu.pointer(self.dev_in[name]))
        for name, ref in outputs.items():
            self.binding.bind_output(name, "cuda", 0, ref.dtype, ref.shape, gpu.pointer(self.dev_out[name]))


def shape_key(feeds: Mapping[str, np.ndarray]) -> tuple:
    return tuple((k, str(v.dtype), tuple(v.shape)) for k, v in sorted(feeds.items()))


class GraphSession:
    """A session of the engine for ONE input shape with ``enable_cuda_graph``: its symbolic input dims fixed to the
    shape (``add_free_dimension_override_by_name``), so onnxruntime folds the shape arithmetic away and every node
    can run on the CUDA EP (a node left on the CPU makes it refuse the graph), its buffers bound once, the graph
    captured and the replay checked against ``reference`` (the plain session's outputs of the same feeds).
    Raises with onnxruntime's reason when it refuses."""

    def __init__(self, ort: Any, path: str, cuda_opts: Mapping[str, str], gpu: Any, dims: Mapping[str, Any],
                 feeds: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray]):
        options = ort.SessionOptions()
        for dim, value in fixed_dims(dims, feeds).items():
            options.add_free_dimension_override_by_name(dim, value)
        self.session = ort.InferenceSession(path, sess_options=options, providers=[
            ("CUDAExecutionProvider", {**cuda_opts, "enable_cuda_graph": "1"}), "CPUExecutionProvider"])
        if self.session.get_providers()[0] != "CUDAExecutionProvider":
            raise RuntimeError(f"the graph session fell back to {self.session.get_providers()}")
        self.bufs = bufs = ShapeBuffers(gpu, self.session, feeds, reference)
        with gpu.on_stream():
            for _ in range(GRAPH_RUNS_TO_CAPTURE):
                self.session.run_with_iobinding(bufs.binding)
            # poison the outputs, replay, read back: every element written and close to the plain session's
            for name, ref in reference.items():
                gpu.host_array(bufs.host_out[name])[...] = np.nan if ref.dtype.kind == "f" else 0
                gpu.copy_async(bufs.dev_out[name], bufs.host_out[name])
            self.session.run_with_iobinding(bufs.binding)
            for name in reference:
                gpu.copy_async(bufs.host_out[name], bufs.dev_out[name])
        gpu.synchronize()
        for name, ref in reference.items():
            problem = replay_mismatch(gpu.host_array(bufs.host_out[name]), ref)
            if problem:
                raise RuntimeError(f"the replayed graph's output {name!r} {problem}")

    def run(self) -> None:
        self.session.run_with_iobinding(self.bufs.binding)


def fixed_dims(dims: Mapping[str, Any], feeds: Mapping[str, np.ndarray]) -> dict[str, int]:
    """The model's symbolic input dims (declared as names) with the values ``feeds`` give them. A name given two
    values (some exporters reuse one name for every dynamic dim: PP-OCR's cls declares H and W alike) stays free."""
    seen: dict[str, set[int]] = {}
    for name, declared in dims.items():
        for dim, value in zip(declared, feeds[name].shape):
            if isinstance(dim, str) and dim:
                seen.setdefault(dim, set()).add(int(value))
    return {dim: values.pop() for dim, values in seen.items() if len(values) == 1}


def replay_mismatch(got: np.ndarray, ref: np.ndarray) -> str | None:
    """Why a replay's output is not the plain session's (None: it is). Both sessions run the same engine with the same
    options but may pick other cuDNN algorithms, so the bound is loose: a wrong graph (stale addresses, a skipped
    kernel) leaves poison or garbage, far outside it."""
    if ref.dtype.kind != "f":
        return None if np.array_equal(got, ref) else "differs from the plain session's"
    if np.isnan(got).any() and not np.isnan(ref).any():
        return "has elements the replay never wrote"
    if not ref.size:
        return None
    scale = float(np.nanmax(np.abs(ref))) if np.isfinite(ref).any() else 0.0
    worst = float(np.nanmax(np.abs(got.astype(np.float64) - ref)))
    return None if worst <= 1e-2 * scale + 1e-3 else f"differs from the plain session's by {worst:.3g}"


class EagerShape:
    """One shape on the plain session: buffers bound once, outputs preallocated where onnxruntime takes them."""

    def __init__(self, gpu: Any, sess: Any, output_names: tuple[str, ...], feeds: Mapping[str, np.ndarray],
                 first: Mapping[str, np.ndarray]):
        self.binding = binding = sess.io_binding()
        self.host_in = {k: gpu.pinned_copy(v) for k, v in feeds.items()}
        self.dev_in = {k: gpu.to_device(v) for k, v in feeds.items()}
        for name, arr in feeds.items():
            binding.bind_input(name, "cuda", 0, arr.dtype, arr.shape, gpu.pointer(self.dev_in[name]))
        self.host_out: dict[str, Any] = {}
        self.dev_out: dict[str, Any] = {}

        def preallocate() -> None:
            for name, ref in first.items():
                self.dev_out[name] = gpu.empty(ref.shape, ref.dtype)
                self.host_out[name] = gpu.pinned_copy(ref)
                binding.bind_output(name, "cuda", 0, ref.dtype, ref.shape, gpu.pointer(self.dev_out[name]))

        with gpu.on_stream():
            self.run, self.outputs = bind_outputs(sess, binding, output_names, preallocate, ("cuda", 0))


class CudaTiming:
    """What an ``OrtSession`` on the CUDA EP keeps between benchmark calls (one per block): the device backend, each
    shape's graph session (opened on first use) or why onnxruntime refused it, and each shape's eager buffers."""

    def __init__(self, ort: Any, path: str, cuda_opts: Mapping[str, str], gpu: Any, free_before: int | None,
                 dims: Mapping[str, Any]):
        self.ort, self.path, self.cuda_opts, self.gpu, self.free_before = ort, path, dict(cuda_opts), gpu, free_before
        self.dims = dict(dims)
        self.graphs: dict[tuple, GraphSession] = {}
        self.refused: dict[tuple, str] = {}
        self.disabled: str | None = None  # set: no graph for any shape (a bench's eager comparison)
        self.eager: dict[tuple, EagerShape] = {}
        self.memory: dict[tuple, int | None] = {}

    def replay(self, feeds: Mapping[str, np.ndarray], first: Mapping[str, np.ndarray]) -> GraphSession | None:
        """The shape's graph session, or None with ``refused[shape]`` saying why."""
        key = shape_key(feeds)
        if self.disabled is not None:
            self.refused[key] = self.disabled
        if key in self.refused:
            return None
        if key not in self.graphs:
            try:
                self.graphs[key] = GraphSession(self.ort, self.path, self.cuda_opts, self.gpu, self.dims, feeds,
                                                first)
            except Exception as e:  # onnxruntime's refusal (pybind Fail/RuntimeError) or a replay that disagreed
                text = " ".join(str(e).split()) or type(e).__name__
                self.refused[key] = f"refused, timed eagerly: {text[:400]}"
                return None
        return self.graphs[key]

    def close(self) -> None:
        self.graphs.clear()  # the sessions and their bindings go before the stream they run on
        self.eager.clear()
        self.gpu.close()


def benchmark_cuda(state: CudaTiming, sess: Any, output_names: tuple[str, ...], feeds: Mapping[str, np.ndarray],
                   warmup: int, iterations: int, budget: float | None) -> Timing:
    """The CUDA path of ``OrtSession.benchmark``: the device series replayed as a CUDA graph where onnxruntime can
    capture it, else eager on ``sess``; end-to-end with the copies."""
    gpu = state.gpu
    first = dict(zip(output_names, sess.run(None, dict(feeds))))
    key = shape_key(feeds)
    if key not in state.memory:  # measured before the graph session opens: the engine's own session, plus its I/O
        state.memory[key] = None if state.free_before is None else max(0, state.free_before - gpu.free_bytes()) + \
            sum(a.nbytes for a in (*feeds.values(), *first.values()))
    used = state.memory[key]
    found = state.replay(feeds, first)
    if found is not None:
        bufs = found.bufs
        binding, host_in, dev_in, host_out, dev_out = bufs.binding, bufs.host_in, bufs.dev_in, bufs.host_out, \
            bufs.dev_out
        compute_run: Callable[[], None] = found.run
        outputs, preallocated = "preallocated (bound once; CUDA-graph replay)", True
    else:
        if key not in state.eager:
            state.eager[key] = EagerShape(gpu, sess, output_names, feeds, first)
        eager = state.eager[key]
        binding, host_in, dev_in, host_out, dev_out = eager.binding, eager.host_in, eager.dev_in, eager.host_out, \
            eager.dev_out
        compute_run, outputs = eager.run, eager.outputs
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
    with gpu.on_stream():
        compute_ms = timed_events(gpu, compute_run, iterations, budget)
    e2e_ms = timed_events(gpu, end_to_end, iterations, budget)
    return Timing(compute_ms=compute_ms, end_to_end_ms=e2e_ms,
                  clock="cuda_graph" if found is not None else "cuda_event", device_memory_bytes=used,
                  extra={"providers": list(sess.get_providers()), "device_buffers": gpu.name, "outputs": outputs,
                         "cuda_graph": "replayed" if found is not None else state.refused.get(key)})


def bind_outputs(sess: Any, binding: Any, names: tuple[str, ...], preallocate: Callable[[], None],
                 device: tuple) -> tuple[Callable[[], None], str]:
    """Bind the outputs and return (one run, how its outputs are held); the CPU and the CUDA paths use it.

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
