"""Issue 24: a regression or drift latency threshold below the noise the benchmark gate accepts from one run
(``max_spread_pct``) cannot be told from that noise: validate refuses it, naming the key, the spread and the fix.
The measured case (the spread of a real run) is the verdict's, tests/unit/gates/test_gates_noise.py."""

from __future__ import annotations

import pytest

from orchestrator.errors import ManifestError

BASE = """\
manifest_version: 1
defaults:
  gate: {benchmark: DEFAULT_BENCH}
models:
  - {name: s, version: "1", source: {path: ../models/scores.onnx}, inputs: {x: {shape: [1, 2]}}, gate: MODEL_GATE}
targets:
  - {name: cpu, builder: onnxruntime, builder_version: "1.31", device: cpu, gate: TARGET_GATE}
"""


def manifest(default_bench: str = "{}", model_gate: str = "{}", target_gate: str = "{}") -> str:
    return (BASE.replace("DEFAULT_BENCH", default_bench).replace("MODEL_GATE", model_gate)
            .replace("TARGET_GATE", target_gate))


def problems(load, text: str) -> list:
    with pytest.raises(ManifestError) as info:
        load(text, name="noise.yaml")
    for p in info.value.problems:
        assert p.file.endswith("noise.yaml") and p.line is not None and p.column is not None, p
    return list(info.value.problems)


def test_a_regression_threshold_below_the_default_spread_is_refused(load):
    (p,) = problems(load, manifest(model_gate="{benchmark: {max_regression_pct: 5}}"))
    assert p.path == "models[0].gate.benchmark.max_regression_pct"
    assert p.message == ("max_regression_pct 5% is below max_spread_pct 10%: a change that small cannot be told from "
                         "the noise the benchmark gate accepts from one run")
    assert "raise max_regression_pct to at least 10, or lower gate.benchmark.max_spread_pct" in p.hint


def test_a_drift_latency_threshold_below_the_spread_is_refused(load):
    gate = "{benchmark: {max_spread_pct: 4}, drift: {max_latency_regression_pct: 3}}"
    (p,) = problems(load, manifest(model_gate=gate))
    assert p.path == "models[0].gate.drift.max_latency_regression_pct"
    assert p.message.startswith("drift.max_latency_regression_pct 3% is below max_spread_pct 4%")


def test_a_target_that_widens_the_spread_past_the_models_threshold_is_refused_at_the_target(load):
    text = manifest(model_gate="{benchmark: {max_regression_pct: 10}}",
                    target_gate="{benchmark: {max_spread_pct: 20}}")
    (p,) = problems(load, text)
    assert p.path == "targets[0].gate.benchmark.max_spread_pct"
    assert "max_regression_pct 10% is below max_spread_pct 20%" in p.message


@pytest.mark.parametrize("model_gate,target_gate", [
    ("{benchmark: {max_regression_pct: 10}}", "{}"),  # equal to the default spread
    ("{benchmark: {max_regression_pct: 5, max_spread_pct: 3}}", "{}"),  # a quiet GPU runner's settings
    ("{benchmark: {max_regression_pct: 5}}", "{benchmark: {max_spread_pct: 5}}"),  # the target narrows it
    ("{benchmark: {max_regression_pct: 1, enabled: false}}", "{}"),  # no benchmark, nothing to judge
    ("{drift: {enabled: false, max_latency_regression_pct: 1}}", "{}"),
])
def test_thresholds_the_gate_can_judge_are_kept(load, model_gate, target_gate):
    load(manifest(model_gate=model_gate, target_gate=target_gate), name="noise.yaml")


def test_the_default_layer_is_checked_for_the_models_that_take_it(load):
    (p,) = problems(load, manifest(default_bench="{max_regression_pct: 2}"))
    assert p.path == "defaults.gate.benchmark.max_regression_pct" and "2% is below max_spread_pct 10%" in p.message


def test_a_matrix_rule_that_sets_a_threshold_inside_the_noise_is_refused_at_the_rule(load):
    text = manifest() + "matrix:\n  include:\n    - {model: s, gate: {benchmark: {max_regression_pct: 4}}}\n"
    (p,) = problems(load, text)
    assert p.path == "matrix.include[0].gate.benchmark.max_regression_pct"
    assert "max_regression_pct 4% is below max_spread_pct 10%" in p.message
