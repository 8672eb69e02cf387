"""The GitHub Actions emitter: a Plan -> `.github/workflows/engines.yml` + `.github/actionlint.yaml`.

The workflow's `plan` job runs `orchestrate plan` and turns plan.json into the build matrix at run time
(templates/matrix.py), so the generated file's static content depends only on the manifests' list and their
runner label sets: regenerating it is byte-stable and a diff in review means the fleet changed.

Safety: nothing from a manifest (names, labels, paths) is interpolated into a `run:` script. Static values
(manifest paths, tool spec, Python version) go into the workflow's `env:` as escaped YAML scalars and scripts use
them as "$VAR"; shard ids and labels reach jobs only as matrix data (`env: SHARD`, `runs-on`).
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import PurePosixPath
from typing import Literal

import yaml

from orchestrator.core.model import RegistryConfig
from orchestrator.core.plan import Plan
from orchestrator.errors import CIError

WORKFLOW_PATH = ".github/workflows/engines.yml"
MAX_MATRIX = 256  # GitHub Actions' limit of jobs per matrix
ACTIONLINT_CONFIG_PATH = ".github/actionlint.yaml"
# Repo-relative manifest paths end up in `paths:` filters (globs) and env: keep them to plain path characters.
_SAFE_PATH = re.compile(r"[A-Za-z0-9._/-]+")
_SAFE_PYTHON = re.compile(r"[A-Za-z0-9._-]+")
# A PR label goes into the build job's `if:` as a single-quoted expression string: no quotes, no `$`, no braces.
_SAFE_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._:/+-]{0,49}")
DEFAULT_PR_LABEL = "build-engines"
# What the jobs install when neither the user nor the app says: this repository at the workflow's commit (`.`
# in the checkout), with onnxruntime for the gates' reference (the app passes `.[extras]` from the manifests).
DEFAULT_TOOL_SPEC = ".[ort]"

# Third-party actions pinned by commit (zizmor's unpinned-uses; Dependabot updates the `# vX.Y.Z` comment with the
# SHA). Each SHA is what that major tag resolved to in GitHub runner logs and what other repositories pin with the
# same version comment (researched 2026-11; v4/v5 lines: node20, any runner >= 2.3xx).
ACTIONS = {
    "checkout": ("actions/checkout", "34e114876b0b11c390a56381ad16ebd13914f8d5", "v4.3.1"),
    "setup_python": ("actions/setup-python", "a26af69be951a213d495a4c3e4e4022e16d87065", "v5.6.0"),
    "upload_artifact": ("actions/upload-artifact", "ea165f8d65b6e75b540449e92b4886f43607fa02", "v4.6.2"),
    "download_artifact": ("actions/download-artifact", "d3f86a106a0bac45b974a628896c90dbdf5c8093", "v4.3.0"),
    "cache": ("actions/cache", "0057852bfaa89a56745cba8c7296529d2fc39830", "v4.3.0"),
    # GitHub's artifact attestations (docs/trust.md): the v3.0.0 tag's commit in actions/attest-build-provenance
    "attest_build_provenance": ("actions/attest-build-provenance", "977bb373ede98d70efdf65b84cb5f73e068dcc2a",
                                "v3.0.0"),
}
ActionRefs = Literal["sha", "tags"]


def action_refs(refs: ActionRefs) -> dict[str, str]:
    """`uses:` values: owner/repo@<sha> # vX.Y.Z (default), or owner/repo@vX (``tags``: Dependabot-free repos that
    prefer moving major tags, at zizmor's unpinned-uses finding)."""
    if refs == "tags":
        return {k: f"{repo}@{version.split('.')[0]}" for k, (repo, _, version) in ACTIONS.items()}
    return {k: f"{repo}@{sha} # {version}" for k, (repo, sha, version) in ACTIONS.items()}


def _is_ghcr(url: str | None) -> bool:
    return bool(url) and str(url).lower().startswith("ghcr.io/")


def _secret(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or name.upper().startswith("GITHUB_"):
        raise CIError(f"registry secret name {name!r} cannot be used in a workflow",
                      hint="letters, digits and '_', not starting with a digit or GITHUB_")
    return "${{ secrets." + name + " }}"


def registry_logins(registry: RegistryConfig | None) -> tuple[dict[str, str] | None, dict[str, str] | None]:
    """(read, write) registry logins as workflow expressions, for the environment variables the OCI store reads.
    Write: the publish step only (``registry.credentials``' named secrets; GHCR with none: the job's GITHUB_TOKEN
    with `packages: write`). Read: the plan, build and gate jobs (which read the index and published caches): the
    ``read_*`` secrets, GHCR's token with `packages: read`, or none (anonymous pull)."""
    if registry is None:
        return None, None
    ghcr = {"username": "${{ github.actor }}", "password": "${{ secrets.GITHUB_TOKEN }}"}
    creds = registry.credentials
    if creds is None:
        return (ghcr, ghcr) if _is_ghcr(registry.url) else (None, None)
    write = {"username": _secret(creds.username_secret), "password": _secret(creds.password_secret)}
    read = None
    if creds.read_username_secret and creds.read_password_secret:
        read = {"username": _secret(creds.read_username_secret), "password": _secret(creds.read_password_secret)}
    elif _is_ghcr(registry.url):
        read = ghcr
    return read, write


@lru_cache(maxsize=1)
def _matrix_namespace() -> dict:
    """templates/matrix.py as a module: the workflow runs that very file, the emitter reuses ``runs_on``."""
    source = _template_text("matrix.py")
    namespace: dict = {"__name__": "trt_orchestrator_ci_matrix"}
    exec(compile(source, "templates/matrix.py", "exec"), namespace)  # our own shipped file, not user input
    return namespace


def _template_text(name: str) -> str:
    return (resources.files(__package__) / "templates" / name).read_text(encoding="utf-8")


def runs_on(labels: Sequence[str]) -> list[str]:
    """The `runs-on` list the workflow computes for one label set (see templates/matrix.py)."""
    return list(_matrix_namespace()["runs_on"](labels))


def check_text(what: str, value: str) -> None:
    if "${{" in value or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        raise CIError(f"{what} {value!r} contains '${{{{' or a control character",
                      hint="GitHub would evaluate or split it; use a plain value")


def check_manifest_path(path: str) -> str:
    pure = PurePosixPath(path)
    if (not _SAFE_PATH.fullmatch(path) or pure.is_absolute() or ".." in pure.parts
            or str(pure) != path):
        raise CIError(f"manifest path {path!r} cannot go into a workflow",
                      hint="pass repo-relative paths made of letters, digits, '.', '_', '-' and '/', "
                           "e.g. manifests/vision.yaml")
    return path


def manifests_hash(manifests: Iterable[str]) -> str:
    """Stable per manifest list (order-independent): keys the workflow's concurrency group."""
    text = "\n".join(sorted(set(manifests)))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def custom_labels(plan: Plan) -> list[str]:
    """Every runner label the workflow's jobs can ask for that is neither `self-hosted` nor GitHub-hosted."""
    hosted = _matrix_namespace()["HOSTED_LABELS"]
    labels: set[str] = set()
    for shard in plan.shards:
        for label_set in (shard.build_labels, shard.gate_labels or shard.build_labels):
            labels.update(label for label in label_set if label != "self-hosted" and label not in hosted)
    return sorted(labels)


def _check_matrix_size(plan: Plan) -> None:
    label_sets = {(s.build_labels, s.gate_labels) for s in plan.shards}
    if len(plan.shards) > MAX_MATRIX or len(label_sets) > MAX_MATRIX:
        raise CIError(
            f"the plan has {len(plan.shards)} shards over {len(label_sets)} runner label sets, more than the "
            f"{MAX_MATRIX} jobs one GitHub Actions matrix can hold",
            hint="give targets that run on the same machines the same runner labels, or split the manifests "
                 "into several workflows (`orchestrate ci github` per manifest group, each with its own "
                 "--output path)")


def _q(value: str) -> str:
    """A YAML double-quoted scalar: JSON escaping is valid YAML and leaves no raw newline or quote."""
    return json.dumps(value, ensure_ascii=True)


def _environment():
    import jinja2  # edge dependency: only needed when rendering

    env = jinja2.Environment(
        block_start_string="[%", block_end_string="%]",
        variable_start_string="[=", variable_end_string="=]",
        comment_start_string="[#", comment_end_string="#]",
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False,
        loader=jinja2.FunctionLoader(lambda name: _template_text(name)),
    )
    env.filters["q"] = _q
    env.filters["sq"] = lambda value: "'" + value + "'"  # only for values checked against _SAFE_LABEL
    return env


def regenerate_command(manifests: Sequence[str], *, tool_spec: str | None, python: str, workflow_path: str,
                       pr_build_label: str, refs: ActionRefs) -> str:
    """The exact command that writes these files again (the files' headers state it); a tool spec only when the
    user pinned one."""
    argv = ["orchestrate", "ci", "github", *manifests]
    if tool_spec is not None:
        argv += ["--tool-spec", tool_spec]
    if python != "3.11":
        argv += ["--python", python]
    if workflow_path != WORKFLOW_PATH:
        argv += ["-o", workflow_path]
    if pr_build_label != DEFAULT_PR_LABEL:
        argv += ["--pr-build-label", pr_build_label]
    if refs != "sha":
        argv += ["--action-refs", refs]
    return shlex.join(argv)


def render_actionlint_config(labels: Sequence[str], regenerate: str = "orchestrate ci github") -> str:
    head = ("# Generated by `orchestrate ci github`: the self-hosted runner labels the engine workflow uses,\n"
            f"# declared so actionlint accepts them. Do not edit: regenerate it with\n#   {regenerate}\n")
    body = {"self-hosted-runner": {"labels": sorted(set(labels))}}
    return head + yaml.safe_dump(body, sort_keys=True, default_flow_style=False, allow_unicode=False,
                                 default_style=None, width=10_000)


@dataclass(frozen=True)
class GitHubEmitter:
    name: str = "github"
    max_shards: int | None = MAX_MATRIX

    def render(self, plan: Plan, manifests: list[str], *, tool_spec: str | None = None,
               default_tool_spec: str = DEFAULT_TOOL_SPEC, python: str = "3.11",
               workflow_path: str = WORKFLOW_PATH, registry: RegistryConfig | None = None,
               lfs: bool = False, pr_build_label: str = DEFAULT_PR_LABEL,
               action_refs_mode: ActionRefs = "sha", output_path: str | None = None) -> dict[str, str]:
        """The workflow and `.github/actionlint.yaml`, as {repo-relative path: text}. Same plan, same bytes.

        Pass a plan made against an empty index (``orchestrator.app.ci.workflow_plan``) so the output depends only on
        the manifests; the real matrix is computed at run time from the plan the workflow itself makes.
        ``tool_spec`` None: the jobs install ``default_tool_spec`` (this repository at the workflow's commit)."""
        if not manifests:
            raise CIError("no manifests given", hint="pass the manifest files the workflow should plan")
        paths = sorted({check_manifest_path(p) for p in manifests})
        check_manifest_path(workflow_path)
        spec = tool_spec if tool_spec is not None else default_tool_spec
        check_text("tool spec", spec)
        if not spec.strip():
            raise CIError("empty tool spec", hint="pass a pip requirement, e.g. trt-orchestrator==0.1.0")
        if not _SAFE_PYTHON.fullmatch(python):
            raise CIError(f"python version {python!r} is not a plain version", hint="e.g. 3.11")
        if not _SAFE_LABEL.fullmatch(pr_build_label):
            raise CIError(f"PR build label {pr_build_label!r} cannot go into a workflow condition",
                          hint="letters, digits, spaces and . _ : / + -, at most 50 characters")
        if action_refs_mode not in ("sha", "tags"):
            raise CIError(f"unknown action refs {action_refs_mode!r}", hint="sha or tags")
        _check_matrix_size(plan)
        regenerate = regenerate_command(paths, tool_spec=tool_spec, python=python,
                                        workflow_path=output_path or workflow_path,
                                        pr_build_label=pr_build_label, refs=action_refs_mode)
        check_text("regenerate command", regenerate)

        read_login, write_login = registry_logins(registry)
        matrix = _matrix_namespace()
        has_gate_job = any(matrix["runs_on"](s.gate_labels or s.build_labels) != matrix["runs_on"](s.build_labels)
                           for s in plan.shards)
        workflow = _environment().get_template("engines.yml.j2").render(
            manifests=paths,
            trigger_paths=sorted(set(paths) | {"manifests/**", workflow_path}),
            manifests_hash=manifests_hash(paths),
            manifests_env="\n".join(paths),
            tool_spec=spec,
            python=python,
            matrix_script=_template_text("matrix.py").rstrip("\n"),
            has_gate_job=has_gate_job,
            publish_needs=["plan", "build", "gate"] if has_gate_job else ["plan", "build"],
            actions=action_refs(action_refs_mode),
            regenerate=regenerate,
            lfs=lfs,
            pr_build_label=pr_build_label,
            credentials=write_login,
            read_login=read_login,
            ghcr=registry is not None and _is_ghcr(registry.url),
        )
        return {workflow_path: workflow,
                ACTIONLINT_CONFIG_PATH: render_actionlint_config(custom_labels(plan), regenerate)}


emitter = GitHubEmitter()
