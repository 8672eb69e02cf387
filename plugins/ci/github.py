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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import PurePosixPath

import yaml

from orchestrator.core.plan import Plan
from orchestrator.errors import CIError

WORKFLOW_PATH = ".github/workflows/engines.yml"
MAX_MATRIX = 256  # GitHub Actions' limit of jobs per matrix
ACTIONLINT_CONFIG_PATH = ".github/actionlint.yaml"
# Repo-relative manifest paths end up in `paths:` filters (globs) and env: keep them to plain path characters.
_SAFE_PATH = re.compile(r"[A-Za-z0-9._/-]+")
_SAFE_PYTHON = re.compile(r"[A-Za-z0-9._-]+")


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


def _check_text(what: str, value: str) -> None:
    if "${{" in value or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        raise CIError(f"{what} {value!r} contains '${{{{' or a control character",
                      hint="GitHub would evaluate or split it; use a plain value")


def _check_manifest_path(path: str) -> str:
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
    return env


def render_actionlint_config(labels: Sequence[str]) -> str:
    head = ("# Generated by `orchestrate ci github`: the self-hosted runner labels the engine workflow uses,\n"
            "# declared so actionlint accepts them. Do not edit: regenerate it.\n")
    body = {"self-hosted-runner": {"labels": sorted(set(labels))}}
    return head + yaml.safe_dump(body, sort_keys=True, default_flow_style=False, allow_unicode=False,
                                 default_style=None, width=10_000)


@dataclass(frozen=True)
class GitHubEmitter:
    name: str = "github"
    max_shards: int | None = MAX_MATRIX

    def render(self, plan: Plan, manifests: list[str], *, tool_spec: str = "trt-orchestrator",
               python: str = "3.11", workflow_path: str = WORKFLOW_PATH) -> dict[str, str]:
        """The workflow and `.github/actionlint.yaml`, as {repo-relative path: text}. Same plan, same bytes.

        Pass a plan made against an empty index (``orchestrator.app.ci.workflow_plan``) so the output depends only on
        the manifests; the real matrix is computed at run time from the plan the workflow itself makes."""
        if not manifests:
            raise CIError("no manifests given", hint="pass the manifest files the workflow should plan")
        paths = sorted({_check_manifest_path(p) for p in manifests})
        _check_manifest_path(workflow_path)
        _check_text("tool spec", tool_spec)
        if not tool_spec.strip():
            raise CIError("empty tool spec", hint="pass a pip requirement, e.g. trt-orchestrator==0.1.0")
        if not _SAFE_PYTHON.fullmatch(python):
            raise CIError(f"python version {python!r} is not a plain version", hint="e.g. 3.11")
        _check_matrix_size(plan)

        matrix = _matrix_namespace()
        has_gate_job = any(matrix["runs_on"](s.gate_labels or s.build_labels) != matrix["runs_on"](s.build_labels)
                           for s in plan.shards)
        workflow = _environment().get_template("engines.yml.j2").render(
            manifests=paths,
            trigger_paths=sorted(set(paths) | {"manifests/**", workflow_path}),
            manifests_hash=manifests_hash(paths),
            manifests_env="\n".join(paths),
            tool_spec=tool_spec,
            python=python,
            matrix_script=_template_text("matrix.py").rstrip("\n"),
            has_gate_job=has_gate_job,
            publish_needs=["plan", "build", "gate"] if has_gate_job else ["plan", "build"],
        )
        return {workflow_path: workflow, ACTIONLINT_CONFIG_PATH: render_actionlint_config(custom_labels(plan))}


emitter = GitHubEmitter()
