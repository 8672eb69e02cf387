"""Real parity and benchmark gates on the demo matrix's onnxruntime engines, a deliberately broken engine that
fails parity with its numbers and exit code 3, RTX engines pending on this CPU runner, and the report of the
demo run rendered in headless Chromium."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from .conftest import REPO, run_json, write_demo_copy

pytestmark = pytest.mark.integration

CPU_CELLS = [f"{m}/{p}/default@cpu+ort1.31" for m in ("ocr-det", "ocr-rec", "orientation") for p in ("fp32", "fp16")]


@pytest.fixture(scope="module")
def gated(demo_gated):
    """The demo built and gated (once for the test run, shared by every worker: conftest.gated_demo_copy)."""
    manifest, cache, record = demo_gated
    assert record["returncode"] == 0, record["output"]
    return manifest, cache, record["summary"]


def _report(summary: dict, node: str) -> dict:
    entry = next(n for n in summary["nodes"] if n["node"] == node)
    assert entry["status"] in ("done", "cached"), entry
    return json.loads((Path(entry["dir"]) / entry["data"]["verdict"]).read_text())


def test_fp32_engines_pass_tight_tolerances(gated):
    _, _, summary = gated
    for address in CPU_CELLS:
        if "/fp32/" not in address:
            continue
        report = _report(summary, f"gate:parity:{address}")
        assert report["status"] == "passed"
        for verdict in report["profiles"].values():
            for case in verdict["cases"]:
                for out in case["outputs"]:
                    assert out["tolerance"]["atol"] <= 1e-4 and out["tolerance"]["rtol"] <= 1e-3
                    assert out["status"] == "passed"


def test_fp16_converted_engines_pass_fp16_tolerances(gated):
    _, _, summary = gated
    for address in CPU_CELLS:
        if "/fp16/" not in address:
            continue
        report = _report(summary, f"gate:parity:{address}")
        assert report["status"] == "passed", json.dumps(report)[:2000]
        outputs = [o for v in report["profiles"].values() for c in v["cases"] for o in c["outputs"]]
        assert all(o["tolerance"]["atol"] == pytest.approx(1e-2) for o in outputs)
        # really fp16: not bit-identical to the fp32 reference
        assert max(o["max_abs_error"] for o in outputs) > 0


def test_benchmarks_recorded_for_cpu_engines(gated):
    _, _, summary = gated
    for address in CPU_CELLS:
        report = _report(summary, f"gate:benchmark:{address}")
        assert report["status"] == "passed"
        shape = report["verdict"]["shapes"][0]
        assert shape["label"] == "opt"
        stats = shape["compute"]
        assert 0 < stats["p50_ms"] <= stats["p95_ms"] <= stats["p99_ms"]
        # 20 iterations over the default 5 timing blocks, at least 5 each (issue 11, benchmark noise)
        assert len(shape["compute_samples_ms"]) == 25 and shape["compute"]["blocks"] == 5


def test_rtx_engines_are_pending_on_a_cpu_runner(gated):
    _, _, summary = gated
    node = next(n for n in summary["nodes"] if n["node"] == "gate:parity:ocr-det/fp16/default@sm86+rtx1.7")
    assert node["status"] == "pending"
    assert "RTX" in node["reason"] and "GPU" in node["reason"]


def _perturb(engine: Path) -> None:
    """What a broken transform would produce: every float weight scaled by 1.1, same graph."""
    model = onnx.load(engine)
    for tensor in model.graph.initializer:
        array = numpy_helper.to_array(tensor)
        if array.dtype == np.float32 and array.size > 16:
            tensor.CopyFrom(numpy_helper.from_array((array * 1.1).astype(np.float32), tensor.name))
    onnx.save(model, engine)


def test_a_broken_engine_fails_parity_with_numbers_and_exit_code(tmp_path, demo_models):
    manifest = write_demo_copy(tmp_path / "manifests")
    cache = tmp_path / "cache"
    address = "orientation/fp32/default@cpu+ort1.31"
    build, _ = run_json("build", str(manifest), "--only", address, cache=cache)
    node = next(n for n in build["nodes"] if n["node"] == f"build:{address}")
    node_dir = Path(node["dir"])
    engine = node_dir / node["data"]["engine"]
    _perturb(engine)
    # the broken "builder" reports its engine honestly (size and digest), so the gate judges this file
    result = json.loads((node_dir / "result.json").read_text())
    result["files"][node["data"]["engine"]] = engine.stat().st_size
    result["data"]["engine_size"] = engine.stat().st_size
    (node_dir / "result.json").write_text(json.dumps(result))
    summary, proc = run_json("gate", str(manifest), "--only", address, cache=cache, check=False)
    assert proc.returncode == 3, proc.stdout[-2000:]
    report = _report(summary, f"gate:parity:{address}")
    assert report["status"] == "failed"
    outputs = [o for v in report["profiles"].values() for c in v["cases"] for o in c["outputs"]]
    worst = max(outputs, key=lambda o: o["max_abs_error"])
    assert worst["status"] == "failed"
    assert worst["max_abs_error"] > 1e-2 and worst["violation_fraction"] > 0
    assert worst["worst"] and {"index", "engine", "reference"} <= set(worst["worst"][0])
    # and it is never published
    pub, _ = run_json("publish", str(manifest), "--only", address, cache=cache, check=False)
    entry = next(n for n in pub["nodes"] if n["node"] == f"publish:{address}")
    assert entry["status"] == "skipped" and "gate failed" in entry["reason"]


def test_demo_report_renders_in_headless_chromium(gated, tmp_path):
    manifest, cache, _ = gated
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("headless Chromium is not installed (Debian package chromium)")
    html = tmp_path / "report.html"
    data, _ = run_json("report", str(manifest), "-o", str(html), cache=cache)
    statuses = {c["address"]: c["status"] for c in data["cells"]}
    assert all(statuses[a] == "passed" for a in CPU_CELLS)
    assert statuses["ocr-det/fp16/default@sm86+rtx1.7"] == "pending"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([chromium, *flags, "--dump-dom", html.as_uri()], capture_output=True, text=True,
                         timeout=120).stdout
    assert "<table" in dom
    for model in ("ocr-det", "ocr-rec", "orientation"):
        assert model in dom
    for column in ("cpu+ort1.31", "sm86+rtx1.7", "sm89-sm120+rtx1.7"):
        assert column in dom
    assert dom.count("passed") >= len(CPU_CELLS) and "pending" in dom
    shot = tmp_path / "report.png"
    subprocess.run([chromium, *flags, f"--screenshot={shot}", "--window-size=1400,1000", html.as_uri()],
                   capture_output=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 20_000
    if __import__("os").environ.get("ORCHESTRATE_UPDATE_SCREENSHOT"):
        shutil.copy(shot, REPO / "docs" / "report-demo.png")
