"""What a builder version can do (pure data the resolver, the manifest checks and `doctor` read)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from orchestrator.core.artifact import ENGINE_MEDIA_TYPE
from orchestrator.core.graph import Route
from orchestrator.core.model import PrecisionSpec, Target
from orchestrator.core.toolchain import Provisioning

# Precisions a GPU generation must have: FP8 GEMMs need CC >= 8.9 on RTX and TensorRT (RTX docs "Advanced"), BF16
# Ampere (8.0). Older GPUs cannot build them; `validate` refuses such cells and the resolver blocks them.
MIN_CC: dict[str, tuple[int, int]] = {"fp8": (8, 9), "bf16": (8, 0)}

TargetKind = Literal["compute_capability", "compute_capability_list", "hardware_compatible", "cpu", "cuda"]


@dataclass(frozen=True)
class BuilderCapabilities:
    """What one builder version can do. ``native``: precisions set by a builder flag/calibrator.
    ``via_transform``: precisions it builds from a converted/Q-DQ ONNX (strongly typed)."""

    native: frozenset[str]
    via_transform: frozenset[str]
    target_kinds: frozenset[str]
    needs_gpu: bool
    # Human sentence on where its engines run, shown by `doctor` and in errors.
    runs_on: str
    # Why a native precision is missing on this version, for the error hint (precision -> sentence).
    native_missing_reason: dict[str, str] = field(default_factory=dict)
    supports_calibrator: bool = False  # int8 entropy calibrator (TRT <= 10.x, deprecated 10.1)
    engine_suffix: str = ".plan"
    engine_media_type: str = ENGINE_MEDIA_TYPE  # how stores label the engine file (an ONNX "engine" differs)
    # The ``BuilderOptions`` fields this builder applies (only they reach its build keys); None: all of them.
    reads_options: frozenset[str] | None = None
    # ``options.extra`` keys it applies -> what each does (the manifest checks refuse any other key, listing these)
    extra_options: Mapping[str, str] = field(default_factory=dict)
    # Engines not portable across OS / CPU architecture (TensorRT's support matrix): the target's platform is a
    # build key input and `pull` refuses another platform's engines.
    platform_specific: bool = True
    # Native int8 calibration writes a cache of this format family (TensorRT's, shared by the ``tensorrt`` and
    # ``trtexec`` builders of one version); None: no native calibration cache.
    calibration_family: str | None = None
    # It can build from a given timing cache and fail on a tactic the cache lacks (``timing_cache: {pin: true}``)
    pins_timing_cache: bool = False
    # The int8 calibration methods its native route can calibrate with (``precisions[].calibration_method``);
    # None: any (or no native int8). validate refuses another method on a cell that takes the native route.
    native_calibration_methods: frozenset[str] | None = None
    # How CI provisions this exact version (toolchains); None: not known where this runs (a committed workflow
    # generated without the plugin): toolchains are then taken as written and checked by the run-time plan
    provisioning: Provisioning | None = field(default_factory=Provisioning)
    # Why this version string cannot be a target's builder_version, as (message, hint); None when it can. A builder
    # whose engines load only on the exact release that built them (TensorRT, TensorRT-RTX) refuses a looser one
    # ("10.13" is three releases); validate reports it at the target's builder_version.
    version_problem: tuple[str, str] | None = None
    # Where its engines' weights may live (``targets[].weights``, docs/refit.md): "embedded" always; "stripped"
    # (built without weights, refitted from the model version's weights blob at deployment) and "refittable"
    # (accepts new weights: a weights-only model change is refitted, not rebuilt) where this version can build them
    # and its runtime plugin can refit them. ``weights_missing_reason``: why a mode is not offered (validate says it).
    weights_modes: frozenset[str] = frozenset({"embedded"})
    weights_missing_reason: Mapping[str, str] = field(default_factory=dict)

    # The native precisions it builds from calibration data (the manifest's ``calibration``: a calibrator reads it);
    # one it quantizes without data (e.g. dynamic quantization) is left out, and its cells then need no data and
    # key none. A Q/DQ transform route always calibrates (``QDQ_PRECISIONS``).
    calibrated: frozenset[str] = frozenset({"int8", "fp8"})

    def can(self, precision: str) -> bool:
        return precision == "fp32" or precision in self.native or precision in self.via_transform


# Precisions whose transform route is a Q/DQ transform that calibrates: it reads the model's calibration data.
QDQ_PRECISIONS = frozenset({"int8", "fp8"})


def needs_calibration_data(spec: PrecisionSpec, caps: BuilderCapabilities, target: Target) -> bool:
    """Whether a cell of ``spec`` on ``target`` is made from calibration data: a Q/DQ transform's, or its builder's
    own calibrator for a precision its capabilities list as ``calibrated``."""
    route = route_of(spec, caps, target)
    if route == "transform":
        return spec.name in QDQ_PRECISIONS
    return route == "native" and spec.name in caps.calibrated


def strongly_typed(target: Target, caps: BuilderCapabilities) -> bool:
    """The target asks for a strongly typed network from a builder that applies that option: precision builder
    flags are ignored there, so precisions come from the graph (a conversion or Q/DQ transform)."""
    return bool(target.options.strongly_typed) and caps.reads_options is not None \
        and "strongly_typed" in caps.reads_options


def route_of(spec: PrecisionSpec, caps: BuilderCapabilities, target: Target) -> Route | None:
    """How ``target`` reaches ``spec``'s precision: builder flags (``native``), a converted/Q-DQ ONNX
    (``transform``), nothing to do (``none``, fp32), or None (it cannot)."""
    if spec.name == "fp32":
        return "none"
    if spec.via == "native":
        return "native" if spec.name in caps.native else None
    if spec.via == "transform":
        return "transform" if spec.name in caps.via_transform else None
    if strongly_typed(target, caps) and spec.name in caps.via_transform:
        return "transform"  # a strongly typed network ignores precision flags: the graph must carry them
    if spec.name in caps.native:
        return "native"
    if spec.name in caps.via_transform:
        return "transform"
    return None


def target_kind(target: Target) -> str:
    if target.device in ("cpu", "cuda") and not target.compute_capabilities:
        return target.device
    if target.hardware_compatibility != "none" and not target.compute_capabilities:
        return "hardware_compatible"
    if len(target.compute_capabilities) > 1:
        return "compute_capability_list"
    if target.hardware_compatibility != "none":
        return "hardware_compatible"
    return "compute_capability"
