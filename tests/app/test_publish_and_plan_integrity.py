"""Nothing wrong is published or built from a stale plan (hardening issue, items 2 and 6), in-process on the tiny
CPU project of test_pipeline: an engine changed in the build cache after its gate ran is not published as
"passed"; `build --plan` refuses a plan whose model changed after `plan --out`, naming the model and both digests.
"""

from __future__ import annotations

import json

import pytest

from orchestrator.app import gating, pipeline
from orchestrator.core.plan import plan_from_json
from orchestrator.errors import PlanError
from orchestrator.run.workspace import read_result
from tests.app.test_pipeline import CPU_RUNNER, FP32, _load, _write_project
from tests.conftest import make_tiny_model


def _flip_a_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_an_engine_changed_after_its_gate_is_not_published(tmp_path):
    _write_project(tmp_path)
    project = _load(tmp_path)
    the_plan = pipeline.plan(project)
    assert pipeline.build(project, the_plan, only=[FP32], fingerprint=CPU_RUNNER, in_process=True).ok
    assert gating.gate(project, the_plan, only=[FP32], fingerprint=CPU_RUNNER, in_process=True).ok
    build_dir = project.workspace.node_dir(project.graph.nodes[f"build:{FP32}"])
    engine = build_dir / read_result(build_dir)["data"]["engine"]
    _flip_a_byte(engine)  # same size: the build result still reads as complete
    summary = pipeline.publish(project, the_plan, only=[FP32], in_process=True)
    (report,) = [r for r in summary.reports if r.node == f"publish:{FP32}"]
    assert report.status == "failed"
    assert "changed after the build" in report.reason
    assert not (tmp_path / "artifacts" / "meta").exists() or not list((tmp_path / "artifacts" / "meta").iterdir())


def test_build_from_a_plan_refuses_a_model_changed_since(tmp_path):
    manifest = _write_project(tmp_path)
    project = _load(tmp_path)
    saved = plan_from_json(json.loads(json.dumps(pipeline.plan(project).to_json())))
    before = saved.models["tiny@1.0.0"]
    make_tiny_model(tmp_path / "tiny.onnx", seed=7)  # the model file changes after `plan --out`
    now = _load(tmp_path)
    assert manifest.read_text()  # the manifest itself did not change
    with pytest.raises(PlanError) as e:
        pipeline.check_plan_current(now, saved)
    assert "model tiny@1.0.0 changed since the plan was made" in e.value.message
    assert before[:19] in e.value.message and now.graph.nodes["prepare:tiny@1.0.0"].key[:19] in e.value.message


RTX_TARGET = """\
  - name: rtx
    builder: tensorrt-rtx
    builder_version: "{version}"
    compute_capability: "8.6"
    runners: {{build: [ubuntu-latest], gate: [self-hosted, rtx]}}
"""


def test_ungated_publish_does_not_cover_a_transform_output_that_failed_parity(tmp_path):
    """Hardening item 4: an RTX fp16 engine (gate pending here) built from the very fp16 ONNX whose onnxruntime
    parity just failed is not published under allow_ungated_publish."""
    rtx = pytest.importorskip("tensorrt_rtx", reason="the tensorrt-rtx extra builds the pending engine")
    from tests.app.test_pipeline import FP16, MANIFEST

    text = MANIFEST.replace(
        "      data: {samples: 2, seed: 0}\n",
        "      data: {samples: 2, seed: 0}\n      tolerances: {fp16: {atol: 1.0e-9, rtol: 0, min_cosine: 1.0}}\n",
    ).replace("    benchmark: {warmup: 1, iterations: 3, shapes: [opt]}\n",
              "    benchmark: {warmup: 1, iterations: 3, shapes: [opt]}\n    allow_ungated_publish: true\n")
    text = text.replace("registry: {store: local", RTX_TARGET.format(version=rtx.__version__)
                        + "registry: {store: local")
    _write_project(tmp_path, text)
    project = _load(tmp_path)
    the_plan = pipeline.plan(project)
    rtx_fp16 = next(c.address for c in project.graph.cells if c.precision.name == "fp16" and "rtx" in c.address)
    only = [FP16, rtx_fp16]
    assert pipeline.build(project, the_plan, only=only, fingerprint=CPU_RUNNER, in_process=True).ok
    gated = gating.gate(project, the_plan, only=only, fingerprint=CPU_RUNNER, in_process=True)
    assert gating.failed_gates(gated) == [f"gate:parity:{FP16}"]  # the ORT fp16 engine fails parity for real
    summary = pipeline.publish(project, the_plan, only=[rtx_fp16], in_process=True)
    (report,) = [r for r in summary.reports if r.node == f"publish:{rtx_fp16}"]
    assert report.status == "skipped"
    assert f"the fp16 ONNX it was built from failed parity on {FP16}" in report.reason
    forced = pipeline.publish(project, the_plan, only=[rtx_fp16], force=True, in_process=True)
    assert [r.status for r in forced.reports if r.node == f"publish:{rtx_fp16}"] == ["done"]


def test_keys_do_not_depend_on_the_tool_versions_of_the_planning_machine(tmp_path, monkeypatch):
    """Hardening: on a bare install every fp16 cell showed `rebuild 1.16.0 -> (absent)`. Keys hold the tool
    versions a manifest declares (`transforms.tools`), never what happens to be installed where `plan` runs."""
    from importlib import metadata as importlib_metadata

    _write_project(tmp_path)
    keys = {c.address: c.build_key for c in _load(tmp_path).graph.cells}
    real = importlib_metadata.version

    def bare(name):
        if name in ("onnxconverter-common", "onnxruntime", "onnx"):
            raise importlib_metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib_metadata, "version", bare)
    assert {c.address: c.build_key for c in _load(tmp_path).graph.cells} == keys


def test_declared_transform_tools_key_the_cells_and_a_runner_without_them_refuses(tmp_path):
    from importlib import metadata as importlib_metadata

    from tests.app.test_pipeline import FP16, MANIFEST

    _write_project(tmp_path)
    plain = {c.address: c.build_key for c in _load(tmp_path).graph.cells}
    installed = importlib_metadata.version("onnxconverter-common")
    family = ".".join(installed.split(".")[:2])
    (tmp_path / "m.yaml").write_text(MANIFEST + f'transforms: {{tools: {{onnxconverter-common: "{family}"}}}}\n')
    project = _load(tmp_path)
    declared = {c.address: c.build_key for c in project.graph.cells}
    assert declared[FP16] != plain[FP16] and declared[FP32] == plain[FP32]  # only the transformed cell moves
    changes = pipeline.plan(project).entries  # nothing published: all build; the key input names the tool
    assert all(e.status == "build" for e in changes)
    cell = project.graph.cell(FP16)
    assert cell.key_inputs["transform"]["settings"]["tools"] == {"onnxconverter-common": family}
    assert pipeline.build(project, pipeline.plan(project), only=[FP16], fingerprint=CPU_RUNNER, in_process=True).ok
    # a version this runner does not have: the transform refuses, naming both versions
    (tmp_path / "m.yaml").write_text(MANIFEST + 'transforms: {tools: {onnxconverter-common: "0.9"}}\n')
    project = _load(tmp_path)
    summary = pipeline.build(project, pipeline.plan(project), only=[FP16], fingerprint=CPU_RUNNER, in_process=True)
    (failed,) = [r for r in summary.reports if r.status == "failed"]
    assert failed.kind == "transform"
    assert f"keys this transform on onnxconverter-common 0.9 (transforms.tools); this runner has {installed}" in \
        failed.reason
