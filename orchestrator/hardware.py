"""Detect this runner's fingerprint: what the machine is (GPU, compute capability, driver, runtimes, OS/arch).

``RunnerFingerprint`` is plain data (pure core uses it); ``detect()`` is the edge that reads NVML (via
nvidia-ml-py, when a driver is present) and the installed runtimes' versions without importing them where a
version can be read from package metadata. "No GPU" is a valid fingerprint.
"""

from __future__ import annotations

import platform
from importlib import metadata

from orchestrator.core.fingerprint import GpuInfo, RunnerFingerprint


def _os_name() -> str:
    return platform.system().lower()


def _dist_version(*names: str) -> str | None:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _nvml_gpus() -> tuple[tuple[GpuInfo, ...], str | None, str | None]:
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return (), None, None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound / DriverNotLoaded: a machine with no driver
        return (), None, None
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else driver
        cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
        cuda_text = f"{cuda // 1000}.{(cuda % 1000) // 10}"
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else name
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h).total // (1024 * 1024)
            uuid = pynvml.nvmlDeviceGetUUID(h)
            uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
            gpus.append(GpuInfo(i, name, f"{major}.{minor}", int(mem), uuid))
        return tuple(gpus), driver, cuda_text
    finally:
        pynvml.nvmlShutdown()


def _ort_info() -> tuple[str | None, tuple[str, ...]]:
    """Version and execution providers of the onnxruntime that ``import onnxruntime`` gives.

    The CPU package's providers are known without importing it (the import costs 0.2-0.5 s on every
    `orchestrate build`). With the GPU package installed the module itself is asked: with both packages present
    the metadata names the wrong one (seen on the lent H200: metadata 1.30.0 CPU, module 1.31.1 GPU)."""
    cpu, gpu = _dist_version("onnxruntime"), _dist_version("onnxruntime-gpu")
    if cpu is None and gpu is None:
        return None, ()
    if gpu is None:
        return cpu, ("CPUExecutionProvider",)
    try:
        import onnxruntime

        return onnxruntime.__version__, tuple(onnxruntime.get_available_providers())
    except Exception:  # a broken install must not stop `doctor`: report the metadata version, no providers
        return gpu, ()


def detect(labels: tuple[str, ...] = ()) -> RunnerFingerprint:
    gpus, driver, cuda = _nvml_gpus()
    ort_version, ort_providers = _ort_info()
    return RunnerFingerprint(
        os=_os_name(),
        arch=platform.machine(),
        gpus=gpus,
        driver_version=driver,
        cuda_driver_version=cuda,
        tensorrt=_dist_version("tensorrt", "tensorrt-cu13", "tensorrt-cu12", "tensorrt-libs"),
        tensorrt_rtx=_dist_version("tensorrt-rtx", "tensorrt_rtx"),
        onnxruntime=ort_version,
        onnxruntime_providers=ort_providers,
        labels=labels,
    )
