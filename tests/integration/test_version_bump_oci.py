"""A model `version:` bump on an OCI registry (issue 22.1): the real registry (CNCF distribution) gets a new record
of the same engine for the new version, publish counts it once, and `pull --version` finds it there."""

from __future__ import annotations

import hashlib
import json

import pytest

from tests.cli.test_cli import _model, run

try:
    from .registry_server import registry  # noqa: F401
except ImportError:  # pragma: no cover - run as a script
    from registry_server import registry  # noqa: F401

pytestmark = pytest.mark.integration

CELL = "tiny/fp32/default@cpu+ort1.31"
MANIFEST = """\
manifest_version: 1
project: bump
models:
  - name: tiny
    version: "VERSION"
    source: {path: tiny.onnx}
    inputs:
      x:
        shape: [N, 3, 32, 32]
        profiles:
          default: {min: [1, 3, 32, 32], opt: [2, 3, 32, 32], max: [4, 3, 32, 32]}
    precisions: [fp32]
    gate: {parity: {data: {samples: 1, seed: 0}}, benchmark: {warmup: 1, iterations: 10}}
targets:
  - {name: cpu, builder: onnxruntime, builder_version: "1.31", device: cpu, runners: {build: [ubuntu-latest]}}
registry: {store: oci, url: "HOST/bump", insecure: true}
"""


def _json(*args, cwd):
    proc = run(*args, "--json", cwd=cwd)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def test_a_version_bump_on_an_oci_registry(tmp_path, registry):  # noqa: F811 (the fixture)
    _model(tmp_path / "tiny.onnx")
    text = MANIFEST.replace("HOST", registry.host)
    (tmp_path / "m.yaml").write_text(text.replace("VERSION", "1.0.0"))
    for verb in ("build", "gate", "publish"):
        _json(verb, "m.yaml", cwd=tmp_path)
    (tmp_path / "m.yaml").write_text(text.replace("VERSION", "1.1.0"))
    (cell,) = _json("plan", "m.yaml", cwd=tmp_path)["cells"]
    assert (cell["status"], cell["reason"]) == ("publish", "version 1.1.0, engine reused")
    published = _json("publish", "m.yaml", cwd=tmp_path)
    assert [(p["address"], p["version"], p["reused_from"]) for p in published["published"]] == [
        (CELL, "1.1.0", "1.0.0")]
    again = _json("publish", "m.yaml", cwd=tmp_path)
    assert again["published"] == [] and again["up_to_date"] == [CELL]
    listing = _json("ls", "--registry", f"oci://{registry.host}/bump", "--model", "tiny", cwd=tmp_path)
    assert sorted(a["version"] for a in listing["artifacts"]) == ["1.0.0", "1.1.0"]
    assert len({a["digest"] for a in listing["artifacts"]}) == 1  # one engine, two records
    pulled = _json("pull", "tiny", "--version", "1.1.0", "--gpu", "none", "--registry", f"oci://{registry.host}/bump",
                   "-o", str(tmp_path / "tiny-1.1.onnx"), cwd=tmp_path)
    assert pulled["metadata"]["model"]["version"] == "1.1.0" and pulled["metadata"]["reused_from"]["model_version"] \
        == "1.0.0"
    digest = "sha256:" + hashlib.sha256((tmp_path / "tiny-1.1.onnx").read_bytes()).hexdigest()
    assert digest == pulled["digest"] == listing["artifacts"][0]["digest"]
