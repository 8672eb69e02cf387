"""Platforms (pure): where an engine runs, as ``os/arch[/variant]`` (docker's notation; the variant is the L4T
release on Jetson, e.g. ``linux/aarch64/l4t36.4``).

TensorRT's support matrix: serialized engines are not portable across platforms (OS, CPU architecture), so a
builder whose engines are platform-specific keys them by platform and ``pull`` refuses another platform's.
"""

from __future__ import annotations

import re

OSES = ("linux", "windows")
ARCHES = ("x86_64", "aarch64")
_ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "x86-64": "x86_64", "arm64": "aarch64", "armv8": "aarch64"}
_OS_ALIASES = {"win": "windows", "win32": "windows", "win64": "windows"}
_VARIANT = re.compile(r"^l4t[0-9]{1,3}(\.[0-9]{1,3}){0,2}$")


class PlatformError(ValueError):
    """A platform text this tool cannot take; ``hint`` says what it can."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


HINT = ("a platform is os/arch[/variant]: os one of " + ", ".join(OSES) + "; arch one of " + ", ".join(ARCHES)
        + "; variant an L4T release on Jetson (l4t36.4), e.g. linux/x86_64, windows/x86_64, linux/aarch64/l4t36.4")


def normalize_platform(text: str) -> str:
    """``Linux/AMD64`` -> ``linux/x86_64``; anything else unreadable is a ``PlatformError``."""
    parts = text.strip().lower().split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise PlatformError(f"unknown platform {text!r}", HINT)
    os_name = _OS_ALIASES.get(parts[0], parts[0])
    arch = _ARCH_ALIASES.get(parts[1], parts[1])
    if os_name not in OSES:
        raise PlatformError(f"unknown platform {text!r}: unknown OS {parts[0]!r}", HINT)
    if arch not in ARCHES:
        raise PlatformError(f"unknown platform {text!r}: unknown CPU architecture {parts[1]!r}", HINT)
    if len(parts) == 3:
        if not _VARIANT.match(parts[2]) or (os_name, arch) != ("linux", "aarch64"):
            raise PlatformError(f"unknown platform {text!r}: the only variant is an L4T release on "
                                "linux/aarch64 (Jetson), e.g. l4t36.4", HINT)
        return f"{os_name}/{arch}/{parts[2]}"
    return f"{os_name}/{arch}"


def platform_text(os_name: str, arch: str, variant: str | None = None) -> str:
    """A runner's platform from what it reports (``platform.system()``, ``platform.machine()``); an unknown OS
    or arch is kept as reported (lowercased), so it matches no engine rather than a wrong one."""
    o = _OS_ALIASES.get(os_name.lower(), os_name.lower()) or "unknown"
    a = _ARCH_ALIASES.get(arch.lower(), arch.lower()) or "unknown"
    return f"{o}/{a}/{variant}" if variant else f"{o}/{a}"


def platform_mismatch(engine: str, runner: str) -> str | None:
    """Why an engine built for platform ``engine`` cannot run on ``runner`` (None when it can). A Jetson engine
    (with an L4T variant) needs that L4T release; an engine without a variant runs on any variant of its
    os/arch only when that os/arch is not Jetson's (``linux/aarch64`` SBSA engines do not run on Jetson)."""
    if engine == runner:
        return None
    e_base, _, e_var = engine.partition("/l4t")
    r_base, _, r_var = runner.partition("/l4t")
    if e_base != r_base:
        return (f"built for {engine}, this deployment is {runner} (engines of this builder are not portable "
                "across platforms: OS and CPU architecture must match)")
    if e_var and r_var:
        return f"built for L4T {e_var}, this Jetson runs L4T {r_var} (a Jetson engine needs its JetPack release)"
    if e_var:
        return f"built for a Jetson (L4T {e_var}); this deployment is {runner}, not a Jetson"
    return f"built for {engine} servers (SBSA); this deployment is a Jetson ({runner})"
