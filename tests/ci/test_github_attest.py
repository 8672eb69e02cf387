"""The generated workflow attests what it publishes with GitHub's artifact attestations (issue 27.2): the
SHA-pinned actions/attest-build-provenance after the publish step, fed the published engines' checksums, with
`id-token: write` and `attestations: write` granted to the publish job alone; actionlint, the workflow schema
and zizmor stay clean."""

from __future__ import annotations

import yaml

from orchestrator.app.ci import workflow_files
from trt_orchestrator_plugins.ci.github import ACTIONS, WORKFLOW_PATH

from .ci_fixtures import actionlint, check_jsonschema, model_entry, trt_target, write_manifest, zizmor

ATTEST = ACTIONS["attest_build_provenance"]


def _workflow(tmp_path):
    repo = tmp_path / "repo"
    manifest = write_manifest(repo / "manifests", "fleet.yaml", [model_entry("det")],
                              [trt_target("l4", "8.9", ["gpu", "sm89", "trt10.13"])])
    files = workflow_files("github", [str(manifest.relative_to(repo))], repo)
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    return repo, yaml.safe_load(files[WORKFLOW_PATH])


def test_publish_job_attests_with_the_pinned_action(tmp_path):
    repo, wf = _workflow(tmp_path)
    jobs = wf["jobs"]
    granted = {name for name, job in jobs.items()
               if {"id-token", "attestations"} & set(job.get("permissions") or {})}
    assert granted == {"publish"} and wf["permissions"] == {}
    assert jobs["publish"]["permissions"]["id-token"] == "write"
    assert jobs["publish"]["permissions"]["attestations"] == "write"
    steps = jobs["publish"]["steps"]
    names = [s.get("name") for s in steps]
    publish, attest = steps[names.index("Publish")], steps[names.index("Attest the published engines")]
    assert names.index("Attest the published engines") > names.index("Publish")
    assert "--checksums published.sha256" in publish["run"]
    assert attest["uses"] == f"{ATTEST[0]}@{ATTEST[1]}"  # the comment `# v3.0.0` is YAML's, not the value's
    assert len(ATTEST[1]) == 40 and attest["with"] == {"subject-checksums": "published.sha256"}
    assert "hashFiles('published.sha256')" in attest["if"]
    text = (repo / WORKFLOW_PATH).read_text()
    assert f"{ATTEST[0]}@{ATTEST[1]} # {ATTEST[2]}" in text


def test_workflow_with_attestation_lints_clean(tmp_path):
    repo, _ = _workflow(tmp_path)
    assert actionlint(repo / WORKFLOW_PATH) == []
    proc = check_jsonschema(repo / WORKFLOW_PATH, "--builtin-schema", "vendor.github-workflows")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert zizmor(repo) == []
