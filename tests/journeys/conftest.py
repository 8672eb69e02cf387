"""The journeys suite (issue 22): a new user's first day on the demo, walked end to end.

Each journey drives the real CLI in a subprocess against real files: the demo manifest copied with its own local
store and cache, built, gated and published once per session (``demo_published``). A journey that changes the
manifest or the store works on its own copy (``published_copy``), so journeys never see each other's changes.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.conftest import gated_demo_copy, orchestrate, run_json


@dataclass(frozen=True)
class Demo:
    """A published demo: the manifest copy, its local store and the executor cache it was built with."""

    root: Path
    manifest: Path
    store: Path
    cache: Path

    def run(self, *args: str, check: bool = True, **kw):
        return orchestrate(*args, cache=self.cache, check=check, **kw)

    def run_json(self, *args: str, check: bool = True, **kw):
        return run_json(*args, cache=self.cache, check=check, **kw)


@pytest.fixture(scope="session")
def demo_published(tmp_path_factory, demo_models) -> Demo:
    """manifests/demo.yaml built, gated and published into a private local store, once per session (the build and
    gate are the run's shared ones: ``gated_demo_copy``). Read-only: journeys that change anything take
    ``published_copy``."""
    root = tmp_path_factory.mktemp("journey-demo")
    store = root / "artifacts"
    manifest, cache, gated = gated_demo_copy(tmp_path_factory, root, registry=str(store))
    assert gated["returncode"] == 0, gated["output"]
    demo = Demo(root=root, manifest=manifest, store=store, cache=cache)
    demo.run("publish", str(manifest), timeout=3600)
    return demo


@pytest.fixture
def published_copy(demo_published: Demo, tmp_path: Path) -> Demo:
    """A private copy of the published demo (manifest, store and cache) that a journey may change."""
    root = tmp_path / "demo"
    shutil.copytree(demo_published.root, root, symlinks=True)
    manifest = root / "manifests" / "demo.yaml"
    manifest.write_text(manifest.read_text().replace(str(demo_published.store), str(root / "artifacts")))
    return Demo(root=root, manifest=manifest, store=root / "artifacts", cache=root / "cache")
