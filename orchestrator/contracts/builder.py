"""The builder and transform contracts: one node in, one output (engine or ONNX) + log + metadata out.

A builder plugin is an object registered under the entry-point group ``trt_orchestrator.builders`` with:

- ``name``: the name targets use (``tensorrt-rtx``)
- ``runtime``: the runtime plugin that runs its engines (``trtexec`` -> ``tensorrt``)
- ``slug``: its part of a cell address (``rtx`` in ``sm89+rtx1.7``)
- ``probe_target(fingerprint) -> Target | None``: the target it would build for on this runner with the version
  installed here (``doctor`` shows it), None when it cannot build here at all
- ``capabilities(version) -> BuilderCapabilities``: what that builder version can do, pure, no import of the
  heavy library (the manifest checks and the planner call it on machines without it); among it, which precisions
  it makes from calibration data (``calibrated``: the manifest then requires ``calibration`` and keys it)
- ``available(fingerprint, target) -> str | None``: None if the runner whose fingerprint it is given can build
  ``target`` with it now, else the reason why not (a shard's runner check asks about another machine)
- ``build(request) -> BuildResult``: does the work; raises ``BuildError`` with the tool's own message
- ``recipe`` (optional): its recipe version, a build-key input; bump it in the change that makes the builder
  write other bytes for the same inputs. Without it the version of the distribution the plugin is installed from
  stands in, so each release of a third-party plugin rebuilds what it built (``plugins.recipe``)

Address slugs are unique among installed builders: two builders with one slug are refused when builders load.

A transform plugin (group ``trt_orchestrator.transforms``) turns one ONNX model into another (fp16 conversion,
int8 Q/DQ calibration); its output is cached under its own key and shared by every cell that needs it. It states a
``recipe`` version like a builder (optional; its distribution's version otherwise), part of that key.

Calibration caches: a Q/DQ transform, or a builder whose capabilities name a ``calibration_family``, also has
``calibrate(CalibrateRequest) -> dict`` writing the cache to ``request.out_path``. The ``calibrate`` node runs it
once per calibration key; transforms (``TransformRequest.calibration_cache``) and builders
(``BuildRequest.calibration_cache``) then read the cache instead of calibrating again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from orchestrator.core.capabilities import BuilderCapabilities, TargetKind, target_kind
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.graph import OptimizationProfile
from orchestrator.core.model import BuilderOptions, DataSource, PrecisionSpec, Target
from orchestrator.core.toolchain import Provisioning


@dataclass(frozen=True)
class BuildRequest:
    address: str
    build_key: str
    onnx_path: Path  # the (possibly transformed) model to build
    profiles: tuple[OptimizationProfile, ...]
    precision: PrecisionSpec
    native_precision: bool  # True: set the builder's precision flag/calibrator; False: ONNX already typed
    target: Target
    options: BuilderOptions
    out_dir: Path  # write the engine, log and layer info here (a temp dir the executor renames on success)
    cache_dir: Path  # timing caches etc. live here, keyed by the builder
    calibration: DataSource | None = None
    log: Callable[[str], None] = print
    # native int8: the calibration cache the ``calibrate`` node wrote (read it; never calibrate again)
    calibration_cache: Path | None = None
    # a timing cache to start from (a pinned build: the published one of this GPU and builder version)
    timing_cache: Path | None = None


@dataclass(frozen=True)
class BuildResult:
    engine_path: Path
    log_path: Path
    builder: str
    builder_version: str  # the exact version really used (may be more precise than the target's)
    build_seconds: float
    layer_info_path: Path | None = None
    metadata: dict[str, Any] = field(default_factory=dict)  # builder-specific facts (flags used, profile count, ...)
    # the timing cache as the build read it and as it left it (sha256:<hex>, None: none), and its file
    timing_cache_read: str | None = None
    timing_cache_written: str | None = None
    timing_cache_path: Path | None = None


@runtime_checkable
class Builder(Protocol):
    name: str
    runtime: str
    slug: str

    def probe_target(self, fingerprint: RunnerFingerprint) -> Target | None: ...

    def capabilities(self, version: str) -> BuilderCapabilities: ...

    def available(self, fingerprint: RunnerFingerprint, target: Target) -> str | None: ...

    def build(self, request: BuildRequest) -> BuildResult: ...


def probe_target(builder: Builder, fingerprint: RunnerFingerprint, *, device: str = "gpu") -> Target | None:
    """The usual ``Builder.probe_target``: the version of the builder's runtime installed here, for this GPU's
    compute capability (8.6 on a machine without one: AOT builders build without a GPU)."""
    version = fingerprint.runtime_version(builder.runtime)
    if not version:
        return None
    if device != "gpu":
        return Target(name="probe", builder=builder.name, builder_version=version, device=device,  # type: ignore[arg-type]
                      builder_slug=builder.slug)
    ccs = (fingerprint.compute_capability,) if fingerprint.compute_capability else ("8.6",)
    return Target(name="probe", builder=builder.name, builder_version=version, compute_capabilities=ccs,
                  builder_slug=builder.slug)


@dataclass(frozen=True)
class TransformRequest:
    kind: str  # "fp16" | "bf16" | "int8-qdq"
    key: str
    onnx_path: Path
    out_path: Path  # write here (temp path; the executor renames on success)
    precision: PrecisionSpec
    calibration: DataSource | None
    # input name -> shape to use when calibrating / generating data (the opt shape of the first profile)
    input_shapes: dict[str, tuple[int, ...]]
    input_dtypes: dict[str, str]
    log: Callable[[str], None] = print
    calibration_cache: Path | None = None  # Q/DQ: ranges the ``calibrate`` node computed (no data is read)


@dataclass(frozen=True)
class CalibrateRequest:
    """One calibration cache: the model, the data, the shapes it runs at, the method; write ``out_path``."""

    key: str
    onnx_path: Path
    out_path: Path
    precision: PrecisionSpec
    calibration: DataSource | None
    input_shapes: dict[str, tuple[int, ...]]
    input_dtypes: dict[str, str]
    log: Callable[[str], None] = print


@runtime_checkable
class Calibrator(Protocol):
    """A transform or builder that writes calibration caches (see the module docstring)."""

    def calibrate(self, request: CalibrateRequest) -> dict[str, Any]: ...


@runtime_checkable
class Transform(Protocol):
    kind: str
    # Python distributions whose versions change the output: a manifest pins them in `transforms.tools` to key on
    # them (keys never hold the planning machine's versions).
    tools: tuple[str, ...]

    def settings(self, precision: PrecisionSpec) -> dict[str, Any]:
        """What of the spec changes this transform's output (goes into the key)."""
        ...

    def run(self, request: TransformRequest) -> dict[str, Any]:
        """Write request.out_path; return facts for the log (e.g. nodes converted)."""
        ...

__all__ = ["BuilderCapabilities", "Provisioning", "TargetKind", "target_kind", "OptimizationProfile", "BuildRequest",
           "BuildResult", "Builder", "CalibrateRequest", "Calibrator", "TransformRequest", "Transform",
           "probe_target"]
