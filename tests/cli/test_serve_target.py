"""targets[].serve (issue 16): a target names its serving stack instead of a TensorRT version; the manifest loader
resolves it through core.serving to the exact TensorRT it ships (the builder version, so the address and build key);
`plan` shows the resolution with its source; an unknown release and a disagreeing builder_version are manifest
errors with the place and the known releases."""

from __future__ import annotations

import json

import pytest

from .test_cli import MANIFEST, _model, run

SERVED = MANIFEST.replace("""registry: {store: local, path: artifacts}""", """\
  - name: triton-a100
    builder: tensorrt
    serve: "triton:25.01"
    compute_capability: "8.0"
    runners: {build: [self-hosted, a100]}
registry: {store: local, path: artifacts}""")


@pytest.fixture()
def project(tmp_path):
    _model(tmp_path / "tiny.onnx")
    return tmp_path


def test_plan_shows_the_resolution_and_the_cells_use_it(project):
    (project / "m.yaml").write_text(SERVED)
    proc = run("plan", "m.yaml", "--json", cwd=project)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert {c["address"] for c in data["cells"]} >= {"tiny/fp32/default@sm80+trt10.8", "tiny/fp16/default@sm80+trt10.8"}
    (row,) = data["serving"]
    assert (row["target"], row["serve"], row["tensorrt"], row["builder_version"], row["cuda"]) == (
        "triton-a100", "triton:25.01", "10.8.0.43", "10.8.0.43", "12.8.0.038")
    assert row["image"] == "nvcr.io/nvidia/tritonserver:25.01-trtllm-python-py3" and "compatibility.md" in row["source"]
    explained = json.loads(run("explain", "tiny/fp32/default@sm80+trt10.8", "m.yaml", "--json", cwd=project).stdout)
    assert explained["build_inputs"]["builder"]["version"] == "10.8.0.43"
    text = run("plan", "m.yaml", cwd=project).stdout
    assert "target triton-a100: serve triton:25.01 -> TensorRT 10.8.0.43, CUDA 12.8.0.038" in text


def test_unknown_release_is_a_manifest_error_listing_the_known_ones(project):
    (project / "m.yaml").write_text(SERVED.replace('"triton:25.01"', '"triton:27.01"'))
    proc = run("validate", "m.yaml", cwd=project)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "m.yaml:26:12: targets[2].serve: unknown triton release '27.01'" in proc.stderr, proc.stderr
    assert "known triton releases: 23.05, 24.02, 24.04, 24.05" in proc.stderr


def test_a_builder_version_that_disagrees_is_refused(project):
    (project / "m.yaml").write_text(SERVED.replace('    serve: "triton:25.01"\n',
                                                   '    serve: "triton:25.01"\n    builder_version: "10.13.3.9"\n'))
    proc = run("validate", "m.yaml", cwd=project)
    assert proc.returncode == 1
    assert "targets[2].builder_version: builder_version 10.13.3.9 is not the TensorRT 10.8.0.43 that triton:25.01 " \
           "ships" in proc.stderr, proc.stderr
    agreeing = SERVED.replace('    serve: "triton:25.01"\n', '    serve: "triton:25.01"\n    builder_version: "10.8"\n')
    (project / "m.yaml").write_text(agreeing)
    assert run("validate", "m.yaml", cwd=project).returncode == 0


def test_neither_builder_version_nor_serve(project):
    (project / "m.yaml").write_text(SERVED.replace('    serve: "triton:25.01"\n', ""))
    proc = run("validate", "m.yaml", cwd=project)
    assert proc.returncode == 1
    assert "targets[2]: a target needs builder_version (or serve: a serving stack that sets it)" in proc.stderr
