"""A local store path that does not exist is not an empty store (issue 23.6): every reader that needs a store
(``ls``, ``show``, ``pull``, ``pull --all``, ``retention``, ``export triton``, ``store check``) says so, naming the
path, and creates nothing; a path that is a file is no store either. ``plan`` against a store not created yet is
normal (a first plan before the first publish): every cell plans as ``+ build`` and the plan says the store does
not exist yet (text and ``registry_note`` in ``--json``); ``publish`` creates it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import run_json, write_demo_copy

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                          timeout=180, cwd=REPO)


def readers(store: Path, out: Path) -> list[tuple[str, ...]]:
    reg = ("--registry", str(store))
    return [("ls", *reg), ("ls", "--json", *reg), ("show", "cls/fp32/default@cpu+ort1.31", *reg),
            ("pull", "cls", "-o", str(out / "e.onnx"), *reg), ("pull", "--all", "--gpus", "none", "-o", str(out), *reg),
            ("retention", "--keep-versions", "1", *reg), ("export", "triton", "cls", "--repo", str(out / "t"), *reg),
            ("store", "check", *reg)]


@pytest.mark.parametrize("shape", ["missing", "a file"])
def test_every_reader_refuses_a_store_that_is_not_there(shape, tmp_path):
    store = tmp_path / "no-such-store"
    if shape == "a file":
        store.write_text("not a store\n")
    out = tmp_path / "out"
    for args in readers(store, out):
        proc = cli(*args)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, (args, proc.returncode, proc.stdout,
                                                                         proc.stderr)
        text = proc.stderr + proc.stdout  # --json reports the error as JSON on stdout
        want = f"the local store {store} does not exist" if shape == "missing" else \
            f"the local store path {store} is not a directory"
        assert want in text, (args, text)
        if shape == "missing":
            assert not store.exists(), args  # reading never creates it
    assert not out.exists()


def test_an_empty_store_directory_is_an_empty_store(tmp_path):
    store = tmp_path / "artifacts"
    store.mkdir()
    listing = json.loads(cli("ls", "--json", "--registry", str(store)).stdout)
    assert listing["artifacts"] == [] and listing["damaged"] == []


def test_a_first_plan_against_a_store_not_created_yet_says_so_and_publish_creates_it(tmp_path, demo_models):
    store = tmp_path / "fresh-store"
    manifest = write_demo_copy(tmp_path / "manifests", registry=str(store))
    plan, proc = run_json("plan", str(manifest), cache=tmp_path / "cache")
    assert proc.returncode == 0
    assert plan["registry_note"] == f"the local store {store} does not exist yet: it is created by the first " \
                                    "`orchestrate publish`"
    assert plan["summary"]["build"] == len(plan["cells"]) - plan["summary"]["blocked"] > 0
    text = subprocess.run([sys.executable, "-m", "orchestrator", "plan", str(manifest)], capture_output=True,
                          text=True, timeout=180, cwd=REPO, env={**__import__("os").environ,
                                                                 "ORCHESTRATE_CACHE": str(tmp_path / "cache")})
    assert text.returncode == 0 and f"registry: the local store {store} does not exist yet" in text.stdout
    assert not store.exists()  # planning created nothing
    # publish creates it (the store's put), and readers then read it
    from orchestrator.core.model import RegistryConfig
    from tests.integration.registry_server import make_artifact
    from trt_orchestrator_plugins.stores.local import LocalStore

    LocalStore(RegistryConfig(store="local", path=str(store))).put(
        make_artifact(tmp_path / "b", model="cls", builder="onnxruntime", builder_version="1.31.1", size=4096))
    assert json.loads(cli("ls", "--json", "--registry", str(store)).stdout)["artifacts"]
    replan, _ = run_json("plan", str(manifest), cache=tmp_path / "cache")
    assert replan["registry_note"] == ""
