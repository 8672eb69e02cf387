"""Per-version TensorRT build configuration, planned as plain data (pure).

``plan_build_config`` decides, from (TensorRT version, flavour, precision, builder options, target), every flag *by
name* and every setting, or raises ``BuildError`` when that version cannot do what was asked. ``_trt.apply`` sets a
plan on a real ``tensorrt`` / ``tensorrt_rtx`` module, resolving each enum by name then; the ``trtexec`` builder
translates the same plan into command-line flags, so both builders agree by construction. Also here:
``capabilities(version)`` per builder version. Alongside: ``_trt.extra_options`` (``options.extra`` per version and
front end), ``_trt.runner_checks`` (can this runner build this target; cross-builds).

Version facts used here, each visible in the binding surfaces the repository carries (tests/conformance/data, read
from NVIDIA's binding wheels of 8.6.1 ... 11.4) and in NVIDIA's 10.x-to-11.x migration reference
(https://docs.nvidia.com/deeplearning/tensorrt/latest/api/migration/tensorrt-10x-to-11x-python-api-reference.html):
8.6 needs ``EXPLICIT_BATCH`` and has no ``STRONGLY_TYPED``; ``BuilderFlag.BF16`` from 10.0; the FP16/INT8/FP8/BF16
flags deprecated in 10.12 ("Superseded by strong typing") and removed in 11.0, with the int8 calibrators (deprecated
10.1); ``device_memory_size_v2`` from 10.1; ``tiling_optimization_level`` from 10.8;
``HardwareCompatibilityLevel.SAME_COMPUTE_CAPABILITY`` from 10.9; ``ERROR_ON_TIMING_CACHE_MISS`` from 10.0.

Weights (``targets[].weights``, docs/refit.md): ``BuilderFlag.REFIT`` exists from 8.6; ``STRIP_PLAN`` and
``REFIT_IDENTICAL`` from 10.0 (absent from the 8.6.1 surface; trtexec ``--stripWeights`` from v10.0.1).
``stripped``: STRIP_PLAN + REFIT_IDENTICAL (the weights come back unchanged at deployment; TensorRT 11.3's
refitting page: REFIT may drop a GEMM bias, REFIT_IDENTICAL does not); ``refittable``: REFIT, + STRIP_PLAN from 10.0
(8.6 keeps the weights in a refittable engine). ``REFIT_INDIVIDUAL`` (10.7+, absent in 10.0.1/10.1.0) marks chosen
weights refittable; this tool refits every weight, so it is not used.

Timing caches: a pinned build (``BuildRequest.timing_cache``) sets ``BuilderFlag.ERROR_ON_TIMING_CACHE_MISS`` /
``--errorOnTimingCacheMiss`` from 10.0 (absent from the 8.6.1 surface and trtexec 8.6.1); 8.6 starts from the
pinned cache but times what it lacks. TensorRT-RTX 1.2 made the timing cache a no-op that forces a GPU during AOT
builds (see builders/tensorrt_rtx.py), so RTX plans keep none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from orchestrator.contracts.builder import BuilderCapabilities, Provisioning
from orchestrator.core.model import BuilderOptions, PrecisionSpec, Target
from orchestrator.core.versions import parse_cc, parse_version, version_text
from orchestrator.errors import BuildError
from trt_orchestrator_plugins._trt import calibration as _calibration
from trt_orchestrator_plugins._trt import extra_options as _extra
from trt_orchestrator_plugins._trt import provisioning as _provisioning
from trt_orchestrator_plugins._trt import releases as _releases
from trt_orchestrator_plugins._trt import runner_checks as _runner
from trt_orchestrator_plugins._trt.extra_options import Tool

Flavour = Literal["tensorrt", "tensorrt-rtx"]
MemoryApi = Literal["device_memory_size", "device_memory_size_v2"]

_PRECISION_FLAG = {"fp16": "FP16", "bf16": "BF16", "int8": "INT8", "fp8": "FP8"}
_TILING = {"none": "NONE", "fast": "FAST", "moderate": "MODERATE", "full": "FULL"}
_HW_LEVEL = {"ampere_plus": "AMPERE_PLUS", "same_compute_capability": "SAME_COMPUTE_CAPABILITY"}

# The BuilderOptions fields each flavour applies (only they reach its build keys).
TENSORRT_READS = frozenset({"optimization_level", "tiling_level", "workspace_mib", "strongly_typed",
                            "version_compatible", "exclude_lean_runtime", "timing_cache", "timing_cache_pin",
                            "extra"})
# RTX: strongly typed always (strongly_typed is moot), no version compatibility (refused), timing cache a no-op
# since 1.2, no extra options.
RTX_READS = frozenset({"optimization_level", "tiling_level", "workspace_mib"})
ERROR_ON_MISS_SINCE = (10, 0)  # BuilderFlag.ERROR_ON_TIMING_CACHE_MISS / --errorOnTimingCacheMiss


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
    # where the engine's weights live (``targets[].weights``); its BuilderFlags are in builder_flags
    weights: str = "embedded"

    @property
    def strongly_typed(self) -> bool:
        return "STRONGLY_TYPED" in self.network_flags

    def weights_json(self) -> dict | None:
        """What the build did with the weights (None: embedded): its mode, whether the plan lacks them (STRIP_PLAN:
        a deployment refits it), the BuilderFlags set (``core.weights``, the build step reads ``stripped``)."""
        if self.weights == "embedded":
            return None
        flags = [f for f in self.builder_flags if f in ("STRIP_PLAN", "REFIT", "REFIT_IDENTICAL")]
        return {"mode": self.weights, "stripped": "STRIP_PLAN" in flags, "flags": flags}

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
            "weights": self.weights,
        }


def memory_api(version: str | tuple[int, ...], flavour: Flavour = "tensorrt") -> MemoryApi:
    """``device_memory_size_v2`` from 10.1 on (and on RTX); Polygraphy gates it the same way (runner.py)."""
    v = parse_version(version) if isinstance(version, str) else version
    if flavour == "tensorrt-rtx" or v >= (10, 1):
        return "device_memory_size_v2"
    return "device_memory_size"


STRIP_PLAN_SINCE = (10, 0)  # BuilderFlag.STRIP_PLAN / REFIT_IDENTICAL, trtexec --stripWeights


def weights_flags(version: str | tuple[int, ...], flavour: Flavour, mode: str) -> tuple[str, ...]:
    """The BuilderFlag names ``targets[].weights: mode`` sets, or ``BuildError`` when this release cannot build it
    (see the module docstring for the facts per release)."""
    v = parse_version(version) if isinstance(version, str) else version
    strips = flavour == "tensorrt-rtx" or v >= STRIP_PLAN_SINCE
    if mode == "embedded":
        return ()
    if mode == "stripped":
        if not strips:
            raise BuildError(weights_missing_reasons(v, flavour)["stripped"])
        return ("STRIP_PLAN", "REFIT_IDENTICAL")
    if mode == "refittable":
        return ("REFIT", "STRIP_PLAN") if strips else ("REFIT",)
    raise BuildError(f"unknown weights mode {mode!r}", hint="weights: embedded, stripped or refittable")


def weights_modes(version: tuple[int, ...], flavour: Flavour) -> frozenset[str]:
    if flavour == "tensorrt-rtx" or version >= STRIP_PLAN_SINCE:
        return frozenset({"embedded", "stripped", "refittable"})
    return frozenset({"embedded", "refittable"})


def weights_missing_reasons(version: tuple[int, ...], flavour: Flavour) -> dict[str, str]:
    if flavour == "tensorrt-rtx" or version >= STRIP_PLAN_SINCE:
        return {}
    return {"stripped": f"TensorRT {version_text(version)} has no BuilderFlag.STRIP_PLAN (added in 10.0; trtexec "
                        "--stripWeights too): a weight-stripped engine needs TensorRT >= 10.0; 8.6 builds "
                        "weights: refittable (BuilderFlag.REFIT, weights kept in the engine)"}


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
        extra_options={} if rtx else _extra.extra_options(v, tool),
        # TensorRT engines do not move between Linux and Windows (runner_checks: the one cross-build aside); RTX
        # engines are OS-independent (see builders/tensorrt_rtx.py)
        platform_specific=not rtx,
        calibration_family="tensorrt" if calibrates else None,
        pins_timing_cache=not rtx and v >= ERROR_ON_MISS_SINCE,
        provisioning=Provisioning() if rtx else _provisioning.provisioning(version, tool),
        native_calibration_methods=(frozenset(_calibration.TRTEXEC_METHODS if tool == "trtexec"
                                              else _calibration.CALIBRATORS) if calibrates else None),
        version_problem=_releases.exact_problem(version, flavour),
        weights_modes=weights_modes(v, flavour),
        weights_missing_reason=weights_missing_reasons(v, flavour),
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

    builder_flags += list(weights_flags(v, flavour, target.weights))

    extra = () if rtx else _extra.extra_settings(v, tool, dict(options.extra), vtext)
    if rtx and options.extra:
        raise BuildError(f"{vtext} applies no extra options; got {sorted(options.extra)}",
                         hint="remove options.extra from this target")

    runtime_platform = None
    # os/arch only: the host's L4T release (a Jetson variant) is not visible from here; the runner check
    # (``runner_checks.platform_reason``, with the fingerprint's full platform) compares it
    if host_platform is not None and _runner.base_platform(host_platform) != _runner.base_platform(target.platform):
        runtime_platform = _runner.cross_build_member(host_platform, target.platform, v, flavour)
        if runtime_platform is None:
            raise BuildError(_runner.cross_build_refusal(host_platform, target, v, "trtexec" if tool == "trtexec"
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
        weights=target.weights,
        timing_cache_pinned=pinned_timing_cache,
    )
