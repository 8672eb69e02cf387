"""The runtime contract: load one engine, run it, time it.

A runtime plugin (entry-point group ``trt_orchestrator.runtimes``) has a ``name`` matching the builder whose
engines it runs, ``can_run(metadata, fingerprint) -> str | None`` (None = yes, else why not; decided before
any deserialization) and ``load(engine_path, metadata, options) -> Session``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Mapping, Protocol, runtime_checkable

import numpy as np

from orchestrator.core.fingerprint import RunnerFingerprint


@dataclass(frozen=True)
class RuntimeOptions:
    profile_index: int = 0
    device: Literal["cpu", "cuda"] = "cpu"
    cache_dir: Path | None = None  # runtime caches (RTX JIT cache per (CC, RTX version))


@dataclass(frozen=True)
class Timing:
    """Latencies in milliseconds, one per timed iteration."""

    compute_ms: tuple[float, ...]
    end_to_end_ms: tuple[float, ...] = ()
    clock: str = "perf_counter_ns"  # or "cuda_event"
    device_memory_bytes: int | None = None
    extra: dict = field(default_factory=dict)


class Session(Protocol):
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    tf32: bool  # fp32 math runs in TF32 here (GPU runtimes by default); parity then uses the tf32 tolerances

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]: ...

    def benchmark(self, inputs: Mapping[str, np.ndarray], *, warmup: int, iterations: int,
                  time_budget_s: float | None) -> Timing: ...

    def close(self) -> None: ...


@runtime_checkable
class Runtime(Protocol):
    name: str

    def can_run(self, metadata: dict, fingerprint: RunnerFingerprint) -> str | None: ...

    def load(self, engine_path: Path, metadata: dict, options: RuntimeOptions) -> Session: ...
