"""Detect this runner's fingerprint: what the machine is (GPU, compute capability, driver, runtimes, OS/arch,
the L4T release on a Jetson, the CPU's kernel-selecting instruction-set features).

``RunnerFingerprint`` is plain data (``orchestrator.core.fingerprint``); ``detect()`` is the edge that reads NVML
(via nvidia-ml-py, when a driver is present) and asks each runtime plugin's ``probe()`` what of it is installed
(plugins read package metadata where they can, so nothing heavy is imported). "No GPU" is a valid fingerprint.

Jetson modules have no NVML (``nvidia-smi`` reports nothing on JetPack 5/6). There the machine's own files say
what it is (``read_tegra``): ``/etc/nv_tegra_release`` the L4T release (the platform variant, ``l4t36.4``),
``/proc/device-tree/compatible`` and ``/proc/device-tree/model`` the module (its integrated GPU's compute
capability is fixed per SoC), ``/proc/meminfo`` the memory it shares with the CPU. NVML stays first: the Jetson
GPU is reported only when NVML reports none. Every path is read under an injectable root, so tests use fake trees.

The CPU (``cpu_info``): an onnxruntime CPU engine's numbers depend on the kernels onnxruntime picks for this CPU's
instruction set (``core.fingerprint.KERNEL_ISA_FEATURES`` says which features and why). On Linux they are read from
``/proc/cpuinfo``; ``ORCHESTRATE_CPU_FEATURES`` declares them instead (recorded as declared); elsewhere they are
unknown.
"""

from __future__ import annotations

import os
import platform
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from orchestrator.core.fingerprint import (
    KERNEL_ISA_FEATURES,
    CpuInfo,
    GpuInfo,
    InstalledRuntime,
    RunnerFingerprint,
    kernel_features,
)
from orchestrator.errors import UsageError

# The integrated GPU of each Tegra SoC: its compute capability (CUDA C Programming Guide, "Compute Capabilities";
# Jetson's support matrix): Orin (tegra234) 8.7, Xavier (tegra194) 7.2, TX2 (tegra186) 6.2, Nano / TX1 (tegra210)
# 5.3. Thor (tegra264) is 11.0: CUDA 13.0 renamed Thor from sm_101 to sm_110 ("Support for Thor SM renaming from
# sm_101 to sm_110 starting from CUDA 13.0; for CUDA 12.9 and older releases Thor stays labeled as sm_101",
# https://docs.nvidia.com/cuda/curanddx/release_notes.html; the CUDA 13.0 PTX ISA adds sm_110 as the renamed
# sm_101), and Thor ships with JetPack 7, whose CUDA is 13.0 ("What's New in CUDA Toolkit 13.0 for Jetson Thor",
# developer.nvidia.com/blog).
TEGRA_SOCS: dict[str, tuple[str, str]] = {  # compatible string -> (module family, compute capability)
    "tegra264": ("Thor", "11.0"),
    "tegra234": ("Orin", "8.7"),
    "tegra194": ("Xavier", "7.2"),
    "tegra186": ("TX2", "6.2"),
    "tegra210": ("Nano/TX1", "5.3"),
}
# The same by the words of /proc/device-tree/model, for a tree without a readable `compatible`. Order matters:
# "Jetson Orin Nano" is an Orin.
_MODEL_WORDS = (("thor", "tegra264"), ("orin", "tegra234"), ("xavier", "tegra194"), ("tx2", "tegra186"),
                ("nano", "tegra210"), ("tx1", "tegra210"))
_TEGRA_RELEASE = re.compile(r"#\s*R(?P<major>[0-9]+)\s*\(release\),\s*REVISION:\s*(?P<rev>[0-9]+(?:\.[0-9]+)*)")


@dataclass(frozen=True)
class Tegra:
    """What a Jetson's own files say: its L4T release (None: not a Jetson, or unreadable) and its integrated GPU
    (None: no Jetson module this tool knows)."""

    l4t: str | None = None
    gpu: GpuInfo | None = None


def _read_text(path: Path) -> str | None:
    try:
        return path.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return None


def l4t_release(text: str) -> str | None:
    """``# R36 (release), REVISION: 4.0, GCID: ...`` -> ``36.4`` (``REVISION: 4.3`` -> ``36.4.3``); None when the
    text is not an L4T release line."""
    m = _TEGRA_RELEASE.search(text)
    if m is None:
        return None
    parts = [str(int(m.group("major")))] + [str(int(p)) for p in m.group("rev").split(".")]
    while len(parts) > 2 and parts[-1] == "0":
        parts.pop()
    return ".".join(parts[:3])


def _shared_memory_mib(root: Path) -> int:
    text = _read_text(root / "proc" / "meminfo") or ""
    m = re.search(r"^MemTotal:\s*([0-9]+)\s*kB", text, re.MULTILINE)
    return int(m.group(1)) // 1024 if m else 0


def read_tegra(root: Path = Path("/")) -> Tegra:
    """A Jetson's L4T release and integrated GPU from the files under ``root``; ``Tegra()`` on any other machine."""
    release = _read_text(root / "etc" / "nv_tegra_release")
    l4t = l4t_release(release) if release else None
    tree = root / "proc" / "device-tree"
    model = (_read_text(tree / "model") or "").replace("\x00", " ").strip()
    compatible = (_read_text(tree / "compatible") or "").lower().split("\x00")
    soc = next((c.split(",", 1)[1] for c in compatible if c.startswith("nvidia,") and
                c.split(",", 1)[1] in TEGRA_SOCS), None)
    if soc is None and "jetson" in model.lower():
        soc = next((s for word, s in _MODEL_WORDS if word in model.lower()), None)
    if soc is None:
        return Tegra(l4t=l4t)
    family, cc = TEGRA_SOCS[soc]
    name = " ".join(model.split()) or f"NVIDIA Jetson {family} ({soc})"
    return Tegra(l4t=l4t, gpu=GpuInfo(0, name, cc, _shared_memory_mib(root)))


def _os_name() -> str:
    return platform.system().lower()


def _dist_version(*names: str) -> str | None:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def nvml_gpus() -> tuple[tuple[GpuInfo, ...], str | None, str | None]:
    """NVML's GPUs, driver version and CUDA driver version; nothing where there is no NVML (no driver, a Jetson)."""
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


# Declares this runner's kernel-selecting ISA features instead of /proc/cpuinfo (comma- or space-separated, names
# as in KERNEL_ISA_FEATURES; "none" for none): for a machine whose OS this tool cannot read them on, and for tests.
# Recorded as declared (CpuInfo.source), so a verdict never passes a declaration off as a detection.
CPU_FEATURES_ENV = "ORCHESTRATE_CPU_FEATURES"


def _cpuinfo_fields(text: str) -> tuple[str, set[str]]:
    """The CPU model and the flags of the first processor block of /proc/cpuinfo (x86 ``model name`` / ``flags``;
    Arm ``Features``, and ``CPU part`` where there is no model name)."""
    model, flags = "", set()
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "hardware", "cpu model") and not model:
            model = " ".join(value.split())
        elif key in ("flags", "features"):
            flags |= set(value.split())
    return model, flags


def cpu_info(root: Path = Path("/"), env: Mapping[str, str] | None = None) -> CpuInfo:
    """This CPU's model and kernel-selecting ISA features: ``ORCHESTRATE_CPU_FEATURES`` when set (a name outside
    ``KERNEL_ISA_FEATURES`` is a ``UsageError``), else ``/proc/cpuinfo`` under ``root`` (Linux), else unknown."""
    env = os.environ if env is None else env
    text = _read_text(root / "proc" / "cpuinfo")
    model, flags = _cpuinfo_fields(text) if text else ("", set())
    declared = env.get(CPU_FEATURES_ENV)
    if declared is not None:
        names = [n for n in re.split(r"[\s,]+", declared.strip().lower()) if n and n != "none"]
        unknown = [n for n in names if n not in KERNEL_ISA_FEATURES]
        if unknown:
            raise UsageError(f"{CPU_FEATURES_ENV} names {', '.join(unknown)}, not a kernel-selecting ISA feature",
                             hint="use the names /proc/cpuinfo prints, among: " + " ".join(KERNEL_ISA_FEATURES))
        return CpuInfo(model, tuple(f for f in KERNEL_ISA_FEATURES if f in names), CPU_FEATURES_ENV)
    if not text:
        return CpuInfo(model)
    return CpuInfo(model, kernel_features(flags), "/proc/cpuinfo")


RuntimeProbe = Callable[[], "InstalledRuntime | None"]


def detect(labels: tuple[str, ...] = (), probes: Mapping[str, RuntimeProbe] | None = None, *,
           root: Path = Path("/")) -> RunnerFingerprint:
    """NVML for the GPUs, else a Jetson's own files (``read_tegra``: also the L4T release, NVML or not); each
    runtime plugin's ``probe()`` (passed in by name) for what of it is installed."""
    gpus, driver, cuda = nvml_gpus()
    tegra = read_tegra(root)
    if not gpus and tegra.gpu is not None:
        gpus = (tegra.gpu,)
    runtimes = {}
    for name, probe in sorted((probes or {}).items()):
        installed = probe()
        if installed is not None:
            runtimes[name] = installed
    return RunnerFingerprint(os=_os_name(), arch=platform.machine(), gpus=gpus, driver_version=driver,
                             cuda_driver_version=cuda, runtimes=runtimes, labels=labels, l4t=tegra.l4t,
                             cpu=cpu_info(root))
