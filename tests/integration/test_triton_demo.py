"""`export triton` and `pull --all` on the demo's real onnxruntime engines (issue 16): the demo's CPU cells are
built, gated and published for real; the exported repository's config.pbtxt files parse with Triton's own protobuf
definition (tritonclient's model_config_pb2 through google.protobuf.text_format) and agree with the engine file
they describe, opened with onnxruntime; a re-export writes nothing; `pull --all` fills a deployment directory and
says "nothing compatible" with its own exit code. The TensorRT matrix over four CCs is in
tests/app/test_triton_export.py (TensorRT cannot build here)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from .conftest import gated_demo_copy, orchestrate, run_json

pytestmark = pytest.mark.integration

MODELS = ("ocr-det", "ocr-rec", "orientation")
CELLS = [f"{m}/fp32/default@cpu+ort1.31" for m in MODELS]
NP_OF = {model_config_pb2.TYPE_FP32: np.float32, model_config_pb2.TYPE_INT64: np.int64}


@pytest.fixture(scope="module")
def published(tmp_path_factory, demo_models):
    """The demo's fp32 CPU cells built, gated and published: the build and gate are the run's shared ones
    (conftest.gated_demo_copy: the same nodes a build and gate of these cells make), the publish is this module's."""
    root = tmp_path_factory.mktemp("triton-demo")
    manifest, cache, record = gated_demo_copy(tmp_path_factory, root, registry=str(root / "artifacts"))
    assert record["returncode"] == 0, record["output"]
    only = [arg for cell in CELLS for arg in ("--only", cell)]
    orchestrate("publish", str(manifest), *only, cache=cache)
    return root, manifest, cache


def parse(path: Path) -> model_config_pb2.ModelConfig:
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def test_export_demo_ort_engines(published):
    root, manifest, cache = published
    repo = root / "repo"
    first, _ = run_json("export", "triton", *MODELS, "--repo", str(repo), "--manifest", str(manifest),
                        "--precision", "fp32", "--runtime", "ort1.31", "--gpus", "none", cache=cache)
    assert [m["name"] for m in first["models"]] == list(MODELS)
    for model in MODELS:
        directory = repo / model
        assert sorted(p.name for p in directory.iterdir()) == ["1", "config.pbtxt", "orchestrate-versions.json"]
        assert sorted(p.name for p in (directory / "1").iterdir()) == ["model.onnx", "model.onnx.provenance.json"]
        config = parse(directory / "config.pbtxt")
        assert config.name == model and config.backend == "onnxruntime" and config.platform == ""
        assert config.max_batch_size == 0
        assert [g.kind for g in config.instance_group] == [model_config_pb2.ModelInstanceGroup.KIND_CPU]
        assert config.version_policy.WhichOneof("policy_choice") == "latest"
        # the config describes the file next to it: names, types and ranks as onnxruntime reads them
        session = ort.InferenceSession(str(directory / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
        for declared, actual in ((config.input, session.get_inputs()), (config.output, session.get_outputs())):
            assert [t.name for t in declared] == [a.name for a in actual]
            assert all(len(t.dims) == len(a.shape) for t, a in zip(declared, actual))
            assert all(t.data_type == model_config_pb2.TYPE_FP32 and a.type == "tensor(float)"
                       for t, a in zip(declared, actual))
        assert -1 in config.input[0].dims  # the batch (and dynamic spatial) dims
        provenance = json.loads((directory / "1" / "model.onnx.provenance.json").read_text())
        record, _ = run_json("show", provenance["address"], str(manifest), cache=cache)
        assert provenance["engine"]["digest"] == record["engine"]["digest"]
        assert provenance["gates"]["status"] == "passed" and provenance["builder"]["version"].startswith("1.31")
        exported = next(f for f in first["models"][MODELS.index(model)]["files"] if f["digest"])
        assert exported["digest"] == record["engine"]["digest"] and exported["status"] == "written"

    before = {p: p.stat().st_mtime_ns for p in repo.rglob("*")}
    again, _ = run_json("export", "triton", *MODELS, "--repo", str(repo), "--manifest", str(manifest),
                        "--precision", "fp32", "--runtime", "ort1.31", "--gpus", "none", cache=cache)
    assert again["unchanged"] is True
    assert {p: p.stat().st_mtime_ns for p in repo.rglob("*")} == before  # nothing rewritten


def test_export_refuses_an_unknown_serving_release_and_a_runtime_triton_cannot_serve(published):
    root, manifest, cache = published
    proc = orchestrate("export", "triton", "orientation", "--repo", str(root / "r2"), "--manifest", str(manifest),
                       "--runtime", "triton:27.01", cache=cache, check=False)
    assert proc.returncode == 2 and "unknown triton release '27.01'" in proc.stderr
    assert "known triton releases: 23.05, 24.02, 24.04" in proc.stderr and "Traceback" not in proc.stderr
    assert not (root / "r2").exists()
    rtx = orchestrate("export", "triton", "orientation", "--repo", str(root / "r2"), "--manifest", str(manifest),
                      "--runtime", "rtx1.7", cache=cache, check=False)
    assert rtx.returncode == 2 and "Triton does not serve tensorrt-rtx engines" in rtx.stderr
    assert not (root / "r2").exists()


def test_pull_all_fills_a_deployment_directory(published):
    root, manifest, cache = published
    out = root / "deploy"
    filled, _ = run_json("pull", "--all", *MODELS, "--gpus", "none", "--precision", "fp32", "-o", str(out),
                         "--manifest", str(manifest), cache=cache)
    assert filled["changed"] is True and len(filled["engines"]) == 3
    for engine in filled["engines"]:
        path = Path(engine["path"])
        assert path.parent == out / engine["model"] and path.name == "model.cpu.onnx"
        record, _ = run_json("show", engine["address"], str(manifest), cache=cache)
        assert engine["digest"] == record["engine"]["digest"] and path.stat().st_size == record["engine"]["size"]
    again, _ = run_json("pull", "--all", *MODELS, "--gpus", "none", "--precision", "fp32", "-o", str(out),
                        "--manifest", str(manifest), cache=cache)
    assert again["changed"] is False and {e["status"] for e in again["engines"]} == {"unchanged"}

    # a deployment on TensorRT: engines are published, none runs there -> exit 4, nothing written
    none = orchestrate("pull", "--all", "orientation", "--gpus", "sm86", "--runtime", "trt10.13", "-o",
                       str(root / "trt"), "--manifest", str(manifest), "--json", cache=cache, check=False)
    assert none.returncode == 4, none.stdout + none.stderr
    error = json.loads(none.stdout)["error"]
    assert error["type"] == "NoCompatibleEngineError" and "orientation on sm86" in error["message"]
    assert "runs on onnxruntime, not the requested runtime tensorrt" in error["message"]
    assert not (root / "trt").exists()
