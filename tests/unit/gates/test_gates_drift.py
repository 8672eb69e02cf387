"""The drift gate's pure parts: recording outputs, matching samples by their inputs, judging outputs and task
metrics against a baseline's, and the latency comparison."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from orchestrator.core.gatekeys import drift_inputs
from orchestrator.core.model import (
    DataSource,
    DriftGate,
    GateSettings,
    InputSpec,
    Model,
    ParityGate,
    SourceModel,
    TaskSpec,
)
from orchestrator.errors import GateError
from orchestrator.gates.drift import (
    INPUTS_KEY,
    DriftVerdict,
    OutputRecorder,
    drift_case,
    inputs_digest,
    judge_drift,
    latency_drift,
    load_outputs,
)
from trt_orchestrator_plugins.tasks.classification import classification

BASE = {"address": "m/fp32/default@cpu+ort1.22", "builder": "onnxruntime", "builder_version": "1.22.1",
        "engine_digest": "sha256:" + "0" * 64, "record_key": "1" * 64}


def model(task: bool = True) -> Model:
    return Model(name="m", version="1", source=SourceModel("/m.onnx"), inputs=(InputSpec("x", (2, 4)),),
                 constraints=(), precisions=(), profile_sets={},
                 calibration=None, gate=GateSettings(parity=ParityGate(data=DataSource(samples=2))),
                 task=TaskSpec("classification", output="logits") if task else None)


def recorded(outputs: list[np.ndarray], inputs: list[np.ndarray] | None = None) -> dict[str, np.ndarray]:
    rec = OutputRecorder()
    samples = [{"x": x} for x in (inputs or [np.full((2, 4), i, np.float32) for i in range(len(outputs))])]
    rec.keep("default", "opt", samples, [{"logits": o} for o in outputs])
    return rec.arrays


def logits(*rows: list[float]) -> np.ndarray:
    return np.array(rows, np.float32)


def test_outputs_round_trip_through_the_npz_without_pickle(tmp_path):
    arrays = recorded([logits([1, 2, 3], [3, 2, 1])])
    rec = OutputRecorder(arrays=arrays)
    path = rec.write(tmp_path / "outputs.npz")
    back = load_outputs(path)
    assert set(back) == set(arrays)
    assert str(back[f"default/opt/0/{INPUTS_KEY}"]) == inputs_digest({"x": np.zeros((2, 4), np.float32)})
    np.testing.assert_array_equal(back["default/opt/0/logits"], arrays["default/opt/0/logits"])
    assert not list(tmp_path.glob("*.partial"))
    assert OutputRecorder().write(tmp_path / "none.npz") is None  # nothing recorded: no file


def test_a_damaged_outputs_file_is_a_gate_error_naming_it(tmp_path):
    bad = tmp_path / "outputs.npz"
    bad.write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(GateError, match="outputs.npz cannot be read"):
        load_outputs(bad)


def test_the_inputs_digest_sees_dtype_shape_and_bytes():
    a = np.zeros((2, 2), np.float32)
    assert inputs_digest({"x": a}) == inputs_digest({"x": a.copy()})
    assert inputs_digest({"x": a}) != inputs_digest({"x": a.astype(np.float16)})
    assert inputs_digest({"x": a}) != inputs_digest({"x": a.reshape(4, 1)})
    assert inputs_digest({"x": a}) != inputs_digest({"y": a})


def test_the_drift_case_is_opt_or_the_dataset():
    assert drift_case(["min", "opt", "max"]) == "opt"
    assert drift_case(["dataset"]) == "dataset"
    assert drift_case(["only"]) == "only"
    assert drift_case(["min", "max"]) is None


def test_identical_outputs_pass_and_are_reported_without_thresholds():
    out = [logits([1, 5, 2], [4, 0, 1])]
    v = judge_drift(model(), DriftGate(), BASE, recorded(out), recorded(out), classification)
    assert v.status == "passed" and v.compared == 1
    assert v.outputs["logits"]["max_abs_error"] == 0 and v.outputs["logits"]["cosine"] == pytest.approx(1.0)
    assert v.task["top1_agreement"] == 1.0
    assert DriftVerdict.from_json(v.to_json()) == v


def test_thresholds_fail_a_drifted_engine_naming_metric_value_and_bound():
    old = [logits([1, 5, 2], [4, 0, 1])]
    new = [logits([1, 5, 6], [4, 0, 1])]  # the first row's top-1 turns
    settings = DriftGate(min_cosine=0.999, max_abs_error=1.0, task={"min_top1_agreement": 1.0})
    v = judge_drift(model(), settings, BASE, recorded(old), recorded(new), classification)
    assert v.status == "failed"
    assert v.task["top1_agreement"] == 0.5
    assert any(r.startswith("logits: cosine ") and r.endswith("< drift.min_cosine 0.999") for r in v.reasons)
    assert "logits: max abs error 4 vs the baseline > drift.max_abs_error 1" in v.reasons
    assert "task top1_agreement 0.5 vs the baseline < drift.task.min_top1_agreement 1" in v.reasons


def test_only_samples_with_identical_inputs_are_compared():
    old = recorded([logits([1, 2]), logits([3, 4])])
    new = recorded([logits([9, 9]), logits([3, 4])],
                   inputs=[np.ones((2, 4), np.float32) * 7, np.ones((2, 4), np.float32)])  # sample 0: other inputs
    v = judge_drift(model(task=False), DriftGate(max_abs_error=0.0), BASE, old, new)
    assert v.compared == 1 and v.status == "passed"
    assert any("1 of 2 samples have other inputs" in n for n in v.notes)
    other = recorded([logits([1, 2])], inputs=[np.full((2, 4), 5, np.float32)])
    none = judge_drift(model(task=False), DriftGate(max_abs_error=0.0), BASE, old, other)
    assert none.compared == 0 and none.status == "passed" and "outputs not compared" in none.notes[0]


def test_a_changed_output_shape_fails():
    v = judge_drift(model(task=False), DriftGate(), BASE, recorded([logits([1, 2])]), recorded([logits([1, 2, 3])]))
    assert v.status == "failed" and v.reasons == ("logits: output shape differs from the baseline's on "
                                                  "default/opt/0",)


def test_a_task_threshold_naming_no_metric_is_refused():
    with pytest.raises(GateError, match="gate.drift.task.min_map50 names no metric"):
        judge_drift(model(), DriftGate(task={"min_map50": 0.5}), BASE, recorded([logits([1, 2])]),
                    recorded([logits([1, 2])]), classification)


def test_a_nan_output_fails_a_cosine_bound():
    v = judge_drift(model(task=False), DriftGate(min_cosine=0.5), BASE, recorded([logits([1, 2])]),
                    recorded([logits([math.nan, 2])]))
    assert v.status == "failed"


BENCH = {"shapes": [{"label": "opt", "input_shapes": {"x": [1, 3]}, "end_to_end": {"p50_ms": 10.0},
                     "compute": {"p50_ms": 9.0}}]}


def test_latency_drift_compares_the_gated_shape_with_the_baselines():
    out = latency_drift(12.0, {"x": (1, 3)}, "opt", BASE, BENCH, DriftGate(max_latency_regression_pct=10))
    assert out["baseline_p50_ms"] == 10.0 and out["change_pct"] == pytest.approx(20.0)
    assert out["status"] == "failed"
    assert out["reasons"] == [f"opt: p50 12 ms is 20.0% slower than the drift baseline {BASE['address']} (10 ms) > "
                              "drift.max_latency_regression_pct 10"]
    faster = latency_drift(8.0, {"x": (1, 3)}, "opt", BASE, BENCH, DriftGate(max_latency_regression_pct=10))
    assert faster["status"] == "passed" and faster["change_pct"] == pytest.approx(-20.0)


@pytest.mark.parametrize(("shapes", "label", "bench", "note"), [
    ({"x": (1, 3)}, "opt", None, "not benchmarked on this GPU model"),
    ({"x": (1, 3)}, "max", BENCH, "has no 'max' shape"),
    ({"x": (2, 3)}, "opt", BENCH, "at other input shapes"),
])
def test_latency_is_not_compared_when_the_baseline_cannot_say(shapes, label, bench, note):
    out = latency_drift(12.0, shapes, label, BASE, bench, DriftGate(max_latency_regression_pct=0))
    assert out["status"] == "passed" and out["change_pct"] is None and note in out["notes"][0]


def test_drift_settings_reach_the_gate_key():
    assert drift_inputs(DriftGate(enabled=False), "parity") is None
    parity = drift_inputs(replace(DriftGate(), min_cosine=0.9), "parity")
    assert parity is not None and parity["min_cosine"] == 0.9 and "max_latency_regression_pct" not in parity
    bench = drift_inputs(replace(DriftGate(), max_latency_regression_pct=5), "benchmark")
    assert bench == {"max_latency_regression_pct": 5, "baseline": parity["baseline"]}
