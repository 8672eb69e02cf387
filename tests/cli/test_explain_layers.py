"""`explain` names the layer a parity tolerance override came from (issue 23, point 23): a target's `gate:` is the
target's, not the model's; a field one layer leaves out inherits from the layer below (issue 22, point 9)."""

from __future__ import annotations

import json

from .test_cli import MANIFEST, _model, run

CPU16, RTX16 = "tiny/fp16/default@cpu+ort1.31", "tiny/fp16/default@sm86-sm89+rtx1.7"

LAYERED = MANIFEST.replace("    precisions: [fp32, fp16]\n", """\
    precisions: [fp32, fp16]
    gate: {parity: {tolerances: {fp16: {atol: 0.02}}}}
""").replace("    runners: {build: [ubuntu-latest]}\n", """\
    runners: {build: [ubuntu-latest]}
    gate: {parity: {tolerances: {fp16: {rtol: 0.05}}, per_output: {y: {min_cosine: 0.5}}}}
""", 1)


def _tolerances(tmp_path, address: str) -> dict:
    proc = run("explain", address, "m.yaml", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["gate_inputs"]["parity"]["tolerances"]


def test_a_target_override_is_labelled_the_targets(tmp_path):
    _model(tmp_path / "tiny.onnx")
    (tmp_path / "m.yaml").write_text(LAYERED)
    cpu, rtx = _tolerances(tmp_path, CPU16), _tolerances(tmp_path, RTX16)
    # the cpu target sets rtol over the model's atol: both layers named, each field from where it was set
    assert cpu["engine"]["source"] == "default:fp16 < model:fp16 < target:cpu:fp16"
    assert (cpu["engine"]["atol"], cpu["engine"]["rtol"], cpu["engine"]["min_cosine"]) == (0.02, 0.05, 0.99)
    assert cpu["per_output"]["y"]["source"] == "default:fp16 < model:fp16 < target:cpu:fp16 < target:cpu:output:y"
    assert cpu["per_output"]["y"]["min_cosine"] == 0.5
    # the rtx target has no gate of its own: the model's override alone
    assert rtx["engine"]["source"] == "default:fp16 < model:fp16"
    assert (rtx["engine"]["atol"], rtx["engine"]["rtol"]) == (0.02, 0.01)
    assert "y" not in rtx["per_output"]
    human = run("explain", CPU16, "m.yaml", cwd=tmp_path)
    assert human.returncode == 0 and "target:cpu:fp16" in human.stdout, human.stdout
