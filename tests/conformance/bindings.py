"""NVIDIA's real TensorRT Python bindings, made importable without TensorRT's native libraries.

The binding wheels (``tensorrt-bindings==8.6.1``, ``tensorrt-cu12-bindings==10.x/11.x``) are on PyPI and hold the
real pybind11 extension; at import it needs only a handful of native symbols from libnvinfer & co. This module
downloads a wheel once into ``<repo>/.cache/trt-bindings/<version>/`` (git-ignored; reused when present), unpacks
it, reads the symbols the extension leaves undefined (``nm -D --undefined-only``) and its ``NEEDED`` TensorRT
libraries (``readelf -d``), and compiles stub libraries that define exactly those symbols (returning NULL/0) with
the system C compiler under the sonames the extension asks for. ``environment(version)`` then gives the
environment in which ``import tensorrt_bindings`` loads the REAL module (tests/conformance/data/README.md). Nothing
native can run: the stubs return NULL, so the conformance driver never constructs a native object; it checks our
adapters against the classes, and the carried surface of each release against the module (``surface.py``).

Stdlib only: the pytest process imports it, and ``python -m tests.conformance.bindings VERSION`` prepares one.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "trt-bindings"
RELEASES = ("8.6.1", "10.0.1", "10.1.0", "10.7.0", "10.8.0.43", "10.9.0.34", "10.12.0.36", "10.13.3.9", "10.16.1.11",
            "11.0.0.114", "11.4.0.106")
_NVIDIA_LIB = re.compile(r"\[(lib(?:nvinfer|nvonnxparser|nvparsers|nvinfer_plugin)[^\]]*)\]")
# undefined symbols that libc / libstdc++ / libpython / libdl provide
_SYSTEM = re.compile(r"^(Py|_Py|dl(open|sym|close|error)$|pthread_|__)")


class BindingsUnavailable(RuntimeError):
    """The wheel could not be fetched or the stubs could not be built (says which step and why)."""


def package(version: str) -> str:
    return "tensorrt-bindings" if version.startswith("8.") else "tensorrt-cu12-bindings"


def _run(cmd: list[str], what: str) -> str:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BindingsUnavailable(f"{what}: {e}") from e
    if proc.returncode != 0:
        raise BindingsUnavailable(f"{what}: exit {proc.returncode}: {(proc.stderr or proc.stdout)[-2000:]}")
    return proc.stdout


def compiler() -> str:
    for name in (os.environ.get("CC") or "", "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    raise BindingsUnavailable("no C compiler (cc/gcc/clang) on PATH: the stub libraries cannot be built "
                              "(apt-get install gcc)")


def wheel(version: str) -> Path:
    """The binding wheel of ``version``, downloaded from PyPI the first time."""
    where = CACHE / version / "wheel"
    found = sorted(where.glob("*.whl"))
    if not found:
        where.mkdir(parents=True, exist_ok=True)
        _run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(where),
              f"{package(version)}=={version}"], f"pip download {package(version)}=={version}")
        found = sorted(where.glob("*.whl"))
    if not found:
        raise BindingsUnavailable(f"pip download left no wheel of {package(version)}=={version} in {where}")
    return found[0]


def extension(site: Path) -> Path:
    found = sorted(site.glob("tensorrt*/tensorrt*.so"))
    if not found:
        raise BindingsUnavailable(f"no tensorrt*.so extension under {site}")
    return found[0]


def undefined_symbols(so: Path) -> tuple[list[str], list[str]]:
    """(C symbols, mangled C++ symbols of NVIDIA namespaces) the extension leaves for TensorRT's libraries."""
    out = _run(["nm", "-D", "--undefined-only", str(so)], f"nm -D {so.name}")
    names = sorted({parts[1] for parts in (line.split() for line in out.splitlines())
                    if len(parts) == 2 and parts[0] == "U" and "@" not in parts[1]})
    plain = [n for n in names if not n.startswith("_Z") and not _SYSTEM.match(n)]
    mangled = [n for n in names if n.startswith("_Z")]
    nvidia = []
    if mangled:
        demangled = _run(["c++filt", *mangled], "c++filt").splitlines()
        nvidia = [m for m, d in zip(mangled, demangled, strict=True) if d.startswith("nv")]
    return plain, nvidia


def needed_libraries(so: Path) -> list[str]:
    """The TensorRT sonames the extension is linked against (``libnvinfer.so.10``, ...)."""
    out = _run(["readelf", "-d", str(so)], f"readelf -d {so.name}")
    return sorted({m.group(1) for line in out.splitlines() if "(NEEDED)" in line
                   for m in [_NVIDIA_LIB.search(line)] if m})


def prepare(version: str) -> dict[str, str]:
    """Download, unpack and stub ``version``; returns the environment additions that import it."""
    root = CACHE / version
    site, stubs = root / "site", root / "stubs"
    done = root / "ready"
    if not done.is_file():
        whl = wheel(version)
        shutil.rmtree(site, ignore_errors=True)
        shutil.rmtree(stubs, ignore_errors=True)
        with zipfile.ZipFile(whl) as z:
            z.extractall(site)
        so = extension(site)
        plain, cxx = undefined_symbols(so)
        libs = needed_libraries(so)
        if not libs:
            raise BindingsUnavailable(f"{so.name} names no TensorRT library in its NEEDED entries")
        stubs.mkdir(parents=True)
        source = stubs / "stub.c"
        lines = ["/* generated by tests/conformance/bindings.py: NULL-returning stand-ins for TensorRT natives */"]
        lines += [f"void* {s}(void) {{ return 0; }}" for s in plain]
        lines += [f'void* cxxstub_{i}(void) __asm__("{m}"); void* cxxstub_{i}(void) {{ return 0; }}'
                  for i, m in enumerate(cxx)]
        source.write_text("\n".join(lines) + "\n")
        cc = compiler()
        for lib in libs:  # every stub holds every symbol: which library owns which differs per release
            _run([cc, "-shared", "-fPIC", "-O0", f"-Wl,-soname,{lib}", "-o", str(stubs / lib), str(source)],
                 f"{cc} {lib}")
        done.write_text("\n".join([f"module={so.parent.name}", *libs, *plain, *cxx]) + "\n")
    module = done.read_text().splitlines()[0].split("=", 1)[1]
    return {"LD_LIBRARY_PATH": os.pathsep.join(filter(None, [str(stubs), os.environ.get("LD_LIBRARY_PATH")])),
            "TRT_CONFORMANCE_SITE": str(site), "TRT_CONFORMANCE_MODULE": module,
            "TRT_CONFORMANCE_VERSION": version}


def stub_symbols(version: str) -> list[str]:
    """What the stubs define (for the report): the sonames, then the symbols."""
    return (CACHE / version / "ready").read_text().splitlines()[1:]


if __name__ == "__main__":
    for v in sys.argv[1:] or RELEASES:
        print(v, prepare(v))
