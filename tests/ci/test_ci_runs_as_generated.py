"""The generated CI runs as generated (issue 22.10): by default every job installs the tool from the repository
itself, at the pipeline's own commit (`.` in the checkout, with the extras the manifests need), not from a package
name no index has; and `orchestrate ci github|gitlab` warns, with the manifest's file:line:col and the fix, about
model files a fresh checkout will not have and about a registry that is a directory on one runner.

The repository is a real git repository in a temp folder; the commands run through the real CLI in a subprocess.
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

from orchestrator.app import ci as app_ci
from tests.conftest import make_tiny_model
from trt_orchestrator_plugins.ci.github import WORKFLOW_PATH

from .ci_fixtures import REPO, model_entry, trt_target

SHA = "2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2"


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=root, check=True,
                   capture_output=True, timeout=60)


def orchestrate(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ORCHESTRATE_CACHE": str(root / ".orchestrate"), "COLUMNS": "200"}
    env.pop("ORCHESTRATE_REGISTRY", None)
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=300)


def write(root: Path, name: str, models: list[dict], registry: dict | None = None) -> str:
    doc = {"manifest_version": 1, "models": models, "targets": [trt_target("l4", "8.9", ["self-hosted", "l4"])]}
    if registry is not None:
        doc["registry"] = registry
    path = root / "manifests" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return f"manifests/{name}"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository: one model committed, one in Git LFS (committed pointer), one git-ignored download, one
    fetched by pinned url; the manifest's registry is a local directory."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    root = tmp_path / "repo"
    (root / "manifests" / "models").mkdir(parents=True)
    git(root, "init", "-q")
    for name in ("committed", "lfs", "ignored"):
        make_tiny_model(root / "manifests" / "models" / f"{name}.onnx")  # validate reads it: text is no model
    # the tool's own repository (or a fork): what the default tool spec `.[extras]` installs in every job
    (root / "pyproject.toml").write_text('[project]\nname = "trt-orchestrator"\nversion = "0.1.0"\n')
    (root / ".gitignore").write_text("manifests/models/ignored.onnx\n")
    (root / ".gitattributes").write_text("manifests/models/lfs.onnx filter=lfs diff=lfs merge=lfs -text\n")
    url = model_entry("fetched")
    url["source"] = {"url": "https://models.example/fetched.onnx", "sha256": SHA}
    write(root, "fleet.yaml", [model_entry("committed"), model_entry("lfs"), model_entry("ignored"), url],
          registry={"store": "local", "path": "../artifacts"})
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "fleet")
    return root


def lines_of(manifest: Path, text: str) -> int:
    return next(i for i, line in enumerate(manifest.read_text().splitlines(), 1) if text in line)


@pytest.mark.parametrize("kind, out", [("github", ".github/workflows/engines.yml"), ("gitlab", ".gitlab-ci.yml")])
def test_warns_about_what_a_checkout_lacks(repo: Path, kind: str, out: str):
    proc = orchestrate(repo, "ci", kind, "manifests/fleet.yaml")
    assert proc.returncode == 0, proc.stderr
    assert (repo / out).is_file(), "the files are written; the warnings say what the repository lacks"
    manifest = repo / "manifests" / "fleet.yaml"
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    ignored = lines_of(manifest, "path: models/ignored.onnx")
    registry = lines_of(manifest, "registry:")
    assert len(warnings) == 2, proc.stderr
    assert warnings[0].startswith(f"warning: manifests/fleet.yaml:{ignored}:")
    assert "models[ignored].source.path: manifests/models/ignored.onnx is not committed" in warnings[0]
    assert warnings[1].startswith(f"warning: manifests/fleet.yaml:{registry}:1: registry: a local store")
    assert "git lfs track" in proc.stderr and "store: oci" in proc.stderr  # each with its fix
    for fine in ("committed", "lfs", "fetched"):
        assert f"models[{fine}]" not in proc.stderr


def test_an_oci_registry_and_committed_models_give_no_warning(repo: Path):
    write(repo, "clean.yaml", [model_entry("committed")], registry={"store": "oci", "url": "ghcr.io/acme/engines"})
    proc = orchestrate(repo, "ci", "github", "manifests/clean.yaml")
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr


def test_outside_a_git_repository_it_says_it_cannot_tell(repo: Path):
    shutil.rmtree(repo / ".git")
    proc = orchestrate(repo, "ci", "github", "manifests/fleet.yaml")
    assert proc.returncode == 0
    assert "not a git repository: cannot tell whether the model files are committed" in proc.stderr


@pytest.mark.parametrize("kind", ["github", "gitlab"])
def test_a_repository_that_only_uses_the_tool_is_told_to_pin_it(repo: Path, kind: str):
    """Without a pyproject.toml the default `.[extras]` would fail every job's first step: said at generation,
    with the fix; a pinned --tool-spec needs no warning."""
    (repo / "pyproject.toml").unlink()
    write(repo, "clean.yaml", [model_entry("committed")], registry={"store": "oci", "url": "ghcr.io/acme/engines"})
    proc = orchestrate(repo, "ci", kind, "manifests/clean.yaml")
    assert proc.returncode == 0, proc.stderr
    (warning,) = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert "would install '.[oci,ort]'" in warning and "no pyproject.toml" in warning, proc.stderr
    assert "--tool-spec 'trt-orchestrator[ort,oci]==VERSION'" in proc.stderr
    pinned = orchestrate(repo, "ci", kind, "manifests/clean.yaml", "--tool-spec", "trt-orchestrator[oci,ort]==0.1.0")
    assert pinned.returncode == 0 and "warning" not in pinned.stderr, pinned.stderr


def test_by_default_jobs_install_this_repository_at_the_workflows_commit(repo: Path):
    write(repo, "oci.yaml", [model_entry("committed", ["fp32", "fp16"])],
          registry={"store": "oci", "url": "ghcr.io/acme/engines"})
    assert orchestrate(repo, "ci", "github", "manifests/oci.yaml").returncode == 0
    workflow = (repo / ".github/workflows/engines.yml").read_text()
    assert yaml.safe_load(workflow)["env"]["TOOL_SPEC"] == ".[oci,ort,transforms]"
    assert "--tool-spec" not in workflow.splitlines()[1], "the header's command is the one that was run"
    assert orchestrate(repo, "ci", "gitlab", "manifests/oci.yaml").returncode == 0
    pipeline = yaml.safe_load((repo / ".gitlab-ci.yml").read_text())
    assert pipeline["plan"]["variables"]["TOOL_SPEC"] == {"value": ".[oci,ort,transforms]", "expand": False}
    # a pinned spec is kept, and stated in the header
    assert orchestrate(repo, "ci", "github", "manifests/oci.yaml", "--tool-spec", "trt-orchestrator==0.1.0"
                       ).returncode == 0
    workflow = (repo / ".github/workflows/engines.yml").read_text()
    assert yaml.safe_load(workflow)["env"]["TOOL_SPEC"] == "trt-orchestrator==0.1.0"
    assert "--tool-spec trt-orchestrator==0.1.0" in workflow.splitlines()[1]


@pytest.mark.integration
def test_the_default_spec_installs_from_this_repository():
    """What the jobs run, `pip install "$TOOL_SPEC"` in the checkout of this repository, resolves: pip builds the
    project's metadata and finds every requirement (``--dry-run``: nothing is installed)."""
    files = app_ci.workflow_files("github", ["manifests/demo.yaml"], REPO)
    spec = yaml.safe_load(files[WORKFLOW_PATH])["env"]["TOOL_SPEC"]
    assert spec == ".[ort,transforms]"  # the demo: a local store, fp16 by transform
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--report", "-",
                          "--disable-pip-version-check", spec], cwd=REPO, capture_output=True, text=True,
                         timeout=600)
    assert pip.returncode == 0, pip.stderr[-3000:]
    (tool,) = [item for item in json.loads(pip.stdout)["install"] if item["metadata"]["name"] == "trt-orchestrator"]
    assert sorted(tool["requested_extras"]) == ["ort", "transforms"]
