"""Gate settings on `matrix.include` rules (issue 15): the cells a rule names take its `gate:` over their target's
over their model's (over defaults'), key by key, later rules over earlier ones; `explain` shows the result, the gate
key follows it, and `validate` refuses what cannot work, with the place."""

from __future__ import annotations

import json

from .test_cli import MANIFEST, _model, run

CPU32, CPU16 = "tiny/fp32/default@cpu+ort1.31", "tiny/fp16/default@cpu+ort1.31"
RTX16 = "tiny/fp16/default@sm86-sm89+rtx1.7"

GATED = MANIFEST.replace("    precisions: [fp32, fp16]\n", """\
    precisions: [fp32, fp16]
    gate: {benchmark: {max_p95_ms: 25, iterations: 40}, parity: {data: {samples: 2}}}
""").replace("    runners: {build: [ubuntu-latest]}\n", """\
    runners: {build: [ubuntu-latest]}
    gate: {benchmark: {max_p95_ms: 250}}
""", 1) + """\
matrix:
  include:
    - {precision: fp16, target: cpu, gate: {benchmark: {max_p95_ms: 400, min_throughput: 2}}}
    - {model: tiny, precision: fp16, target: cpu, gate: {benchmark: {min_throughput: 3}, parity: {data: {seed: 4}}}}
"""


def _explain(tmp_path, address: str) -> dict:
    proc = run("explain", address, "m.yaml", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_rules_gate_overrides_the_targets_and_the_models_on_the_cells_it_names(tmp_path):
    _model(tmp_path / "tiny.onnx")
    (tmp_path / "m.yaml").write_text(GATED)
    cpu32, cpu16, rtx16 = (_explain(tmp_path, a) for a in (CPU32, CPU16, RTX16))
    bench = {a: e["gate_inputs"]["benchmark"] for a, e in ((CPU32, cpu32), (CPU16, cpu16), (RTX16, rtx16))}
    # fp32 on cpu: the target's budget over the model's; no rule names it
    assert (bench[CPU32]["max_p95_ms"], bench[CPU32]["min_throughput"]) == (250, None)
    # fp16 on cpu: both rules, the later one's min_throughput over the earlier one's, the earlier one's budget
    assert (bench[CPU16]["max_p95_ms"], bench[CPU16]["min_throughput"]) == (400, 3)
    # what no rule or target sets still comes from the model
    assert bench[CPU16]["iterations"] == bench[CPU32]["iterations"] == 40
    # fp16 on rtx: the rules name the cpu target only, rtx has no gate of its own: the model's
    assert (bench[RTX16]["max_p95_ms"], bench[RTX16]["min_throughput"]) == (25, None)
    parity16 = json.dumps(cpu16["gate_inputs"]["parity"])
    assert '"seed": 4' in parity16 and '"samples": 2' in parity16, parity16

    # a rule's setting reaches the gate key of the cells it names, not the build key, not other cells
    before = {a: _explain(tmp_path, a) for a in (CPU32, CPU16)}
    (tmp_path / "m.yaml").write_text(GATED.replace("min_throughput: 3", "min_throughput: 5"))
    after = {a: _explain(tmp_path, a) for a in (CPU32, CPU16)}
    assert after[CPU16]["gate_key"] != before[CPU16]["gate_key"]
    assert after[CPU16]["build_key"] == before[CPU16]["build_key"]
    assert after[CPU32]["gate_key"] == before[CPU32]["gate_key"]


def test_validate_refuses_rule_gates_that_cannot_work_with_their_place(tmp_path):
    _model(tmp_path / "tiny.onnx")
    cases = [
        # an exclude rule removes cells: it has nothing to gate
        (MANIFEST + "matrix:\n  exclude: [{target: rtx, gate: {benchmark: {max_p95_ms: 5}}}]\n",
         "matrix.exclude[0]", "gate"),
        # a rule with only `gate:` would name every cell: defaults.gate says that
        (MANIFEST + "matrix:\n  include: [{gate: {benchmark: {max_p95_ms: 5}}}]\n",
         "matrix.include[0]: a matrix rule with gate: names no cells", "defaults.gate"),
        # the rule's own parity data must be there
        (MANIFEST + "matrix:\n  include: [{target: cpu, gate: {parity: {data: {path: nowhere}}}}]\n",
         "matrix.include[0].gate.parity.data.path: data path not found", "nowhere"),
        (MANIFEST + "matrix:\n  include: [{target: cpu, gate: {benchmark: {max_p95_ms: -1}}}]\n",
         "matrix.include[0].gate.benchmark.max_p95_ms", ""),
    ]
    for text, where, also in cases:
        (tmp_path / "m.yaml").write_text(text)
        proc = run("validate", "m.yaml", cwd=tmp_path)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert where in proc.stderr and also in proc.stderr, proc.stderr
        assert "m.yaml:" in proc.stderr, proc.stderr  # file:line of the place
