"""A runner's fingerprint as plain data: what the machine is (GPUs, compute capability, driver, installed
runtimes, OS/arch). Detection lives at the edge (``orchestrator.hardware``); "no GPU" is a valid fingerprint."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace


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
