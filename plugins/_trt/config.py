"""Per-version TensorRT build configuration, planned as plain data and applied to a real ``trt`` module.

``plan_build_config`` is pure: from (TensorRT version, flavour, precision, builder options, target) it decides
every flag *by name* and every setting, or raises ``BuildError`` when that version cannot do what was asked.
``apply`` then sets the plan on a real ``tensorrt`` / ``tensorrt_rtx`` module, resolving every enum by name at
that moment (``1 << int(trt.NetworkDefinitionCreationFlag.X)``): TensorRT 11.0 renumbered BuilderFlag and
NetworkDefinitionCreationFlag, so an integer written here would silently mean another flag
(shared/reference/tensorrt-api.md §0). The ``tensorrt`` builder applies the plan through the Python API, the
``trtexec`` builder translates the same plan into command-line flags, so both builders agree by construction.

Also here: ``capabilities(version)`` per builder version and ``build_runner_reason`` (can this runner build
this target with this installed version), both pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from orchestrator.contracts.builder import BuilderCapabilities
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.model import BuilderOptions, PrecisionSpec, Target
from orchestrator.core.versions import parse_cc, parse_version
from orchestrator.errors import BuildError

Flavour = Literal["tensorrt", "tensorrt-rtx"]
MemoryApi = Literal["device_memory_size", "device_memory_size_v2"]

_PRECISION_FLAG = {"fp16": "FP16", "bf16": "BF16", "int8": "INT8", "fp8": "FP8"}
_TILING = {"none": "NONE", "fast": "FAST", "moderate": "MODERATE", "full": "FULL"}
_HW_LEVEL = {"ampere_plus": "AMPERE_PLUS", "same_compute_capability": "SAME_COMPUTE_CAPABILITY"}


@dataclass(frozen=True)
class BuildConfigPlan:
    """Everything ``apply`` sets, by name. Enum values are resolved only when applied."""

    flavour: Flavour
    version: tuple[int, ...]
    network_flags: tuple[str, ...]  # NetworkDefinitionCreationFlag member names
    builder_flags: tuple[str, ...]  # BuilderFlag member names
    calibrator: bool  # attach an int8 entropy calibrator (TensorRT <= 10.x)
    hardware_compatibility_level: str | None  # HardwareCompatibilityLevel member name, None = leave default
    optimization_level: int | None  # builder_optimization_level 0-5, None = TensorRT default (3)
    tiling_level: str | None  # TilingOptimizationLevel member name (>= 10.8), None = default
    workspace_bytes: int | None  # MemoryPoolType.WORKSPACE limit, None = device maximum
    use_timing_cache: bool
    memory_api: MemoryApi  # which device-memory API runtimes use for these engines
    compute_capabilities: tuple[str, ...] = ()  # RTX AOT: ComputeCapability member names (SM86, ...)
    profiling_verbosity: str = "DETAILED"  # so the engine inspector reports every layer
    notes: tuple[str, ...] = ()  # warnings for the build log (deprecations, ignored options)

    @property
    def strongly_typed(self) -> bool:
        return "STRONGLY_TYPED" in self.network_flags

    def to_json(self) -> dict:
        """What the build used, for the artifact's metadata."""
        return {
            "network_flags": list(self.network_flags),
            "builder_flags": list(self.builder_flags),
            "calibrator": self.calibrator,
            "hardware_compatibility_level": self.hardware_compatibility_level,
            "optimization_level": self.optimization_level,
            "tiling_level": self.tiling_level,
            "workspace_bytes": self.workspace_bytes,
            "timing_cache": self.use_timing_cache,
            "compute_capabilities": list(self.compute_capabilities),
        }


def memory_api(version: str | tuple[int, ...], flavour: Flavour = "tensorrt") -> MemoryApi:
    """``device_memory_size_v2`` from 10.1 on (and on RTX); Polygraphy gates it the same way (runner.py)."""
    v = parse_version(version) if isinstance(version, str) else version
    if flavour == "tensorrt-rtx" or v >= (10, 1):
        return "device_memory_size_v2"
    return "device_memory_size"


def _removed_in_11(precision: str) -> str:
    flag = _PRECISION_FLAG[precision]
    if precision in ("int8", "fp8"):
        return (f"TensorRT 11.0 removed BuilderFlag.{flag} and the int8 calibrators; build from a Q/DQ-quantized "
                "ONNX (precision via: transform)")
    return (f"TensorRT 11.0 removed BuilderFlag.{flag}; build from an {precision}-converted ONNX "
            "(precision via: transform)")


_RTX_NO_FLAGS = ("TensorRT-RTX has no precision builder flags (strongly typed networks only); build from a "
                 "converted or Q/DQ-quantized ONNX (precision via: transform)")
_FP8_NO_IMPLICIT = ("FP8 has no implicit (calibrated) mode in TensorRT: FP8 needs Q/DQ nodes in the ONNX "
                    "(precision via: transform)")


def native_precisions(version: tuple[int, ...], flavour: Flavour) -> frozenset[str]:
    if flavour == "tensorrt-rtx" or version >= (11,):
        return frozenset()
    if version >= (10,):
        return frozenset({"fp16", "bf16", "int8"})  # BF16 flag added in 10.0
    return frozenset({"fp16", "int8"})


def via_transform_precisions(version: tuple[int, ...], flavour: Flavour) -> frozenset[str]:
    if flavour == "tensorrt-rtx" or version >= (10,):
        return frozenset({"fp16", "bf16", "int8", "fp8"})
    # 8.6: no strongly typed networks and no BF16 data type; a converted fp16 ONNX or int8 Q/DQ ONNX still needs
    # the FP16 / INT8 flag to be allowed to run in that precision (weakly typed).
    return frozenset({"fp16", "int8"})


def native_missing_reasons(version: tuple[int, ...], flavour: Flavour) -> dict[str, str]:
    if flavour == "tensorrt-rtx":
        return {p: _RTX_NO_FLAGS for p in _PRECISION_FLAG}
    if version >= (11,):
        return {p: _removed_in_11(p) for p in _PRECISION_FLAG}
    reasons = {"fp8": _FP8_NO_IMPLICIT}
    if version < (10,):
        reasons["bf16"] = "BuilderFlag.BF16 was added in TensorRT 10.0"
    return reasons


def capabilities(version: str, flavour: Flavour = "tensorrt", *, calibrator: bool = True) -> BuilderCapabilities:
    """What TensorRT ``version`` can build (pure). ``calibrator=False`` for trtexec, which cannot calibrate."""
    v = parse_version(version)
    native = native_precisions(v, flavour)
    reasons = native_missing_reasons(v, flavour)
    supports_calibrator = calibrator and flavour == "tensorrt" and v < (11,)
    if not calibrator and "int8" in native:
        native = native - {"int8"}
        reasons["int8"] = ("trtexec cannot calibrate int8 from data (--int8 without --calib uses placeholder "
                           "scales); use precision via: transform (Q/DQ) or the tensorrt builder")
    kinds = {"compute_capability", "hardware_compatible"}  # ampere+ (8.6+); same-CC level from 10.9
    if flavour == "tensorrt-rtx":
        kinds = {"compute_capability", "compute_capability_list"}
    runs_on = ("the same GPU compute capability (or Ampere+ when built hardware-compatible) with the exact "
               "same TensorRT version (or a newer one when built version-compatible)")
    if flavour == "tensorrt-rtx":
        runs_on = "RTX/Ampere+ GPUs (CC 8.0, 8.6, 8.9, 12.x) in the engine's CC list, same RTX release"
    return BuilderCapabilities(
        native=native,
        via_transform=via_transform_precisions(v, flavour),
        target_kinds=frozenset(kinds),
        needs_gpu=flavour == "tensorrt",
        runs_on=runs_on,
        native_missing_reason=reasons,
        supports_calibrator=supports_calibrator,
    )


def plan_build_config(version: str, flavour: Flavour, precision: PrecisionSpec, native_precision: bool,
                      options: BuilderOptions, target: Target) -> BuildConfigPlan:
    """Decide the whole build configuration for one engine, or raise BuildError naming what cannot be done."""
    v = parse_version(version)
    if not v:
        raise BuildError(f"unreadable {flavour} version {version!r}")
    rtx = flavour == "tensorrt-rtx"
    label = "TensorRT-RTX" if rtx else "TensorRT"
    vtext = f"{label} {version}"
    notes: list[str] = []
    network_flags: list[str] = []
    builder_flags: list[str] = []
    calibrator = False
    wants_precision = precision.name != "fp32"
    native = native_precision and wants_precision

    # --- network creation flags ---------------------------------------------------------------------------
    if not rtx and v < (10,):
        # 8.x: implicit batch is the default and the ONNX parser rejects it.
        network_flags.append("EXPLICIT_BATCH")
        if options.strongly_typed:
            raise BuildError(f"{vtext} has no strongly typed networks (STRONGLY_TYPED arrived in 9.1)",
                             hint="drop builder option strongly_typed or target TensorRT 10.x")
    elif rtx or v >= (11,):
        # RTX: "only supports strongly typed networks, explicitly specify this to avoid warning";
        # 11.0: always strongly typed (the flag is deprecated and ignored, set for clarity like NVIDIA's samples).
        network_flags.append("STRONGLY_TYPED")
    else:
        if options.strongly_typed is True or (wants_precision and not native_precision):
            if native:
                raise BuildError(f"a strongly typed network ignores precision builder flags, so {precision.name} "
                                 "cannot be set natively", hint="use precision via: transform, or turn off "
                                 "builder option strongly_typed")
            network_flags.append("STRONGLY_TYPED")

    # --- precision ------------------------------------------------------------------------------------------
    if native:
        if rtx:
            raise BuildError(_RTX_NO_FLAGS)
        if v >= (11,):
            raise BuildError(_removed_in_11(precision.name))
        if precision.name not in native_precisions(v, flavour):
            raise BuildError(f"{vtext} cannot build {precision.name} natively: "
                             f"{native_missing_reasons(v, flavour)[precision.name]}")
        builder_flags.append(_PRECISION_FLAG[precision.name])
        if precision.name == "int8":
            calibrator = True
            if v >= (10, 1):
                notes.append("implicit INT8 calibration (IInt8EntropyCalibrator2) is deprecated since "
                             "TensorRT 10.1 and removed in 11.0; prefer Q/DQ (precision via: transform)")
        if v >= (10, 12):
            notes.append(f"BuilderFlag.{_PRECISION_FLAG[precision.name]} is deprecated since TensorRT 10.12 "
                         "(weak typing); TensorRT 11.0 removes it")
    elif wants_precision and not rtx and v < (10,):
        if precision.name not in via_transform_precisions(v, flavour):
            raise BuildError(f"{vtext} cannot build a {precision.name} ONNX (no BF16/FP8 Q/DQ support before "
                             "TensorRT 10)")
        # 8.6 has no strong typing: the converted fp16 / Q/DQ ONNX builds weakly typed and TensorRT only runs
        # layers in fp16/int8 when the matching flag allows it.
        builder_flags.append(_PRECISION_FLAG[precision.name])

    # --- compatibility modes --------------------------------------------------------------------------------
    if options.version_compatible:
        if rtx:
            raise BuildError("TensorRT-RTX engines are not compatible across RTX releases; "
                             "version_compatible is not supported", hint="drop builder option version_compatible")
        builder_flags.append("VERSION_COMPATIBLE")
        if options.exclude_lean_runtime:
            builder_flags.append("EXCLUDE_LEAN_RUNTIME")
    elif options.exclude_lean_runtime:
        notes.append("exclude_lean_runtime is ignored unless version_compatible is set")

    hw_level = None
    if target.hardware_compatibility != "none":
        if rtx:
            raise BuildError("TensorRT-RTX targets name their compute capabilities (AOT list), not a hardware "
                             "compatibility level", hint="use compute_capabilities: [8.6, 8.9, 12.0]")
        if target.hardware_compatibility == "same_compute_capability" and v < (10, 9):
            raise BuildError(f"{vtext} has no HardwareCompatibilityLevel.SAME_COMPUTE_CAPABILITY (added in 10.9)")
        hw_level = _HW_LEVEL[target.hardware_compatibility]

    ccs: tuple[str, ...] = ()
    if rtx:
        parsed = [parse_cc(c) for c in target.compute_capabilities]
        if any(p is None for p in parsed):
            raise BuildError(f"unreadable compute capability in {list(target.compute_capabilities)}")
        ccs = tuple(f"SM{p[0]}{p[1]}" for p in parsed if p)

    # --- tuning knobs ---------------------------------------------------------------------------------------
    opt_level = options.optimization_level
    if opt_level is not None and not 0 <= opt_level <= 5:
        raise BuildError(f"builder optimization level {opt_level} is outside 0-5")
    tiling = None
    if options.tiling_level not in (None, "none"):
        if not rtx and v < (10, 8):
            raise BuildError(f"{vtext} has no tiling_optimization_level (added in 10.8)",
                             hint="drop builder option tiling_level or target TensorRT >= 10.8")
        tiling = _TILING[options.tiling_level]
    workspace = options.workspace_mib * (1 << 20) if options.workspace_mib else None

    use_cache = options.timing_cache
    if rtx and v >= (1, 2) and use_cache:
        # RTX 1.2 deprecated the timing cache (no-op) and using it forces a GPU during AOT builds.
        use_cache = False

    return BuildConfigPlan(
        flavour=flavour,
        version=v,
        network_flags=tuple(network_flags),
        builder_flags=tuple(builder_flags),
        calibrator=calibrator,
        hardware_compatibility_level=hw_level,
        optimization_level=opt_level,
        tiling_level=tiling,
        workspace_bytes=workspace,
        use_timing_cache=use_cache,
        memory_api=memory_api(v, flavour),
        compute_capabilities=ccs,
        notes=tuple(notes),
    )


# ---------------------------------------------------------------------------------------------------------------
# Applying a plan to a real module. Every name is looked up when applied; a missing one is a BuildError naming it.


def _member(trt: Any, enum: str, name: str) -> Any:
    try:
        return getattr(getattr(trt, enum), name)
    except AttributeError as e:
        version = getattr(trt, "__version__", "?")
        raise BuildError(f"this {getattr(trt, '__name__', 'tensorrt')} {version} has no {enum}.{name}") from e


def network_flags_value(plan: BuildConfigPlan, trt: Any) -> int:
    """The ``create_network`` flags, each resolved by name now: ``1 << int(trt.NetworkDefinitionCreationFlag.X)``."""
    value = 0
    for name in plan.network_flags:
        value |= 1 << int(_member(trt, "NetworkDefinitionCreationFlag", name))
    return value


def _set_attr(obj: Any, attr: str, value: Any, what: str) -> None:
    try:
        setattr(obj, attr, value)
    except AttributeError as e:  # Polygraphy's try_run pattern: the binding does not have it on this version
        raise BuildError(f"this TensorRT cannot set {what} ({type(obj).__name__}.{attr} is missing)") from e


def apply(plan: BuildConfigPlan, trt: Any, builder: Any, network: Any, config: Any,
          *, calibrator: Any = None) -> list[str]:
    """Set ``plan`` on ``config`` (an IBuilderConfig of ``trt``); returns lines for the build log.

    ``network`` must have been created with ``network_flags_value(plan, trt)``; ``builder`` is consulted only for
    hardware hints that exist on older versions (``platform_has_fast_fp16``, removed in 11.0).
    """
    log = list(plan.notes)
    for name in plan.builder_flags:
        config.set_flag(_member(trt, "BuilderFlag", name))
    log.append(f"network flags: {', '.join(plan.network_flags) or 'none'}; "
               f"builder flags: {', '.join(plan.builder_flags) or 'none'}")
    if "FP16" in plan.builder_flags:
        try:
            if not builder.platform_has_fast_fp16:
                log.append("warning: this GPU has no fast FP16; FP16 layers may be slower than FP32")
        except AttributeError:
            pass  # removed in 11.0, deprecated 10.5
    if plan.strongly_typed and hasattr(network, "get_flag"):
        try:
            if not network.get_flag(_member(trt, "NetworkDefinitionCreationFlag", "STRONGLY_TYPED")):
                raise BuildError("the network was not created strongly typed; create it with "
                                 "network_flags_value(plan, trt)")
        except (AttributeError, TypeError):
            pass
    if plan.calibrator:
        if calibrator is None:
            raise BuildError("this int8 build needs a calibrator and none was given")
        _set_attr(config, "int8_calibrator", calibrator, "an INT8 calibrator")
    if plan.workspace_bytes is not None:
        config.set_memory_pool_limit(_member(trt, "MemoryPoolType", "WORKSPACE"), plan.workspace_bytes)
    if plan.optimization_level is not None:
        _set_attr(config, "builder_optimization_level", plan.optimization_level, "the builder optimization level")
    if plan.hardware_compatibility_level is not None:
        _set_attr(config, "hardware_compatibility_level",
                  _member(trt, "HardwareCompatibilityLevel", plan.hardware_compatibility_level),
                  "a hardware compatibility level")
    if plan.tiling_level is not None:
        _set_attr(config, "tiling_optimization_level", _member(trt, "TilingOptimizationLevel", plan.tiling_level),
                  "the tiling optimization level")
    if plan.compute_capabilities:
        _set_attr(config, "num_compute_capabilities", len(plan.compute_capabilities), "AOT compute capabilities")
        for i, name in enumerate(plan.compute_capabilities):
            config.set_compute_capability(_member(trt, "ComputeCapability", name), i)
    _set_attr(config, "profiling_verbosity", _member(trt, "ProfilingVerbosity", plan.profiling_verbosity),
              "the profiling verbosity")
    return log


# ---------------------------------------------------------------------------------------------------------------
# Can this runner build this target?


def build_runner_reason(fp: RunnerFingerprint, target: Target, installed_version: str | None,
                        tool: str = "TensorRT") -> str | None:
    """None if a runner with ``fp`` and ``installed_version`` of TensorRT can build ``target``, else why not."""
    if installed_version is None:
        return f"{tool} is not installed"
    if parse_version(installed_version) != parse_version(target.builder_version):
        return (f"target {target.name!r} wants TensorRT {target.builder_version}, this runner has "
                f"{installed_version}; engines load only on the exact version that built them, so the builder "
                "version must match exactly")
    if not fp.has_gpu:
        return "TensorRT builds need an NVIDIA GPU; this runner has none"
    local = parse_cc(fp.compute_capability)
    if local is None:
        return f"this runner's compute capability {fp.compute_capability!r} is unreadable"
    wanted = [parse_cc(c) for c in target.compute_capabilities]
    if len(wanted) > 1:
        return (f"a TensorRT engine targets one compute capability; target {target.name!r} lists "
                f"{list(target.compute_capabilities)} (use one target per CC, or a hardware-compatible build)")
    level = target.hardware_compatibility
    if level == "ampere_plus":
        if local < (8, 0):
            return (f"an Ampere+ hardware-compatible engine must be built on Ampere or newer (CC >= 8.0); "
                    f"this runner's GPU is {fp.compute_capability}")
        return None
    if level == "same_compute_capability" and local < (7, 5):
        return ("a same-compute-capability engine must be built on Turing or newer (CC >= 7.5); "
                f"this runner's GPU is {fp.compute_capability}")
    if wanted and wanted[0] != local:
        return (f"target {target.name!r} is for compute capability {target.compute_capabilities[0]}, this "
                f"runner's GPU is {fp.compute_capability}; a TensorRT engine is built on the GPU it targets")
    if not wanted and level == "none":
        return f"target {target.name!r} names no compute capability"
    return None
