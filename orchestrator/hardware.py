"""This runner's fingerprint: what the machine is (GPU, compute capability, driver, runtimes, OS/arch).

``RunnerFingerprint`` is plain data (pure core uses it); ``detect()`` is the edge that reads NVML (via
nvidia-ml-py, when a driver is present) and the installed runtimes' versions without importing them where a
version can be read from package metadata. "No GPU" is a valid fingerprint.
"""

from __future__ import annotations

import platform
from dataclasses import asdict, dataclass, field
from importlib import metadata


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    compute_capability: str  # "9.0"
    memory_mib: int
    uuid: str | None = None


@dataclass(frozen=True)
class RunnerFingerprint:
    os: str  # linux / windows
    arch: str  # x86_64 / aarch64
    gpus: tuple[GpuInfo, ...] = ()
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # the CUDA version the driver supports, e.g. "13.0"
    tensorrt: str | None = None  # exact version, e.g. "10.13.3.9"
    tensorrt_rtx: str | None = None
    onnxruntime: str | None = None
    onnxruntime_providers: tuple[str, ...] = ()
    labels: tuple[str, ...] = field(default_factory=tuple)

    @property
    def compute_capability(self) -> str | None:
        return self.gpus[0].compute_capability if self.gpus else None

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpus)

    def to_json(self) -> dict:
        data = asdict(self)
        data["gpus"] = [asdict(g) for g in self.gpus]
        return data

    @classmethod
    def from_json(cls, data: dict) -> "RunnerFingerprint":
        gpus = tuple(GpuInfo(**g) for g in data.get("gpus", ()))
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__ and k != "gpus"}
        for k in ("onnxruntime_providers", "labels"):
            if k in fields:
                fields[k] = tuple(fields[k])
        return cls(gpus=gpus, **fields)

    @classmethod
    def parse_gpu_spec(cls, spec: str, base: "RunnerFingerprint | None" = None) -> "RunnerFingerprint":
        """``sm89`` / ``8.9`` / ``none`` -> a fingerprint with that GPU (for `pull --gpu`)."""
        base = base or cls(os=_os_name(), arch=platform.machine())
        text = spec.strip().lower()
        if text in ("none", "cpu"):
            return _replace(base, gpus=())
        if text.startswith("sm"):
            digits = text[2:]
            cc = f"{digits[:-1]}.{digits[-1]}"
        else:
            cc = text
        gpu = GpuInfo(index=0, name=f"declared sm{cc.replace('.', '')}", compute_capability=cc, memory_mib=0)
        return _replace(base, gpus=(gpu,))


def _replace(fp: RunnerFingerprint, **changes) -> RunnerFingerprint:
    from dataclasses import replace

    return replace(fp, **changes)


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
