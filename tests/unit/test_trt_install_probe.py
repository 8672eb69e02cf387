"""The tensorrt runtime's probe (the fingerprint) states what ``import tensorrt`` would load and its ``__version__``
(issue 23.19), read without importing it; where the module has no literal ``__version__``, the version of the
distribution that provides it (issue 13). Fake ``site-packages`` trees with real ``.dist-info`` folders, and NVIDIA's
real binding wheels unpacked (``tests/conformance/bindings.py`` fetches them), are put first on sys.path.

Every fake module's ``__init__`` raises on import, and the real bindings cannot import here (no libnvinfer): a
probe that imports TensorRT (which loads CUDA) fails these tests.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from orchestrator import plugins
from tests.conformance import bindings
from trt_orchestrator_plugins._trt.install import find_install
from trt_orchestrator_plugins.runtimes.tensorrt import runtime as trt_runtime
from trt_orchestrator_plugins.runtimes.tensorrt_rtx import runtime as rtx_runtime

_BOOM = "raise RuntimeError('the probe must not import TensorRT')\n"


def _dist(site: Path, name: str, version: str, files: dict[str, str]) -> None:
    """A real installed distribution: ``files`` written under ``site`` and listed in RECORD."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "INSTALLER").write_text("pip\n")
    record = []
    for rel, text in files.items():
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        record.append(f"{rel},,")
    record += [f"{info.name}/METADATA,,", f"{info.name}/INSTALLER,,", f"{info.name}/RECORD,,"]
    (info / "RECORD").write_text("\n".join(record) + "\n")


@pytest.fixture
def site(tmp_path: Path):
    """Makes fake site-packages folders (``_activate`` puts them on sys.path; monkeypatch takes them off)."""

    def make(name: str = "site-packages") -> Path:
        path = tmp_path / name
        path.mkdir()
        return path

    yield make
    importlib.invalidate_caches()


def _activate(*sites: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for path in reversed(sites):  # the first given ends up first on sys.path
        monkeypatch.syspath_prepend(str(path))
    importlib.invalidate_caches()


def _no_real_tensorrt() -> None:
    for module in ("tensorrt", "tensorrt_bindings"):
        if importlib.util.find_spec(module) is not None:
            pytest.skip(f"a real {module} is importable here; the fake trees could not be told apart from it")


def _real_bindings(site: Path, version: str) -> None:
    """NVIDIA's binding wheel of ``version`` (``tensorrt-cu12-bindings`` / ``tensorrt-bindings``: the module
    ``tensorrt_bindings``), unpacked into ``site`` as pip would leave it (its .dist-info and RECORD included)."""
    try:
        wheel = bindings.wheel(version)
    except bindings.BindingsUnavailable as e:
        pytest.fail(f"NVIDIA's {version} binding wheel could not be fetched: {e}")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)


def _frontend(site: Path, name: str, version: str) -> None:
    """The ``tensorrt-cuXX`` frontend package: its module is NVIDIA's frontend_sdist/tensorrt/__init__.py."""
    _dist(site, name, version, {"tensorrt/__init__.py": FRONTEND_INIT})


# NVIDIA/TensorRT python/packaging/frontend_sdist/tensorrt/__init__.py, less the license header
FRONTEND_INIT = "from tensorrt_bindings import *\nfrom tensorrt_bindings import __version__\n"


@pytest.mark.parametrize("version", ["10.13.3.9", "8.6.1"])
def test_a_bindings_only_install_is_no_tensorrt_to_import(site, monkeypatch, version):
    """Issue 23.19: ``tensorrt-cu12-bindings`` alone provides ``tensorrt_bindings``, not ``tensorrt``: the builder's
    ``import tensorrt`` fails, so the fingerprint holds no TensorRT (it used to report the bindings' version)."""
    _no_real_tensorrt()
    s = site()
    _real_bindings(s, version)
    _activate(s, monkeypatch=monkeypatch)
    assert importlib.util.find_spec("tensorrt_bindings") is not None and metadata.version(
        bindings.package(version)) == version
    assert trt_runtime.probe() is None
    assert "tensorrt_bindings" not in sys.modules


def test_the_version_is_the_one_of_the_module_that_loads_not_the_wrapper_package(site, monkeypatch):
    """Issue 23.19: a tensorrt-cu12 10.13.3.9 frontend beside tensorrt-cu12-bindings 10.16.1.11 (pip allows it)
    imports the 10.16.1.11 bindings: that is the version, and the features say the wrapper disagrees."""
    _no_real_tensorrt()
    s = site()
    _real_bindings(s, "10.16.1.11")
    _frontend(s, "tensorrt-cu12", "10.13.3.9")
    _activate(s, monkeypatch=monkeypatch)
    found = trt_runtime.probe()
    assert found is not None and found.version == "10.16.1.11"
    assert found.features == ("module:tensorrt", "distribution:tensorrt-cu12", "version-from:__version__",
                              "via:tensorrt_bindings", "distribution-says:10.13.3.9")
    assert "tensorrt" not in sys.modules and "tensorrt_bindings" not in sys.modules


def test_a_matching_frontend_and_bindings(site, monkeypatch):
    _no_real_tensorrt()
    s = site()
    _real_bindings(s, "10.13.3.9")
    _frontend(s, "tensorrt-cu12", "10.13.3.9")
    _activate(s, monkeypatch=monkeypatch)
    found = find_install()
    assert found is not None
    assert (found.version, found.how, found.via, found.distribution) == ("10.13.3.9", "__version__",
                                                                          ("tensorrt_bindings",), "tensorrt-cu12")


def test_a_frontend_without_its_bindings_is_no_install(site, monkeypatch):
    _no_real_tensorrt()
    s = site()
    _frontend(s, "tensorrt-cu12", "10.13.3.9")
    _activate(s, monkeypatch=monkeypatch)
    assert trt_runtime.probe() is None


def test_bindings_without_their_extension_are_no_install(site, monkeypatch):
    """The bindings package imports its pybind11 extension (``from .tensorrt import *``): without it, no import."""
    _no_real_tensorrt()
    s = site()
    _real_bindings(s, "10.13.3.9")
    next((s / "tensorrt_bindings").glob("tensorrt*.so")).unlink()
    _frontend(s, "tensorrt-cu12", "10.13.3.9")
    _activate(s, monkeypatch=monkeypatch)
    assert trt_runtime.probe() is None


def test_unpinned_meta_package_reports_the_cu12_package_that_holds_the_module(site, monkeypatch):
    """``tensorrt==10.0.1`` pulls an unpinned ``tensorrt-cu12``: the module is the cu12 package's, and so is its
    version (the old probe answered 10.0.1 from the meta distribution)."""
    _no_real_tensorrt()
    s = site()
    _dist(s, "tensorrt", "10.0.1", {})
    _dist(s, "tensorrt-cu12", "10.3.0", {"tensorrt/__init__.py": _BOOM})
    _activate(s, monkeypatch=monkeypatch)
    found = trt_runtime.probe()
    assert found is not None and found.version == "10.3.0"
    assert found.features == ("module:tensorrt", "distribution:tensorrt-cu12", "version-from:files")
    assert "tensorrt" not in sys.modules


def test_cu13_install(site, monkeypatch):
    _no_real_tensorrt()
    s = site()
    _dist(s, "tensorrt-cu13", "10.16.1.11", {"tensorrt/__init__.py": _BOOM})
    _dist(s, "tensorrt-cu13-bindings", "10.16.1.11", {"tensorrt_bindings/__init__.py": _BOOM})
    _activate(s, monkeypatch=monkeypatch)
    found = trt_runtime.probe()
    assert found is not None and found.version == "10.16.1.11"
    assert "distribution:tensorrt-cu13" in found.features and "module:tensorrt" in found.features


def test_the_distribution_whose_files_hold_the_imported_module_wins_over_a_shadowed_one(site, monkeypatch):
    _no_real_tensorrt()
    first, second = site("first"), site("second")
    _dist(first, "tensorrt-cu13", "10.14.1.48", {"tensorrt/__init__.py": _BOOM})
    _dist(second, "tensorrt-cu12", "10.13.3.9", {"tensorrt/__init__.py": _BOOM})
    _activate(first, second, monkeypatch=monkeypatch)
    found = find_install()
    assert found is not None
    assert (found.version, found.distribution, found.how) == ("10.14.1.48", "tensorrt-cu13", "files")
    assert Path(found.location) == first / "tensorrt"


def test_a_module_no_record_lists_falls_back_to_the_known_distribution_beside_it(site, monkeypatch):
    """An install whose RECORD does not list the module (e.g. copied in by a container build): the known
    distribution in the same site-packages answers, and the features say it was by metadata only."""
    _no_real_tensorrt()
    s = site()
    _dist(s, "tensorrt", "8.6.1.6", {})
    (s / "tensorrt").mkdir()
    (s / "tensorrt" / "__init__.py").write_text(_BOOM)
    _activate(s, monkeypatch=monkeypatch)
    found = trt_runtime.probe()
    assert found is not None and found.version == "8.6.1.6"
    assert found.features[-1] == "version-from:metadata"


def test_distributions_without_an_importable_module_are_not_an_install(site, monkeypatch):
    """A leftover ``tensorrt`` meta dist-info (the module itself removed) is no TensorRT to build with."""
    _no_real_tensorrt()
    s = site()
    _dist(s, "tensorrt", "10.13.3.9", {})
    _activate(s, monkeypatch=monkeypatch)
    assert metadata.version("tensorrt") == "10.13.3.9"  # the old probe would have answered this
    assert trt_runtime.probe() is None


def test_the_fingerprint_carries_the_distribution(site, monkeypatch):
    _no_real_tensorrt()
    s = site()
    _dist(s, "tensorrt-cu12", "10.7.0", {"tensorrt/__init__.py": _BOOM})
    _activate(s, monkeypatch=monkeypatch)
    fp = plugins.fingerprint()
    assert fp.runtime_version("tensorrt") == "10.7.0"
    assert "distribution:tensorrt-cu12" in fp.runtime_features("tensorrt")


def test_rtx_probe_reads_the_real_install():
    pytest.importorskip("tensorrt_rtx", reason="tensorrt-rtx is not installed")
    found = rtx_runtime.probe()
    assert found is not None
    assert found.version == metadata.version("tensorrt-rtx")
    assert "module:tensorrt_rtx" in found.features and "version-from:__version__" in found.features
