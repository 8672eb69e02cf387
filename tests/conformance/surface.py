"""The binding surfaces the repository carries (``tests/conformance/data/surface_<release>.json.gz``), and the
check that each still is what NVIDIA's real module of that release exposes.

Each file is one release's Python API as introspected from the real ``tensorrt_bindings`` module of NVIDIA's binding
wheel on PyPI (``tensorrt-bindings==8.6.1``, ``tensorrt-cu12-bindings==<release>``), imported with stub native
libraries (``bindings.py``): ``{"version", "module", "functions", "constants", "enums": {name: {"members": {NAME:
{"value", "doc", "deprecated"}}}}, "classes": {name: {"bases", "methods": {name: {"sigs", ...}}, "properties":
{name: {"type", "settable", "deprecated"}}}}}``. The stand-ins of ``tests/unit/test_builder_trt_surface.py`` are
extracted from them.

``compare(module, version)`` re-reads the real module (run by ``driver.py`` inside the release's own process) and
lists every difference in what the stand-ins rely on: the enum members and their values, each class's methods
(``__init__`` and the public names; the other dunders are pybind11's plumbing) and its properties and whether each
is settable. Stdlib only.
"""

from __future__ import annotations

import gzip
import inspect
import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data"


def path_for(version: str) -> Path:
    return DATA / f"surface_{version}.json.gz"


def carried_versions() -> list[str]:
    """The releases whose surface the repository carries."""
    return sorted(p.name[len("surface_"):-len(".json.gz")] for p in DATA.glob("surface_*.json.gz"))


def load(version: str) -> dict[str, Any]:
    with gzip.open(path_for(version)) as f:
        data: dict[str, Any] = json.loads(f.read())
    return data


def _kept(name: str) -> bool:
    return name == "__init__" or not name.startswith("_")


def shape_of_carried(surface: dict[str, Any]) -> dict[str, Any]:
    """The comparable part of a carried surface."""
    enums = {n: {m: int(x["value"]) for m, x in e["members"].items()} for n, e in surface["enums"].items()}
    classes = {n: {"methods": sorted(m for m in c.get("methods", {}) if _kept(m)),
                   "properties": {p: bool(x.get("settable")) for p, x in c.get("properties", {}).items()}}
               for n, c in surface["classes"].items()}
    return {"enums": enums, "classes": classes}


def shape_of_module(module: Any) -> dict[str, Any]:
    """The same, read from an imported binding module (classes and pybind11 enums at its top level)."""
    enums: dict[str, dict[str, int]] = {}
    classes: dict[str, dict[str, Any]] = {}
    for name in dir(module):
        obj = getattr(module, name)
        if not isinstance(obj, type):
            continue
        members = getattr(obj, "__members__", None)
        if isinstance(members, dict):
            enums[name] = {m: int(v) for m, v in members.items()}
            continue
        methods, properties = [], {}
        for attr in dir(obj):
            if not _kept(attr):
                continue
            try:
                value = inspect.getattr_static(obj, attr)
            except AttributeError:
                continue
            if isinstance(value, property):
                properties[attr] = value.fset is not None
            elif callable(value) or isinstance(value, (staticmethod, classmethod)):
                methods.append(attr)
        classes[name] = {"methods": sorted(methods), "properties": properties}
    return {"enums": enums, "classes": classes}


def differences(carried: dict[str, Any], real: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for kind in ("enums", "classes"):
        for name in sorted(set(carried[kind]) ^ set(real[kind])):
            where = "only in the carried surface" if name in carried[kind] else "only in the real module"
            out.append(f"{kind[:-1]} {name}: {where}")
    for name in sorted(set(carried["enums"]) & set(real["enums"])):
        if carried["enums"][name] != real["enums"][name]:
            out.append(f"enum {name}: carried {carried['enums'][name]}, real {real['enums'][name]}")
    for name in sorted(set(carried["classes"]) & set(real["classes"])):
        a, b = carried["classes"][name], real["classes"][name]
        for m in sorted(set(a["methods"]) ^ set(b["methods"])):
            out.append(f"{name}.{m}(): {'only carried' if m in a['methods'] else 'only real'}")
        for p in sorted(set(a["properties"]) | set(b["properties"])):
            if a["properties"].get(p) != b["properties"].get(p):
                out.append(f"{name}.{p}: carried settable={a['properties'].get(p)}, real "
                           f"settable={b['properties'].get(p)}")
    return out


def compare(module: Any, version: str) -> dict[str, Any]:
    """What the driver reports: how much was compared, and every difference."""
    if not path_for(version).is_file():
        return {"carried": False, "classes": 0, "enums": 0, "differences": [f"no {path_for(version).name}"]}
    carried = shape_of_carried(load(version))
    real = shape_of_module(module)
    return {"carried": True, "classes": len(real["classes"]), "enums": len(real["enums"]),
            "differences": differences(carried, real)}
