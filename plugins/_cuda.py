"""cuda-python helpers for the TensorRT runtimes and the int8 calibrator: device memory, pinned host buffers,
streams and events. Every call's error code is checked (NVIDIA's ``cuda_call`` pattern, samples/python/common).

Imports ``cuda.bindings.runtime`` (cuda-python >= 12.6; the only path in cuda-bindings 13, which removed the
``cuda.cudart`` trampoline) and falls back to ``from cuda import cudart`` for older cuda-python
(cuda-python's 13.0.0 release notes: the ``cuda.cuda``/``cuda.cudart`` modules are gone; NVIDIA/TensorRT's
samples moved to ``from cuda.bindings import runtime as cudart`` in 10.14). Nothing is imported until first use.
"""

from __future__ import annotations

import ctypes
from functools import lru_cache
from typing import Any

import numpy as np


class CudaCallError(RuntimeError):
    """A CUDA runtime call failed; callers translate it to their error family at the adapter edge."""

    def __init__(self, call: str, code: Any, text: str):
        self.call = call
        self.code = code
        super().__init__(f"{call} failed: {text}")


class CudaUnavailable(RuntimeError):
    """cuda-python is not installed or no CUDA driver/device is usable."""


@lru_cache(maxsize=1)
def cudart() -> Any:
    try:
        from cuda.bindings import runtime as rt  # cuda-python >= 12.6 / cuda-bindings 13
    except ImportError:
        try:
            from cuda import cudart as rt  # older cuda-python
        except ImportError as e:
            raise CudaUnavailable("cuda-python is not installed: pip install 'trt-orchestrator[gpu]'") from e
    return rt


def _error_text(rt: Any, err: Any) -> str:
    try:
        _, name = rt.cudaGetErrorName(err)
        _, desc = rt.cudaGetErrorString(err)
        name = name.decode() if isinstance(name, bytes) else name
        desc = desc.decode() if isinstance(desc, bytes) else desc
        return f"{name}: {desc}"
    except Exception:  # describing an error must never hide it
        return str(err)


def call(name: str, *args: Any) -> Any:
    """``cudart.<name>(*args)``; raise CudaCallError unless it returned cudaSuccess; unwrap the results."""
    rt = cudart()
    result = getattr(rt, name)(*args)
    if not isinstance(result, tuple):
        result = (result,)
    err, rest = result[0], result[1:]
    if err != rt.cudaError_t.cudaSuccess:
        raise CudaCallError(name, err, _error_text(rt, err))
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


def handle(obj: Any) -> int:
    """A CUDA object (stream, event) or pointer as the plain int TensorRT's ``size_t`` parameters take.

    ``int(obj)`` is deprecated in cuda-bindings >= 12.9.1 in favour of ``get_cuda_native_handle``.
    """
    if isinstance(obj, int):
        return obj
    try:
        from cuda.bindings.utils import get_cuda_native_handle

        return int(get_cuda_native_handle(obj))
    except ImportError:
        return int(obj)


def _quietly(name: str, *args: Any) -> None:
    """A clean-up call whose own failure must not hide the error being handled."""
    try:
        call(name, *args)
    except CudaCallError:
        pass


def free_device_bytes() -> int:
    """Free memory of the current device (``cudaMemGetInfo``)."""
    free, _total = call("cudaMemGetInfo")
    return int(free)


def device_compute_capability(device: int = 0) -> str:
    rt = cudart()
    major = call("cudaDeviceGetAttribute", rt.cudaDeviceAttr.cudaDevAttrComputeCapabilityMajor, device)
    minor = call("cudaDeviceGetAttribute", rt.cudaDeviceAttr.cudaDevAttrComputeCapabilityMinor, device)
    return f"{major}.{minor}"


class DeviceBuffer:
    """``cudaMalloc``'d memory; ``ptr`` is an int. Zero-size buffers allocate nothing (ptr 0)."""

    def __init__(self, nbytes: int):
        self.nbytes = int(nbytes)
        self.ptr = int(call("cudaMalloc", self.nbytes)) if self.nbytes else 0

    def free(self) -> None:
        if self.ptr:
            call("cudaFree", self.ptr)
            self.ptr = 0


class PinnedBuffer:
    """Page-locked host memory viewed as a numpy array of ``shape``/``dtype`` (``cudaMallocHost``)."""

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype):
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(d) for d in shape)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self.ptr = int(call("cudaMallocHost", max(self.nbytes, 1)))
        raw = (ctypes.c_byte * max(self.nbytes, 1)).from_address(self.ptr)
        self.array = np.frombuffer(raw, dtype=np.uint8, count=self.nbytes).view(self.dtype).reshape(self.shape)

    def free(self) -> None:
        if self.ptr:
            self.array = None  # type: ignore[assignment]
            call("cudaFreeHost", self.ptr)
            self.ptr = 0


class Stream:
    def __init__(self) -> None:
        self.obj = call("cudaStreamCreate")
        self.handle = handle(self.obj)

    def synchronize(self) -> None:
        call("cudaStreamSynchronize", self.obj)

    def destroy(self) -> None:
        if self.obj is not None:
            call("cudaStreamDestroy", self.obj)
            self.obj = None


class Event:
    def __init__(self) -> None:
        self.obj = call("cudaEventCreate")

    def record(self, stream: Stream) -> None:
        call("cudaEventRecord", self.obj, stream.obj)

    def synchronize(self) -> None:
        call("cudaEventSynchronize", self.obj)

    def elapsed_ms_since(self, start: Event) -> float:
        return float(call("cudaEventElapsedTime", start.obj, self.obj))

    def destroy(self) -> None:
        if self.obj is not None:
            call("cudaEventDestroy", self.obj)
            self.obj = None


def copy_htod_async(dst_ptr: int, src: PinnedBuffer, stream: Stream) -> None:
    kind = cudart().cudaMemcpyKind.cudaMemcpyHostToDevice
    if src.nbytes:
        call("cudaMemcpyAsync", dst_ptr, src.ptr, src.nbytes, kind, stream.obj)


def copy_dtoh_async(dst: PinnedBuffer, src_ptr: int, stream: Stream) -> None:
    kind = cudart().cudaMemcpyKind.cudaMemcpyDeviceToHost
    if dst.nbytes:
        call("cudaMemcpyAsync", dst.ptr, src_ptr, dst.nbytes, kind, stream.obj)


def copy_htod(dst_ptr: int, array: np.ndarray) -> None:
    """Synchronous copy from any (pageable) contiguous numpy array; for calibration batches."""
    array = np.ascontiguousarray(array)
    if array.nbytes:
        call("cudaMemcpy", dst_ptr, array.ctypes.data, array.nbytes,
             cudart().cudaMemcpyKind.cudaMemcpyHostToDevice)


class CudaGraph:
    """Work enqueued on one stream, captured once as a CUDA graph and replayed with one launch.

    NVIDIA's pattern for TensorRT (Developer Guide, "CUDA Graphs"; trtexec ``--useCudaGraph``): enqueue once outside
    capture so the engine's shape-dependent state is set up, then ``cudaStreamBeginCapture``, enqueue, and
    ``cudaStreamEndCapture`` + ``cudaGraphInstantiate``; each run is then one ``cudaGraphLaunch``. A replay issues
    one launch instead of one per kernel, so the host's launch jitter stays out of the device time of a short,
    launch-bound engine. Capture is refused when the enqueued work is not capturable (a synchronising call inside,
    data-dependent shapes): :meth:`capture` then raises ``CudaCallError`` and leaves no graph, and the caller runs
    the work eagerly (trtexec does the same after "The CUDA graph capture on the stream has failed")."""

    def __init__(self) -> None:
        self.graph: Any = None
        self.exec: Any = None

    def capture(self, stream: Stream, enqueue: Any) -> None:
        rt = cudart()
        # thread-local mode: another thread's unrelated CUDA calls neither break nor join this capture
        call("cudaStreamBeginCapture", stream.obj, rt.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal)
        try:
            enqueue()
        except BaseException:
            _quietly("cudaStreamEndCapture", stream.obj)  # leave capture mode before the error travels
            _quietly("cudaGetLastError")
            raise
        try:
            self.graph = call("cudaStreamEndCapture", stream.obj)  # cudaErrorStreamCaptureInvalidated: refused
        except CudaCallError:
            _quietly("cudaGetLastError")  # an invalidated capture leaves a (non-sticky) error behind
            raise
        self.exec = call("cudaGraphInstantiate", self.graph, 0)

    def launch(self, stream: Stream) -> None:
        call("cudaGraphLaunch", self.exec, stream.obj)

    def destroy(self) -> None:
        if self.exec is not None:
            call("cudaGraphExecDestroy", self.exec)
            self.exec = None
        if self.graph is not None:
            call("cudaGraphDestroy", self.graph)
            self.graph = None
