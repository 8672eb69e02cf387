"""The versions this plugin pair speaks in: its own package version, and whether onnxruntime is installed."""

from __future__ import annotations

from importlib import metadata

DISTRIBUTION = "onnx-copy-plugin"
FALLBACK_VERSION = "1.0.0"  # keep equal to pyproject.toml's version (used only when run from a source tree)


def plugin_version() -> str:
    """The installed onnx-copy-plugin version: the version of both the builder and the runtime."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return FALLBACK_VERSION


def onnxruntime_version() -> str | None:
    """The installed onnxruntime distribution (CPU or GPU package), without importing it."""
    for dist in ("onnxruntime", "onnxruntime-gpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def family(version: str) -> str:
    """major.minor of a version string ("1.0.0" -> "1.0")."""
    return ".".join(version.strip().split(".")[:2])
