"""The upgrade rehearsal on the fleet manifest (issue 26.2), plans only: its TensorRT engines cannot be built here,
so the engines judged are the cells as `plan` would build them (no record is faked).

Shown, for Triton 25.11 (TensorRT 10.13.3.9) -> 26.03 (10.14.1.48):
- the lists by target: the exact-version T4/A10/L4 engines stop loading, the Ampere+ version-compatible ones keep
  loading (10.13 -> 10.14, same major), the H100 TensorRT 11.1 ones load on neither, RTX and onnxruntime engines
  are on another runtime (the serving table says only which TensorRT a stack ships);
- engine by engine, each answer equals what the engine's own runtime plugin's `can_run` says for the old and the
  new TensorRT (no false positive: nothing listed as stopping loads on 26.03, nothing kept fails there);
- the rebuild set's build keys are those `plan` computes for a copy of the fleet whose T4/A10/L4 targets declare
  `serve: "triton:26.03"`;
- JetPack rows: 6.2 -> 7.0 moves TensorRT 10.3.0.30 -> 10.13.3.9 (and L4T R36 -> R38 with --platform)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import plugins
from orchestrator.app.pipeline import engine_probe
from orchestrator.app.project import load_project
from orchestrator.app.upgrade import upgrade_check
from orchestrator.core.fingerprint import InstalledRuntime, RunnerFingerprint
from orchestrator.errors import UsageError

REPO = Path(__file__).resolve().parents[2]
FLEET = REPO / "manifests" / "fleet.yaml"
MODELS = REPO / ".cache" / "models"
OLD, NEW = "10.13.3.9", "10.14.1.48"
EXACT = {"t4-trt10", "a10-trt10", "l4-trt10"}


def _need_models() -> None:
    if not (MODELS / "ch_PP-OCRv4_det_infer.onnx").is_file():
        pytest.skip(f"the fleet's models are not in {MODELS}: python scripts/fetch_models.py")


def fleet_copy(dest: Path, registry: Path, edit=lambda text: text) -> Path:
    """manifests/fleet.yaml with absolute paths and its own registry."""
    text = FLEET.read_text().replace("../.cache/models", str(MODELS))
    text = text.replace("path: data/calib-det", f"path: {REPO / 'manifests' / 'data' / 'calib-det'}")
    text = text.replace("path: ../artifacts", f"path: {registry}").replace("$schema: ../", f"$schema: {REPO}/")
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / "fleet.yaml"
    path.write_text(edit(text))
    return path


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    _need_models()
    root = tmp_path_factory.mktemp("fleet-upgrade")
    project = load_project([fleet_copy(root, root / "registry")], cache_dir=root / "cache")
    return root, project, upgrade_check(project, from_="triton:25.11", to="triton:26.03")


def test_the_lists_by_target(fleet):
    _, project, report = fleet
    by_target: dict[str, set[str]] = {}
    for e in report.engines:
        by_target.setdefault(e.target, set()).add(e.status)
    assert by_target == {"t4-trt10": {"stops"}, "a10-trt10": {"stops"}, "l4-trt10": {"stops"},
                         "ampere-plus-trt10": {"keeps"}, "h100-trt11": {"never"},
                         "rtx-desktop": {"other-runtime"}, "cpu-x86": {"other-runtime"}}
    # every cell the fleet plans (none blocked here is left out) is judged once, as planned
    planned = {c.address for c in project.graph.cells if not c.blocked}
    assert sorted(e.address for e in report.engines) == sorted(planned)
    assert {e.source for e in report.engines} == {"planned"}
    stops = report.of("stops")
    assert len(stops) == 36 and len(report.of("keeps")) == 13 and len(report.of("never")) == 11
    assert all("loads only on the exact version that built it" in e.reason for e in stops)
    assert report.breaking


def _fp(gpu: str, version: str) -> RunnerFingerprint:
    fp = RunnerFingerprint.parse_gpu_spec(gpu, RunnerFingerprint(os="linux", arch="x86_64"))
    return fp.with_runtime("tensorrt", InstalledRuntime(version))


def test_each_answer_is_the_runtimes_own(fleet):
    """Engine by engine: the rehearsal's old/new answers are the tensorrt runtime's can_run for 10.13.3.9 and
    10.14.1.48 on each GPU judged, and the status follows from them (no false positive)."""
    _, project, report = fleet
    cells = {c.address: c for c in project.graph.cells}
    checked = 0
    for e in report.engines:
        if e.status == "other-runtime":
            assert e.runtime != "tensorrt" and not e.gpus
            continue
        engine = engine_probe(cells[e.address])
        runtime = plugins.runtime_for(engine)
        for a in e.gpus:
            old, new = runtime.can_run(engine, _fp(a.gpu, OLD)), runtime.can_run(engine, _fp(a.gpu, NEW))
            assert (a.old_ok, a.new_ok) == (old.ok, new.ok), e.address
            checked += 1
        if e.status == "stops":
            assert any(a.old_ok and not a.new_ok for a in e.gpus)
        if e.status == "keeps":
            assert all(a.new_ok for a in e.gpus if a.old_ok)
    assert checked == 36 + 13 + 11


def test_the_rebuild_set_is_what_plan_says_for_the_fleet_on_triton_26_03(fleet, tmp_path):
    root, _, report = fleet

    def serve_2603(text: str) -> str:
        for name in sorted(EXACT):
            head = f"  - name: {name}\n    builder: tensorrt\n"
            text = text.replace(head + f'    builder_version: "{OLD}"\n', head + '    serve: "triton:26.03"\n')
        return text

    moved = load_project([fleet_copy(tmp_path, root / "registry", serve_2603)], cache_dir=root / "cache")
    assert {t.name: t.builder_version for t in moved.manifests[0].targets if t.name in EXACT} == \
        dict.fromkeys(EXACT, NEW)
    declared = {c.address: c.build_key for c in moved.graph.cells if c.target.name in EXACT}
    assert {r.entry.address: r.entry.build_key for r in report.rebuild} == declared
    assert {r.entry.status for r in report.rebuild} == {"build"}
    assert {r.replaces for r in report.rebuild} == {e.address for e in report.of("stops")}
    assert all(r.estimate.basis == "no record" for r in report.rebuild)  # nothing of the fleet is published


def test_from_triton_25_01_nothing_of_the_fleet_loads_there(fleet):
    _, project, _ = fleet
    report = upgrade_check(project, from_="triton:25.01", to="triton:26.03")
    assert not report.of("stops") and not report.of("keeps") and not report.rebuild and not report.breaking
    assert all("10.8.0.43" in e.reason for e in report.of("never"))  # 25.01 ships 10.8.0.43


def test_different_runtimes_are_refused(fleet):
    _, project, _ = fleet
    with pytest.raises(UsageError, match="name different runtimes"):
        upgrade_check(project, from_="ort1.22", to="triton:26.03")


JETSON = """\
manifest_version: 1
project: edge
models:
  - name: det
    version: "1.0.0"
    source: {path: MODEL}
    inputs:
      x:
        shape: [N, 3, H, W]
        profiles:
          default: {min: [1, 3, 320, 320], opt: [1, 3, 640, 640], max: [1, 3, 960, 960]}
    constraints: {H: {multiple_of: 32}, W: {multiple_of: 32}}
    precisions: [fp16]
targets:
  - name: orin
    builder: tensorrt
    serve: "jetpack:6.2"
    compute_capability: "8.7"
    platform: linux/aarch64/l4t36.4
registry: {store: local, path: REGISTRY}
"""


def test_jetpack_6_2_to_7_0(tmp_path):
    _need_models()
    path = tmp_path / "edge.yaml"
    path.write_text(JETSON.replace("MODEL", str(MODELS / "ch_PP-OCRv4_det_infer.onnx"))
                    .replace("REGISTRY", str(tmp_path / "registry")))
    project = load_project([path], cache_dir=tmp_path / "cache")
    report = upgrade_check(project, from_="jetpack:6.2", to="jetpack:7.0", platform="linux/aarch64/l4t38.2")
    (engine,) = report.engines
    assert engine.status == "stops" and engine.builder_version == "10.3.0.30"
    (answer,) = engine.gpus
    assert answer.old_ok and not answer.new_ok and answer.gpu == "sm87"
    (rebuild,) = report.rebuild
    assert rebuild.entry.address == "det/fp16/default@sm87-linux-aarch64-l4t38.2+trt10.13"
    # the key plan computes for the target declaring JetPack 7.0 on L4T R38.2
    declared = JETSON.replace('"jetpack:6.2"', '"jetpack:7.0"').replace("l4t36.4", "l4t38.2")
    path.write_text(declared.replace("MODEL", str(MODELS / "ch_PP-OCRv4_det_infer.onnx"))
                    .replace("REGISTRY", str(tmp_path / "registry")))
    (cell,) = load_project([path], cache_dir=tmp_path / "cache").graph.cells
    assert (cell.address, cell.build_key) == (rebuild.entry.address, rebuild.entry.build_key)
    # the same engine on JetPack 7.0 without moving L4T: the TensorRT version alone stops it
    same_l4t = upgrade_check(project, from_="jetpack:6.2", to="jetpack:7.0")
    assert "built with TensorRT 10.3.0.30" in same_l4t.engines[0].reason
    assert same_l4t.rebuild[0].entry.address == "det/fp16/default@sm87-linux-aarch64-l4t36.4+trt10.13"
