"""The command line as a user meets it: help, exit codes, --json shapes, errors without tracebacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

REPO = Path(__file__).resolve().parents[2]


def run(*args: str, cwd: Path, cache: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "ORCHESTRATE_CACHE": str(cache or cwd / ".orchestrate")}
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


def _model(path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 32, 32])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)


MANIFEST = """\
manifest_version: 1
project: tiny
models:
  - name: tiny
    version: "1.0.0"
    source: {path: tiny.onnx}
    inputs:
      x:
        shape: [N, 3, 32, 32]
        profiles:
          default: {min: [1, 3, 32, 32], opt: [2, 3, 32, 32], max: [4, 3, 32, 32]}
    precisions: [fp32, fp16]
targets:
  - name: cpu
    builder: onnxruntime
    builder_version: "1.31"
    device: cpu
    runners: {build: [ubuntu-latest]}
  - name: rtx
    builder: tensorrt-rtx
    builder_version: "1.7.1.116"
    compute_capabilities: ["8.6", "8.9"]
    runners: {build: [ubuntu-latest], gate: [self-hosted, rtx]}
registry: {store: local, path: artifacts}
"""


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    _model(tmp_path / "tiny.onnx")
    (tmp_path / "m.yaml").write_text(MANIFEST)
    return tmp_path


def test_help_lists_every_command(tmp_path):
    proc = run("--help", cwd=tmp_path)
    assert proc.returncode == 0
    for command in ("validate", "plan", "graph", "schema", "build", "gate", "publish", "ls", "show", "pull",
                    "report", "ci", "doctor", "retention", "export", "store"):
        assert command in proc.stdout


def test_validate_ok_and_json(project):
    proc = run("validate", "m.yaml", "--json", cwd=project)
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["valid"] is True


def test_plan_json_lists_every_cell_with_status_and_build_key(project):
    proc = run("plan", "m.yaml", "--json", cwd=project)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["format_version"] == 1
    addresses = {c["address"]: c for c in data["cells"]}
    assert set(addresses) == {"tiny/fp32/default@cpu+ort1.31", "tiny/fp16/default@cpu+ort1.31",
                              "tiny/fp32/default@sm86-sm89+rtx1.7", "tiny/fp16/default@sm86-sm89+rtx1.7"}
    for cell in data["cells"]:
        assert cell["status"] == "build" and len(cell["build_key"]) == 64
    assert data["summary"]["text"] == "Plan: 4 to build, 0 to rebuild, 0 up to date, 0 blocked"


def test_plan_table_summary_line_and_detailed_exitcode(project):
    proc = run("plan", "m.yaml", "--detailed-exitcode", cwd=project)
    assert proc.returncode == 2
    assert "Plan: 4 to build, 0 to rebuild, 0 up to date, 0 blocked" in proc.stdout
    assert "+  tiny/fp16/default@cpu+ort1.31" in proc.stdout


def test_plan_out_records_registry_state_and_manifests(project):
    proc = run("plan", "m.yaml", "--out", "plan.json", cwd=project)
    assert proc.returncode == 0
    saved = json.loads((project / "plan.json").read_text())
    assert saved["registry_state"] == "empty" and list(saved["manifests"]) == ["m.yaml"]
    assert saved["shards"] and all(s["addresses"] for s in saved["shards"])


def test_graph_mermaid_and_dot_render(project):
    mermaid = run("graph", "m.yaml", "--format", "mermaid", cwd=project)
    assert mermaid.returncode == 0 and mermaid.stdout.startswith("flowchart LR")
    assert "transform" in mermaid.stdout and "publish" in mermaid.stdout
    dot = run("graph", "m.yaml", "--format", "dot", cwd=project)
    assert dot.returncode == 0 and dot.stdout.lstrip().startswith("digraph")
    data = json.loads(run("graph", "m.yaml", "--format", "json", cwd=project).stdout)
    kinds = {n["kind"] for n in data["nodes"]}
    assert kinds == {"prepare", "transform", "build", "gate:parity", "gate:benchmark", "publish"}
    # one fp16 transform shared by both targets
    assert sum(n["kind"] == "transform" for n in data["nodes"]) == 1


def test_schema_is_draft_2020_12(tmp_path):
    proc = run("schema", cwd=tmp_path)
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_manifest_errors_exit_1_with_location_and_no_traceback(project):
    text = MANIFEST.replace("precisions: [fp32, fp16]", "precisoins: [fp32, fp16]")
    (project / "bad.yaml").write_text(text)
    proc = run("plan", "bad.yaml", cwd=project)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "bad.yaml:12:5: models[0].precisoins: unknown key" in proc.stderr
    assert "did you mean 'precisions'?" in proc.stderr


def test_manifest_errors_as_json(project):
    (project / "bad.yaml").write_text(MANIFEST.replace('builder_version: "1.31"', 'builder_version: 1.31'))
    proc = run("validate", "bad.yaml", "--json", cwd=project)
    assert proc.returncode == 1
    error = json.loads(proc.stdout)["error"]
    assert error["type"] == "ManifestError"
    assert error["problems"][0]["path"].startswith("targets[0].builder_version")


def test_usage_errors_exit_2(project):
    assert run("plan", cwd=project).returncode == 2
    assert run("graph", "m.yaml", "--format", "svg", cwd=project).returncode == 2
    assert run("no-such-command", cwd=project).returncode == 2


def test_unknown_only_address_suggests_a_close_match(project):
    proc = run("build", "m.yaml", "--only", "tiny/fp32/default@cpu+ort1.3", cwd=project)
    assert proc.returncode == 2
    assert "did you mean 'tiny/fp32/default@cpu+ort1.31'?" in proc.stderr


def test_missing_plan_file_is_a_clear_error(project):
    (project / "plan.json").write_text("{not json")
    proc = run("build", "m.yaml", "--plan", "plan.json", cwd=project)
    assert proc.returncode == 1 and "is not JSON" in proc.stderr and "Traceback" not in proc.stderr


def test_build_gate_publish_pull_round_trip_on_cpu(project):
    assert run("build", "m.yaml", "--only", "tiny/fp32/default@cpu+ort1.31", cwd=project).returncode == 0
    gate = run("gate", "m.yaml", "--only", "tiny/fp32/default@cpu+ort1.31", "--json", cwd=project)
    assert gate.returncode == 0, gate.stdout + gate.stderr
    publish = run("publish", "m.yaml", "--only", "tiny/fp32/default@cpu+ort1.31", cwd=project)
    assert publish.returncode == 0
    listing = json.loads(run("ls", "m.yaml", "--json", cwd=project).stdout)["artifacts"]
    assert [a["address"] for a in listing] == ["tiny/fp32/default@cpu+ort1.31"]
    shown = json.loads(run("show", listing[0]["digest"], "m.yaml", "--json", cwd=project).stdout)
    assert shown["gates"]["status"] == "passed" and shown["provenance"]["_type"].startswith("https://in-toto.io")
    pulled = run("pull", "tiny", "--registry", "artifacts", "-o", "tiny.engine", "--json", cwd=project)
    assert pulled.returncode == 0, pulled.stderr
    assert json.loads(pulled.stdout)["address"] == "tiny/fp32/default@cpu+ort1.31"
    plan = json.loads(run("plan", "m.yaml", "--json", cwd=project).stdout)
    assert {c["address"]: c["status"] for c in plan["cells"]}["tiny/fp32/default@cpu+ort1.31"] == "up-to-date"


def test_rebuild_names_the_changed_input(project):
    run("build", "m.yaml", "--only", "tiny/fp32/default@cpu+ort1.31", cwd=project)
    run("gate", "m.yaml", "--only", "tiny/fp32/default@cpu+ort1.31", cwd=project)
    run("publish", "m.yaml", "--only", "tiny/fp32/default@cpu+ort1.31", cwd=project)
    (project / "m.yaml").write_text(MANIFEST.replace("max: [4, 3, 32, 32]", "max: [8, 3, 32, 32]"))
    plan = json.loads(run("plan", "m.yaml", "--json", cwd=project).stdout)
    cell = {c["address"]: c for c in plan["cells"]}["tiny/fp32/default@cpu+ort1.31"]
    assert cell["status"] == "rebuild"
    assert any(line == "profiles[0].shapes.x.max: [4,3,32,32] -> [8,3,32,32]"
               for line in cell["changes"]), cell["changes"]


def test_doctor_json_has_fingerprint_and_plugins(tmp_path):
    proc = run("doctor", "--json", cwd=tmp_path)
    assert proc.returncode == 0
    data = json.loads(proc.stdout)
    assert data["fingerprint"]["os"] and "builders" in data and "runtimes" in data
    rtx = next(b for b in data["builders"] if b["name"] == "tensorrt-rtx")
    assert rtx["can_build"] is True and rtx["needs_gpu"] is False
    trt = next(b for b in data["builders"] if b["name"] == "tensorrt")
    assert trt["can_build"] is False and trt["reason"]
