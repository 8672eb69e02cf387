"""A runner's fingerprint as plain data: what the machine is (GPUs, compute capability, driver, the runtimes
installed, OS/arch and, on a Jetson, its L4T release: together its platform, ``core.platform``). Detection lives
at the edge (``orchestrator.hardware``, asking each runtime plugin what of it is installed); "no GPU" is a valid
fingerprint. The core names no runtime: ``runtimes`` is keyed by the runtime plugins' own names."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from orchestrator.core.platform import platform_text
from orchestrator.errors import UsageError

_CC_SPEC = re.compile(r"^(?:sm_?(?P<sm>[0-9]{2,3})|(?P<major>[0-9]{1,2})\.(?P<minor>[0-9])|(?P<digits>[0-9]{2,3}))$")
# What people type for `--gpu` instead of a compute capability: the name of the GPU. Suggested, never guessed.
_GPU_CC = {"b200": "10.0", "gb200": "10.0", "b100": "10.0", "h200": "9.0", "gh200": "9.0", "h100": "9.0",
           "h800": "9.0", "a100": "8.0", "a800": "8.0", "a30": "8.0", "a10": "8.6", "a10g": "8.6", "a16": "8.6",
           "a40": "8.6", "a6000": "8.6", "rtxa6000": "8.6", "a2": "8.6", "l4": "8.9", "l40": "8.9", "l40s": "8.9",
           "rtx6000ada": "8.9", "t4": "7.5", "v100": "7.0", "p100": "6.0", "orin": "8.7", "rtx5090": "12.0",
           "5090": "12.0", "rtx5080": "12.0", "rtx4090": "8.9", "4090": "8.9", "rtx4080": "8.9", "rtx4070": "8.9",
           "rtx3090": "8.6", "3090": "8.6", "rtx3080": "8.6", "rtx2080": "7.5"}
# The name of a GPU declared by compute capability only (`pull --gpu sm89`): it has no model.
DECLARED_PREFIX = "declared "

# The instruction-set features that select onnxruntime's CPU kernels, named as Linux's /proc/cpuinfo names them
# (x86 "flags", Arm "Features"). onnxruntime's MLAS library picks its GEMM, convolution and int8 kernels once per
# process from CPUID / hwcaps (onnxruntime/core/mlas/lib/platform.cpp, MLAS_PLATFORM::MLAS_PLATFORM): x86-64 -- AVX
# (with OS-saved YMM state), FMA + AVX2 (GemmU8S8/U8U8 AVX2, FMA3 float kernels), AVX-VNNI, AVX512F (float kernels,
# NCHWc block 16 instead of 8), AVX512BW/DQ/VL ("AVX512 core": int8 GEMM), AVX512-VNNI (int8 GEMM and symmetric
# conv), AVX-VNNI-INT8, AVX-NE-CONVERT (fp16 casts), AMX-TILE + AMX-INT8 (int8 GEMM on tiles); aarch64 -- ASIMD
# dot product (udot/sdot int8 GEMM), I8MM (ummla/smmla), SVE and SVE I8MM, BF16, fp16 vector arithmetic (asimdhp),
# SME. A CPU engine's numbers (int8 most of all: issue 22.5 measured cosine 0.904 on one x86-64 machine and 0.238
# on an AMD EPYC with avx512_vnni, same engine and data) follow these; SSE4.1 is MSVC-only there, and
# avx512_bf16 / amx_bf16 are kept for onnxruntime's bf16 paths, so a verdict states them too.
KERNEL_ISA_FEATURES: tuple[str, ...] = (
    # x86-64
    "sse4_1", "avx", "fma", "avx2", "avx_vnni", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni",
    "avx512_bf16", "avx_vnni_int8", "avx_ne_convert", "amx_tile", "amx_int8", "amx_bf16",
    # aarch64
    "asimd", "asimddp", "asimdhp", "i8mm", "bf16", "sve", "sve2", "svei8mm", "sme",
)


@dataclass(frozen=True)
class CpuInfo:
    """The CPU as far as a CPU engine's numbers depend on it: its model name and which of ``KERNEL_ISA_FEATURES``
    it has (sorted in that order). ``source`` says where the features were read: ``/proc/cpuinfo``, the
    ``ORCHESTRATE_CPU_FEATURES`` declaration, or "" (unknown: not Linux, or unreadable)."""

    model: str = ""
    features: tuple[str, ...] = ()
    source: str = ""

    @property
    def known(self) -> bool:
        return bool(self.source)

    @property
    def isa(self) -> list[str] | None:
        """The features as a verdict and a gate key record them; None when unknown."""
        return list(self.features) if self.known else None

    def describe(self) -> str:
        """``AMD EPYC: avx fma avx2 avx512f ...`` (or ``ISA unknown``) for messages and `show`."""
        isa = (" ".join(self.features) or "none of the kernel-selecting features") if self.known else "ISA unknown"
        return f"{self.model or 'CPU'}: {isa}"

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "features": list(self.features), "source": self.source}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CpuInfo:
        return cls(str(data.get("model") or ""), tuple(str(f) for f in data.get("features") or ()),
                   str(data.get("source") or ""))


def kernel_features(flags: Iterable[str]) -> tuple[str, ...]:
    """The kernel-selecting features among ``flags`` (any case), in ``KERNEL_ISA_FEATURES`` order."""
    have = {f.strip().lower() for f in flags}
    return tuple(f for f in KERNEL_ISA_FEATURES if f in have)


def same_gpu_model(a: str | None, b: str | None) -> bool:
    """Whether two GPU model names (NVML's, or declared) name one model: case and spacing aside."""
    if not a or not b:
        return False
    return " ".join(a.split()).casefold() == " ".join(b.split()).casefold()


def _gpu_key(name: str) -> str:
    """``NVIDIA GeForce RTX 4090`` -> ``rtx4090``: a GPU name as ``_GPU_CC`` knows it."""
    text = re.sub(r"[\s_-]+", "", name.lower())
    return text.removeprefix("nvidia").removeprefix("geforce").removeprefix("tesla")


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    compute_capability: str  # "9.0"
    memory_mib: int
    uuid: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "name": self.name, "compute_capability": self.compute_capability,
                "memory_mib": self.memory_mib, "uuid": self.uuid}


@dataclass(frozen=True)
class InstalledRuntime:
    """What a runtime plugin found installed here: its exact version and what it offers (e.g. execution
    providers), as the plugin itself reads them."""

    version: str
    features: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "features": list(self.features)}


@dataclass(frozen=True)
class RunnerFingerprint:
    os: str  # linux / windows
    arch: str  # x86_64 / aarch64
    gpus: tuple[GpuInfo, ...] = ()
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # the CUDA version the driver supports, e.g. "13.0"
    # runtime plugin name -> what is installed; absent: not installed
    runtimes: Mapping[str, InstalledRuntime] = field(default_factory=dict, hash=False)
    labels: tuple[str, ...] = ()
    l4t: str | None = None  # the L4T release on a Jetson ("36.4"): its platform variant; None elsewhere
    cpu: CpuInfo | None = None  # the CPU's model and kernel-selecting ISA features; None: not detected

    @property
    def platform(self) -> str:
        """``linux/x86_64``, ``linux/aarch64/l4t36.4`` (``core.platform``); an OS or architecture this tool does
        not know is kept as reported, so it matches no engine rather than a wrong one."""
        return platform_text(self.os, self.arch, f"l4t{self.l4t}" if self.l4t else None)

    @property
    def gpu_model(self) -> str | None:
        """The first GPU's model (SKU) as NVML names it ("NVIDIA L4"), or None: no GPU, or a declared one
        whose model was not declared."""
        return self.gpus[0].name if self.gpus and not self.gpus[0].name.startswith(DECLARED_PREFIX) else None

    @property
    def compute_capability(self) -> str | None:
        return self.gpus[0].compute_capability if self.gpus else None

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpus)

    def runtime_version(self, name: str) -> str | None:
        installed = self.runtimes.get(name)
        return installed.version if installed else None

    def runtime_features(self, name: str) -> tuple[str, ...]:
        installed = self.runtimes.get(name)
        return installed.features if installed else ()

    def with_runtime(self, name: str, installed: InstalledRuntime | None) -> RunnerFingerprint:
        """The same runner with ``name`` installed as given (None: not installed); for declared deployments."""
        runtimes = {k: v for k, v in self.runtimes.items() if k != name}
        if installed is not None:
            runtimes[name] = installed
        return replace(self, runtimes=dict(sorted(runtimes.items())))

    def with_gpu_model(self, model: str) -> RunnerFingerprint:
        """The same runner with its first GPU named ``model`` (a deployment's declared GPU model, `--gpu-model`);
        a ``UsageError`` when there is no GPU to name."""
        name = " ".join(model.split())
        if not self.gpus:
            raise UsageError("--gpu-model names the deployment's GPU, but it has none",
                             hint="declare its compute capability too: --gpu sm89 --gpu-model 'NVIDIA L4'")
        if not name or name.lower().startswith(DECLARED_PREFIX):
            raise UsageError(f"unreadable --gpu-model {model!r}",
                             hint="the GPU model as nvidia-smi names it, e.g. --gpu-model 'NVIDIA L4'")
        known = _GPU_CC.get(_gpu_key(name))
        if known is not None and known != self.gpus[0].compute_capability:
            raise UsageError(f"--gpu-model {name!r} has compute capability {known}, not the declared "
                             f"{self.gpus[0].compute_capability}",
                             hint=f"declare --gpu sm{known.replace('.', '')} with it, or the model that is meant")
        return replace(self, gpus=(replace(self.gpus[0], name=name), *self.gpus[1:]))

    def describe(self) -> str:
        """``NVIDIA H100 (CC 9.0) on linux/x86_64; tensorrt 10.13.3.9``-style one-liner for messages."""
        gpu = f"{self.gpus[0].name} (CC {self.compute_capability})" if self.gpus else "no GPU"
        where = f" on {self.platform}" if self.os or self.arch else ""
        installed = ", ".join(f"{name} {rt.version}" for name, rt in sorted(self.runtimes.items()))
        return f"{gpu}{where}; {installed or 'no runtime installed'}"

    def to_json(self) -> dict[str, Any]:
        return {"os": self.os, "arch": self.arch, "gpus": [g.to_json() for g in self.gpus],
                "driver_version": self.driver_version, "cuda_driver_version": self.cuda_driver_version,
                "runtimes": {name: rt.to_json() for name, rt in sorted(self.runtimes.items())},
                "labels": list(self.labels), "l4t": self.l4t,
                **({"cpu": self.cpu.to_json()} if self.cpu is not None else {})}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunnerFingerprint:
        gpus = tuple(GpuInfo(**g) for g in data.get("gpus", ()))
        runtimes = {str(name): InstalledRuntime(str(rt["version"]), tuple(rt.get("features", ())))
                    for name, rt in (data.get("runtimes") or {}).items()}
        return cls(os=str(data.get("os", "")), arch=str(data.get("arch", "")), gpus=gpus,
                   driver_version=data.get("driver_version"), cuda_driver_version=data.get("cuda_driver_version"),
                   runtimes=runtimes, labels=tuple(data.get("labels", ())),
                   l4t=str(data["l4t"]) if data.get("l4t") else None,
                   cpu=CpuInfo.from_json(data["cpu"]) if isinstance(data.get("cpu"), Mapping) else None)

    @classmethod
    def parse_gpu_spec(cls, spec: str, base: RunnerFingerprint | None = None) -> RunnerFingerprint:
        """``sm89`` / ``sm_89`` / ``8.9`` / ``89`` / ``none`` (or ``cpu``) -> a fingerprint with that GPU (for
        `pull --gpu`). Anything else is a ``UsageError`` (a GPU's name gets its compute capability suggested):
        a misread value would silently pick an engine for another machine."""
        base = base or cls(os="", arch="")
        text = spec.strip().lower()
        if text in ("none", "cpu"):
            return replace(base, gpus=())
        m = _CC_SPEC.match(text)
        if m is not None:
            digits = m.group("sm") or m.group("digits")
            major, minor = (digits[:-1], digits[-1]) if digits else (m.group("major"), m.group("minor"))
            if int(major) > 0:
                cc = f"{int(major)}.{minor}"
                gpu = GpuInfo(index=0, name=f"{DECLARED_PREFIX}sm{int(major)}{minor}", compute_capability=cc,
                              memory_mib=0)
                return replace(base, gpus=(gpu,))
        known = _GPU_CC.get(_gpu_key(text))
        if known is not None:
            slug = "sm" + known.replace(".", "")
            hint = (f"did you mean {slug} (the {spec.strip().upper()}'s compute capability)? --gpu takes a compute "
                    "capability (sm90, 9.0), none, or auto")
        else:
            hint = ("--gpu takes a compute capability such as sm90 or 9.0, or none (a machine without a GPU), or "
                    "auto (this machine's GPU)")
        raise UsageError(f"unknown --gpu {spec!r}: not a compute capability", hint=hint)
