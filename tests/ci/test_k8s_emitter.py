"""The Kubernetes emitter: Indexed Jobs validated against Kubernetes' own JSON schemas (the `kubernetes-validate`
package ships them: batch/v1 Job, v1 ConfigMap), shard lookup by completion index, no dynamic text in the shell."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from orchestrator import plugins
from orchestrator.errors import CIError
from trt_orchestrator_plugins.ci.k8s import OUTPUT_PATH, emitter, node_selector

from .ci_fixtures import (
    HOSTILE,
    HOSTILE_LABELS,
    hostile_manifest,
    model_entry,
    plan_for_workflow,
    plan_of,
    trt_target,
    write_manifest,
)

K8S_VERSION = "1.30"  # backoffLimitPerIndex is beta from 1.29; the schemas of 1.30 know it


@pytest.fixture
def plan(tmp_path: Path):
    return plan_of(write_manifest(tmp_path, "fleet.yaml", [model_entry("det", ["fp32", "fp16"]), model_entry("cls")], [
        trt_target("l4", "8.9", ["gpu", "sm89"]),
        trt_target("l4-old", "8.9", ["gpu", "sm89"], gate=["gpu", "sm89", "bench"], version="10.12.0.36"),
        trt_target("a10", "8.6", ["self-hosted", "gpu", "sm86"]),
    ]))


def documents(plan, **kw) -> list[dict]:
    files = emitter.render(plan, ["manifests/fleet.yaml"], **kw)
    assert list(files) == [OUTPUT_PATH]
    return list(yaml.safe_load_all(files[OUTPUT_PATH]))


def test_registered_through_entry_points():
    assert plugins.load(plugins.CI, "k8s-indexed-job") is emitter


def test_validates_against_the_kubernetes_schemas(plan):
    kubernetes_validate = pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate (Kubernetes JSON schemas) is missing: "
                                      "run scripts/install-ci-tools.sh")
    docs = documents(plan, namespace="ml")
    assert [d["kind"] for d in docs] == ["ConfigMap", "Job", "Job"]
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    # and the validator does reject a malformed Job (negative control)
    broken = json.loads(json.dumps(docs[1]))
    broken["spec"]["completionMode"] = 3
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_one_indexed_job_per_build_label_set(plan):
    config, *jobs = documents(plan)
    groups = {}
    for shard in plan.shards:
        groups.setdefault(shard.build_labels, []).append(shard.id)
    assert len(jobs) == len(groups) == 2
    for job in jobs:
        labels = tuple(json.loads(job["metadata"]["annotations"]["trt-orchestrator/runner-labels"]))
        spec = job["spec"]
        assert spec["completionMode"] == "Indexed"
        assert spec["completions"] == spec["parallelism"] == len(groups[labels])
        pod = spec["template"]["spec"]
        assert pod["restartPolicy"] == "Never"
        assert pod["nodeSelector"] == {f"trt-orchestrator/label-{label}": "true"
                                       for label in labels if label != "self-hosted"}
        items = pod["volumes"][0]["configMap"]["items"]
        shards_key = next(i["key"] for i in items if i["path"] == "shards.txt")
        assert config["data"][shards_key].splitlines() == sorted(groups[labels])
    assert json.loads(config["data"]["plan.json"]) == plan.to_json()


def test_the_script_is_static_and_picks_the_shard_by_completion_index(plan, tmp_path):
    config, *jobs = documents(plan)
    scripts = {job["spec"]["template"]["spec"]["containers"][0]["command"][2] for job in jobs}
    assert len(scripts) == 1, "every Job runs the same script: shard ids live in the ConfigMap"
    script = scripts.pop()
    for shard in plan.shards:
        assert shard.id not in script
    # Run it for real with a stand-in `orchestrate` that prints its arguments.
    job = next(j for j in jobs if j["spec"]["completions"] == 2)
    items = job["spec"]["template"]["spec"]["volumes"][0]["configMap"]["items"]
    plan_dir = tmp_path / "plan"
    plan_dir.mkdir()
    for item in items:
        (plan_dir / item["path"]).write_text(config["data"][item["key"]])
    fake = tmp_path / "bin" / "orchestrate"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho "$@"\n')
    fake.chmod(0o755)
    local = script.replace("/plan/", f"{plan_dir}/")
    wanted = (plan_dir / "shards.txt").read_text().splitlines()
    for index, shard in enumerate(wanted):
        proc = subprocess.run(["/bin/sh", "-c", local], capture_output=True, text=True, timeout=30,
                              env={"PATH": f"{fake.parent}:/usr/bin:/bin", "JOB_COMPLETION_INDEX": str(index)})
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines() == [f"build --plan {plan_dir}/plan.json --shard {shard}",
                                            f"gate --plan {plan_dir}/plan.json --shard {shard}"]
    proc = subprocess.run(["/bin/sh", "-c", local], capture_output=True, text=True, timeout=30,
                          env={"PATH": f"{fake.parent}:/usr/bin:/bin", "JOB_COMPLETION_INDEX": "7"})
    assert proc.returncode == 1 and "no shard at index 7" in proc.stderr


def test_same_plan_same_bytes(plan):
    assert emitter.render(plan, ["b.yaml", "a.yaml"]) == emitter.render(plan, ["a.yaml", "b.yaml"])


def test_hostile_names_stay_out_of_the_script_and_labels_are_refused():
    plan = plan_for_workflow([hostile_manifest()])
    with pytest.raises(CIError, match="cannot be a Kubernetes node label") as info:
        emitter.render(plan, ["manifests/hostile.yaml"])
    assert "letters, digits" in info.value.hint
    # The same hostile model and target names with plain labels: data only, never in the script.
    safe = type(plan)(entries=plan.entries, registry_state=plan.registry_state, manifests=plan.manifests,
                      shards=tuple(type(s)(id=s.id, build_labels=("gpu",), gate_labels=("gpu",), targets=s.targets,
                                           addresses=s.addresses) for s in plan.shards))
    docs = list(yaml.safe_load_all(emitter.render(safe, ["manifests/hostile.yaml"])[OUTPUT_PATH]))
    script = docs[1]["spec"]["template"]["spec"]["containers"][0]["command"][2]
    for bad in HOSTILE + HOSTILE_LABELS:
        assert bad not in script
    assert json.loads(docs[0]["data"]["plan.json"]) == safe.to_json()


@pytest.mark.parametrize("labels, expected", [
    (("self-hosted", "gpu", "sm89"), {"trt-orchestrator/label-gpu": "true", "trt-orchestrator/label-sm89": "true"}),
    ((), {}),
])
def test_node_selector(labels, expected):
    assert node_selector(labels) == expected


@pytest.mark.parametrize("kwargs", [{"name": "Engines"}, {"namespace": "a b"}, {"image": "x y"}])
def test_bad_options_are_refused(plan, kwargs):
    with pytest.raises(CIError):
        emitter.render(plan, ["m.yaml"], **kwargs)
