"""Journey (issue 22.4): the Python API as the README shows it, pasted into a script.

``orchestrator.pull("ocr-det", registry="artifacts", ...)`` used to fail (a ``RegistryConfig(path="artifacts")``:
"local store path must be absolute"; a plain string: ``AttributeError``). The verbs take a registry as a user
names it: a directory relative to the working directory, a path, an ``oci://`` URL (here a real registry server
on loopback), or a ``RegistryConfig``; anything else is a usage error that says what to pass.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import orchestrator
from orchestrator import plugins
from orchestrator.contracts.store import ArtifactFiles
from orchestrator.core.model import RegistryConfig
from orchestrator.errors import ExitCode, UsageError
from tests.integration.registry_server import registry  # noqa: F401  (the real OCI registry server fixture)
from tests.journeys.store_copy import link_copy

MODEL = "ocr-det"


@pytest.fixture
def in_project(demo_published, tmp_path: Path, monkeypatch) -> Path:
    """A working directory holding the published demo's store as ./artifacts, as after `bash scripts/demo.sh`."""
    link_copy(demo_published.store, tmp_path / "artifacts")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("how", ["relative", "path", "config", "relative-config"])
def test_pull_takes_the_registry_as_a_user_names_it(in_project: Path, how: str):
    ref = {"relative": "artifacts", "path": in_project / "artifacts",
                "config": RegistryConfig(store="local", path=str(in_project / "artifacts")),
                "relative-config": RegistryConfig(path="artifacts")}[how]
    result = orchestrator.pull(MODEL, registry=ref, precision="fp16", out="ocr-det.engine")
    assert result.path == Path("ocr-det.engine") and result.path.is_file()
    assert result.metadata["model"]["name"] == MODEL and result.metadata["precision"] == "fp16"
    assert result.metadata["engine"]["digest"] == "sha256:" + hashlib.sha256(
        result.path.read_bytes()).hexdigest()


def test_pull_all_and_export_triton_take_a_string_registry(in_project: Path):
    filled = orchestrator.pull_all([MODEL], registry="artifacts", gpus=["sm86", "sm89"], precision="fp16",
                                   out="models")
    assert {e.path.parent.name for e in filled.engines} == {MODEL} and all(e.path.is_file() for e in filled.engines)
    repo = orchestrator.export_triton([MODEL], registry="artifacts", repo="triton-repo", precision="fp16",
                                      runtime="ort1.31", gpus="none")
    assert (in_project / "triton-repo" / MODEL / "config.pbtxt").is_file() and not repo.unchanged


def test_an_oci_url(demo_published, registry, tmp_path: Path, monkeypatch):  # noqa: F811
    """An ``oci://`` URL names a real registry: one engine copied there from the demo's store, then pulled."""
    local = plugins.open_store(RegistryConfig(store="local", path=str(demo_published.store)))
    (chosen,) = [a for a in local.records(MODEL)
                 if a.metadata["precision"] == "fp16" and a.metadata["target"]["device"] == "cpu"]
    engine = tmp_path / "engine"
    local.get(chosen.digest, engine)
    url = f"oci://{registry.host}/journeys"
    plugins.open_store(url).put(ArtifactFiles(engine=engine, metadata=chosen.metadata))
    monkeypatch.chdir(tmp_path)
    result = orchestrator.pull(MODEL, registry=url, precision="fp16", gpu="none", out="pulled.onnx")
    assert result.metadata["engine"]["digest"] == chosen.digest
    assert Path("pulled.onnx").read_bytes() == engine.read_bytes()


@pytest.mark.parametrize("bad", [3, None, "", b"artifacts"])
def test_anything_else_is_a_usage_error(bad, in_project: Path):
    with pytest.raises(UsageError) as info:
        orchestrator.pull(MODEL, registry=bad)
    assert info.value.exit_code == ExitCode.USAGE and "oci://" in info.value.hint


def test_the_public_names_are_typed_and_listed():
    """``py.typed`` ships (PEP 561) and ``__all__`` lists exactly the names ``orchestrator`` resolves."""
    package = Path(orchestrator.__file__).parent
    assert (package / "py.typed").is_file()
    assert set(orchestrator.__all__) == set(orchestrator._API) | {"__version__"}
    for name in orchestrator._API:
        assert getattr(orchestrator, name) is not None
