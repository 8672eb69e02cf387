"""The report's per-model plots: p50/p95 per target and precision, and the task metric against p50."""

from __future__ import annotations

import re

import numpy as np

from orchestrator.cli.render.report import accuracy_of, cell_summary, model_plots, render_report
from orchestrator.core.model import BenchmarkGate
from orchestrator.gates import run_benchmark

from .test_gates_run_report import Affine


def _bench(ms):
    return run_benchmark(Affine(timing=ms), {"opt": {"x": np.zeros((2, 3), np.float32)}},
                         BenchmarkGate(blocks=1)).to_json()


def _cell(model, precision, target, ms, task=None):
    parity = {"status": "passed", "cases": [{"label": "opt", "outputs": [
        {"name": "y", "max_abs_error": 0.01, "rel_l2": 0.02, "status": "passed"}],
        "task": {"kind": "classification", "metrics": task} if task else None}]}
    return {"address": f"{model}/{precision}/default@{target}", "model": model, "precision": precision,
            "profile_set": "default", "target": target, "status": "passed", "parity": parity,
            "benchmark": _bench(ms)}


CELLS = [_cell("cls", "fp32", "cpu+ort1.31", (4.0, 4.0, 4.0), {"top1_agreement": 1.0}),
         _cell("cls", "fp16", "cpu+ort1.31", (3.0, 3.0, 3.0), {"top1_agreement": 0.9}),
         _cell("cls", "int8", "sm89+trt10.13", (1.0, 1.0, 1.0), {"top1_agreement": 0.6}),
         _cell("<b>det</b>", "fp32", "cpu+ort1.31", (8.0, 8.0, 9.0))]


def test_accuracy_prefers_a_task_metric_then_tensor_agreement():
    s = cell_summary(CELLS[0])
    assert accuracy_of(s) == ("top1_agreement", 1.0)
    s = cell_summary(CELLS[3])
    name, value = accuracy_of(s)
    assert name == "1 - rel-L2 (worst output)" and abs(value - 0.98) < 1e-12


def test_model_plots_draw_every_cell_with_figures():
    summaries = {id(c): cell_summary(c) for c in CELLS}
    plots = {p["model"]: p for p in model_plots(CELLS, summaries)}
    assert set(plots) == {"cls", "<b>det</b>"}
    cls = plots["cls"]
    assert cls["metric"] == "top1_agreement"
    assert len(re.findall(r"<rect [^>]*><title>", cls["latency"])) == 3  # one bar per cell
    assert "sm89+trt10.13 int8: p50 2 ms" in cls["latency"]  # the end-to-end series (compute + 1 ms)
    assert cls["scatter"].count("<circle") == 3
    assert "cpu+ort1.31 fp16: p50 4 ms, top1_agreement 0.9" in cls["scatter"]
    # a higher accuracy is drawn higher: fp32 (1.0) above int8 (0.6)
    ys = {m.group(2): float(m.group(1)) for m in re.finditer(r'cy="([0-9.]+)"[^<]*<title>[^ ]+ (\w+):', cls["scatter"])}
    assert ys["fp32"] < ys["int8"]


def test_report_has_the_plots_section_and_escapes_names(tmp_path):
    page = render_report(CELLS, tmp_path / "r.html").read_text()
    assert 'id="plots"' in page and 'data-model="cls"' in page
    assert "<b>det</b>" not in page and "&lt;b&gt;det&lt;/b&gt;" in page
