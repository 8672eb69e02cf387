"""A runner's fingerprint as plain data: what the machine is (GPUs, compute capability, driver, the runtimes
installed, OS/arch). Detection lives at the edge (``orchestrator.hardware``, asking each runtime plugin what of
it is installed); "no GPU" is a valid fingerprint. The core names no runtime: ``runtimes`` is keyed by the
runtime plugins' own names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any


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

    def describe(self) -> str:
        """``NVIDIA H100 (CC 9.0); tensorrt 10.13.3.9, onnxruntime absent``-style one-liner for messages."""
        gpu = f"{self.gpus[0].name} (CC {self.compute_capability})" if self.gpus else "no GPU"
        installed = ", ".join(f"{name} {rt.version}" for name, rt in sorted(self.runtimes.items()))
        return f"{gpu}; {installed or 'no runtime installed'}"

    def to_json(self) -> dict[str, Any]:
        return {"os": self.os, "arch": self.arch, "gpus": [g.to_json() for g in self.gpus],
                "driver_version": self.driver_version, "cuda_driver_version": self.cuda_driver_version,
                "runtimes": {name: rt.to_json() for name, rt in sorted(self.runtimes.items())},
                "labels": list(self.labels)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunnerFingerprint:
        gpus = tuple(GpuInfo(**g) for g in data.get("gpus", ()))
        runtimes = {str(name): InstalledRuntime(str(rt["version"]), tuple(rt.get("features", ())))
                    for name, rt in (data.get("runtimes") or {}).items()}
        return cls(os=str(data.get("os", "")), arch=str(data.get("arch", "")), gpus=gpus,
                   driver_version=data.get("driver_version"), cuda_driver_version=data.get("cuda_driver_version"),
                   runtimes=runtimes, labels=tuple(data.get("labels", ())))

    @classmethod
    def parse_gpu_spec(cls, spec: str, base: RunnerFingerprint | None = None) -> RunnerFingerprint:
        """``sm89`` / ``8.9`` / ``none`` -> a fingerprint with that GPU (for `pull --gpu`)."""
        base = base or cls(os="", arch="")
        text = spec.strip().lower()
        if text in ("none", "cpu"):
            return replace(base, gpus=())
        if text.startswith("sm"):
            digits = text[2:]
            cc = f"{digits[:-1]}.{digits[-1]}"
        else:
            cc = text
        gpu = GpuInfo(index=0, name=f"declared sm{cc.replace('.', '')}", compute_capability=cc, memory_mib=0)
        return replace(base, gpus=(gpu,))
