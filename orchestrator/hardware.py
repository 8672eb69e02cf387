"""Detect this runner's fingerprint: what the machine is (GPU, compute capability, driver, runtimes, OS/arch).

``RunnerFingerprint`` is plain data (``orchestrator.core.fingerprint``); ``detect()`` is the edge that reads NVML
(via nvidia-ml-py, when a driver is present) and asks each runtime plugin's ``probe()`` what of it is installed
(plugins read package metadata where they can, so nothing heavy is imported). "No GPU" is a valid fingerprint.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Mapping
from importlib import metadata

from orchestrator.core.fingerprint import GpuInfo, InstalledRuntime, RunnerFingerprint


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


RuntimeProbe = Callable[[], "InstalledRuntime | None"]


def detect(labels: tuple[str, ...] = (), probes: Mapping[str, RuntimeProbe] | None = None) -> RunnerFingerprint:
    """NVML for the GPUs; each runtime plugin's ``probe()`` (passed in by name) for what of it is installed."""
    gpus, driver, cuda = _nvml_gpus()
    runtimes = {}
    for name, probe in sorted((probes or {}).items()):
        installed = probe()
        if installed is not None:
            runtimes[name] = installed
    return RunnerFingerprint(os=_os_name(), arch=platform.machine(), gpus=gpus, driver_version=driver,
                             cuda_driver_version=cuda, runtimes=runtimes, labels=labels)
