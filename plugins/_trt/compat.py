"""Which TensorRT and TensorRT-RTX engines can run on a runner, and why not (pure; decided before any engine
byte is deserialized). The ``tensorrt`` and ``tensorrt-rtx`` runtimes own these rules.

Rules, from NVIDIA's TensorRT "Version Compatibility" (8.6-10.x) and "Engine Compatibility" (11.x) pages and
TensorRT-RTX's "Engine Compatibility" page:
  https://docs.nvidia.com/deeplearning/tensorrt/latest/inference-library/advanced.html
  https://docs.nvidia.com/deeplearning/tensorrt/11.1.0/inference-library/engine-compatibility.html
  https://docs.nvidia.com/deeplearning/tensorrt-rtx/latest/inference-library/engine-compatibility.html

- TensorRT (engines of the ``tensorrt`` and ``trtexec`` builders): need a GPU. Exact CC match ranks best; else
  an ``ampere_plus`` engine runs on CC >= 8.0 and a ``same_compute_capability`` one only on its own CC. The
  runtime must be the exact TensorRT release that built the engine unless the engine is version compatible;
  then a newer runtime of the same major, or one major hop 8.6 -> 10.x / 10.x -> 11.x, is allowed (never
  8 -> 11, never older). "Exact" follows ``orchestrator.core.versions.same_version``: the versions agree on
  every part both carry (an installed ``10.7.0``, whose module has no build number, is the engine's
  ``10.7.0.23``; ``10.13.3.9`` and ``10.13.3.10`` differ). The plan header's own 4-part version is checked
  again at load (``plan_header``).
- TensorRT-RTX: the engine's CC list must contain the runner's CC (RTX runtimes refuse CC 9.0 outright); the
  runner's RTX must be the same release (major.minor.patch) as the builder's.

Ranks follow ``orchestrator.core.select``: TensorRT ``placement * 10 + version_distance`` (placement 0 exact CC,
1 same-CC build, 2 Ampere+; distance 1 for a newer version-compatible runtime), TensorRT-RTX 100.
"""

from __future__ import annotations

from orchestrator.core.artifact import EngineDescriptor
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.select import Compat
from orchestrator.core.versions import (
    cc_text,
    common_parts,
    parse_cc,
    parse_version,
    same_release,
    same_version,
    version_text,
)

RTX_SUPPORTED_CCS = ("8.0", "8.6", "8.9", "12.0", "12.1")
# An engine record names at least major.minor.patch: a TensorRT module reports 3 parts up to 10.7 (its build number
# is then checked against the plan header at load); fewer parts name no release.
RECORDED_PARTS = 3
RTX_HOPPER_REASON = (
    "TensorRT-RTX runtimes do not support compute capability 9.0 (Hopper); "
    "RTX engines run on 8.0, 8.6, 8.9, 12.x"
)
INSTALL_HINTS = {
    "tensorrt": "pip install 'trt-orchestrator[tensorrt]' (TensorRT wheels come only from NVIDIA's index)",
    "tensorrt-rtx": "pip install 'trt-orchestrator[rtx]'",
}


def _local_cc(fp: RunnerFingerprint, engine_kind: str, gpu_kind: str = "an NVIDIA GPU") -> tuple[int, int] | Compat:
    """This runner's compute capability, or why an engine of this kind cannot run here at all."""
    if not fp.has_gpu:
        return Compat.no(f"a {engine_kind} engine needs {gpu_kind}; this runner has none")
    local = parse_cc(fp.compute_capability)
    if local is None:
        return Compat.no(f"this runner's compute capability {fp.compute_capability!r} is unreadable")
    return local


def check_tensorrt(engine: EngineDescriptor, fp: RunnerFingerprint, runtime: str = "tensorrt") -> Compat:
    """A plain TensorRT engine (built by the tensorrt or trtexec builder) on this runner."""
    target = engine.target
    local = _local_cc(fp, "TensorRT")
    if isinstance(local, Compat):
        return local
    ccs = [c for c in (parse_cc(x) for x in target.compute_capabilities) if c]
    level = target.hardware_compatibility
    if local in ccs:
        placement = 1 if level == "same_compute_capability" else 0
    elif level == "ampere_plus":
        if local < (8, 0):
            return Compat.no(f"hardware-compatible (Ampere+) engines need compute capability >= 8.0; "
                              f"this GPU is {cc_text(local)}")
        placement = 2
    elif level == "same_compute_capability":
        built = ", ".join(cc_text(c) for c in ccs) or "unknown"
        return Compat.no(f"built same-compute-capability for {built}; this GPU is {cc_text(local)}")
    else:
        built = ", ".join(cc_text(c) for c in ccs) or "no compute capability recorded"
        return Compat.no(f"built for compute capability {built}; this GPU is {cc_text(local)} "
                          "(plain TensorRT engines run only on the CC they were built for)")
    installed = fp.runtime_version(runtime)
    if installed is None:
        return Compat.no(f"TensorRT is not installed on this runner: {INSTALL_HINTS['tensorrt']}")
    built_v = parse_version(engine.builder_version)
    have_v = parse_version(installed)
    distance = _tensorrt_version_distance(built_v, have_v, target.version_compatible)
    if isinstance(distance, str):
        return Compat.no(distance)
    how = "exact compute capability" if placement == 0 else (
        "same-compute-capability build" if placement == 1 else "Ampere+ hardware-compatible build")
    runtime = "exact TensorRT version" if distance == 0 else "newer TensorRT runtime (version compatible)"
    return Compat.yes(f"{how}, {runtime}", placement * 10 + distance)


def _tensorrt_version_distance(built: tuple[int, ...], have: tuple[int, ...], vc: bool) -> int | str:
    if not built:
        return "the engine's metadata records no TensorRT version"
    if len(built) < RECORDED_PARTS:
        return (f"the engine's metadata records TensorRT {version_text(built)}, which names no exact release (an "
                f"older builder recorded its target's version, not the one that built it); this runner's "
                f"{version_text(have)} may not load it: rebuild and republish it")
    if same_version(built, have):
        return 0
    if not vc:
        return (f"built with TensorRT {version_text(built)}, this runner has {version_text(have)}; a TensorRT engine "
                "loads only on the exact version that built it (down to the build number) unless built version "
                "compatible; versions compare on the parts both carry")
    n = common_parts(built, have)
    if have[:n] < built[:n]:
        return (f"version-compatible engine built with TensorRT {version_text(built)} cannot run on the older "
                f"runtime {version_text(have)}")
    if have[0] == built[0]:
        return 1
    # Support Matrix "Engine Portability": only 8.6 -> 10.x and 10.x -> 11.x hops, for VC engines.
    if (built[0], have[0]) == (10, 11) or (built[0] == 8 and built[:2] >= (8, 6) and have[0] == 10):
        return 1
    return (f"version-compatible engine built with TensorRT {version_text(built)} cannot run on TensorRT "
            f"{version_text(have)}: only same-major, 8.6 -> 10.x and 10.x -> 11.x are supported "
            "(a TensorRT 8 engine cannot run with a TensorRT 11 runtime)")


def check_rtx(engine: EngineDescriptor, fp: RunnerFingerprint, runtime: str = "tensorrt-rtx") -> Compat:
    """A TensorRT-RTX engine on this runner."""
    target = engine.target
    local = _local_cc(fp, "TensorRT-RTX", "an NVIDIA GPU (RTX/Ampere+)")
    if isinstance(local, Compat):
        return local
    if local == (9, 0):
        return Compat.no(RTX_HOPPER_REASON)
    ccs = [c for c in (parse_cc(x) for x in target.compute_capabilities) if c]
    if local not in ccs:
        built = ", ".join(cc_text(c) for c in ccs) or "no compute capability recorded"
        return Compat.no(f"TensorRT-RTX engine built for compute capabilities {built}; this GPU is "
                          f"{cc_text(local)}")
    installed = fp.runtime_version(runtime)
    if installed is None:
        return Compat.no(f"TensorRT-RTX is not installed on this runner: {INSTALL_HINTS['tensorrt-rtx']}")
    built_v = parse_version(engine.builder_version)[:3]
    have_v = parse_version(installed)[:3]
    if len(built_v) < RECORDED_PARTS:
        return Compat.no(f"the engine's metadata records TensorRT-RTX {engine.builder_version}, which names no exact "
                         "release: rebuild and republish it")
    if not same_version(built_v, have_v):
        return Compat.no(f"built with TensorRT-RTX {version_text(built_v)}, this runner has {installed}; "
                          "RTX engines run only on the same RTX release (major.minor.patch)")
    return Compat.yes("TensorRT-RTX engine whose CC list holds this GPU, same RTX release", 100)


def builder_version_reason(target_name: str, wanted: str, installed: str | None, tool: str = "TensorRT") -> str | None:
    """Can a runner with ``installed`` of TensorRT (the module's ``__version__`` or trtexec's banner) build target
    ``target_name``, which wants ``wanted``? None, or why not. The rule (``core.versions.same_release``): the
    versions agree on every part both carry and the target is at least as precise as the install, so an installed
    ``8.6.1`` builds an ``8.6.1.6`` target, ``10.13.3.9`` does not build a ``10.13.3.10`` one, and a loose target
    (``10.13``, ``10``) is built by no runner: it names no release."""
    if installed is None:
        return f"{tool} is not installed"
    if same_release(wanted, installed):
        return None
    if same_version(wanted, installed):
        return (f"target {target_name!r} wants TensorRT {wanted}, which names no exact release; this runner's "
                f"{tool} is {installed}: set builder_version: \"{installed}\" if that is the release you mean "
                "(engines load only on the exact release that built them)")
    return (f"target {target_name!r} wants TensorRT {wanted}, this runner's {tool} is {installed}; engines load "
            "only on the exact release that built them, so the builder version must be the same (compared on the "
            "parts both versions carry: 8.6.1 is 8.6.1.6, 10.13.3.9 is not 10.13.3.10)")
