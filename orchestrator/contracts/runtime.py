"""The runtime port: say what of it is installed, judge whether an engine can run here, verify an engine file,
load it, run it, time it.

A runtime plugin (entry-point group ``trt_orchestrator.runtimes``) owns its compatibility rules: the core only
ranks the ``Compat`` answers (``orchestrator.core.select``). Everything is decided from the engine's descriptor
and the runner's fingerprint before a byte of the engine is deserialized.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from orchestrator.core.artifact import EngineDescriptor
from orchestrator.core.fingerprint import InstalledRuntime, RunnerFingerprint
from orchestrator.core.select import Compat

if TYPE_CHECKING:  # annotations only: numpy costs ~60 ms at start-up, and `plan` never runs an engine
    import numpy as np


@dataclass(frozen=True)
class RuntimeOptions:
    profile_index: int = 0
    device: Literal["cpu", "cuda"] = "cpu"
    cache_dir: Path | None = None  # runtime caches (RTX JIT cache per (CC, RTX version))


# Clocks that time the device work itself: CUDA events around the enqueue ("cuda_event"), or around the replay of a
# CUDA graph the runtime captured ("cuda_graph"). The benchmark gate judges the compute series of these (docs/gates.md).
DEVICE_CLOCKS = frozenset({"cuda_event", "cuda_graph"})


@dataclass(frozen=True)
class Timing:
    """Latencies in milliseconds, one per timed iteration. ``compute_ms``: the engine's work alone (on a GPU, the
    device series: a CUDA-graph replay where the runtime could capture one; ``extra["cuda_graph"]`` says whether it
    did, or why not); ``end_to_end_ms``: with the host<->device copies (GPU) or the runtime's plain run (CPU)."""

    compute_ms: tuple[float, ...]
    end_to_end_ms: tuple[float, ...] = ()
    clock: str = "perf_counter_ns"  # or one of DEVICE_CLOCKS
    device_memory_bytes: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Session(Protocol):
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    tf32: bool  # fp32 math runs in TF32 here (GPU runtimes by default); parity then uses the tf32 tolerances

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]: ...

    def benchmark(self, inputs: Mapping[str, np.ndarray], *, warmup: int, iterations: int,
                  time_budget_s: float | None) -> Timing: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class TritonBackend:
    """How NVIDIA Triton Inference Server serves a runtime's engines (``export triton``). A runtime plugin that
    Triton can serve sets ``triton`` to one of these (an optional attribute: absent or None, Triton cannot)."""

    platform: str | None  # config.pbtxt ``platform`` ("tensorrt_plan"), or
    backend: str | None  # config.pbtxt ``backend`` ("onnxruntime")
    filename: str  # the engine's file name in a version directory: "model.plan", "model.onnx"
    # True: one engine per compute capability, listed in ``cc_model_filenames``; False: one file for every GPU
    per_compute_capability: bool
    # what the backend offers, as this runtime's ``probe`` names its features (onnxruntime's execution providers)
    features: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        """``tensorrt_plan`` / ``onnxruntime``: the platform or backend, whichever it is."""
        return self.platform or self.backend or ""


@dataclass(frozen=True)
class RefitRequest:
    """Put weights into an engine: a stripped engine at deployment (the weights it was built with), or a refittable
    engine given a new model version's weights (``plan``'s ``~ refit``)."""

    engine_path: Path  # the engine as published (stripped, or refittable)
    engine: EngineDescriptor
    # a folder in the weights blob's format (``orchestrator.weights_file``): model.onnx + weights.bin
    weights: Path
    out_path: Path  # write the refitted engine here (the caller checks it, then renames it into place)
    new_weights: bool = False  # other weights than the engine was built with (only a refittable engine takes them)
    keep_refittable: bool = False  # the refitted engine must stay refittable (a ``~ refit`` build publishes it)


@dataclass(frozen=True)
class RefitResult:
    path: Path
    facts: dict[str, Any] = field(default_factory=dict)  # what the refit did, for logs and records


@runtime_checkable
class RefitCapability(Protocol):
    """A runtime that can put weights into its engines (``targets[].weights``: stripped, refittable; docs/refit.md).
    Optional, like the stores' optional ports: ``validate`` refuses a stripped or refittable target whose builder's
    runtime lacks it. ``refit`` raises ``GateError`` with the runtime's own reason when it cannot (no GPU its library
    accepts, weights that do not fit the engine); it never leaves a partial ``out_path``."""

    def refit(self, request: RefitRequest) -> RefitResult: ...


@runtime_checkable
class Runtime(Protocol):
    name: str
    # How deployments name it in ``pull --runtime <slug><version>`` (e.g. "trt" for trt10.13).
    slug: str

    def probe(self) -> InstalledRuntime | None:
        """What of this runtime is installed on this machine (None: not installed); cheap, no heavy import."""
        ...

    def can_run(self, engine: EngineDescriptor, fingerprint: RunnerFingerprint) -> Compat:
        """Whether ``engine`` can run on ``fingerprint``, why, and its rank (see ``core.select``)."""
        ...

    def verify_engine(self, engine_path: Path, engine: EngineDescriptor) -> str | None:
        """None when the file's own header agrees with its descriptor, else why not (second line of defence
        at ``pull``; runtimes whose engines carry no header return None)."""
        ...

    def load(self, engine_path: Path, engine: EngineDescriptor, options: RuntimeOptions) -> Session: ...
