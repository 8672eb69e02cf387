"""Which TensorRT (or TensorRT-RTX) this runner's builder will import, and its ``__version__``, read without
importing it (TensorRT's import loads libnvinfer and CUDA).

The builder and the runtime run ``import tensorrt`` (``import tensorrt_rtx``); the fingerprint must describe that
module, not whatever TensorRT distribution happens to be installed. NVIDIA's wheels give it two layouts
(https://github.com/NVIDIA/TensorRT/tree/main/python/packaging):

- ``bindings_wheel/tensorrt/__init__.py``: the module holds the pybind11 extension (``from .tensorrt import *``) and
  assigns ``__version__ = "<release>"`` as a literal. As ``tensorrt_bindings`` it is the ``tensorrt-cuXX-bindings``
  / ``tensorrt-bindings`` wheel; as ``tensorrt`` (or ``tensorrt_rtx_bindings``) a tar/NGC install or RTX's wheel.
- ``frontend_sdist/tensorrt/__init__.py``: the ``tensorrt-cuXX`` (``tensorrt``, ``tensorrt-rtx``) package's module is
  two lines, ``from tensorrt_bindings import *`` and ``from tensorrt_bindings import __version__``. Its version is
  the bindings module's, whatever the frontend's own distribution says: pip lets a ``tensorrt-cu12==10.13.3.9``
  frontend sit beside ``tensorrt-cu12-bindings==10.16.1.11``, and then 10.16.1.11 is what loads.

So: ``importlib.util.find_spec`` on the top-level name (it locates the file; nothing runs), parse that
``__init__.py`` with ``ast`` and follow ``from X import __version__`` to module X the same way, until a literal
``__version__``. A module the import needs that is not there (``tensorrt_bindings`` alone, with no ``tensorrt``
module; a frontend whose bindings are gone; a bindings package without its extension) means the import would fail:
no install. Only where no literal is found (an install of another shape) does the version come from the
distribution that provides the module (``importlib.metadata``; preference below), and the features say so.

Distribution preference (the fallback, and the ``distribution:`` feature): the candidates are the distributions
``importlib.metadata.packages_distributions()`` says provide the module, then the known names; one whose RECORD
lists a file of the module at the very place ``find_spec`` found it wins (``files``); then one whose RECORD lists
the module elsewhere (``files-elsewhere``: another ``sys.path`` entry shadows it); then an installed known name
that lists no file of it (a meta package: ``metadata``), preferring the one in the module's own ``site-packages``.

Pure enough to test with fake and real (unpacked binding wheels) ``site-packages`` trees on ``sys.path``.
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

TENSORRT_MODULES = ("tensorrt",)  # what the builder and the runtime import
TENSORRT_DISTRIBUTIONS = ("tensorrt", "tensorrt-cu13", "tensorrt-cu12", "tensorrt-cu13-bindings",
                          "tensorrt-cu12-bindings", "tensorrt-bindings", "tensorrt_bindings")
RTX_MODULES = ("tensorrt_rtx",)
RTX_DISTRIBUTIONS = ("tensorrt-rtx", "tensorrt_rtx")
# a runtime plugin's module -> the importable names that are that library
MODULES_OF = {"tensorrt": TENSORRT_MODULES, "tensorrt_rtx": RTX_MODULES}

_RANK_TEXT = {0: "files", 1: "files-elsewhere", 2: "metadata"}
_MAX_HOPS = 4  # tensorrt -> tensorrt_bindings is one; nothing real needs more


@dataclass(frozen=True)
class Install:
    """The importable ``module``, its ``version`` and where that came from: ``how`` is ``__version__`` (a literal
    in the module, or in the module it re-exports it from: ``via``) or, where there is none, how the
    ``distribution`` was tied to the module (``files``, ``files-elsewhere``, ``metadata``); ``location`` the folder
    (or file) ``find_spec`` found; ``distribution_version`` what that distribution's own metadata says."""

    module: str
    version: str
    distribution: str
    how: str
    location: str
    via: tuple[str, ...] = ()
    distribution_version: str = ""

    def features(self) -> tuple[str, ...]:
        """For the fingerprint: which module loads, where its version came from, and a disagreeing distribution."""
        out = [f"module:{self.module}", f"distribution:{self.distribution}", f"version-from:{self.how}"]
        out += [f"via:{m}" for m in self.via]
        if self.distribution_version and self.distribution_version != self.version:
            out.append(f"distribution-says:{self.distribution_version}")
        return tuple(out)


# -- what `import <module>` would load, read statically ------------------------------------------------------------

@dataclass(frozen=True)
class _Chain:
    version: str | None  # the literal __version__ at the end of the chain, None where there is none
    via: tuple[str, ...]  # the modules followed after the first
    missing: str | None  # why the import would fail (a module or an extension that is not there)


def _spec(module: str) -> importlib.machinery.ModuleSpec | None:
    try:
        return importlib.util.find_spec(module)  # a top-level name: the file is located, nothing is executed
    except (ImportError, ValueError):
        return None


def _has_extension(package: Path, name: str) -> bool:
    return any((package / f"{name}{suffix}").is_file() for suffix in importlib.machinery.EXTENSION_SUFFIXES)


def _follow(module: str, hops: int = 0) -> _Chain:
    spec = _spec(module)
    if spec is None:
        return _Chain(None, (), f"module {module!r} is not importable")
    origin = Path(spec.origin) if spec.origin and spec.origin not in ("built-in", "frozen") else None
    if origin is None or origin.suffix != ".py":
        return _Chain(None, (), None)  # an extension module or a namespace package: no source to read
    try:
        tree = ast.parse(origin.read_bytes(), filename=str(origin))
    except (OSError, SyntaxError, ValueError):
        return _Chain(None, (), None)
    package = origin.parent if spec.submodule_search_locations else None
    needs: list[str] = []
    version: str | None = None
    source: str | None = None
    for node in tree.body:  # top-level statements: what the import always runs
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__version__"
                                                for t in node.targets):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                version, source = node.value.value, None
        elif isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module and package is not None and "." not in node.module \
                    and not _has_extension(package, node.module) and not (package / f"{node.module}.py").is_file() \
                    and not (package / node.module).is_dir():
                return _Chain(None, (), f"{module}/{node.module}: the extension module it imports is not there")
            if node.level == 0 and node.module and "." not in node.module:
                needs.append(node.module)
                if any((a.asname or a.name) == "__version__" for a in node.names):
                    version, source = None, node.module
    for needed in dict.fromkeys(needs):
        if needed != source and _spec(needed) is None:
            return _Chain(None, (), f"module {needed!r}, which {module} imports, is not importable")
    if source is None or hops >= _MAX_HOPS:
        return _Chain(version, (), None)
    inner = _follow(source, hops + 1)
    return _Chain(inner.version, (source, *inner.via), inner.missing)


# -- the distribution that provides it ------------------------------------------------------------------------------

def _normal(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _module_location(module: str) -> Path | None:
    spec = _spec(module)
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


def _provider(module: str, location: Path, distributions: Sequence[str]) -> tuple[int, metadata.Distribution,
                                                                                      str] | None:
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
    return None if best is None else (best[0], best[3], best[4])


def find_install(modules: Sequence[str] = TENSORRT_MODULES,
                 distributions: Sequence[str] = TENSORRT_DISTRIBUTIONS) -> Install | None:
    """The first module of ``modules`` that ``import`` would load, and its version (see the module docstring);
    None when none would import, or nothing says its version."""
    for module in modules:
        location = _module_location(module)
        if location is None:
            continue
        chain = _follow(module)
        if chain.missing is not None:
            continue  # `import module` would fail: it is no install to build or run with
        provider = _provider(module, location, distributions)
        dist_name = str(provider[1].metadata["Name"] or provider[2]) if provider else ""
        dist_version = str(provider[1].version) if provider else ""
        if chain.version:
            return Install(module=module, version=chain.version, distribution=dist_name or "unknown",
                           how="__version__", location=str(location), via=chain.via,
                           distribution_version=dist_version)
        if provider is not None:
            return Install(module=module, version=dist_version, distribution=dist_name, how=_RANK_TEXT[provider[0]],
                           location=str(location), via=chain.via, distribution_version=dist_version)
    return None
