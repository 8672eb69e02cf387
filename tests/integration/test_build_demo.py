"""`orchestrate build` on the demo manifest, for real: TensorRT-RTX AOT engines for several compute capabilities
and onnxruntime engines, fp32 and fp16 via the transform; reuse, targeted rebuild, SIGKILL resume, keep-going."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from .conftest import REPO, run_json, write_demo_copy

pytestmark = pytest.mark.integration


def _by_node(summary: dict) -> dict[str, dict]:
    return {n["node"]: n for n in summary["nodes"]}


def test_demo_builds_real_rtx_and_ort_engines(demo_build):
    _, cache, summary = demo_build
    assert summary["ok"], summary
    nodes = _by_node(summary)
    builds = {k: v for k, v in nodes.items() if k.startswith("build:")}
    rtx = {k: v for k, v in builds.items() if "+rtx" in k}
    ort = {k: v for k, v in builds.items() if "+ort" in k}
    # >= 2 real models x 2 compute-capability targets x fp32/fp16
    for model in ("ocr-det", "ocr-rec"):
        for precision in ("fp32", "fp16"):
            for where in ("sm86+rtx1.7", "sm89-sm120+rtx1.7"):
                assert rtx[f"build:{model}/{precision}/default@{where}"]["status"] == "done"
    assert all(v["status"] == "done" for v in ort.values()) and len(ort) >= 4
    for node in rtx.values():
        engine = Path(node["dir"]) / node["data"]["engine"]
        assert engine.read_bytes()[:4] == b"vtrt"  # a TensorRT-RTX plan, not a placeholder
        assert node["data"]["engine_size"] == engine.stat().st_size > 1_000_000
    # fp16 really converted the weights: its plan is clearly smaller than fp32's
    fp32 = rtx["build:ocr-rec/fp32/default@sm86+rtx1.7"]["data"]["engine_size"]
    fp16 = rtx["build:ocr-rec/fp16/default@sm86+rtx1.7"]["data"]["engine_size"]
    assert fp16 < 0.75 * fp32
    # one fp16 transform per model, shared by every target
    transforms = [k for k in nodes if k.startswith("transform:")]
    assert len(transforms) == len({k.split("/")[0] for k in transforms}) == 3


def test_second_run_builds_nothing(demo_build):
    manifest, cache, _ = demo_build
    summary, _ = run_json("build", str(manifest), cache=cache)
    assert summary["ok"]
    assert set(summary["counts"]) == {"cached"}, summary["counts"]


def test_deleting_one_engine_rebuilds_only_that_one(demo_build):
    manifest, cache, first = demo_build
    node = _by_node(first)["build:ocr-det/fp16/default@sm89-sm120+rtx1.7"]
    (Path(node["dir"]) / node["data"]["engine"]).unlink()
    summary, _ = run_json("build", str(manifest), cache=cache)
    done = [n["node"] for n in summary["nodes"] if n["status"] == "done"]
    assert done == ["build:ocr-det/fp16/default@sm89-sm120+rtx1.7"]


def test_sigkill_mid_build_resumes_without_redoing_finished_nodes(tmp_path, demo_models):
    manifest = write_demo_copy(tmp_path / "manifests")
    cache = tmp_path / "cache"
    env = {**os.environ, "ORCHESTRATE_CACHE": str(cache)}
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "build", str(manifest), "-j", "2", "-q"],
                            env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    build_dir = cache / "nodes" / "build"
    deadline = time.monotonic() + 300
    # kill once a few builds finished and others are in flight
    while time.monotonic() < deadline and proc.poll() is None:
        finished = list(build_dir.glob("*/result.json")) if build_dir.exists() else []
        if len(finished) >= 3:
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the build finished before it could be killed; the test needs a longer build"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    finished_before = {p.parent.name for p in build_dir.glob("*/result.json")}
    # nothing half-written where results live: every node dir is complete
    for node_dir in (cache / "nodes").glob("*/*"):
        result = json.loads((node_dir / "result.json").read_text())
        for rel, size in result["files"].items():
            assert (node_dir / rel).stat().st_size == size
    summary, _ = run_json("build", str(manifest), cache=cache)
    assert summary["ok"], summary
    by_key = {Path(n["dir"]).name: n["status"] for n in summary["nodes"] if n["node"].startswith("build:")}
    assert finished_before, "no build had finished"
    for key in finished_before:
        assert by_key[key] == "cached"
    assert any(status == "done" for status in by_key.values())
    assert list((cache / "tmp").iterdir()) == []  # the killed run's temp dirs are gone


def _ort_only_quantized_model(path: Path) -> None:
    """ConvInteger + DynamicQuantizeLinear: onnxruntime-only ops the TensorRT ONNX parser rejects."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])
    y = helper.make_tensor_value_info("y", TensorProto.INT32, [1, 4, 30, 30])
    w = helper.make_tensor("w", TensorProto.UINT8, [4, 3, 3, 3], [1] * 108)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"], name="quantize_x"),
             helper.make_node("ConvInteger", ["xq", "w", "xz"], ["y"], name="conv_int")]
    graph = helper.make_graph(nodes, "ort_only", [x], [y], initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=9)
    onnx.save(model, path)


def test_unparseable_model_fails_its_node_and_keep_going_builds_the_rest(tmp_path, demo_models):
    bad = tmp_path / "ort_only.onnx"
    _ort_only_quantized_model(bad)

    def add_bad_model(text: str) -> str:
        block = f"""
  - name: broken
    version: "1.0.0"
    source: {{path: {bad}}}
    precisions: [fp32]
    inputs:
      x: {{shape: [1, 3, 32, 32]}}
"""
        text = text.replace("\nmodels:\n", "\nmodels:\n" + block, 1)
        return text

    manifest = write_demo_copy(tmp_path / "manifests", text_edit=add_bad_model)
    cache = tmp_path / "cache"
    only = ["broken/fp32/default@sm86+rtx1.7", "orientation/fp32/default@sm86+rtx1.7",
            "orientation/fp32/default@cpu+ort1.31"]
    args = ["build", str(manifest), "--keep-going"] + [a for o in only for a in ("--only", o)]
    summary, proc = run_json(*args, cache=cache, check=False)
    assert proc.returncode == 1
    nodes = _by_node(summary)
    failed = nodes["build:broken/fp32/default@sm86+rtx1.7"]
    assert failed["status"] == "failed"
    # the parser's node-level message: node name, operator, description
    assert "conv_int" in failed["reason"] and "ConvInteger" in failed["reason"]
    assert nodes["build:orientation/fp32/default@sm86+rtx1.7"]["status"] == "done"
    assert nodes["build:orientation/fp32/default@cpu+ort1.31"]["status"] == "done"


def test_ctrl_c_stops_cleanly(tmp_path, demo_models):
    """SIGINT to the process group, as a terminal's Ctrl-C sends it: exit 130, workers gone, nothing partial."""
    manifest = write_demo_copy(tmp_path / "manifests")
    cache = tmp_path / "cache"
    env = {**os.environ, "ORCHESTRATE_CACHE": str(cache)}
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "build", str(manifest), "-j", "2", "-q"],
                            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if len(list((cache / "nodes" / "build").glob("*/result.json"))) >= 1:
            break
        time.sleep(0.2)
    assert proc.poll() is None
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert "Traceback" not in out
    assert list((cache / "tmp").iterdir()) == []
    for node_dir in (cache / "nodes").glob("*/*"):
        assert (node_dir / "result.json").exists()
