"""`orchestrate upgrade-check` (issue 26.2) as a command: help, the JSON document, exit codes (0; 2 with
--detailed-exitcode when an engine stops loading, as `plan --detailed-exitcode` says "changes"), usage errors that
name the option and the forms it takes, --inventory, and --build for TensorRT targets refused on this runner (no
TensorRT here) with the reason, publishing nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .test_cli import MANIFEST, _model, run

TRT = MANIFEST.replace("registry: {store: local, path: artifacts}", """\
  - name: a10
    builder: tensorrt
    serve: "triton:25.11"
    compute_capability: "8.6"
registry: {store: local, path: artifacts}""")


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    _model(tmp_path / "tiny.onnx")
    (tmp_path / "m.yaml").write_text(TRT)
    return tmp_path


def check(project: Path, *args: str):
    proc = run("upgrade-check", "m.yaml", *args, cwd=project)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def test_help_names_the_options_and_exit_codes(project):
    text = check(project, "--help").stdout
    for word in ("--to", "--from", "--inventory", "--gpus", "--platform", "--build", "--publish",
                 "--detailed-exitcode", "--json", "triton:26.03", "ort1.31", "Exit status"):
        assert word in text, word


def test_triton_upgrade_lists_and_plans_the_rebuild(project):
    proc = check(project, "--from", "triton:25.11", "--to", "triton:26.03", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["format_version"] == 1 and data["exit_code"] == 0
    assert data["from"]["serving"]["tensorrt_version"] == "10.13.3.9"
    assert data["to"]["serving"]["tensorrt_version"] == "10.14.1.48"
    statuses = {e["address"]: e["status"] for e in data["engines"]}
    assert statuses == {"tiny/fp32/default@sm86+trt10.13": "stops", "tiny/fp16/default@sm86+trt10.13": "stops",
                        "tiny/fp32/default@cpu+ort1.31": "other-runtime", "tiny/fp16/default@cpu+ort1.31":
                        "other-runtime", "tiny/fp32/default@sm86-sm89+rtx1.7": "other-runtime",
                        "tiny/fp16/default@sm86-sm89+rtx1.7": "other-runtime"}
    assert sorted(r["address"] for r in data["rebuild"]) == ["tiny/fp16/default@sm86+trt10.14",
                                                             "tiny/fp32/default@sm86+trt10.14"]
    assert all(r["predicted_build"] == {"seconds": None, "records": 0, "basis": "no record"} for r in data["rebuild"])
    assert data["summary"]["stops"] == 2 and data["summary"]["rebuild"] == 2
    detailed = check(project, "--from", "triton:25.11", "--to", "triton:26.03", "--detailed-exitcode")
    assert detailed.returncode == 2
    assert "2 stop loading" in detailed.stdout and "no record" in detailed.stdout
    assert "tiny/fp32/default@sm86+trt10.14" in detailed.stdout


def test_nothing_breaks_exit_0_even_with_detailed_exitcode(project):
    proc = check(project, "--from", "triton:25.11", "--to", "triton:25.12", "--detailed-exitcode", "--json", "--build")
    data = json.loads(proc.stdout)
    assert proc.returncode == 0 and data["summary"]["breaking"] is False and data["rebuild"] == []
    assert data["rehearsal"] is None  # --build with nothing to rebuild builds nothing
    assert data["summary"]["keeps"] == 2


def test_a_runtime_release_as_the_new_stack(project):
    data = json.loads(check(project, "--to", "rtx1.8.0.1", "--json").stdout)
    rtx = [e for e in data["engines"] if e["runtime"] == "tensorrt-rtx"]
    assert {e["status"] for e in rtx} == {"stops"}
    assert {g["gpu"] for e in rtx for g in e["gpus"]} == {"sm86", "sm89"}
    assert all("same RTX release" in e["reason"] for e in rtx)
    assert {r["address"] for r in data["rebuild"]} == {"tiny/fp32/default@sm86-sm89+rtx1.8",
                                                       "tiny/fp16/default@sm86-sm89+rtx1.8"}
    assert {e["status"] for e in data["engines"] if e["runtime"] != "tensorrt-rtx"} == {"other-runtime"}


@pytest.mark.parametrize(("args", "words"), [
    (("--to", "triton:27.01"), ["--to: unknown triton release '27.01'", "known triton releases: 23.05"]),
    (("--to", "rtx1.7.x"), ["--to: 'rtx1.7.x' is not a runtime and release", "triton:25.01", "rtx"]),
    (("--to", "ort1.31", "--from", "rtx1.7.1.116"), ["name different runtimes"]),
    (("--to", "ort1.31", "--publish"), ["--publish publishes what --build rebuilt"]),
    (("--to", "ort1.31", "--gpus", "h100"), ["unknown --gpu 'h100'", "sm90"]),
    (("--to", "ort1.31", "--platform", "linux/sparc"), ["unknown CPU architecture"]),
    (("--from", "ort1.31"), ["Missing option '--to'"]),
])
def test_usage_errors_name_the_option(project, args, words):
    proc = check(project, *args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    for word in words:
        assert word in proc.stderr, (word, proc.stderr)


def test_json_errors_are_json(project):
    proc = check(project, "--to", "triton:27.01", "--json")
    error = json.loads(proc.stdout)["error"]
    assert proc.returncode == 2 and error["exit_code"] == 2 and error["type"] == "UsageError"


@pytest.mark.parametrize(("content", "words"), [
    ("not json", "is not JSON"),
    ('{"out": "/models"}', "has no engines list"),
    ('{"engines": [{"model": "tiny", "gpus": ["sm86"]}]}', "engines[0] needs a digest, a model and its gpus"),
    ('[{"engines": []}, {"engines": [{"model": "tiny", "digest": "sha256:0", "gpus": ["h100"]}]}]',
     "[1]engines[0].gpus: unknown --gpu 'h100'"),
])
def test_a_bad_inventory_is_a_usage_error_naming_it(project, content, words):
    (project / "inv.json").write_text(content)
    proc = check(project, "--to", "ort1.31", "--inventory", "inv.json")
    assert proc.returncode == 2 and words in proc.stderr, proc.stderr
    assert "inv.json" in proc.stderr


def test_an_inventory_engine_not_in_the_registry_is_listed_unknown(project):
    (project / "inv.json").write_text(json.dumps({"engines": [
        {"model": "tiny", "digest": "sha256:" + "0" * 64, "gpus": ["cpu"], "address": "tiny/fp32/default@cpu+ort1.31",
         "path": "/models/tiny/model.cpu.onnx"}]}))
    data = json.loads(check(project, "--to", "ort1.32", "--inventory", "inv.json", "--json").stdout)
    (engine,) = data["engines"]
    assert engine["status"] == "unknown" and "is not in the registry" in engine["reason"]
    assert engine["path"] == "/models/tiny/model.cpu.onnx" and data["summary"]["unknown"] == 1


def test_build_for_tensorrt_is_refused_here_with_the_reason_and_publishes_nothing(project):
    proc = check(project, "--from", "triton:25.11", "--to", "triton:26.03", "--build", "--publish", "--json",
                 "--report", str(project / "r.html"))
    data = json.loads(proc.stdout)
    assert proc.returncode == 1, proc.stderr
    rehearsal = data["rehearsal"]
    assert sorted(rehearsal["not_built"]) == ["tiny/fp16/default@sm86+trt10.14", "tiny/fp32/default@sm86+trt10.14"]
    assert all(why.startswith("skipped: ") and "TensorRT" in why for why in rehearsal["not_built"].values())
    assert rehearsal["published"]["published"] == [] and rehearsal["exit_code"] == 1
    assert not (project / "artifacts").exists()  # nothing reached the store
    assert (project / "r.html").is_file()


def test_what_the_new_version_refuses_in_a_retargeted_target_is_named(project):
    """A target built in NVIDIA's container of its release: no container of TensorRT 10.14.1.48 is known, so the
    re-targeted cell is blocked with the toolchain's reason (as `validate` would say for a manifest declaring it),
    and --build builds nothing."""
    text = TRT.replace('    compute_capability: "8.6"\n', '    compute_capability: "8.6"\n    toolchain: container\n')
    (project / "m.yaml").write_text(text.replace("triton:25.11", "triton:25.01"))  # 10.8.0.43: NGC 25.01
    data = json.loads(check(project, "--from", "triton:25.01", "--to", "triton:26.03", "--json").stdout)
    assert data["rebuild"] and all(r["status"] == "blocked" for r in data["rebuild"])
    assert all(r["problem"].startswith("targets.2.toolchain: toolchain container:") for r in data["rebuild"])
    assert all("10.14.1.48" in r["problem"] for r in data["rebuild"])
    assert data["summary"]["rebuild"] == 0
