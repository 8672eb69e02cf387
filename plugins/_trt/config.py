"""Per-version TensorRT build configuration, planned as plain data and applied to a real ``trt`` module.

``plan_build_config`` is pure: from (TensorRT version, flavour, precision, builder options, target) it decides
every flag *by name* and every setting, or raises ``BuildError`` when that version cannot do what was asked.
``apply`` then sets the plan on a real ``tensorrt`` / ``tensorrt_rtx`` module, resolving every enum by name at
that moment (``1 << int(trt.NetworkDefinitionCreationFlag.X)``): TensorRT 11.0 renumbered BuilderFlag and
NetworkDefinitionCreationFlag, so an integer written here would silently mean another flag
(shared/reference/tensorrt-api.md §0). The ``tensorrt`` builder applies the plan through the Python API, the
``trtexec`` builder translates the same plan into command-line flags, so both builders agree by construction.

Also here: ``capabilities(version)`` per builder version and ``build_runner_reason`` (can this runner build
this target with this installed version, on this platform), both pure.

``options.extra`` (per builder version, ``EXTRA_OPTIONS``; any other key is refused at validate, and again here):

=========================  =======================================  ======================  ====================
key (value)                TensorRT Python API (``tensorrt``)       trtexec flag            versions
=========================  =======================================  ======================  ====================
``avg_timing_iterations``  ``config.avg_timing_iterations = N``     ``--avgTiming=N``       8.6.1+ (both)
(int >= 1)
``max_aux_streams``        ``config.max_aux_streams = N``           ``--maxAuxStreams=N``   8.6.1+ (both)
(int >= 0)
``sparse_weights`` (bool)  true: ``set_flag(BuilderFlag.             true: ``--sparsity=     8.6.1+ (both)
                           SPARSE_WEIGHTS)``                        enable``
``tf32`` (bool)            false: ``clear_flag(BuilderFlag.TF32)``  false: ``--noTF32``     8.6.1+ (both)
``max_num_tactics``        ``config.max_num_tactics = N``           ``--maxTactics=N``      API 10.4+ (reference
(int >= 1)                                                                                  §1); trtexec 10.7+
                                                                                            (first option table
                                                                                            listing it)
=========================  =======================================  ======================  ====================

Every name above was checked against the dumped binding surfaces (shared/reference/trt-api-surface, 8.6.1 ...
11.4) and trtexec's option sets per tag (v8.6.1 ... v11.1). ``true`` for ``tf32`` / ``false`` for
``sparse_weights`` is TensorRT's default and changes nothing (but is still a key input).

Timing caches: a pinned build (``BuildRequest.timing_cache``) sets ``BuilderFlag.ERROR_ON_TIMING_CACHE_MISS`` /
``--errorOnTimingCacheMiss`` from 10.0 (absent from the 8.6.1 surface and trtexec 8.6.1); 8.6 starts from the
pinned cache but times what it lacks. Platforms: a linux/x86_64 runner cross-builds windows/x86_64 engines with
``config.runtime_platform = RuntimePlatform.WINDOWS_AMD64`` / ``--runtimePlatform=WindowsAMD64`` from 10.2
(reference §2, §6; absent from the 10.1.0 surface and option table, present from 10.7.0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from orchestrator.contracts.builder import BuilderCapabilities, Provisioning
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.model import BuilderOptions, PrecisionSpec, Target
from orchestrator.core.versions import parse_cc, parse_version
from orchestrator.errors import BuildError
from trt_orchestrator_plugins._trt import calibration as _calibration
from trt_orchestrator_plugins._trt import compat
from trt_orchestrator_plugins._trt import provisioning as _provisioning

Flavour = Literal["tensorrt", "tensorrt-rtx"]
MemoryApi = Literal["device_memory_size", "device_memory_size_v2"]
# which front end applies the plan: the Python API (the ``tensorrt`` builder) or trtexec's command line
Tool = Literal["python", "trtexec"]

_PRECISION_FLAG = {"fp16": "FP16", "bf16": "BF16", "int8": "INT8", "fp8": "FP8"}
_TILING = {"none": "NONE", "fast": "FAST", "moderate": "MODERATE", "full": "FULL"}
_HW_LEVEL = {"ampere_plus": "AMPERE_PLUS", "same_compute_capability": "SAME_COMPUTE_CAPABILITY"}

# The BuilderOptions fields each flavour applies (only they reach its build keys).
TENSORRT_READS = frozenset({"optimization_level", "tiling_level", "workspace_mib", "strongly_typed",
                            "version_compatible", "exclude_lean_runtime", "timing_cache", "timing_cache_pin",
                            "extra"})
# RTX: strongly typed always (strongly_typed is moot), no version compatibility (refused), timing cache a no-op
# since 1.2 (reference §8), no extra options.
RTX_READS = frozenset({"optimization_level", "tiling_level", "workspace_mib"})

# Cross-building: the one pair TensorRT supports (RuntimePlatform.WINDOWS_AMD64 "can only be enabled when building
# engines on Linux AMD64 platforms", enum doc in the 10.7+ surfaces), from 10.2 (reference §2).
CROSS_BUILDS = {("linux/x86_64", "windows/x86_64"): "WINDOWS_AMD64"}
RUNTIME_PLATFORM_SINCE = (10, 2)
ERROR_ON_MISS_SINCE = (10, 0)  # BuilderFlag.ERROR_ON_TIMING_CACHE_MISS / --errorOnTimingCacheMiss


@dataclass(frozen=True)
class ExtraOption:
    """One ``options.extra`` key: its value type, and from which version each front end has it."""

    kind: Literal["int", "bool"]
    minimum: int | None
    python_since: tuple[int, ...]
    trtexec_since: tuple[int, ...]
    what: str


EXTRA_OPTIONS: dict[str, ExtraOption] = {
    "avg_timing_iterations": ExtraOption(
        "int", 1, (8, 6), (8, 6),
        "int >= 1: timing iterations averaged per tactic (IBuilderConfig.avg_timing_iterations; trtexec "
        "--avgTiming)"),
    "max_aux_streams": ExtraOption(
        "int", 0, (8, 6), (8, 6),
        "int >= 0: auxiliary streams TensorRT may run layers on in parallel (IBuilderConfig.max_aux_streams; "
        "trtexec --maxAuxStreams)"),
    "sparse_weights": ExtraOption(
        "bool", None, (8, 6), (8, 6),
        "bool: true lets TensorRT pick 2:4 structured-sparsity tactics (BuilderFlag.SPARSE_WEIGHTS; trtexec "
        "--sparsity=enable)"),
    "tf32": ExtraOption(
        "bool", None, (8, 6), (8, 6),
        "bool: false forbids TF32 in FP32 layers (clears BuilderFlag.TF32, on by default; trtexec --noTF32)"),
    "max_num_tactics": ExtraOption(
        "int", 1, (10, 4), (10, 7),
        "int >= 1: most tactics timed per layer (IBuilderConfig.max_num_tactics; trtexec --maxTactics)"),
}


def extra_options(version: str | tuple[int, ...], tool: Tool = "python") -> dict[str, str]:
    """The extra keys TensorRT ``version`` applies through ``tool``, each with what it does."""
    v = parse_version(version) if isinstance(version, str) else version
    return {k: o.what for k, o in EXTRA_OPTIONS.items()
            if v >= (o.python_since if tool == "python" else o.trtexec_since)}


def _extra_settings(v: tuple[int, ...], tool: Tool, extra: dict[str, Any], vtext: str) -> tuple[tuple[str, Any], ...]:
    """``options.extra`` checked against what this version/tool applies, values type-checked; sorted by key."""
    known = extra_options(v, tool)
    who = f"{vtext} ({'trtexec' if tool == 'trtexec' else 'Python API'})"
    out = []
    for key in sorted(extra):
        value = extra[key]
        if key not in known:
            gate = EXTRA_OPTIONS.get(key)
            why = (f" (from {'.'.join(map(str, gate.python_since if tool == 'python' else gate.trtexec_since))})"
                   if gate else "")
            raise BuildError(f"{who} does not apply extra option {key!r}{why}",
                             hint="it applies: " + ("; ".join(f"{k}: {w}" for k, w in known.items()) or "none"))
        spec = EXTRA_OPTIONS[key]
        if spec.kind == "bool":
            if not isinstance(value, bool):
                raise BuildError(f"extra option {key!r} takes true or false, not {value!r}")
        else:
            if isinstance(value, bool) or not isinstance(value, int):
                raise BuildError(f"extra option {key!r} takes an integer, not {value!r}")
            if spec.minimum is not None and value < spec.minimum:
                raise BuildError(f"extra option {key!r} must be >= {spec.minimum}, not {value}")
        out.append((key, value))
    return tuple(out)


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
    # options.extra as applied: (key, value) sorted by key (EXTRA_OPTIONS says how each is set)
    extra: tuple[tuple[str, Any], ...] = ()
    # RuntimePlatform member name when cross-building (WINDOWS_AMD64), None: the build host's platform
    runtime_platform: str | None = None
    # native int8: the calibration method ("entropy" / "minmax"); None when there is no calibrator
    calibration_method: str | None = None
    # the build starts from a given (published) timing cache rather than the shared local one
    timing_cache_pinned: bool = False

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
            "timing_cache_pinned": self.timing_cache_pinned,
            "compute_capabilities": list(self.compute_capabilities),
            "extra": dict(self.extra),
            "runtime_platform": self.runtime_platform,
            "calibration_method": self.calibration_method,
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


def capabilities(version: str, flavour: Flavour = "tensorrt", *, tool: Tool = "python") -> BuilderCapabilities:
    """What TensorRT ``version`` can build through ``tool`` (pure): the ``tensorrt`` builder (Python API) or the
    ``trtexec`` builder, which reads a native int8 calibration cache (``--calib``) but cannot compute one (the
    ``tensorrt`` builder of the same version computes it: ``calibration_family`` is shared)."""
    v = parse_version(version)
    rtx = flavour == "tensorrt-rtx"
    native = native_precisions(v, flavour)
    reasons = native_missing_reasons(v, flavour)
    # int8 calibrators exist up to 10.x (removed in 11.0); trtexec only reads their caches (--calib, gone in 11.x)
    calibrates = not rtx and v < (11,)
    kinds = {"compute_capability", "hardware_compatible"}  # ampere+ (8.6+); same-CC level from 10.9
    if rtx:
        kinds = {"compute_capability", "compute_capability_list"}
    runs_on = ("the same GPU compute capability (or Ampere+ when built hardware-compatible) with the exact "
               "same TensorRT version (or a newer one when built version-compatible), on the platform (OS/CPU) "
               "it was built for")
    if rtx:
        runs_on = "RTX/Ampere+ GPUs (CC 8.0, 8.6, 8.9, 12.x) in the engine's CC list, same RTX release"
    return BuilderCapabilities(
        native=native,
        via_transform=via_transform_precisions(v, flavour),
        target_kinds=frozenset(kinds),
        needs_gpu=not rtx,
        runs_on=runs_on,
        native_missing_reason=reasons,
        supports_calibrator=calibrates and tool == "python",
        reads_options=RTX_READS if rtx else TENSORRT_READS,
        extra_options={} if rtx else extra_options(v, tool),
        # TensorRT support matrix: engines do not move between Linux and Windows (reference §5); RTX engines are
        # OS-independent (reference §8; see builders/tensorrt_rtx.py)
        platform_specific=not rtx,
        calibration_family="tensorrt" if calibrates else None,
        pins_timing_cache=not rtx and v >= ERROR_ON_MISS_SINCE,
        provisioning=Provisioning() if rtx else _provisioning.provisioning(version, tool),
        native_calibration_methods=(frozenset(_calibration.TRTEXEC_METHODS if tool == "trtexec"
                                              else _calibration.CALIBRATORS) if calibrates else None),
    )


def plan_build_config(version: str, flavour: Flavour, precision: PrecisionSpec, native_precision: bool,
                      options: BuilderOptions, target: Target, *, tool: Tool = "python",
                      host_platform: str | None = None, pinned_timing_cache: bool = False) -> BuildConfigPlan:
    """Decide the whole build configuration for one engine, or raise BuildError naming what cannot be done.

    ``tool``: the front end that applies it (extra options are gated per front end); ``host_platform``: the build
    host's ``os/arch`` (None: the target's own, a native build); ``pinned_timing_cache``: the build starts from a
    given timing cache and fails on a miss where the version can."""
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
            _calibration.calibrator_for(precision.calibration_method)  # percentile: refused, naming the ways out
            if tool == "trtexec" and precision.calibration_method not in _calibration.TRTEXEC_METHODS:
                raise BuildError(f"trtexec reads only entropy calibration caches (its calibrator is an "
                                 f"IInt8EntropyCalibrator2); calibration_method {precision.calibration_method!r} "
                                 "cannot be built natively by trtexec",
                                 hint="use calibration_method: entropy, the tensorrt builder, or precision via: "
                                      "transform")
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
    if pinned_timing_cache:
        if rtx:
            raise BuildError("TensorRT-RTX keeps no timing cache (a deprecated no-op since RTX 1.2): nothing to pin",
                             hint="remove timing_cache: {pin: true} from this target")
        if not use_cache:
            raise BuildError("a pinned timing cache was given but the target's timing cache is off",
                             hint="timing_cache: {pin: true} needs the timing cache on")
        if v >= ERROR_ON_MISS_SINCE:
            builder_flags.append("ERROR_ON_TIMING_CACHE_MISS")
        else:
            notes.append(f"{vtext} has no ERROR_ON_TIMING_CACHE_MISS (added in 10.0): the build starts from the "
                         "pinned timing cache but times any tactic it lacks instead of failing")

    extra = () if rtx else _extra_settings(v, tool, dict(options.extra), vtext)
    if rtx and options.extra:
        raise BuildError(f"{vtext} applies no extra options; got {sorted(options.extra)}",
                         hint="remove options.extra from this target")

    runtime_platform = None
    # os/arch only: the host's L4T release (a Jetson variant) is not visible from here; the runner check
    # (``platform_reason``, with the fingerprint's full platform) compares it
    if host_platform is not None and _base(host_platform) != _base(target.platform):
        runtime_platform = cross_build_member(host_platform, target.platform, v, flavour)
        if runtime_platform is None:
            raise BuildError(cross_build_refusal(host_platform, target, v, "trtexec" if tool == "trtexec"
                                                 else label))
        if "VERSION_COMPATIBLE" in builder_flags and "EXCLUDE_LEAN_RUNTIME" not in builder_flags:
            # NvInfer.h RuntimePlatform doc: a cross-platform version-compatible engine must exclude the lean
            # runtime (the host's would be embedded)
            raise BuildError(f"a version-compatible engine cross-built for {target.platform} must exclude the "
                             "lean runtime", hint="set exclude_lean_runtime: true on this target")

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
        extra=extra,
        runtime_platform=runtime_platform,
        calibration_method=precision.calibration_method if calibrator else None,
        timing_cache_pinned=pinned_timing_cache,
    )


def _base(platform: str) -> str:
    """``linux/aarch64/l4t36.4`` -> ``linux/aarch64``."""
    return "/".join(platform.split("/")[:2])


def cross_build_member(host: str, target_platform: str, v: tuple[int, ...], flavour: Flavour) -> str | None:
    """The RuntimePlatform member that lets ``host`` build engines for ``target_platform`` with TensorRT ``v``,
    None when it cannot (the only pair: linux/x86_64 -> windows/x86_64 from 10.2; none on RTX, whose engines are
    OS-independent anyway)."""
    if flavour != "tensorrt" or v < RUNTIME_PLATFORM_SINCE:
        return None
    return CROSS_BUILDS.get((host, target_platform))


def cross_build_refusal(host: str, target: Target, v: tuple[int, ...], tool: str = "TensorRT") -> str:
    """Why a ``host`` runner cannot build ``target``'s engines (its platform differs)."""
    version = ".".join(map(str, v))
    if (host, target.platform) in CROSS_BUILDS and v < RUNTIME_PLATFORM_SINCE:
        return (f"target {target.name!r} is for {target.platform}; this runner is {host}, and {tool} {version} "
                f"cannot cross-build for it (RuntimePlatform arrived in TensorRT 10.2): build on {target.platform}")
    pairs = ", ".join(f"{a} -> {b}" for a, b in CROSS_BUILDS)
    return (f"target {target.name!r} is for {target.platform}, this runner is {host}; TensorRT engines are not "
            f"portable across platforms (OS, CPU architecture) and are built on the platform they run on (the one "
            f"cross-build is {pairs}, TensorRT >= 10.2)")


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
    # 10.x: STRONGLY_TYPED is an opt-in the network must report. 11.x: the flag is deprecated and ignored (value 0,
    # networks are always strongly typed), so what get_flag says about it decides nothing there.
    if plan.strongly_typed and plan.flavour == "tensorrt" and plan.version < (11,) and hasattr(network, "get_flag"):
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
    for key, value in plan.extra:
        if key == "sparse_weights":
            if value:
                config.set_flag(_member(trt, "BuilderFlag", "SPARSE_WEIGHTS"))
        elif key == "tf32":
            if not value:
                config.clear_flag(_member(trt, "BuilderFlag", "TF32"))
        else:  # avg_timing_iterations, max_aux_streams, max_num_tactics: IBuilderConfig properties of that name
            _set_attr(config, key, int(value), f"extra option {key}")
    if plan.extra:
        log.append("extra options: " + ", ".join(f"{k}={v}" for k, v in plan.extra))
    if plan.runtime_platform is not None:
        _set_attr(config, "runtime_platform", _member(trt, "RuntimePlatform", plan.runtime_platform),
                  "a runtime platform (cross-build)")
        log.append(f"cross-build: runtime_platform = RuntimePlatform.{plan.runtime_platform} (the engine cannot run "
                   "on this host)")
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
    why = compat.builder_version_reason(target.name, target.builder_version, installed_version, tool)
    if why:
        return why
    assert installed_version is not None
    why = platform_reason(fp, target, installed_version, tool)
    if why:
        return why
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


def platform_reason(fp: RunnerFingerprint, target: Target, version: str, tool: str = "TensorRT") -> str | None:
    """None when a runner with ``fp`` builds ``target``'s platform: its own (``fp.platform``: ``os/arch`` as
    ``platform.system()``/``platform.machine()`` report them, with the L4T release on a Jetson), or the documented
    cross-build (linux/x86_64 -> windows/x86_64 with RuntimePlatform.WINDOWS_AMD64, TensorRT >= 10.2)."""
    host = fp.platform
    if host == target.platform:
        return None
    if cross_build_member(host, target.platform, parse_version(version), "tensorrt") is not None:
        return None
    return cross_build_refusal(host, target, parse_version(version), tool)
