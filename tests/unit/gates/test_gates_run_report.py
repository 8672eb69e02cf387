"""run_parity/run_benchmark with in-test sessions (pure numpy), verdict JSON, report data and rich table."""

from __future__ import annotations

import json

import numpy as np
import pytest
from rich.console import Console

from orchestrator.cli.render.report import report_json, summary_table
from orchestrator.contracts.runtime import Timing
from orchestrator.core.model import (
    BenchmarkGate,
    DataSource,
    GateSettings,
    InputSpec,
    Model,
    ParityGate,
    SourceModel,
    Tolerance,
)
from orchestrator.errors import GateError
from orchestrator.gates import gate_cases, run_benchmark, run_parity
from orchestrator.gates.verdict import ParityVerdict


class Affine:
    """y = x * k + b, with a NaN or a failure on demand."""

    input_names = ("x",)
    output_names = ("y",)

    def __init__(self, k=1.0, b=0.0, fail=False, timing=(1.0, 2.0, 3.0)):
        self.k, self.b, self.fail, self.timing = k, b, fail, timing

    def run(self, inputs):
        if self.fail:
            raise RuntimeError("boom")
        return {"y": inputs["x"] * self.k + self.b}

    def benchmark(self, inputs, *, warmup, iterations, time_budget_s):
        return Timing(compute_ms=self.timing, end_to_end_ms=tuple(t + 1 for t in self.timing),
                      device_memory_bytes=1024)

    def close(self):
        pass


MODEL = Model(name="m", version="1", source=SourceModel("/m.onnx"), inputs=(InputSpec("x", (2, 3)),),
              constraints=(), precisions=(), profile_sets={}, calibration=None,
              gate=GateSettings(parity=ParityGate(data=DataSource(samples=2),
                                                  per_output={"y": Tolerance(atol=0.05, rtol=0.0, max_rel_l2=0.1)})))
CASES = gate_cases(MODEL, "default")


def test_parity_passes_and_uses_the_output_override():
    v = run_parity(MODEL, Affine(b=0.04), Affine(), CASES, "fp16")
    assert v.status == "passed"
    out = v.cases[0].outputs[0]
    assert out.tolerance.source == "default:fp16 < output:y" and out.max_abs_error == pytest.approx(0.04)
    assert ParityVerdict.from_json(json.loads(json.dumps(v.to_json()))) == v


def test_parity_failures_engine_crash_nan_and_reference_crash():
    v = run_parity(MODEL, Affine(b=0.06), Affine(), CASES, "fp16")
    assert v.status == "failed" and v.reasons[0].startswith("min+opt+max/y: 12 of 12 elements")
    crash = run_parity(MODEL, Affine(fail=True), Affine(), CASES, "fp16")
    assert crash.reasons == ("min+opt+max: engine run failed on sample 0: RuntimeError: boom",)
    nan = run_parity(MODEL, Affine(k=np.nan), Affine(), CASES, "fp16").to_json()
    assert nan["status"] == "failed" and nan["cases"][0]["outputs"][0]["worst"][0]["engine"] == "NaN"
    with pytest.raises(GateError, match="reference run failed"):
        run_parity(MODEL, Affine(), Affine(fail=True), CASES, "fp16")


def test_benchmark_thresholds_on_the_end_to_end_series():
    feeds = {"opt": {"x": np.zeros((2, 3), np.float32)}}
    v = run_benchmark(Affine(), feeds, BenchmarkGate(max_p95_ms=3.5, min_throughput=700.0))
    opt = v.shape("opt")
    assert opt.compute.p50_ms == 2.0 and opt.end_to_end.p50_ms == 3.0 and opt.device_memory_bytes == 1024
    assert v.reasons == ("opt: end-to-end p95 3.900 ms > max_p95_ms 3.5 ms",
                         "opt: throughput 666.7/s < min_throughput 700/s (batch 2 / mean 3.000 ms)")
    base = run_benchmark(Affine(timing=(0.5, 1.0, 1.5)), feeds, BenchmarkGate())
    slow = run_benchmark(Affine(), feeds, BenchmarkGate(max_regression_pct=20), baseline=base.to_json())
    assert slow.shape("opt").regression_pct == pytest.approx(50.0)
    assert slow.reasons == ("opt: p50 3.000 ms is 50.0% slower than the baseline 2.000 ms (allowed 20%)",)
    none = run_benchmark(Affine(), feeds, BenchmarkGate(max_regression_pct=20))
    assert none.passed and none.notes == (
        "no baseline engine published for this address on this GPU model; regression not checked",)


def test_report_json_and_summary_table():
    parity = run_parity(MODEL, Affine(b=0.06), Affine(), CASES, "fp16").to_json()
    bench = run_benchmark(Affine(), {"opt": {"x": np.zeros((2, 3), np.float32)}}, BenchmarkGate()).to_json()
    cells = [{"address": "a/m@1/fp16/default/cpu+ort1.31", "model": "m", "precision": "fp16",
              "profile_set": "default", "target": "cpu+ort1.31", "status": "failed", "parity": parity,
              "benchmark": bench},
             {"address": "a/m@1/fp16/default/sm89+trt10.13", "model": "m", "precision": "fp16",
              "profile_set": "default", "target": "sm89+trt10.13", "status": "pending", "parity": None,
              "benchmark": None}]
    data = json.loads(json.dumps(report_json(cells)))
    assert data["counts"] == {"failed": 1, "pending": 1}
    first = data["summary"][0]
    assert (first["p50_ms"], first["p95_ms"], first["worst_output"]) == (3.0, 3.9, "y")
    assert first["worst_max_abs"] == pytest.approx(0.06)
    console = Console(width=140, record=True, color_system=None)
    console.print(summary_table(cells))
    text = console.export_text()
    assert "cpu+ort1.31" in text and "failed" in text and "pending" in text and "6.00e-02 (y)" in text


def test_memory_gate_in_the_summary_table_and_columns_without_values_left_out():
    bench = run_benchmark(Affine(), {"max": {"x": np.zeros((2, 3), np.float32)}}, BenchmarkGate(shapes=("max",)))
    memory = {"shape": "max", "input_shapes": {"x": [2, 3]}, "device_memory_bytes": 600 * 2**20,
              "engine_bytes": 24 * 2**20, "threshold_mib": 512, "status": "failed", "notes": [],
              "reasons": ["max: device memory 600.0 MiB at input shapes {'x': [2, 3]} > max_device_memory_mib 512"]}
    cell = {"address": "m/fp16/default@sm89+trt10.13", "model": "m", "precision": "fp16", "profile_set": "default",
            "target": "sm89+trt10.13", "status": "failed", "parity": None, "benchmark": bench.to_json(),
            "memory": memory, "reasons": memory["reasons"]}
    s = report_json([cell])["summary"][0]
    assert (s["device_memory_mib"], s["engine_mib"], s["memory_threshold_mib"]) == (600.0, 24.0, 512)
    console = Console(width=250, record=True, color_system=None)
    console.print(summary_table([cell]))
    text = console.export_text()
    assert "device 600.0 MiB at max (≤ 512) · engine 24.0 MiB" in text
    assert "max: device memory 600.0 MiB" in text
    header = text.splitlines()[2]
    assert "memory" in header and "drift" not in header and "worst abs err" not in header  # no cell has those
