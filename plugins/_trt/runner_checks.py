"""Can this runner build this TensorRT target: the installed version, the platform (OS/CPU, and the one documented
cross-build), the GPU and the compatibility level. Pure.

Platforms: TensorRT engines are built on the platform they run on; the one exception is a linux/x86_64 host
building windows/x86_64 engines with ``RuntimePlatform.WINDOWS_AMD64`` ("can only be enabled when building engines
on Linux AMD64 platforms", the enum's docstring in the 10.7+ binding surfaces in tests/conformance/data), from
TensorRT 10.2 (``IBuilderConfig.runtime_platform`` is absent from the 10.1.0 surface; trtexec's
``--runtimePlatform`` is in the option tables from v10.7.0). TensorRT-RTX engines are OS-independent, so RTX never
cross-builds.
"""

from __future__ import annotations

from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.model import Target
from orchestrator.core.versions import parse_cc, parse_version
from trt_orchestrator_plugins._trt import compat

# Cross-building: the one pair TensorRT supports, from 10.2.
CROSS_BUILDS = {("linux/x86_64", "windows/x86_64"): "WINDOWS_AMD64"}
RUNTIME_PLATFORM_SINCE = (10, 2)


def base_platform(platform: str) -> str:
    """``linux/aarch64/l4t36.4`` -> ``linux/aarch64``."""
    return "/".join(platform.split("/")[:2])


def cross_build_member(host: str, target_platform: str, v: tuple[int, ...], flavour: str) -> str | None:
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
