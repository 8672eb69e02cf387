"""Hardening (issue 11) through the real command line, each in its own process: manifests that crashed `plan`,
hostile names in the plan table and its markdown (a GitHub job summary), `pull` arguments that crashed or were
silently misread, and `plan` telling "never built" from "built here but failed". Each test reproduced its problem
before the fix."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

_TRACEBACK = "Traceback (most recent call last)"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "ORCHESTRATE_CACHE": str(cwd / ".orchestrate"), "COLUMNS": "250"}
    env.pop("ORCHESTRATE_REGISTRY", None)
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


def _model(path: Path, *, shape=("N", 3, 8, 8)) -> None:
    """y = Relu(x * 1.0001): exact in fp32; its fp16 conversion rounds the factor to 1.0, so an fp16 parity gate with
    zero tolerance fails for real."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))
    factor = helper.make_tensor("factor", TensorProto.FLOAT, [1], [1.0001])
    graph = helper.make_graph([helper.make_node("Mul", ["x", "factor"], ["scaled"], name="mul"),
                               helper.make_node("Relu", ["scaled"], ["y"], name="relu")], "g", [x], [y], [factor])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)


HEAD = """\
manifest_version: 1
project: hard
registry: {store: local, path: artifacts}
"""
CPU = """\
targets:
  - {name: cpu, builder: onnxruntime, builder_version: "1.31", device: cpu, runners: {build: [ubuntu-latest]}}
"""
DYNAMIC = """\
models:
  - name: tiny
    version: "1.0.0"
    source: {path: tiny.onnx}
    inputs:
      INPUT:
        shape: [N, 3, 8, 8]
        profiles:
          default: {min: [1, 3, 8, 8], opt: [2, 3, 8, 8], max: [4, 3, 8, 8]}
    precisions: [fp32, fp16]
    gate:
      parity: {data: {samples: 1}, tolerances: {fp16: {atol: 0, rtol: 0}}}
      benchmark: {enabled: false}
"""


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    _model(tmp_path / "tiny.onnx")
    _model(tmp_path / "static.onnx", shape=(1, 3, 8, 8))
    (tmp_path / "calib").mkdir()
    return tmp_path


def _no_traceback(proc: subprocess.CompletedProcess) -> None:
    assert _TRACEBACK not in proc.stderr and _TRACEBACK not in proc.stdout, proc.stderr[-3000:]


# -- item 1 and 2: manifests that validated, then crashed `plan` -----------------------------------------------------

def test_plan_int8_on_a_static_model(folder):
    (folder / "m.yaml").write_text(HEAD + CPU + """\
models:
  - name: st
    version: "1"
    source: {path: static.onnx}
    inputs: {x: {shape: [1, 3, 8, 8]}}
    precisions: [fp32, int8]
    calibration: {path: calib}
""")
    proc = run("plan", "m.yaml", "--json", cwd=folder)
    _no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    cells = {c["address"]: c for c in json.loads(proc.stdout)["cells"]}
    assert set(cells) == {"st/fp32/default@cpu+ort1.31", "st/int8/default@cpu+ort1.31"}


@pytest.mark.parametrize("text", ["---\n", "", "# nothing yet\n"])
def test_plan_and_validate_refuse_an_empty_document_with_its_location(folder, text):
    (folder / "empty.yaml").write_text(text)
    for verb in ("validate", "plan"):
        proc = run(verb, "empty.yaml", cwd=folder)
        _no_traceback(proc)
        assert proc.returncode == 1
        assert "empty.yaml:1:1: the manifest is empty" in proc.stderr


def test_plan_an_include_rule_without_model(folder):
    (folder / "m.yaml").write_text(HEAD + CPU + """\
models:
  - {name: st, version: "1", source: {path: static.onnx}, inputs: {x: {shape: [1, 3, 8, 8]}}}
  - name: dyn
    version: "1"
    source: {path: tiny.onnx}
    inputs:
      x: {shape: [N, 3, 8, 8], profiles: {big: {min: [1, 3, 8, 8], opt: [2, 3, 8, 8], max: [4, 3, 8, 8]}}}
matrix:
  exclude: [{target: cpu}]
  include: [{profile_set: big, target: cpu}]
""")
    proc = run("plan", "m.yaml", "--json", cwd=folder)
    _no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    assert [c["address"] for c in json.loads(proc.stdout)["cells"]] == ["dyn/fp32/big@cpu+ort1.31"]


# -- item 3: YAML that crashed the loader ----------------------------------------------------------------------------

def test_validate_refuses_explicit_tags_with_a_location(folder):
    (folder / "m.yaml").write_text(HEAD + CPU.replace("device: cpu,", "device: cpu, options: {timing_cache: !!bool "
                                                                        "maybe},") + DYNAMIC.replace("INPUT", "x"))
    proc = run("validate", "m.yaml", cwd=folder)
    _no_traceback(proc)
    assert proc.returncode == 1
    assert "m.yaml:5:" in proc.stderr and "targets[0].options.timing_cache: invalid bool value" in proc.stderr


# -- item 5: hostile names -------------------------------------------------------------------------------------------

HOSTILE_LABELS = ["[/]", "[link=https://evil.example]ok[/link]", ":smile:", "a|b", "`tick`", "<img src=x>", "[bold]",
                  "x\n| + | `forged` | build | k | y |", "\u202eevil"]  # labels are free text (tests/ci)
SHOWN = [label.encode("unicode_escape").decode("ascii") if not label.isprintable() else label
         for label in HOSTILE_LABELS]


@pytest.fixture()
def hostile(folder) -> Path:
    first = ", ".join(json.dumps(label) for label in HOSTILE_LABELS[:5])
    second = ", ".join(json.dumps(label) for label in HOSTILE_LABELS[5:])
    (folder / "m.yaml").write_text(HEAD + DYNAMIC.replace("INPUT", "x") + f"""\
targets:
  - {{name: cpu, builder: onnxruntime, builder_version: "1.31", device: cpu, runners: {{build: [{first}]}}}}
  - {{name: gpu, builder: onnxruntime, builder_version: "1.31", device: cuda, runners: {{build: [{second}]}}}}
runners:
  - {{labels: [ubuntu-latest]}}
""")
    return folder


def test_plan_table_shows_hostile_text_literally(hostile):
    proc = run("plan", "m.yaml", cwd=hostile)
    _no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for label in SHOWN:  # no markup applied, no emoji substituted, no link made, control characters escaped
        assert label in out, (label, out)
    assert "\x1b]8;" not in out and "\U0001f604" not in out and "\u202e" not in out
    assert not any(line.startswith("| + |") for line in out.splitlines())
    assert sum(line.startswith("!") for line in out.splitlines()) == 4


def test_plan_markdown_escapes_everything_user_given(hostile):
    proc = run("plan", "m.yaml", "--markdown", cwd=hostile)
    _no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    rows = [line for line in lines if line.startswith("| ")]
    assert len(rows) == 1 + 4  # the header and one row per cell: nothing forged
    text = "\n".join(rows[1:])
    for row in rows[1:]:
        assert row.count(" | ") == 4, row  # five cells, every user '|' escaped
        assert "<img" not in row and "\u202e" not in row
    assert "&lt;img src=x&gt;" in text and "\\u202eevil" in text and "\\| \\+ \\|" in text
    assert "\\`tick\\`" in text and "a\\|b" in text and "\\[/\\]" in text and "\\:smile\\:" in text


def test_hostile_names_are_refused_at_validate_with_their_location(folder):
    for name in ("[/]", "[link=https://evil.example]ok", "a\\n| + | `forged` | build | x | y |\\nb"):
        (folder / "m.yaml").write_text(HEAD + CPU + DYNAMIC.replace("INPUT", "x").replace("default:", f'"{name}":'))
        proc = run("plan", "m.yaml", "--markdown", cwd=folder)
        _no_traceback(proc)
        assert proc.returncode == 1, proc.stdout
        assert re.search(r"m\.yaml:14:11: models\[0\]\.inputs\.x\.profiles\[\"", proc.stderr), proc.stderr
        assert "forged" not in proc.stdout
        assert not any(line.startswith("| + |") for line in proc.stderr.splitlines())


# -- items 6 and 8: pull arguments; the last local outcome in `plan` ---------------------------------------------

@pytest.fixture(scope="module")
def published(tmp_path_factory) -> Path:
    """The tiny model's fp32 CPU engine built, gated and published with the real plugins; its fp16 cell built and
    gated (it fails parity: zero tolerance), and a second model whose build fails (its manifest names an input
    the model does not have)."""
    folder = tmp_path_factory.mktemp("published")
    _model(folder / "tiny.onnx")
    broken = DYNAMIC.replace("INPUT", "image").replace("name: tiny", "name: broken").replace("models:\n", "")
    (folder / "m.yaml").write_text(HEAD + CPU + DYNAMIC.replace("INPUT", "x") + broken)
    fp32, fp16 = "tiny/fp32/default@cpu+ort1.31", "tiny/fp16/default@cpu+ort1.31"
    for verb in ("build", "gate"):
        proc = run(verb, "m.yaml", "--only", fp32, "--only", fp16, cwd=folder)
        assert proc.returncode in (0, 3), proc.stdout + proc.stderr
    proc = run("publish", "m.yaml", "--only", fp32, cwd=folder)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = run("build", "m.yaml", "--only", "broken/fp32/default@cpu+ort1.31", cwd=folder)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    return folder


@pytest.mark.parametrize("args,message,hint", [
    (("--gpu", "sm"), "unknown --gpu 'sm'", "a compute capability such as sm90 or 9.0, or none"),
    (("--gpu", "h100"), "unknown --gpu 'h100'", "did you mean sm90 (the H100's compute capability)?"),
    (("--gpu", "sm_9x"), "unknown --gpu 'sm_9x'", "a compute capability such as sm90 or 9.0, or none"),
    (("--precision", "fp61"), "unknown --precision 'fp61'", "one of: fp32, fp16, bf16, int8, fp8"),
])
def test_pull_refuses_unknown_gpu_and_precision_values(published, args, message, hint):
    proc = run("pull", "tiny", "--registry", "artifacts", "-o", "out.engine", *args, cwd=published)
    _no_traceback(proc)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr and hint in proc.stderr
    assert not (published / "out.engine").exists()


@pytest.mark.parametrize("gpu", ["none", "sm90", "9.0", "SM89", "cpu"])
def test_pull_still_takes_the_documented_gpu_forms(published, gpu):
    # only a CPU engine is published: a declared GPU takes it when asked (--allow-cpu, issue 22.2)
    allow = () if gpu in ("none", "cpu") else ("--allow-cpu",)
    proc = run("pull", "tiny", "--registry", "artifacts", "--gpu", gpu, *allow, "--json", cwd=published)
    _no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["address"] == "tiny/fp32/default@cpu+ort1.31"


def test_plan_shows_the_last_local_outcome(published):
    proc = run("plan", "m.yaml", "--json", cwd=published)
    _no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    cells = {c["address"]: c for c in json.loads(proc.stdout)["cells"]}
    assert cells["tiny/fp32/default@cpu+ort1.31"]["status"] == "up-to-date"
    assert cells["tiny/fp32/default@cpu+ort1.31"]["local"]["status"] == "gated"

    failed = cells["broken/fp32/default@cpu+ort1.31"]
    assert failed["status"] == "build" and failed["local"]["status"] == "failed"
    assert failed["local"]["step"] == "build" and "does not have" in failed["local"]["detail"]
    assert failed["local"]["at"] and failed["local"]["run"].startswith("runs/build-")

    gate_failed = cells["tiny/fp16/default@cpu+ort1.31"]
    assert gate_failed["status"] == "build" and gate_failed["local"]["status"] == "gate-failed"
    assert gate_failed["local"]["step"] == "gate:parity"

    never = cells["broken/fp16/default@cpu+ort1.31"]
    assert never["status"] == "build" and never["local"] is None  # never tried here

    table = run("plan", "m.yaml", cwd=published).stdout.splitlines()

    def why(address: str) -> list[str]:  # a cell's reasons: one per line, from its row on (issue 22.7)
        at = next(i for i, line in enumerate(table) if address in line)
        return [table[at].split(address, 1)[1]] + [line.strip() for line in table[at + 1:at + 3]]

    lines = why("broken/fp32/default@cpu+ort1.31")
    assert lines[0].rstrip().endswith("not published") and lines[1].startswith("last build here failed"), lines
    assert "built here; parity gate failed" in why("tiny/fp16/default@cpu+ort1.31")[1]
    row = next(line for line in table if "broken/fp16/default@cpu+ort1.31" in line)
    assert row.rstrip().endswith("not published")
    markdown = run("plan", "m.yaml", "--markdown", cwd=published).stdout
    assert "last build here failed" in markdown


def test_a_failure_of_other_inputs_is_not_shown_for_the_current_ones(folder):
    """The failure is tied to the build key it happened under (run records carry node keys): after the manifest
    changes the cell's inputs, `plan` no longer blames the new build for the old failure."""
    (folder / "m.yaml").write_text(HEAD + CPU + DYNAMIC.replace("INPUT", "image"))
    address = "tiny/fp32/default@cpu+ort1.31"
    assert run("build", "m.yaml", "--only", address, cwd=folder).returncode == 1

    def local():
        proc = run("plan", "m.yaml", "--json", cwd=folder)
        assert proc.returncode == 0, proc.stderr
        return {c["address"]: c for c in json.loads(proc.stdout)["cells"]}[address]["local"]

    assert local()["status"] == "failed"
    (folder / "m.yaml").write_text(HEAD + CPU + DYNAMIC.replace("INPUT", "image").replace("max: [4,", "max: [8,"))
    assert local() is None
