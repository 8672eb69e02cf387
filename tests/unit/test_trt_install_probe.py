"""Issue 13 defect 4: the tensorrt runtime's probe reads the version of the distribution that provides the module
that would be imported, from real ``.dist-info`` folders in fake ``site-packages`` trees put first on sys.path.

Every fake module's ``__init__`` raises on import: a probe that imports TensorRT (which loads CUDA) fails here.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from importlib import metadata
from pathlib import Path

import pytest

from orchestrator import plugins
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


def test_cu12_bindings_alone(site, monkeypatch):
    _no_real_tensorrt()
    s = site()
    _dist(s, "tensorrt-cu12-bindings", "10.13.3.9",
          {"tensorrt_bindings/__init__.py": _BOOM, "tensorrt_bindings/tensorrt.so": ""})
    _activate(s, monkeypatch=monkeypatch)
    found = trt_runtime.probe()
    assert found is not None
    assert found.version == "10.13.3.9"
    assert found.features == ("module:tensorrt_bindings", "distribution:tensorrt-cu12-bindings",
                              "version-from:files")
    assert "tensorrt_bindings" not in sys.modules


def test_tensorrt_bindings_8_6_alone(site, monkeypatch):
    _no_real_tensorrt()
    s = site()
    _dist(s, "tensorrt_bindings", "8.6.1", {"tensorrt_bindings/__init__.py": _BOOM})
    _activate(s, monkeypatch=monkeypatch)
    found = trt_runtime.probe()
    assert found is not None and found.version == "8.6.1"
    assert "distribution:tensorrt_bindings" in found.features


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
    assert "module:tensorrt_rtx" in found.features and "version-from:files" in found.features
