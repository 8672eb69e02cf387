"""Which TensorRT (or TensorRT-RTX) install this runner has, read from package metadata without importing it.

TensorRT reaches a machine as several distributions (shared/reference/trt-api-surface/README.md): the
``tensorrt`` meta package (which pulls ``tensorrt-cu12`` / ``tensorrt-cu13``: unpinned in 10.0.1), the
``tensorrt-cuXX`` packages, the ``tensorrt-cuXX-bindings`` / ``tensorrt-bindings`` wheels alone (module
``tensorrt_bindings``), or an NGC container's own install. The version that matters is the one of the module that
will be imported, so:

1. find which module is importable (``importlib.util.find_spec`` on the top-level name: the module's file is
   located, nothing is executed; TensorRT's import loads CUDA);
2. the candidates are the distributions ``importlib.metadata.packages_distributions()`` says provide that top-level
   module, then the known names;
3. a candidate whose RECORD lists a file of the module at the very place ``find_spec`` found it wins
   (``how="files"``); then one whose RECORD lists the module elsewhere (``"files-elsewhere"``: another
   ``sys.path`` entry shadows it); then an installed known name that lists no file of the module (a meta package:
   ``"metadata"``), preferring the one installed in the module's own ``site-packages``.

Pure enough to test with fake ``site-packages`` trees on ``sys.path`` (real ``.dist-info`` folders).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

TENSORRT_MODULES = ("tensorrt", "tensorrt_bindings")
TENSORRT_DISTRIBUTIONS = ("tensorrt", "tensorrt-cu13", "tensorrt-cu12", "tensorrt-cu13-bindings",
                          "tensorrt-cu12-bindings", "tensorrt-bindings", "tensorrt_bindings")
RTX_MODULES = ("tensorrt_rtx",)
RTX_DISTRIBUTIONS = ("tensorrt-rtx", "tensorrt_rtx")
# a runtime plugin's module -> the importable names that are that library
MODULES_OF = {"tensorrt": TENSORRT_MODULES, "tensorrt_rtx": RTX_MODULES}

_RANK_TEXT = {0: "files", 1: "files-elsewhere", 2: "metadata"}


@dataclass(frozen=True)
class Install:
    """The importable ``module``, its ``version`` and the ``distribution`` it was read from; ``how`` the
    distribution was tied to the module (``files``, ``files-elsewhere``, ``metadata``); ``location`` the folder (or
    file) ``find_spec`` found."""

    module: str
    version: str
    distribution: str
    how: str
    location: str

    def features(self) -> tuple[str, ...]:
        """For the fingerprint: where the version came from."""
        return (f"module:{self.module}", f"distribution:{self.distribution}", f"version-from:{self.how}")


def _normal(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _module_location(module: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    if spec.origin and spec.origin not in ("built-in", "frozen"):
        return Path(spec.origin)
    return None


def _candidates(module: str, known: Sequence[str]) -> list[str]:
    try:
        provided = metadata.packages_distributions().get(module, [])
    except Exception:  # a broken dist-info elsewhere on sys.path must not hide TensorRT
        provided = []
    out: list[str] = []
    seen: set[str] = set()
    for name in [*provided, *known]:
        if _normal(name) not in seen:
            seen.add(_normal(name))
            out.append(name)
    return out


def _same_path(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.normcase(os.path.abspath(a)) == os.path.normcase(os.path.abspath(b))


def _rank(dist: metadata.Distribution, module: str, location: Path) -> int:
    """0: the RECORD lists a file of ``module`` where find_spec found it; 1: elsewhere; 2: no file of it."""
    files: Iterable[metadata.PackagePath] = dist.files or ()
    held_elsewhere = False
    for f in files:
        parts = f.parts
        if not parts or parts[0].split(".")[0] != module:
            continue
        top = Path(str(dist.locate_file(parts[0])))
        if _same_path(top, location):
            return 0
        held_elsewhere = True
    return 1 if held_elsewhere else 2


def _site_of(dist: metadata.Distribution) -> Path | None:
    try:
        return Path(str(dist.locate_file("")))
    except Exception:
        return None


def find_install(modules: Sequence[str] = TENSORRT_MODULES,
                 distributions: Sequence[str] = TENSORRT_DISTRIBUTIONS) -> Install | None:
    """The first importable module of ``modules`` and the version of the distribution that provides it (see the
    module docstring for the preference); None when no module is importable or no distribution describes it."""
    for module in modules:
        location = _module_location(module)
        if location is None:
            continue
        site = location.parent  # the sys.path entry (site-packages) it was found in
        best: tuple[int, int, int, metadata.Distribution, str] | None = None
        for order, name in enumerate(_candidates(module, distributions)):
            try:
                dist = metadata.distribution(name)
            except metadata.PackageNotFoundError:
                continue
            if not dist.version:
                continue
            rank = _rank(dist, module, location)
            dist_site = _site_of(dist)
            away = 0 if dist_site is not None and _same_path(dist_site, site) else 1
            key = (rank, away, order)
            if best is None or key < best[:3]:
                best = (rank, away, order, dist, name)
        if best is not None:
            rank, _away, _order, dist, name = best
            dist_name = dist.metadata["Name"] or name
            return Install(module=module, version=str(dist.version), distribution=str(dist_name),
                           how=_RANK_TEXT[rank], location=str(location))
    return None
