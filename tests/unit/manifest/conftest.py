"""Fixtures for manifest tests: a folder with small generated ONNX models, laid out like a repository
(``<root>/manifests/*.yaml`` next to ``<root>/models/*.onnx`` and ``<root>/data/calib/``)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from . import fakes


def tiny_model(path: Path, *, shape=("N", 3, "H", "W"), output: str = "y") -> None:
    """Identity over one float input: enough for a manifest to point at; its bytes are fixed by onnx's version."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    y = helper.make_tensor_value_info(output, TensorProto.FLOAT, list(shape))
    graph = helper.make_graph([helper.make_node("Identity", ["x"], [output])], "tiny", [x], [y])
    model = helper.make_model(graph, producer_name="trt-orchestrator-tests",
                              opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)


@pytest.fixture(scope="session")
def repo_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("repo")
    (root / "manifests").mkdir()
    (root / "models").mkdir()
    (root / "data" / "calib").mkdir(parents=True)
    (root / "data" / "calib" / "sample0.npy").write_bytes(b"\x93NUMPY")  # existence is all the loader checks
    tiny_model(root / "models" / "tiny.onnx")
    tiny_model(root / "models" / "scores.onnx", shape=("N", 2))
    # the demo's orientation classifier stand-in: its `classifier_outputs` names this output
    tiny_model(root / "models" / "classifier.onnx", output="fetch_name_0")
    return root


@pytest.fixture(scope="session")
def digests(repo_root) -> dict[str, str]:
    # regular files only: tests add folders (and must never add FIFOs, which would block a read) to this session's
    # models folder
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (repo_root / "models").iterdir()
            if p.is_file()}


@pytest.fixture
def load(repo_root):
    """Write YAML text into <root>/manifests/<name>.yaml and load it with the literal builder knowledge."""
    from orchestrator.manifest import load_manifest

    def _load(text: str, name: str = "m.yaml", capabilities=fakes.capabilities):
        path = repo_root / "manifests" / name
        path.write_text(text, encoding="utf-8")
        return load_manifest(path, capabilities=capabilities, builder_names=fakes.BUILDER_NAMES,
                             builder_slug=fakes.slug)

    return _load
