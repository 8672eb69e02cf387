"""Key completeness, proven (issue 12): ``orchestrator.core.keyspec.KEY_TABLE`` against the schema and the resolver.

1. Agreement: every leaf of ``manifest-v1.schema.json`` is classified and every entry is a schema leaf; a field
   added to a copy of the schema is reported, by path, as unclassified.
2. Property (hypothesis), one test per entry: in real manifests (YAML through the loader, tiny ONNX files, data
   folders of .npy files) the field is set to another valid value drawn from its schema, the manifest is
   resolved again, and exactly the cells the entry names move the key it names:

   - ``build``: the build key of exactly ``rule.build``'s cells (their gate keys with them), and the gate key
     of exactly those plus ``rule.gate``'s cells; no cell comes or goes;
   - ``gate``: no build key; the gate key of exactly ``rule.gate``'s cells;
   - ``address``: the cells differ, and every cell there before and after keeps both keys;
   - ``none``: no key moves and no cell comes or goes.

   A value the loader refuses is skipped (``assume``); each entry must see at least one accepted value, and a
   keyed entry at least one that moved a key.

Cells are identified by (model, precision, profile set, target name): a compute capability change moves a cell
to a new address and still counts as the same cell whose key changed.
"""

from __future__ import annotations

import copy
import hashlib
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import yaml
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from onnx import TensorProto, helper

from orchestrator.app import sources
from orchestrator.core import gatekeys
from orchestrator.core.capabilities import BuilderCapabilities
from orchestrator.core.graph import BuildGraph, Cell
from orchestrator.core.keys import canonical_json
from orchestrator.core.keyspec import KEY_TABLE, Cells, KeyRule, disagreement, mirrored_path, schema_leaves
from orchestrator.core.model import PRECISIONS, Manifest, Model, ParityGate
from orchestrator.core.resolve import ResolveInputs, resolve
from orchestrator.core.toolchain import Provisioning
from orchestrator.digests import DigestCache
from orchestrator.errors import ManifestError
from orchestrator.manifest import load_manifest, schema

# --- agreement ---------------------------------------------------------------------------------------------------


def _assert_agreement(manifest_schema: dict[str, Any]) -> None:
    found = disagreement(manifest_schema)
    assert not found, "the manifest schema and orchestrator/core/keyspec.py disagree:\n" + found.message()


def test_schema_and_key_table_agree():
    _assert_agreement(schema())
    assert len(schema_leaves(schema())) == len(KEY_TABLE)


def test_a_new_unclassified_schema_field_fails_the_agreement_naming_its_path():
    changed = schema()  # a fresh copy: the shipped schema is untouched
    changed["$defs"]["builder_options"]["properties"]["new_knob"] = {"type": "integer", "minimum": 0}
    found = disagreement(changed)
    # builder_options is also the schema of defaults.builder_options: one new property, two new leaves
    assert (found.unclassified, found.stale) == (("defaults.builder_options.new_knob", "targets[].options.new_knob"),
                                                 ())
    with pytest.raises(AssertionError) as failed:
        _assert_agreement(changed)
    assert [line.strip() for line in str(failed.value).splitlines()[:3]] == [
        "the manifest schema and orchestrator/core/keyspec.py disagree:",
        "manifest field defaults.builder_options.new_knob is not classified: add it to _EXPLICIT in "
        "orchestrator/core/keyspec.py as build, gate, address or none (with the reason) - as a defaults field it "
        "mirrors targets[].options.new_knob: classify that one",
        "manifest field targets[].options.new_knob is not classified: add it to _EXPLICIT in "
        "orchestrator/core/keyspec.py as build, gate, address or none (with the reason)"]


def test_a_new_nested_object_is_walked_to_its_leaves():
    changed = schema()
    changed["$defs"]["model"]["properties"]["calibration_cache"] = {
        "type": "object", "properties": {"reuse": {"type": "boolean"}, "tags": {"type": "array", "items": {
            "type": "string"}}, "by_input": {"type": "object", "additionalProperties": {"oneOf": [
                {"type": "integer"}, {"type": "object", "properties": {"scale": {"type": "number"}}}]}}}}
    assert disagreement(changed).unclassified == (
        "models[].calibration_cache.by_input.*", "models[].calibration_cache.by_input.*.scale",
        "models[].calibration_cache.reuse", "models[].calibration_cache.tags")


def test_a_removed_schema_field_leaves_a_stale_entry():
    changed = schema()
    del changed["$defs"]["target"]["properties"]["gpu_match"]
    found = disagreement(changed)
    assert (found.unclassified, found.stale) == ((), ("targets[].gpu_match",))
    assert "classifies targets[].gpu_match, which the schema no longer has" in found.message()


def test_schema_leaves_walk_refs_unions_maps_and_arrays():
    leaves = set(schema_leaves(schema()))
    assert {"models[].calibration.preprocess.std", "targets[].options.extra.*", "transforms.tools.*",
            "defaults.gate.parity.tolerances.*.atol", "models[].precisions[]", "models[].precisions[].name",
            "targets[].options.timing_cache", "targets[].options.timing_cache.pin",
            "models[].inputs.*.profiles.*.opt", "matrix.include[].target", "$schema"} <= leaves
    # arrays of scalars are one leaf, never walked into
    assert not any(p.startswith("models[].inputs.*.shape") and p != "models[].inputs.*.shape" for p in leaves)


def test_every_rule_names_its_cells_as_its_class_says():
    for path, rule in KEY_TABLE.items():
        assert rule.reason, path
        if rule.key == "build":
            assert rule.build is not None, path
        elif rule.key == "gate":
            assert rule.build is None and rule.gate is not None, path
        else:
            assert rule.build is None and rule.gate is None, path


# --- the project: files, fake builders, base manifests -----------------------------------------------------------

EXTRA = {"aux_streams": "auxiliary streams", "note": "a free-form build note"}
TRT_READS = frozenset({"optimization_level", "tiling_level", "workspace_mib", "strongly_typed", "version_compatible",
                       "exclude_lean_runtime", "timing_cache_pin", "extra"})
QDQ = frozenset({"fp16", "bf16", "int8", "fp8"})
BUILDERS = ("tensorrt", "trtexec", "tensorrt-rtx", "onnxruntime", "acme")
SLUGS = {"tensorrt": "trt", "trtexec": "trtexec", "tensorrt-rtx": "rtx", "onnxruntime": "ort", "acme": "acme"}


def capabilities(builder: str, version: str) -> BuilderCapabilities | None:
    """Fake builders covering each capability the resolver reads: which options a builder reads (a set, or None:
    all), platform-specific engines or not, a native calibrator with a cache family (tensorrt 10) and one without
    (``acme``, a third-party builder that calibrates inside its build step)."""
    major = int(version.split(".")[0]) if version.split(".")[0].isdigit() else 0
    gpu = frozenset({"compute_capability", "hardware_compatible"})
    if builder == "tensorrt":
        native = frozenset({"fp16", "bf16", "int8"}) if major < 11 else frozenset()
        return BuilderCapabilities(native=native, via_transform=QDQ, target_kinds=gpu, needs_gpu=True, runs_on="trt",
                                   supports_calibrator=major < 11, reads_options=TRT_READS, extra_options=EXTRA,
                                   calibration_family="tensorrt" if major < 11 else None, pins_timing_cache=True,
                                   weights_modes=frozenset({"embedded", "stripped", "refittable"}),
                                   provisioning=Provisioning(pip_requirements={"12": (f"tensorrt-cu12=={version}",),
                                                                            "13": (f"tensorrt-cu13=={version}",)}))
    if builder == "trtexec":
        return BuilderCapabilities(native=frozenset({"fp16", "bf16"}), via_transform=QDQ, target_kinds=gpu,
                                   needs_gpu=True, runs_on="trt", reads_options=None, extra_options=EXTRA,
                                   pins_timing_cache=True)
    if builder == "tensorrt-rtx":
        return BuilderCapabilities(native=frozenset(), via_transform=QDQ, needs_gpu=False, runs_on="rtx",
                                   target_kinds=frozenset({"compute_capability", "compute_capability_list"}),
                                   reads_options=frozenset({"optimization_level", "tiling_level", "workspace_mib",
                                                            "extra"}), extra_options=EXTRA,
                                   provisioning=Provisioning(pip_requirements={"": (f"tensorrt-rtx=={version}",)},
                                                             container_image="example.test/rtx:1"))
    if builder == "onnxruntime":
        return BuilderCapabilities(native=frozenset(), via_transform=frozenset({"fp16", "int8"}),
                                   target_kinds=frozenset({"cpu", "cuda"}), needs_gpu=False, runs_on="anywhere",
                                   engine_suffix=".onnx", reads_options=frozenset({"ort_optimization", "extra"}),
                                   extra_options=EXTRA, platform_specific=False)
    if builder == "acme":
        return BuilderCapabilities(native=frozenset({"fp16", "int8"}), via_transform=frozenset({"fp16", "int8", "fp8"}),
                                   target_kinds=frozenset({"compute_capability"}), needs_gpu=True, runs_on="acme",
                                   supports_calibrator=True, reads_options=None, extra_options=EXTRA)
    return None


TOLERANCE = "{atol: 0.02, rtol: 0.03, min_cosine: 0.99, max_rel_l2: 0.2, topk: 3, min_topk_agreement: 0.8}"
PREPROCESS = ("{resize: [64, 64], mean: [0.5, 0.4, 0.3], std: [0.2, 0.25, 0.3], scale: 0.5, layout: NCHW, "
              "dtype: float32, color: BGR}")
THRESHOLDS = ("{max_top1_disagreement: 0.05, min_top1_agreement: 0.9, min_top5_agreement: 0.8, min_accuracy: 0.7, "
              "min_text_accuracy: 0.9, max_norm_edit_distance: 0.1, min_label_text_accuracy: 0.6, "
              "max_label_norm_edit_distance: 0.3, min_mask_iou: 0.8, min_box_recall: 0.9, min_box_precision: 0.85, "
              "min_map50: 0.5, min_map50_95: 0.3, min_boundary_f: 0.9, min_pixel_agreement: 0.95, "
              "min_label_mask_iou: 0.6}")
TASK = ("{kind: text-detection, output: y, charset: ../data/charset.txt, blank: 0, threshold: 0.3, box_iou: 0.5, "
        "min_box_side: 3, layout: yolov8, boxes: y, scores: y, classes: y, score_threshold: 0.25, "
        "iou_threshold: 0.45, match_iou: 0.5, max_detections: 300, class_agnostic: false, sigmoid: false, "
        "boundary_tolerance: 2}")
BENCHMARK = ("{warmup: 3, iterations: 50, time_budget_s: 2.5, shapes: [opt, max], max_p95_ms: 12.5, "
             "min_throughput: 30.0, max_regression_pct: 15.0, max_refit_cost_pct: 20.0, enabled: true, blocks: 4, "
             "block_gap_s: 0.5, max_spread_pct: 8.0, max_p99_p50_ratio: 3.0, max_cv_pct: 40.0, "
             "max_device_memory_mib: 512, soak_s: 2.0, max_memory_growth_mib: 16}")
DRIFT = ("{enabled: true, max_latency_regression_pct: 10.0, min_cosine: 0.999, max_rel_l2: 0.01, max_abs_error: 0.5, "
         f"task: {THRESHOLDS}}}")

# Every field of the schema is set somewhere below: in its own entry (models/targets) and as a default some model or
# target takes. det: dynamic, two profile sets, a static second input, every precision form; cls: static, takes the
# default precisions and most of the default gate; seg: takes the whole default gate, random parity data.
BASE_A = f"""
$schema: ../manifest-v1.schema.json
manifest_version: 1
project: keyspec
salt: s1
transforms:
  tools: {{onnx: "1.17.0", onnxruntime: "1.22.1", onnxconverter-common: "1.14.0"}}
defaults:
  precisions: [fp16, {{name: int8, via: transform, keep_io_types: true, op_block_list: [Softmax],
                      calibration_method: minmax, min_quantized_share: 0.75}}]
  builder_options:
    optimization_level: 2
    tiling_level: moderate
    workspace_mib: 2048
    strongly_typed: true
    version_compatible: false
    exclude_lean_runtime: true
    timing_cache: {{pin: true}}
    ort_optimization: basic
    extra: {{aux_streams: 1}}
  gate:
    parity:
      data: {{samples: 3, seed: 7, preprocess: {PREPROCESS}}}
      tolerances: {{fp16: {TOLERANCE}}}
      per_output: {{y: {TOLERANCE}}}
      enabled: true
      task: {THRESHOLDS}
      task_by_precision: {{fp16: {THRESHOLDS}}}
      tensor: true
    benchmark: {BENCHMARK}
    drift: {DRIFT}
    allow_ungated_publish: true
    require_gpu_parity: [fp16, int8]
  runners: {{build: [self-hosted], gate: [self-hosted, gpu]}}
models:
  - name: det
    version: "1.0.0"
    source: {{path: ../models/det.onnx, sha256: "@DET_SHA@"}}
    inputs:
      x:
        shape: [N, 3, H, W]
        dtype: float32
        profiles:
          small: {{min: [1, 3, 64, 64], opt: [2, 3, 128, 128], max: [4, 3, 256, 256]}}
          large: {{min: [1, 3, 256, 256], opt: [1, 3, 512, 512], max: [2, 3, 1024, 1024]}}
      mask: {{shape: [1, 1, 8, 8], dtype: float32}}
    constraints:
      H: {{multiple_of: 32, min: 32, max: 2048}}
      W: {{multiple_of: 32}}
    precisions:
      - fp32
      - {{name: fp16, keep_io_types: false, op_block_list: [Softmax, Resize]}}
      - {{name: int8, via: auto, calibration_method: percentile, min_quantized_share: 0.5}}
      - {{name: fp8, via: transform, calibration_method: entropy}}
    profile_sets: {{small: [small], both: [small, large]}}
    calibration: {{path: ../data/calib, samples: 16, seed: 3, preprocess: {PREPROCESS}}}
    gate:
      parity:
        data: {{path: ../data/parity, samples: 4, labels: ../data/labels.json}}
        tolerances: {{int8: {TOLERANCE}}}
        per_output: {{y: {TOLERANCE}}}
        enabled: true
        task: {THRESHOLDS}
        task_by_precision: {{int8: {THRESHOLDS}}}
        tensor: false
      benchmark: {BENCHMARK}
      drift: {DRIFT}
      allow_ungated_publish: false
      require_gpu_parity: [fp16]
    classifier_outputs: {{y: 5}}
    task: {TASK}
  - name: cls
    version: "3"
    source: {{path: ../models/cls.onnx}}
    inputs: {{x: {{shape: [1, 3, 8, 8], dtype: float16}}}}
    calibration: {{path: ../data/calib}}
    gate: {{parity: {{data: {{seed: 5}}}}}}
  - name: seg
    version: "0.1"
    source: {{path: ../models/seg.onnx}}
    inputs: {{x: {{shape: [1, 4]}}}}
    precisions: [fp32]
targets:
  - name: l4
    builder: tensorrt
    builder_version: "10.13.3.9"
    compute_capability: "8.9"
    platform: linux/x86_64
    gpu_match: sku
    weights: refittable
    runners: {{build: [self-hosted, l4], gate: [self-hosted, l4, gpu]}}
    toolchain: {{kind: pip, cuda: "12", index_url: "https://pypi.nvidia.com/simple"}}
    gate:
      parity:
        data: {{samples: 2, seed: 3}}
        tolerances: {{fp16: {TOLERANCE}}}
        per_output: {{y: {TOLERANCE}}}
        enabled: true
        task: {THRESHOLDS}
        task_by_precision: {{fp16: {THRESHOLDS}}}
        tensor: true
      benchmark: {BENCHMARK}
      drift: {DRIFT}
      allow_ungated_publish: false
      require_gpu_parity: [fp16, int8]
    options:
      optimization_level: 4
      tiling_level: fast
      workspace_mib: 1024
      strongly_typed: false
      version_compatible: false
      exclude_lean_runtime: false
      timing_cache: true
      ort_optimization: all
      extra: {{aux_streams: 2, note: fast}}
  # strongly_typed here too: on l4 (10.13) turning it on leaves det's native int8 unbuildable, which validate refuses
  - {{name: h100, builder: tensorrt, builder_version: "11.0.0.1", compute_capability: "9.0",
     hardware_compatibility: same_compute_capability, options: {{timing_cache: {{pin: true}}, strongly_typed: true}}}}
  - {{name: rtx, builder: tensorrt-rtx, builder_version: "1.2.0.54", compute_capabilities: ["8.6", "8.9"],
     options: {{timing_cache: false}}}}
  - {{name: ort-cpu, builder: onnxruntime, builder_version: "1.23.2", device: cpu, platform: linux/aarch64,
     options: {{ort_optimization: extended, timing_cache: false}}}}
  - {{name: a10-trtexec, builder: trtexec, builder_version: "10.13.3.9", compute_capability: "8.6"}}
  - {{name: acme, builder: acme, builder_version: "2.0", compute_capability: "8.0"}}
matrix:
  exclude:
    - {{precision: fp8, target: ort-cpu}}
    - {{precision: fp8, target: acme}}          # fp8 needs CC >= 8.9: validate refuses it on sm80/sm86
    - {{precision: fp8, target: rtx}}
    - {{precision: fp8, target: a10-trtexec}}
    - {{model: cls, target: rtx}}
    - {{model: det, profile_set: both, target: a10-trtexec}}
    - {{model: det, precision: fp16, target: h100}}
  include:
    - {{model: cls, precision: fp16, profile_set: default, target: rtx}}
    - {{model: seg, target: rtx}}
    - {{precision: fp16, profile_set: small, target: a10-trtexec}}
    # gate settings of the cells a rule names, over l4's own (every key, so each of its fields matters here)
    - model: det
      precision: int8
      profile_set: small
      target: l4
      gate:
        parity:
          data: {{samples: 5, seed: 9}}
          tolerances: {{int8: {TOLERANCE}}}
          per_output: {{y: {TOLERANCE}}}
          enabled: true
          task: {THRESHOLDS}
          task_by_precision: {{int8: {THRESHOLDS}}}
          tensor: true
        benchmark: {BENCHMARK}
        drift: {DRIFT}
        allow_ungated_publish: false
        require_gpu_parity: [fp16]
    - {{model: seg, target: l4, gate: {{parity: {{data: {{seed: 11}}}}}}}}   # random parity data: the seed matters
registry: {{store: oci, url: "registry.example:5000/engines", path: ../artifacts, insecure: true, publish_onnx: true,
           credentials: {{username_secret: REGISTRY_USER, password_secret: REGISTRY_TOKEN,
                          read_username_secret: REGISTRY_READER, read_password_secret: REGISTRY_READ_TOKEN}},
           signing: {{signer: ed25519, key: "env:ORCH_SIGNING_KEY", require: "env:ORCH_SIGNING_PUB"}}}}
runners:
  - {{labels: [self-hosted, l4], compute_capability: "8.9", gpu: NVIDIA L4, tensorrt: "10.13.3.9",
     tensorrt_rtx: "1.2.0.54"}}
  - {{labels: [self-hosted, gpu]}}
  - {{labels: [self-hosted]}}
"""

# What BASE_A must leave to defaults or cannot combine: a model with its own parity preprocessing and one that takes a
# default parity dataset; a default boolean timing cache; models and targets no matrix rule names (renames).
BASE_B = f"""
manifest_version: 1
defaults:
  precisions: [fp32]
  builder_options: {{timing_cache: true}}
  gate: {{parity: {{data: {{path: ../data/parity2, labels: ../data/labels.json}}}}}}
models:
  - name: tiny
    version: "2.0"
    source: {{path: ../models/tiny.onnx}}
    inputs: {{x: {{shape: [N, 3, 16, 16], profiles: {{p: {{min: [1, 3, 16, 16], opt: [2, 3, 16, 16],
                                                          max: [4, 3, 16, 16]}}}}}}}}
    precisions: [fp32, {{name: fp16, keep_io_types: true}}]
    gate: {{parity: {{data: {{path: ../data/parity, preprocess: {PREPROCESS}}}}}}}
  - name: tiny2
    version: "1"
    source: {{path: ../models/cls.onnx}}
    inputs: {{x: {{shape: [1, 4]}}}}
  - name: fetched
    version: "1"
    source: {{url: "https://models.example/cls.onnx", sha256: "@CLS_SHA@"}}
    inputs: {{x: {{shape: [1, 4]}}}}
targets:
  - {{name: l4, builder: tensorrt, builder_version: "10.13.3.9", compute_capability: "8.9",
      toolchain: {{kind: container, image: "nvcr.io/nvidia/tensorrt:25.10-py3"}}}}
  - {{name: rtx, builder: tensorrt-rtx, builder_version: "1.7.1.116", compute_capabilities: ["8.9", "12.0"],
     toolchain: runner, gate: {{parity: {{data: {{path: ../data/parity2, preprocess: {PREPROCESS},
                                                    labels: ../data/labels2.json}}}}}}}}
  - {{name: h100-triton, builder: tensorrt, serve: "triton:25.11", compute_capability: "9.0"}}
  # cpu_match is for device: cpu only (validate refuses it elsewhere): here, so BASE_A's ort-cpu device can move
  - {{name: ort-isa, builder: onnxruntime, builder_version: "1.23.2", device: cpu, cpu_match: isa}}
matrix:
  exclude:
    - {{model: tiny, target: ort-isa}}   # onnxruntime refuses most precisions tiny's may be mutated to
  include:
    - {{model: tiny, target: l4, gate: {{parity: {{data: {{path: ../data/parity2,
         preprocess: {PREPROCESS}, labels: ../data/labels2.json}}}}}}}}
"""

MODEL_FILES = ("../models/det.onnx", "../models/det2.onnx", "../models/cls.onnx", "../models/seg.onnx",
               "../models/tiny.onnx")
DATA_DIRS = ("../data/calib", "../data/calib2", "../data/parity", "../data/parity2")
VERSIONS = ("10.13.3.9", "10.13.2.6", "10.8.0.43", "11.0.0.1", "1.2.0.54", "1.7.1.116", "1.23.2", "2.0")
CCS = ("7.5", "8.0", "8.6", "8.9", "9.0", "12.0")
PLATFORMS = ("linux/x86_64", "linux/aarch64", "windows/x86_64", "linux/aarch64/l4t36.4")
DELETE = object()  # a mutation that removes the field


OUTPUTS = ("y", "z")  # validate holds the output names a task reads to the model's (issue 23.10)


def _onnx(path: Path, producer: str) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    outs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["N", 3, "H", "W"]) for name in OUTPUTS]
    graph = helper.make_graph([helper.make_node("Identity", ["x"], [name]) for name in OUTPUTS], "tiny", [x], outs)
    onnx.save(helper.make_model(graph, producer_name=producer, opset_imports=[helper.make_opsetid("", 17)]), path)


def _npy(folder: Path, values: list[float]) -> None:
    folder.mkdir(parents=True)
    for i, v in enumerate(values):
        np.save(folder / f"sample{i}.npy", np.full((1, 3, 8, 8), v, dtype=np.float32))


CellId = tuple[str, str, str, str]  # model, precision, profile set, target name
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml where installed: most of a mutation's cost


@dataclass
class Base:
    name: str
    data: dict[str, Any]
    manifest: Manifest
    cells: dict[CellId, Cell]

    def __repr__(self) -> str:
        return f"<base manifest {self.name}>"


class Project:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.digests = DigestCache.open(None)
        self.bases: list[Base] = []

    def load(self, data: dict[str, Any], name: str = "mutated.yaml") -> Manifest:
        path = self.root / "manifests" / name
        path.write_text(yaml.dump(data, Dumper=_DUMPER, sort_keys=False), encoding="utf-8")
        return load_manifest(path, capabilities=capabilities, builder_names=BUILDERS, builder_slug=SLUGS.__getitem__)

    def resolve(self, manifest: Manifest) -> BuildGraph:
        # url sources as load_project keys them: by their pin, at their content-addressed place (nothing fetched)
        manifest = sources.localize([manifest], self.root / "cache")[0]
        models = {m.source.path: sources.model_digest(m, self.digests) for m in manifest.models}
        # targets' and matrix rules' own too
        gates = [m.gate for m in manifest.models] + [g for _, g in (*manifest.cell_gates, *manifest.rule_gates)]
        sources_of_data = [m.calibration for m in manifest.models] + [g.parity.data for g in gates]
        data = {path: self.digests.data_digest(path)
                for d in sources_of_data if d is not None for path in (d.path, d.labels) if path is not None}
        return resolve([manifest], ResolveInputs(model_digests=models, data_digests=data), capabilities)

    def base(self, name: str, text: str) -> Base:
        data = yaml.safe_load(text)
        manifest = self.load(data, f"{name}.yaml")
        return Base(name, data, manifest, _by_id(self.resolve(manifest)))


def _by_id(graph: BuildGraph) -> dict[CellId, Cell]:
    return {(c.model, c.precision.name, c.profile_set, c.target.name): c for c in graph.cells}


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Project:
    root = tmp_path_factory.mktemp("keyspec")
    (root / "manifests").mkdir()
    (root / "models").mkdir()
    for name in ("det", "det2", "cls", "seg", "tiny"):
        _onnx(root / "models" / f"{name}.onnx", f"keyspec-{name}")
    _npy(root / "data" / "calib", [0.1, 0.2])
    _npy(root / "data" / "calib2", [0.1, 0.3])  # one sample changed
    _npy(root / "data" / "parity", [0.5, 0.6])
    _npy(root / "data" / "parity2", [0.5, 0.7])
    (root / "data" / "labels.json").write_text('{"a.jpg": 1}')
    (root / "data" / "labels2.json").write_text('{"a.jpg": 2}')
    p = Project(root)
    det_sha = hashlib.sha256((root / "models" / "det.onnx").read_bytes()).hexdigest()
    cls_sha = hashlib.sha256((root / "models" / "cls.onnx").read_bytes()).hexdigest()
    p.bases = [p.base("a", BASE_A.replace("@DET_SHA@", det_sha)), p.base("b", BASE_B.replace("@CLS_SHA@", cls_sha))]
    return p


def test_base_manifests_cover_every_classified_field(project):
    missing = [path for path in KEY_TABLE
               if not any(_occurrences(base.data, path) for base in project.bases)]
    assert missing == [], "set these fields in BASE_A or BASE_B (tests/unit/test_keyspec.py)"


def test_keys_follow_file_content_not_file_paths(project):
    """A path field is keyed by the content it names: the same bytes under another name move nothing."""
    base = project.bases[0]
    (project.root / "models" / "cls-copy.onnx").write_bytes((project.root / "models" / "cls.onnx").read_bytes())
    shutil.copytree(project.root / "data" / "calib", project.root / "data" / "calib-copy")
    shutil.copytree(project.root / "data" / "parity", project.root / "data" / "parity-copy")
    data = copy.deepcopy(base.data)
    data["models"][1]["source"]["path"] = "../models/cls-copy.onnx"
    data["models"][0]["calibration"]["path"] = "../data/calib-copy"
    data["models"][0]["gate"]["parity"]["data"]["path"] = "../data/parity-copy"
    after = _by_id(project.resolve(project.load(data)))
    assert {k: (c.build_key, c.gate_key) for k, c in after.items()} == \
        {k: (c.build_key, c.gate_key) for k, c in base.cells.items()}


# --- occurrences of a path in manifest data ------------------------------------------------------------------------


@dataclass(frozen=True)
class Occurrence:
    loc: tuple[str | int, ...]  # keys and indices from the document root to the value
    stars: tuple[str, ...]  # the map keys the path's `*`s stand for, in order


def _tokens(path: str) -> list[str]:
    out: list[str] = []
    for part in path.split("."):
        while part.endswith("[]"):
            part = part[:-2]
            if part:
                out.append(part)
            out.append("[]")
            part = ""
        if part:
            out.append(part)
    return out


def _occurrences(data: Any, path: str) -> list[Occurrence]:
    tokens = _tokens(path)

    def walk(node: Any, i: int, loc: tuple[str | int, ...], stars: tuple[str, ...]) -> Iterator[Occurrence]:
        if i == len(tokens):
            if not isinstance(node, dict):  # the scalar form of a union (`- fp16`, `timing_cache: true`)
                yield Occurrence(loc, stars)
            return
        t = tokens[i]
        if t == "[]" and isinstance(node, list):
            for j, item in enumerate(node):
                yield from walk(item, i + 1, loc + (j,), stars)
        elif t == "*" and isinstance(node, dict):
            for k, v in node.items():
                yield from walk(v, i + 1, loc + (k,), stars + (k,))
        elif isinstance(node, dict) and t in node:
            yield from walk(node[t], i + 1, loc + (t,), stars)

    return list(walk(data, 0, (), ()))


def _get(data: Any, loc: tuple[str | int, ...]) -> Any:
    for k in loc:
        data = data[k]
    return data


def _set(data: Any, loc: tuple[str | int, ...], value: Any) -> Any:
    parent = _get(data, loc[:-1])
    if value is DELETE:
        del parent[loc[-1]]
    else:
        parent[loc[-1]] = value
    return data


# --- values a field may take: from its schema, or prepared where validity needs the project's knowledge -----------

ASCII = st.characters(min_codepoint=0x21, max_codepoint=0x7E)


def _deref(node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = SCHEMA["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    return node


def _leaf_nodes(node: dict[str, Any], tokens: list[str]) -> list[dict[str, Any]]:
    """The schema nodes a leaf path ends at (one per scalar branch of a union)."""
    node = _deref(node)
    out: list[dict[str, Any]] = []
    for k in ("anyOf", "oneOf", "allOf"):
        for branch in node.get(k) or ():
            out += _leaf_nodes(branch, tokens)
    if not tokens:
        structured = isinstance(node.get("properties"), dict) or isinstance(node.get("additionalProperties"), dict)
        if not structured and not any(k in node for k in ("anyOf", "oneOf", "allOf")):
            out.append(node)
        return out
    t, rest = tokens[0], tokens[1:]
    if t == "[]" and isinstance(node.get("items"), dict):
        out += _leaf_nodes(node["items"], rest)
    elif t == "*" and isinstance(node.get("additionalProperties"), dict):
        out += _leaf_nodes(node["additionalProperties"], rest)
    elif isinstance(node.get("properties"), dict) and t in node["properties"]:
        out += _leaf_nodes(node["properties"][t], rest)
    return out


def _from_schema(node: dict[str, Any]) -> st.SearchStrategy[Any]:
    node = _deref(node)
    if "const" in node:
        return st.just(node["const"])
    if "enum" in node:
        return st.sampled_from(node["enum"])
    types = node.get("type", [])
    types = [types] if isinstance(types, str) else list(types)
    parts: list[st.SearchStrategy[Any]] = []
    for t in types:
        if t == "boolean":
            parts.append(st.booleans())
        elif t == "integer":
            lo = node.get("minimum", -(2 ** 31))
            if "exclusiveMinimum" in node:
                lo = node["exclusiveMinimum"] + 1
            parts.append(st.integers(lo, node.get("maximum", 2 ** 31)))
        elif t == "number":
            lo = max(node.get("minimum", node.get("exclusiveMinimum", -1e6)), -1e6)
            parts.append(st.floats(lo, min(node.get("maximum", 1e6), 1e6), exclude_min="exclusiveMinimum" in node,
                                   allow_nan=False, allow_infinity=False))
        elif t == "string":
            low, high = node.get("minLength", 0), min(node.get("maxLength", 40), 40)
            if "pattern" in node:
                text = st.from_regex(node["pattern"], fullmatch=True, alphabet=ASCII)
                parts.append(text.filter(lambda s, lo=low, hi=node.get("maxLength", 10 ** 6): lo <= len(s) <= hi))
            else:
                parts.append(st.text(ASCII, min_size=low, max_size=max(low, high)))
        elif t == "null":
            parts.append(st.none())
        elif t == "array":
            items = _from_schema(node.get("items", {}))
            low = node.get("minItems", 0)
            parts.append(st.lists(items, min_size=low, max_size=max(low, min(node.get("maxItems", 4), 4)),
                                  unique_by=canonical_json if node.get("uniqueItems") else None))
    assert parts, f"no values for schema node {node}"
    return st.one_of(parts)


def _one_changed(current: list[Any], element: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
    """``current`` with one element replaced."""
    def replace_at(i_value: tuple[int, Any]) -> list[Any]:
        out = list(current)
        out[i_value[0]] = i_value[1]
        return out
    return st.tuples(st.integers(0, len(current) - 1), element).map(replace_at)


def _profile_names(model: dict[str, Any]) -> list[str]:
    return list(dict.fromkeys(p for spec in model["inputs"].values() for p in spec.get("profiles", {})))


Prepared = Callable[[Any, dict[str, Any], Occurrence], st.SearchStrategy[Any]]
_DIMS = st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128, 256, 512])
# Values that need the project's knowledge to be valid (files, names, shapes the checks accept); keyed by the
# model/target path (a defaults path uses its mirror's).
PREPARED: dict[str, Prepared] = {
    "models[].source.path": lambda cur, data, occ: st.sampled_from(MODEL_FILES),
    "models[].source.sha256": lambda cur, data, occ: st.just(DELETE),
    "models[].source.url": lambda cur, data, occ: st.sampled_from(
        ["https://mirror.example/models/cls.onnx", "s3://models/cls.onnx", "gs://models/v2/cls.onnx",
         "hf://acme/cls/cls.onnx"]),
    "models[].calibration.path": lambda cur, data, occ: st.sampled_from(DATA_DIRS),
    "models[].gate.parity.data.path": lambda cur, data, occ: st.sampled_from(DATA_DIRS),
    "models[].gate.parity.data.labels": lambda cur, data, occ: st.sampled_from(
        ["../data/labels.json", "../data/labels2.json"]),
    # the names of the model's outputs: any other is refused at validate
    **{f"models[].task.{key}": (lambda cur, data, occ: st.sampled_from(OUTPUTS))
       for key in ("output", "boxes", "scores", "classes")},
    "models[].inputs.*.shape": lambda cur, data, occ: _one_changed(cur, st.sampled_from(["N", "B", "H", 1, 2, 3, 8])),
    **{f"models[].inputs.*.profiles.*.{w}": (lambda cur, data, occ: _one_changed(cur, _DIMS))
       for w in ("min", "opt", "max")},
    "models[].constraints.*.multiple_of": lambda cur, data, occ: st.sampled_from([1, 2, 4, 8, 16, 32, 64]),
    "models[].constraints.*.min": lambda cur, data, occ: st.integers(1, 64),
    "models[].constraints.*.max": lambda cur, data, occ: st.integers(1024, 2 ** 31 - 1),
    "models[].profile_sets.*": lambda cur, data, occ: st.permutations(
        _profile_names(data["models"][occ.loc[1]])).flatmap(
        lambda names: st.integers(1, len(names)).map(lambda n: names[:n])),
    "targets[].builder": lambda cur, data, occ: st.sampled_from(BUILDERS),
    "targets[].builder_version": lambda cur, data, occ: st.sampled_from(VERSIONS),
    "targets[].compute_capability": lambda cur, data, occ: st.sampled_from(CCS),
    "targets[].compute_capabilities": lambda cur, data, occ: st.lists(st.sampled_from(CCS), min_size=1, max_size=4,
                                                                      unique=True),
    "targets[].platform": lambda cur, data, occ: st.sampled_from(PLATFORMS),
    # the serving stacks whose TensorRT the builder knows (core.serving); the rest are refused by the loader
    "targets[].serve": lambda cur, data, occ: st.sampled_from(
        ["triton:25.01", "triton:25.05", "triton:25.08", "triton:26.03", "ngc-tensorrt:25.01", "triton:24.05"]),
    "targets[].toolchain.cuda": lambda cur, data, occ: st.sampled_from(["12", "13", 13]),
    "runners[].compute_capability": lambda cur, data, occ: st.sampled_from((*CCS, None)),
    **{f"matrix.{s}[].model": lambda cur, data, occ: st.sampled_from([m["name"] for m in data["models"]])
       for s in ("include", "exclude")},
    **{f"matrix.{s}[].target": lambda cur, data, occ: st.sampled_from([t["name"] for t in data["targets"]])
       for s in ("include", "exclude")},
    **{f"matrix.{s}[].precision": lambda cur, data, occ: st.sampled_from(PRECISIONS) for s in ("include", "exclude")},
    **{f"matrix.{s}[].profile_set": lambda cur, data, occ: st.sampled_from(
        sorted({n for m in data["models"] for n in m.get("profile_sets", {})} | {"default"}))
       for s in ("include", "exclude")},
}


def _values(path: str, current: Any, data: dict[str, Any], occ: Occurrence) -> st.SearchStrategy[Any]:
    prepared = PREPARED.get(mirrored_path(path) or path)
    if prepared is not None:
        return prepared(current, data, occ)
    nodes = _leaf_nodes(SCHEMA, _tokens(path))
    assert nodes, f"{path}: no schema node"
    fresh = st.one_of([_from_schema(n) for n in nodes])
    if isinstance(current, list) and current:
        items = [_deref(n)["items"] for n in nodes if isinstance(_deref(n).get("items"), dict)]
        if items:
            return st.one_of(fresh, _one_changed(current, _from_schema(items[0])))
    return fresh


def _meaning(path: str, value: Any) -> str:
    """What a value means to the loader, to tell a real change from a respelling (5 and 5.0, a CC list's order)."""
    if value is DELETE:
        return "(deleted)"
    leaf = (mirrored_path(path) or path).rsplit(".", 1)[-1]
    if leaf in ("compute_capabilities", "op_block_list"):
        return canonical_json(sorted(set(value)))
    nodes = [_deref(n) for n in _leaf_nodes(SCHEMA, _tokens(path))]
    numeric = any(n.get("type") == "number" or (n.get("type") == "array" and _deref(n.get("items", {})).get("type")
                                                == "number") for n in nodes)
    if numeric and not isinstance(value, bool):
        return canonical_json([float(v) for v in value] if isinstance(value, list) else float(value))
    return canonical_json(value)


SCHEMA = schema()


# --- which cells an entry names ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Owner:
    kind: str  # "model", "target" or "manifest"
    name: str = ""
    precision: str | None = None  # for fields of a precisions[] entry: that entry's precision
    selectors: tuple[tuple[str, str], ...] = ()  # a matrix rule's: its model/precision/profile_set/target


def _precision_of(item: Any) -> str:
    return item if isinstance(item, str) else item["name"]


def _inherits(own: dict[str, Any], sub: tuple[str | int, ...]) -> bool:
    """Does an entry without ``sub`` of its own take the default? (``convert.deep_merge``: mappings merge key by key,
    any other own value wins whole.)"""
    node: Any = own
    for k in sub:
        if not isinstance(node, dict):
            return False
        if k not in node:
            return True
        node = node[k]
    return False


def _owners(data: dict[str, Any], occ: Occurrence) -> list[Owner]:
    loc = occ.loc
    if loc[:2] == ("matrix", "include") and loc[3:4] == ("gate",):
        rule = data["matrix"]["include"][loc[2]]
        return [Owner("rule", str(loc[2]), selectors=tuple((k, v) for k, v in rule.items() if k != "gate"))]
    if loc[0] in ("models", "targets"):
        entry = data[loc[0]][loc[1]]
        prec = _precision_of(entry["precisions"][loc[3]]) if loc[2:3] == ("precisions",) and len(loc) > 3 else None
        return [Owner(str(loc[0])[:-1], entry["name"], prec)]
    if loc[0] != "defaults":
        return [Owner("manifest")]
    section = loc[1]
    if section == "precisions":
        prec = _precision_of(data["defaults"]["precisions"][loc[2]])
        return [Owner("model", m["name"], prec) for m in data["models"] if "precisions" not in m]
    if section == "runners":
        return [Owner("target", t["name"]) for t in data["targets"] if "runners" not in t]
    if section == "gate":
        return [Owner("model", m["name"]) for m in data["models"] if _inherits(m, ("gate",) + loc[2:])]
    assert section == "builder_options", loc
    return [Owner("target", t["name"]) for t in data["targets"] if _inherits(t, ("options",) + loc[2:])]


def _matches(cells: Cells, owner: Owner, occ: Occurrence, cell: Cell, after: Cell | None, model: Model) -> bool:
    """Every condition of ``cells`` (see ``keyspec.Cells``) for one cell of the base manifest."""
    if owner.kind == "model" and cell.model != owner.name:
        return False
    if owner.kind == "target" and cell.target.name != owner.name:
        return False
    if owner.kind == "rule" and not _names(dict(owner.selectors), cell):
        return False
    key = occ.stars[-1] if occ.stars else None
    gate = cell.gate or model.gate  # a target's or a rule's own gate over the model's
    caps = capabilities(cell.target.builder, cell.target.builder_version)
    assert caps is not None
    checks = [
        cells.precision != "entry" or cell.precision.name == owner.precision,
        cells.precision != "key" or cell.precision.name == key,
        not cells.profile_in_set or key in [p.name for p in cell.profiles],
        not cells.profile_set or cell.profile_set == key,
        not cells.calibrated or (cell.precision.name in ("int8", "fp8") and cell.route in ("native", "transform")),
        not cells.transformed or cell.route == "transform",
        not cells.route_changes or (after is not None and after.route != cell.route),
        not cells.input_not_in_profile or not cell.profiles or key not in cell.profiles[0].shapes,
        cells.reads_option is None or caps.reads_options is None or cells.reads_option in caps.reads_options,
        not cells.platform_specific or caps.platform_specific,
        not cells.gates or any(getattr(gate, g).enabled for g in cells.gates),
        cells.parity_data is None or (gate.parity.data.path is None) == (cells.parity_data == "random"),
    ]
    return all(checks)


def _names(rule: dict[str, Any], cell: Cell) -> bool:
    """Does a matrix rule name this cell (a field it leaves out names any)?"""
    have = {"model": cell.model, "precision": cell.precision.name, "profile_set": cell.profile_set,
            "target": cell.target.name}
    return all(rule.get(k) in (None, v) for k, v in have.items())


def _gate_sub(loc: tuple[str | int, ...]) -> tuple[str, tuple[str | int, ...]] | None:
    """(whose, the path below `gate`) of a gate field of the defaults, a model, a target or a matrix rule (None:
    not a gate field)."""
    if loc[:2] == ("defaults", "gate"):
        return "model", loc[2:]
    if loc[0] in ("models", "targets") and loc[2:3] == ("gate",):
        return str(loc[0])[:-1], loc[3:]
    if loc[:2] == ("matrix", "include") and loc[3:4] == ("gate",):
        return "rule", loc[4:]
    return None


def _overridden(base: Base, occ: Occurrence, cell: Cell) -> bool:
    """Is the gate field at ``occ`` overridden, for this cell, by a more specific `gate:` that sets it (the order:
    defaults < model < target < matrix rules in manifest order)?"""
    found = _gate_sub(occ.loc)
    if found is None:
        return False
    whose, sub = found
    target = next(t for t in base.data["targets"] if t["name"] == cell.target.name)
    if whose == "model" and "gate" in target and not _inherits(target["gate"], sub):
        return True
    later = [r for i, r in enumerate((base.data.get("matrix") or {}).get("include", ()))
             if "gate" in r and (whose != "rule" or i > int(occ.loc[2]))]
    return any(_names(r, cell) and not _inherits(r["gate"], sub) for r in later)


def _expected(cells: Cells | None, owners: list[Owner], occ: Occurrence, base: Base,
              after: dict[CellId, Cell]) -> set[CellId]:
    if cells is None:
        return set()
    models = {m.name: m for m in base.manifest.models}
    return {k for k, c in base.cells.items() if not _overridden(base, occ, c)
            and any(_matches(cells, o, occ, c, after.get(k), models[c.model]) for o in owners)}


def _diff(moved: set[CellId], want: set[CellId]) -> str:
    return f"moved but not named {sorted(moved - want)}; named but not moved {sorted(want - moved)}"


# --- the property ------------------------------------------------------------------------------------------------

EXAMPLES = {"build": 3, "gate": 2, "address": 2, "none": 1}  # accepted values per place the field is set
REFUSALS = 8  # values the loader may refuse per place before it counts as a place with no valid other value


def _check_place(path: str, rule: KeyRule, base: Base, occ: Occurrence, project: Project,
                 outcomes: list[bool], *, shrink: bool = True) -> None:
    """Mutate ``path`` where ``occ`` sets it in ``base``; ``outcomes`` gets, per accepted value, whether it moved
    the entry's key (address: whether the cells differ)."""
    refused = [0]

    @settings(max_examples=EXAMPLES[rule.key], deadline=None, database=None,
              phases=tuple(Phase) if shrink else (Phase.generate,),
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(st.data())
    def check(draw):
        current = _get(base.data, occ.loc)
        value = draw.draw(_values(path, current, base.data, occ), label="value")
        assume(_meaning(path, value) != _meaning(path, current))
        if refused[0] >= REFUSALS:
            return  # e.g. a name matrix rules refer to: every other value is refused; other places cover it
        data = _set(copy.deepcopy(base.data), occ.loc, value)
        try:
            after = _by_id(project.resolve(project.load(data)))
        except ManifestError:
            refused[0] += 1
            assume(False)  # a value the loader refuses is no mutation of a valid manifest
            return
        before = base.cells
        moved_build = {k for k in before.keys() & after.keys() if before[k].build_key != after[k].build_key}
        moved_gate = {k for k in before.keys() & after.keys() if before[k].gate_key != after[k].gate_key}
        where = f"{path} at {'/'.join(map(str, occ.loc))} in base {base.name}: {current!r} -> {value!r}"
        if rule.key == "address":
            # a rule with `gate:` also names the cells its gate applies to: theirs, before or after, may move
            rule_entry = _get(data, occ.loc[:3]) if occ.loc[:2] == ("matrix", "include") else {}
            named = ({k for k, c in (*before.items(), *after.items()) if _names(_get(base.data, occ.loc[:3]), c)
                      or _names(rule_entry, c)} if "gate" in rule_entry else set())
            assert moved_build == set() and moved_gate <= named, f"{where} moved keys of cells it does not name"
            outcomes.append(before.keys() != after.keys() or bool(moved_gate))
            return
        assert before.keys() == after.keys(), f"{where} added or removed cells: " \
            f"{sorted(before.keys() ^ after.keys())}"
        owners = _owners(base.data, occ)
        want_build = _expected(rule.build, owners, occ, base, after)
        want_gate = want_build | _expected(rule.gate, owners, occ, base, after)
        assert moved_build == want_build, f"{where}: build keys moved on the wrong cells: " + _diff(moved_build,
                                                                                                   want_build)
        assert moved_gate == want_gate, f"{where}: gate keys moved on the wrong cells: " + _diff(moved_gate, want_gate)
        outcomes.append(bool(moved_gate))

    try:
        check()
    except Unsatisfiable:
        pass  # no valid other value here (e.g. a precision name every other precision would clash with)


@pytest.mark.parametrize("path", sorted(KEY_TABLE))
def test_mutating_a_field_moves_exactly_the_keys_it_is_classified_for(path, project):
    if path == "manifest_version":
        pytest.skip("a const: the schema allows no other value to mutate it to")
    _check_entry(path, project)


def _check_entry(path: str, project: Project, *, shrink: bool = True) -> None:
    rule = KEY_TABLE[path]
    places = [(base, occ) for base in project.bases for occ in _occurrences(base.data, path)]
    assert places, f"no base manifest sets {path}"
    outcomes: list[bool] = []
    for base, occ in places:  # every place: a field may matter in one (a model's dataset) and not in another
        _check_place(path, rule, base, occ, project, outcomes, shrink=shrink)
    assert outcomes, f"no accepted mutation of {path}"
    if rule.key in ("build", "gate"):
        assert any(outcomes), f"no mutation of {path} moved a key: make a base manifest where it matters"
    elif rule.key == "address":
        assert any(outcomes), f"no mutation of {path} named other cells"


def test_the_property_catches_a_field_that_stops_reaching_its_key(project, monkeypatch):
    """Not a test that cannot fail: with the manifest's parity tolerances no longer reaching gate keys (the defaults
    only), the tolerance entry fails."""
    real = gatekeys.resolve_tolerance

    def defaults_only(gate: Any, precision: str, output: str, *, tf32: bool = False) -> Any:
        return real(ParityGate(), precision, output, tf32=tf32)

    monkeypatch.setattr(gatekeys, "resolve_tolerance", defaults_only)
    gapped = Project(project.root)
    gapped.bases = [Base(b.name, b.data, b.manifest, _by_id(gapped.resolve(b.manifest))) for b in project.bases]
    with pytest.raises(AssertionError, match="gate keys moved on the wrong cells"):
        _check_entry("models[].gate.parity.tolerances.*.atol", gapped, shrink=False)
