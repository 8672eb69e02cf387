"""Entry-point discovery and load-time validation of plugins.

First-party plugins register exactly like third-party ones (see pyproject.toml). A plugin that fails to import
or lacks what its group requires is reported with its name, group and the problem, never as a traceback.
Heavy libraries are imported by the plugin's own methods, so loading a plugin is cheap.
"""

from __future__ import annotations

import difflib
from functools import lru_cache
from importlib import metadata
from typing import Any

from orchestrator.errors import PluginError

BUILDERS = "trt_orchestrator.builders"
TRANSFORMS = "trt_orchestrator.transforms"
RUNTIMES = "trt_orchestrator.runtimes"
STORES = "trt_orchestrator.stores"
CI = "trt_orchestrator.ci"

# What each group's objects must have: attribute -> "callable" | "attr"
_REQUIRED: dict[str, dict[str, str]] = {
    BUILDERS: {"name": "attr", "capabilities": "callable", "available": "callable", "build": "callable"},
    TRANSFORMS: {"kind": "attr", "settings": "callable", "run": "callable"},
    RUNTIMES: {"name": "attr", "can_run": "callable", "load": "callable"},
    STORES: {},  # a factory: checked as callable below
    CI: {"name": "attr", "render": "callable"},
}


def _entry_points(group: str) -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group=group)}


def names(group: str) -> list[str]:
    return sorted(_entry_points(group))


def validate_plugin(group: str, name: str, obj: Any) -> None:
    """pluggy-style verification: name the plugin, the hook and the problem."""
    if group == STORES:
        if not callable(obj):
            raise PluginError(name, "a store entry point must be a factory callable(RegistryConfig)", group=group)
        return
    for attr, kind in _REQUIRED[group].items():
        if not hasattr(obj, attr):
            raise PluginError(name, f"missing required attribute {attr!r}", group=group,
                              hint=f"plugins in {group} must define: {', '.join(_REQUIRED[group])}")
        if kind == "callable" and not callable(getattr(obj, attr)):
            raise PluginError(name, f"{attr!r} must be callable", group=group)
    declared = getattr(obj, "name", getattr(obj, "kind", name))
    if declared != name:
        raise PluginError(name, f"declares name {declared!r} but is registered as {name!r}", group=group)


@lru_cache(maxsize=None)
def load(group: str, name: str) -> Any:
    eps = _entry_points(group)
    if name not in eps:
        close = difflib.get_close_matches(name, list(eps), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"installed: {', '.join(sorted(eps)) or 'none'}"
        raise PluginError(name, "no such plugin installed", group=group, hint=hint)
    try:
        obj = eps[name].load()
    except Exception as e:  # any import failure of a plugin module is that plugin's problem, reported by name
        raise PluginError(name, f"failed to load {eps[name].value}: {type(e).__name__}: {e}", group=group) from e
    validate_plugin(group, name, obj)
    return obj


def builder(name: str):
    return load(BUILDERS, name)


def transform(kind: str):
    return load(TRANSFORMS, kind)


def runtime(name: str):
    return load(RUNTIMES, name)


def store_factory(name: str):
    return load(STORES, name)


def builder_capabilities(name: str, version: str):
    """Capabilities of a builder version, or None when the plugin is not installed (the check reports it)."""
    if name not in _entry_points(BUILDERS):
        return None
    return builder(name).capabilities(version)
