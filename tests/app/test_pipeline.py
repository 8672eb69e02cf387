"""The app verbs in-process (no CLI subprocess): plan -> build -> gate -> publish -> plan -> pull -> report ->
doctor -> registry queries, on a tiny model and a CPU-only onnxruntime target; and the refusals each verb makes."""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest

from orchestrator.app import ci, deploy, doctor, gating, matrix, pipeline, registry
from orchestrator.app.project import Project, display_path, load_project
from orchestrator.core.fingerprint import InstalledRuntime, RunnerFingerprint
from orchestrator.core.plan import Plan
from orchestrator.errors import (
    ArtifactNotFoundError,
    CIError,
    NoCompatibleEngineError,
    PlanError,
    RunnerMismatchError,
    UsageError,
)
from orchestrator.run.executor import RunSummary
from tests.conftest import make_tiny_model

ORT = metadata.version("onnxruntime")
ORT_FAMILY = ".".join(ORT.split(".")[:2])
FP32 = f"tiny/fp32/default@cpu+ort{ORT_FAMILY}"
FP16 = f"tiny/fp16/default@cpu+ort{ORT_FAMILY}"

MANIFEST = f"""\
manifest_version: 1
project: tiny
defaults:
  precisions:
    - fp32
    - {{name: fp16, via: transform}}
  gate:
    parity:
      data: {{samples: 2, seed: 0}}
    benchmark: {{warmup: 1, iterations: 3, shapes: [opt]}}
models:
  - name: tiny
    version: "1.0.0"
    source: {{path: tiny.onnx}}
    inputs:
      x:
        shape: [N, 3, H, W]
        profiles:
          default: {{min: [1, 3, 8, 8], opt: [2, 3, 16, 16], max: [4, 3, 32, 32]}}
targets:
  - name: cpu
    builder: onnxruntime
    builder_version: "{ORT_FAMILY}"
    device: cpu
    runners: {{build: [ubuntu-latest]}}
registry: {{store: local, path: artifacts}}
"""

CPU_RUNNER = RunnerFingerprint(os="linux", arch="x86_64",
                               runtimes={"onnxruntime": InstalledRuntime(ORT, ("CPUExecutionProvider",))})
BARE_RUNNER = RunnerFingerprint(os="linux", arch="x86_64")  # no runtime at all


def _write_project(folder: Path, text: str = MANIFEST, seed: int = 0) -> Path:
    make_tiny_model(folder / "tiny.onnx", seed=seed)
    manifest = folder / "m.yaml"
    manifest.write_text(text)
    return manifest


def _load(folder: Path) -> Project:
    return load_project([folder / "m.yaml"], cache_dir=folder / "cache")


def _statuses(the_plan: Plan) -> dict[str, str]:
    return {e.address: e.status for e in the_plan.entries}


def _by_node(summary: RunSummary) -> dict[str, str]:
    return {r.node: r.status for r in summary.reports}


def _sha256(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class RoundTrip:
    folder: Path
    project: Project
    first_plan: Plan
    built: RunSummary
    gated: RunSummary
    published: RunSummary


@pytest.fixture(scope="module")
def done(tmp_path_factory) -> RoundTrip:
    """One full round trip, shared by the read-only checks below."""
    folder = tmp_path_factory.mktemp("pipeline")
    _write_project(folder)
    project = _load(folder)
    first = pipeline.plan(project)
    built = pipeline.build(project, first, jobs=1, fingerprint=CPU_RUNNER, in_process=True)
    gated = gating.gate(project, first, fingerprint=CPU_RUNNER, in_process=True)
    pipeline.check_plan_current(project, first)  # nothing published yet: the plan still holds
    published = pipeline.publish(project, first, in_process=True)
    return RoundTrip(folder, project, first, built, gated, published)


def test_first_plan_builds_every_cell(done):
    assert _statuses(done.first_plan) == {FP32: "build", FP16: "build"}
    assert done.first_plan.registry_state == "empty"
    assert list(done.first_plan.manifests) == [display_path(str(done.folder / "m.yaml"))]


def test_build_runs_prepare_transform_and_both_builds(done):
    assert done.built.ok, done.built.to_json()
    status = _by_node(done.built)
    assert status[f"build:{FP32}"] == status[f"build:{FP16}"] == "done"
    assert {r.kind for r in done.built.reports} == {"prepare", "transform", "build"}
    assert set(status.values()) == {"done"}


def test_gate_passes_parity_and_benchmark(done):
    assert done.gated.ok, done.gated.to_json()
    assert gating.failed_gates(done.gated) == []
    status = _by_node(done.gated)
    assert set(status) == {f"gate:{k}:{a}" for k in ("parity", "benchmark") for a in (FP32, FP16)}
    assert set(status.values()) == {"done"}
    for address in (FP32, FP16):
        parity, bench = pipeline.gate_reports(done.project, done.project.graph.cell(address))
        assert parity["status"] == "passed" and bench["status"] == "passed"
        assert parity["address"] == address


def test_publish_puts_both_engines_in_the_registry(done):
    assert done.published.ok, done.published.to_json()
    reports = {r.node: r for r in done.published.reports}
    assert set(reports) == {f"publish:{FP32}", f"publish:{FP16}"}
    for address in (FP32, FP16):
        report = reports[f"publish:{address}"]
        assert report.status == "done"
        assert report.data["gates"] == "passed" and report.data["digest"].startswith("sha256:")
        assert report.data["build_key"] == done.project.graph.cell(address).build_key


def test_plan_after_publish_is_up_to_date(done):
    again = pipeline.plan(_load(done.folder))
    assert _statuses(again) == {FP32: "up-to-date", FP16: "up-to-date"}
    assert not again.has_changes
    assert again.registry_state != done.first_plan.registry_state


def test_a_plan_made_before_another_publish_is_refused(done):
    with pytest.raises(PlanError) as e:
        pipeline.check_plan_current(done.project, done.first_plan)
    assert "registry changed" in e.value.message
    # the fresh plan is current
    pipeline.check_plan_current(done.project, pipeline.plan(done.project))


def test_a_plan_is_refused_after_its_manifest_changed(tmp_path):
    manifest = _write_project(tmp_path)
    saved = pipeline.plan(_load(tmp_path))
    pipeline.check_plan_current(_load(tmp_path), saved)
    manifest.write_text(MANIFEST.replace('version: "1.0.0"', 'version: "1.0.1"'))
    with pytest.raises(PlanError) as e:
        pipeline.check_plan_current(_load(tmp_path), saved)
    assert e.value.message == f"{display_path(str(manifest))} changed since the plan was made"
    assert "re-run" in (e.value.hint or "")


def test_a_plan_of_a_manifest_not_loaded_now_is_refused(tmp_path):
    _write_project(tmp_path)
    saved = pipeline.plan(_load(tmp_path))
    other = tmp_path / "other"
    other.mkdir()
    _write_project(other)
    with pytest.raises(PlanError) as e:
        pipeline.check_plan_current(_load(other), saved)
    assert e.value.message == (f"the plan was made from {display_path(str(tmp_path / 'm.yaml'))}, "
                               "which is not loaded now")


def test_unknown_only_address_suggests_the_close_one(done):
    with pytest.raises(UsageError) as e:
        pipeline.cells_in_scope(done.project, done.first_plan, only=[FP32[:-1]])
    assert repr(FP32[:-1]) in e.value.message
    assert e.value.hint == f"did you mean {FP32!r}?"


def test_only_names_a_cell_whatever_its_plan_status(done):
    up_to_date = pipeline.plan(done.project)
    assert pipeline.cells_in_scope(done.project, up_to_date) == []
    assert [c.address for c in pipeline.cells_in_scope(done.project, up_to_date, only=[FP16])] == [FP16]


def test_shard_runner_without_onnxruntime_cannot_gate_the_shard(done):
    shard = done.first_plan.shards[0]
    assert set(shard.addresses) == {FP32, FP16}
    pipeline.verify_shard_runner(done.project, done.first_plan, shard.id, CPU_RUNNER, role="gate")
    with pytest.raises(RunnerMismatchError) as e:
        pipeline.verify_shard_runner(done.project, done.first_plan, shard.id, BARE_RUNNER, role="gate")
    for address in (FP32, FP16):
        assert f"cpu ({address}): onnxruntime is not installed on this runner" in e.value.message
    assert f"cannot gate shard {shard.id!r}" in e.value.message


def test_shard_runner_without_onnxruntime_cannot_build_the_shard(done):
    shard = done.first_plan.shards[0]
    pipeline.verify_shard_runner(done.project, done.first_plan, shard.id, CPU_RUNNER, role="build")
    with pytest.raises(RunnerMismatchError) as e:
        pipeline.verify_shard_runner(done.project, done.first_plan, shard.id, BARE_RUNNER, role="build")
    for address in (FP32, FP16):
        assert f"({address})" in e.value.message


def test_pull_picks_a_cpu_engine_and_writes_verified_bytes(done, tmp_path):
    out = tmp_path / "engine.onnx"
    result = deploy.pull("tiny", registry=done.project.registry, out=out, fingerprint=CPU_RUNNER)
    assert result.path == out
    assert result.metadata["target"]["device"] == "cpu"
    assert result.metadata["address"] in (FP32, FP16)
    assert result.reason == "onnxruntime CPU engine"
    assert _sha256(out) == result.metadata["engine"]["digest"]
    # the other engine was compatible too, only ranked lower
    (other,) = result.rejections
    assert "also compatible" in other[1]
    pinned = deploy.pull("tiny", registry=done.project.registry, precision="fp16", out=tmp_path / "fp16.onnx",
                         fingerprint=CPU_RUNNER)
    assert pinned.metadata["address"] == FP16
    assert _sha256(tmp_path / "fp16.onnx") == pinned.metadata["engine"]["digest"]


def test_pull_of_a_precision_never_built_says_what_is_published(done, tmp_path):
    # exit 1, not 4: nothing of that precision was published (4 is "published, but none runs here"; issue 23.5)
    with pytest.raises(ArtifactNotFoundError) as e:
        deploy.pull("tiny", registry=done.project.registry, precision="int8", out=tmp_path / "x.onnx",
                    fingerprint=CPU_RUNNER)
    assert e.value.message == "tiny 1.0.0: precision int8 is not published"
    assert e.value.hint == "published for tiny 1.0.0: precisions fp16, fp32; profile sets default"
    assert not (tmp_path / "x.onnx").exists()


def test_pull_on_a_runner_without_onnxruntime_explains_each_candidate(done):
    with pytest.raises(NoCompatibleEngineError) as e:
        deploy.pull("tiny", registry=done.project.registry, fingerprint=BARE_RUNNER)
    assert len(e.value.rejections) == 2
    assert all("onnxruntime is not installed" in why for _, why in e.value.rejections)


def test_pull_with_an_unknown_runtime_is_a_usage_error(done):
    with pytest.raises(UsageError) as e:
        deploy.pull("tiny", registry=done.project.registry, runtime="zzz1.0", fingerprint=CPU_RUNNER)
    assert "zzz1.0" in e.value.message
    assert "ortX.Y" in (e.value.hint or "")


def test_pull_with_a_declared_runtime_version(done):
    result = deploy.pull("tiny", registry=done.project.registry, runtime=f"ort{ORT_FAMILY}", precision="fp32",
                         fingerprint=CPU_RUNNER)
    assert result.path is None and result.metadata["address"] == FP32
    with pytest.raises(NoCompatibleEngineError) as e:
        deploy.pull("tiny", registry=done.project.registry, runtime="ort0.1", fingerprint=CPU_RUNNER)
    assert all("major.minor must match" in why for _, why in e.value.rejections)


def test_matrix_report_shows_both_cells_passed(done):
    cells = {c["address"]: c for c in matrix.report_cells(done.project)}
    assert set(cells) == {FP32, FP16}
    for cell in cells.values():
        assert cell["status"] == "passed", cell
        assert cell["parity"] is not None and cell["benchmark"] is not None
        assert cell["target"] == f"cpu+ort{ORT_FAMILY}"


def test_matrix_report_of_another_machine_reads_the_registry(done, tmp_path):
    """A fresh cache (nothing built here): the verdicts come from the published artifacts."""
    project = load_project([done.folder / "m.yaml"], cache_dir=tmp_path / "other-cache")
    cells = matrix.report_cells(project)
    assert {c["status"] for c in cells} == {"passed"}
    assert {c["note"] for c in cells} == {"from the registry"}


def test_doctor_says_the_onnxruntime_builder_can_build_here():
    report = doctor.diagnose(CPU_RUNNER)
    assert report["fingerprint"] == CPU_RUNNER.to_json()
    ort = next(b for b in report["builders"] if b["name"] == "onnxruntime")
    assert ort["can_build"] is True and ort["reason"] is None
    assert ort["installed_version"] == ORT and ort["probe_target"] == f"cpu+ort{ORT_FAMILY}"
    assert ort["needs_gpu"] is False
    runtime = next(r for r in report["runtimes"] if r["name"] == "onnxruntime")
    assert runtime["can_run"] is True and runtime["installed_version"] == ORT
    bare = next(b for b in doctor.diagnose(BARE_RUNNER)["builders"] if b["name"] == "onnxruntime")
    assert bare["can_build"] is False and "not installed" in bare["reason"]


def test_registry_list_find_and_show(done):
    reg = done.project.registry
    listed = registry.list_artifacts(reg)
    assert {a.metadata["address"] for a in listed} == {FP32, FP16}
    assert registry.list_artifacts(reg, model="nope") == []
    assert [a.metadata["address"] for a in registry.find(reg, address=FP16)] == [FP16]
    assert {a.metadata["address"] for a in registry.find(reg, model="tiny", version="1.0.0")} == {FP32, FP16}
    assert registry.find(reg, model="tiny", version="9.9.9") == []
    by_address = registry.show(reg, FP32)
    assert by_address.metadata["gates"]["status"] == "passed"
    assert registry.show(reg, by_address.digest).metadata["address"] == FP32
    assert registry.show(reg, by_address.digest.split(":", 1)[1]).digest == by_address.digest
    with pytest.raises(ArtifactNotFoundError):
        registry.show(reg, "tiny/int8/default@cpu+ort0.0")


def test_retention_dry_run_then_delete_after_a_second_version(done, tmp_path):
    """A copy of the round trip's folder publishes version 2.0.0 of the model (other weights, so other keys)."""
    folder = tmp_path / "copy"
    shutil.copytree(done.folder, folder)
    _write_project(folder, MANIFEST.replace('version: "1.0.0"', 'version: "2.0.0"'), seed=1)
    project = _load(folder)
    the_plan = pipeline.plan(project)
    assert _statuses(the_plan) == {FP32: "rebuild", FP16: "rebuild"}
    assert pipeline.build(project, the_plan, only=[FP32], jobs=1, fingerprint=CPU_RUNNER, in_process=True).ok
    assert gating.gate(project, the_plan, only=[FP32], fingerprint=CPU_RUNNER, in_process=True).ok
    assert _by_node(pipeline.publish(project, the_plan, only=[FP32], in_process=True)) == {
        f"publish:{FP32}": "done"}
    reg = project.registry
    assert len(registry.list_artifacts(reg)) == 3

    keep_two = registry.retention(reg, keep_versions=2, delete=False)
    assert keep_two.doomed == () and keep_two.removed == 0
    dry = registry.retention(reg, keep_versions=1, delete=False)
    assert {a.metadata["model"]["version"] for a in dry.doomed} == {"1.0.0"}
    assert {a.metadata["address"] for a in dry.doomed} == {FP32, FP16}
    assert dry.removed == 0 and len(registry.list_artifacts(reg)) == 3  # a dry run deletes nothing
    wet = registry.retention(reg, keep_versions=1, delete=True)
    assert wet.removed == 2
    (left,) = registry.list_artifacts(reg)
    assert (left.metadata["address"], left.metadata["model"]["version"]) == (FP32, "2.0.0")
    # the original round trip's registry is untouched
    assert len(registry.list_artifacts(done.project.registry)) == 2


def test_workflow_plan_ignores_the_registry(done):
    """The committed workflow depends on the manifests only: after publishing, every cell is still `build`."""
    the_plan = ci.workflow_plan(done.project.manifests, max_shards=None)
    assert _statuses(the_plan) == {FP32: "build", FP16: "build"}
    assert the_plan.registry_state == "empty"


def test_workflow_files_are_deterministic_and_name_the_manifest(done, tmp_path):
    files = ci.workflow_files("github", ["m.yaml"], done.folder, tool_spec="trt-orchestrator")
    assert len(files) == 2
    workflow = next(text for path, text in files.items() if path.startswith(".github/workflows/"))
    assert "m.yaml" in workflow
    assert ci.workflow_files("github", [done.folder / "m.yaml"], done.folder, tool_spec="trt-orchestrator") == files
    with pytest.raises(CIError) as e:
        ci.workflow_files("github", [done.folder / "m.yaml"], tmp_path)
    assert "outside the repository" in e.value.message


def test_plan_files_render_the_current_plan(done, tmp_path):
    with pytest.raises(CIError) as e:  # everything is published: nothing for a job to build
        ci.plan_files("k8s-indexed-job", done.project)
    assert "nothing to build" in e.value.message
    _write_project(tmp_path)
    files = ci.plan_files("k8s-indexed-job", _load(tmp_path), output_path="k8s/engines.yaml",
                          repo_url="https://git.example/r.git", revision="0" * 40, image="registry.example/trt:1")
    (path, text), = files.items()
    assert path == "k8s/engines.yaml"
    assert FP32 in text and FP16 in text and "kind: Job" in text
