"""fp8 cells on compute capabilities without FP8 (< 8.9): the planner blocks them with the CC named, and
`validate` should refuse them with a location (the TensorRT-RTX builder itself refuses: "Cannot compile for
target(s) sm86, because the model contains HW-specific datatypes: fp8_e4m3", docs/fp8-modelopt.md).

The builder knowledge is the real tensorrt-rtx plugin's ``capabilities`` (pure: nothing heavy is imported)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.core.resolve import ResolveInputs, resolve
from orchestrator.errors import ManifestError
from orchestrator.manifest import load_manifest
from tests.conftest import make_tiny_model
from trt_orchestrator_plugins.builders.tensorrt_rtx import builder as rtx

MANIFEST = """\
manifest_version: 1
project: fp8
models:
  - name: cls
    version: "1"
    source: {path: cls.onnx}
    inputs:
      x:
        shape: [N, 3, 224, 224]
        profiles: {default: {min: [1, 3, 224, 224], opt: [1, 3, 224, 224], max: [4, 3, 224, 224]}}
    precisions:
      - {name: fp8, via: transform, calibration_method: entropy}
    calibration: {path: calib, samples: 2}
targets:
  - name: rtx-sm89-sm120
    builder: tensorrt-rtx
    builder_version: "1.7.1.116"
    compute_capabilities: ["8.9", "12.0"]
  - name: LOW_NAME
    builder: tensorrt-rtx
    builder_version: "1.7.1.116"
    compute_capabilities: LOW_CCS
registry: {store: local, path: artifacts}
"""


def _caps(name: str, version: str):
    return rtx.capabilities(version) if name == rtx.name else None


def _write(tmp_path: Path, low_name: str, low_ccs: list[str]) -> Path:
    make_tiny_model(tmp_path / "cls.onnx")  # validate reads the model: a real one
    (tmp_path / "calib").mkdir()
    path = tmp_path / "fp8.yaml"
    path.write_text(MANIFEST.replace("LOW_NAME", low_name).replace("LOW_CCS", str(low_ccs).replace("'", '"')))
    return path


def _typed_without_checks(tmp_path: Path, low_name: str, low_ccs: list[str]):
    """The manifest with the low target swapped in after loading one that validates (a hand-made Manifest)."""
    good = _load(_write(tmp_path, low_name, ["8.9"]))
    low = replace(good.targets[1], compute_capabilities=tuple(low_ccs))
    return replace(good, targets=(good.targets[0], low))


def _load(path: Path):
    return load_manifest(path, capabilities=_caps, builder_names=(rtx.name,), builder_slug=lambda name: rtx.slug)


@pytest.mark.parametrize(("low_name", "low_ccs", "named"), [
    ("rtx-sm86", ["8.6"], "sm86"),
    ("rtx-sm80-sm89", ["8.0", "8.9"], "sm80"),  # one CC without FP8 blocks the whole multi-CC engine
])
def test_plan_blocks_fp8_below_cc_8_9_and_names_the_cc(tmp_path, low_name, low_ccs, named):
    # validate refuses this manifest (below); the resolver still blocks such a cell of a Manifest made without it
    manifest = _typed_without_checks(tmp_path, low_name, low_ccs)
    model = manifest.models[0].source.path
    graph = resolve([manifest], ResolveInputs(model_digests={model: "sha256:" + "0" * 64},
                                              transforms=frozenset({"fp8-qdq"})), _caps)
    blocked = {c.target.name: c.blocked for c in graph.cells}
    assert blocked == {"rtx-sm89-sm120": None,
                       low_name: f"fp8 needs compute capability >= 8.9; target has {named}"}


def test_plan_names_the_missing_fp8_transform_on_capable_targets(tmp_path):
    manifest = _typed_without_checks(tmp_path, "rtx-sm86", ["8.6"])
    model = manifest.models[0].source.path
    graph = resolve([manifest], ResolveInputs(model_digests={model: "sha256:" + "0" * 64},
                                              transforms=frozenset({"fp16", "bf16", "int8-qdq"})), _caps)
    blocked = {c.target.name: c.blocked for c in graph.cells}
    # the CC reason wins where both apply: installing the transform would not make an sm86 fp8 engine
    assert blocked["rtx-sm86"] == "fp8 needs compute capability >= 8.9; target has sm86"
    assert "fp8-qdq" in str(blocked["rtx-sm89-sm120"])


def test_validate_refuses_fp8_below_cc_8_9_with_a_location(tmp_path):
    path = _write(tmp_path, "rtx-sm86", ["8.6"])
    with pytest.raises(ManifestError) as caught:
        _load(path)
    (problem,) = caught.value.problems
    assert problem.file == str(path) and problem.line is not None
    assert problem.path.startswith("models[0].precisions[0]") or problem.path.startswith("targets[1]")
    assert "8.9" in problem.message and "sm86" in problem.message and "rtx-sm86" in problem.message
