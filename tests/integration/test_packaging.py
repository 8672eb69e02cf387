"""Installing is silent and complete (issue 22.6, 22.4): `pip install .` and `pip install -e .` print no
setuptools warning, every folder of the two package trees is configured, and the wheel carries ``py.typed``
and the templates the code reads at run time.

The builds are real: pip with build isolation (setuptools from the index, as a user gets it) on a copy of the
files a clone has, into private folders; nothing touches this interpreter's environment.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# What a build reads: the two package trees, the backend, the project file and the readme it names.
SOURCES = ("orchestrator", "plugins", "pyproject.toml", "README.md", "scripts/build_backend.py")
# Some machines' pip configuration names local index folders that do not exist; pip then warns about its own
# configuration, once per lookup (scripts/setup-env.sh drops the same lines). Nothing of ours.
PIP_CONFIG_NOISE = "WARNING: Location 'file://"


def _pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11+")
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def _package_folders() -> set[str]:
    """Every folder of the two trees that holds a file, as the import name setuptools gives it."""
    roots = {"orchestrator": REPO / "orchestrator", "trt_orchestrator_plugins": REPO / "plugins"}
    found = set()
    for name, root in roots.items():
        for folder in [root, *(p for p in root.rglob("*") if p.is_dir())]:
            if "__pycache__" in folder.parts or not any(f.is_file() for f in folder.iterdir()):
                continue
            found.add(".".join([name, *folder.relative_to(root).parts]))
    return found


def test_every_package_folder_is_configured():
    """A folder missing from `packages` is what setuptools warns about (and leaves its files out of a wheel)."""
    config = _pyproject()["tool"]["setuptools"]
    assert set(config["packages"]) == _package_folders()
    assert config["package-dir"] == {"orchestrator": "orchestrator", "trt_orchestrator_plugins": "plugins"}


def test_license_is_an_spdx_expression():
    project = _pyproject()["project"]
    assert project["license"] == "Apache-2.0", "a TOML table here is deprecated (setuptools warns on every build)"
    assert not any(c.startswith("License ::") for c in project.get("classifiers", ()))


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """The files a clone has that a build reads, without caches or build leftovers."""
    root = tmp_path_factory.mktemp("src")
    for rel in SOURCES:
        src = REPO / rel
        if src.is_dir():
            shutil.copytree(src, root / rel, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, root / rel)
    return root


def _pip(*args: str, cwd: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return subprocess.Popen([sys.executable, "-m", "pip", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _warnings(output: str) -> list[str]:
    return [line for line in output.splitlines() if "warn" in line.lower() and PIP_CONFIG_NOISE not in line]


@pytest.mark.integration
def test_install_and_editable_install_print_no_warnings(source: Path, tmp_path: Path):
    """Both builds at pip's default verbosity (what `pip install .` shows) and at -q (scripts/setup-env.sh)."""
    runs = {
        "pip wheel .": _pip("wheel", "--no-deps", "-w", str(tmp_path / "wheels"), str(source), cwd=tmp_path),
        "pip install -q -e .": _pip("install", "-q", "--no-deps", "-e", str(source), "--target",
                                    str(tmp_path / "editable"), cwd=tmp_path),
    }
    for what, proc in runs.items():
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"{what} failed:\n{out[-4000:]}"
        assert _warnings(out) == [], f"{what} printed warnings:\n{out}"

    (wheel,) = (tmp_path / "wheels").glob("trt_orchestrator-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for wanted in ("orchestrator/py.typed", "orchestrator/cli/render/templates/report.html.j2",
                   "orchestrator/manifest/manifest-v1.schema.json",
                   "trt_orchestrator_plugins/ci/templates/engines.yml.j2",
                   "trt_orchestrator_plugins/ci/templates/matrix.py"):
        assert wanted in names, f"{wanted} is not in {wheel.name}"
    assert not any(n.startswith(("scripts/", "build_backend")) for n in names), "the build backend is not shipped"

    # the installed wheel finds its templates (importlib.resources), not this checkout's copies
    site = tmp_path / "site"
    install = _pip("install", "-q", "--no-deps", "--no-index", "--target", str(site), str(wheel), cwd=tmp_path)
    out, _ = install.communicate(timeout=300)
    assert install.returncode == 0, out
    probe = ("import orchestrator, trt_orchestrator_plugins.ci.github as g; "
             "print(orchestrator.__file__); print(len(g._template_text('engines.yml.j2')))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(site)}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    where, size = proc.stdout.split()
    assert Path(where).is_relative_to(site) and int(size) > 0
