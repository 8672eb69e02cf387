"""Applying a planned build configuration (``_trt.config.BuildConfigPlan``) to a real ``tensorrt`` /
``tensorrt_rtx`` module. Every enum is resolved by name at that moment
(``1 << int(trt.NetworkDefinitionCreationFlag.X)``): TensorRT 11.0 renumbered BuilderFlag and
NetworkDefinitionCreationFlag, so an integer written here would silently mean another flag (compare the 10.16 and
11.0 surfaces in tests/conformance/data). A name the module lacks is a ``BuildError`` naming it.
"""

from __future__ import annotations

from typing import Any

from orchestrator.errors import BuildError
from trt_orchestrator_plugins._trt.config import BuildConfigPlan


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
