"""The GitLab CI emitter: a committed parent pipeline (`.gitlab-ci.yml`) and, at run time, a child pipeline.

Parent (``pipeline="parent"``, rendered from the manifests' list only, like the GitHub workflow): a ``plan`` job
runs `orchestrate plan` and `orchestrate ci gitlab-child`, keeping plan.json and child-pipeline.yml as artifacts;
an ``engines`` trigger job runs that child (``strategy: depend``, so the parent ends as the child ends). Merge
requests plan only; pushes to the default branch and manual runs (``web``) also build.

Child (``pipeline="child"``, rendered from plan.json in the plan job, same plan -> same bytes): one
``build:<shard>`` job per shard on the runners tagged with its build labels, in its toolchain (a container image,
a cached virtual environment of pinned wheels, or the runner as it is); a ``gate:<shard>`` job where the gate
runners differ; one ``publish`` job that runs even when some shards failed (``orchestrate publish`` publishes
what passed and exits non-zero when anything was held back) and is the only job given registry credentials.

GitLab specifics: ``self-hosted`` is a GitHub convention, not a tag, and a GitHub-hosted label (``ubuntu-latest``)
means "any runner": such jobs get no tags and a Python image. GitLab has no per-job GPU switch: a runner for
container shards enables GPUs in its own config (docs/ci.md). A job's ``needs:`` is capped at 50
(``ci_needs_size_limit``): publish needs the parent's plan job plus one job per shard, hence ``MAX_SHARDS``.

Safety: the YAML is ``yaml.safe_dump`` of a dict, so every value is an escaped scalar, and every ``script:`` line
is a constant of this module. Values (shard ids, pins, the tool spec) reach scripts only through ``variables:``
(``expand: false`` where GitLab would otherwise expand ``$``); labels become ``tags:`` (refused when GitLab would
expand or split them), images ``image:`` (checked as image references).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import yaml

from orchestrator.core.model import RegistryConfig
from orchestrator.core.plan import Plan, Shard
from orchestrator.core.toolchain import IMAGE_RE, INDEX_URL_RE, REQUIREMENT_RE, ResolvedToolchain
from orchestrator.errors import CIError
from trt_orchestrator_plugins.ci.github import DEFAULT_TOOL_SPEC, check_manifest_path, check_text, runs_on

PIPELINE_PATH = ".gitlab-ci.yml"
CHILD_PATH = "child-pipeline.yml"
PLAN_PATH = "plan.json"
DEFAULT_PYTHON = "3.11"
MAX_NEEDS = 50  # GitLab's default ci_needs_size_limit (jobs one job may list in `needs:`)
MAX_SHARDS = MAX_NEEDS - 1  # publish needs the parent's plan job and one job per shard
NODES_DIR = ".orchestrate/nodes"
CACHES_DIR = ".orchestrate/caches"
TOOLCHAIN_VENV = ".orchestrate/toolchain/venv"  # pip toolchain: cached, one cache key per exact pin set
RUNNER_VENV = ".orchestrate/venv"  # runner toolchain: the machine's Python (and its TensorRT) plus orchestrate
Pipeline = Literal["parent", "child"]

_SAFE_PYTHON = re.compile(r"[0-9]+(\.[0-9]+){0,2}")
_SHARD_ID = re.compile(r"[A-Za-z0-9_.@~+-]{1,200}")
_CACHE_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}")
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")
# A registry URL naming GitLab's own container registry: the job token logs in (CI_REGISTRY_USER/PASSWORD).
_GITLAB_REGISTRY = ("$CI_REGISTRY", "${CI_REGISTRY}", "registry.gitlab.com")

_PLAN_FROM_PARENT = {"pipeline": "$PARENT_PIPELINE_ID", "job": "plan"}
_INSTALL_TOOL = 'python -m pip install "$TOOL_SPEC"'
# toolchain kind -> the job's install lines (before_script). Constants: values come from `variables:`.
_INSTALL = {
    "container": [
        # the image's own Python has TensorRT; PEP 668 images refuse a plain system-wide install
        'PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install "$TOOL_SPEC"',
    ],
    "pip": [
        f'[ -x {TOOLCHAIN_VENV}/bin/python ] || python3 -m venv {TOOLCHAIN_VENV}',
        f'export PATH="$PWD/{TOOLCHAIN_VENV}/bin:$PATH"',
        "printf '%s\\n' \"$TOOLCHAIN_REQUIREMENTS\" > .orchestrate/toolchain/requirements.txt",
    ],
    "runner": [
        f"python3 -m venv --system-site-packages {RUNNER_VENV}",
        f'export PATH="$PWD/{RUNNER_VENV}/bin:$PATH"',
        _INSTALL_TOOL,
    ],
}
_PIP_REQUIREMENTS = "python -m pip install -r .orchestrate/toolchain/requirements.txt"
_PIP_REQUIREMENTS_INDEX = _PIP_REQUIREMENTS + ' --extra-index-url "$TOOLCHAIN_INDEX_URL"'


# -- checks ----------------------------------------------------------------------------------------------------

def gitlab_tags(labels: Sequence[str]) -> list[str]:
    """A runner label set as GitLab job tags: without `self-hosted`; none for one GitHub-hosted label (any runner).
    Refuses what GitLab would expand (`$`), split (`,`: runner registration separates tags by commas) or trim."""
    on = runs_on(labels)
    if not on or on[0] != "self-hosted":
        return []
    tags = on[1:]
    for tag in tags:
        if (not tag or "$" in tag or "," in tag or tag != tag.strip() or len(tag) > 255
                or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in tag)):
            raise CIError(f"runner label {tag!r} cannot be a GitLab runner tag",
                          hint="GitLab expands '$' in tags and registers tags separated by commas: use letters, "
                               "digits, '-', '_' and '.' (e.g. gpu, sm89, trt10.13)")
    return tags


def _check_image(what: str, image: str) -> str:
    if not IMAGE_RE.match(image):
        raise CIError(f"{what} {image!r} is not an image reference",
                      hint="registry/path:tag or registry/path@sha256:<64 hex>, e.g. python:3.11-slim")
    return image


def _check_shard(shard: Shard) -> None:
    if not _SHARD_ID.fullmatch(shard.id):
        raise CIError(f"shard id {shard.id!r} in the plan cannot name a GitLab job",
                      hint="re-create the plan with `orchestrate plan --out plan.json` (shard ids are slugs)")
    if shard.cache_key and not _CACHE_KEY.fullmatch(shard.cache_key):
        raise CIError(f"cache key {shard.cache_key!r} of shard {shard.id} cannot key a GitLab cache",
                      hint="re-create the plan with `orchestrate plan --out plan.json`")
    tc = shard.toolchain
    if tc.kind == "container":
        _check_image(f"container image of shard {shard.id}", tc.image)
    elif tc.kind == "pip":
        bad = [r for r in tc.requirements if not REQUIREMENT_RE.match(r)]
        if bad or not tc.requirements:
            raise CIError(f"shard {shard.id}: pip requirements {list(tc.requirements)!r} are not plain pins",
                          hint="re-create the plan with `orchestrate plan --out plan.json`")
        if tc.index_url and not INDEX_URL_RE.match(tc.index_url):
            raise CIError(f"shard {shard.id}: index URL {tc.index_url!r} is not a plain https URL",
                          hint="e.g. https://pypi.nvidia.com")
    elif tc.kind != "runner":
        raise CIError(f"shard {shard.id}: unknown toolchain {tc.kind!r}", hint="runner, container or pip")


def _check_options(tool_spec: str, image: str) -> None:
    check_text("tool spec", tool_spec)
    if not tool_spec.strip():
        raise CIError("empty tool spec", hint="pass a pip requirement, e.g. trt-orchestrator==0.1.0")
    _check_image("image", image)


def _check_size(plan: Plan) -> None:
    if len(plan.shards) > MAX_SHARDS:
        raise CIError(
            f"the plan has {len(plan.shards)} shards: the publish job would need {len(plan.shards) + 1} jobs, more "
            f"than the {MAX_NEEDS} one GitLab job may list in `needs:` (ci_needs_size_limit)",
            hint="give targets that run on the same machines the same runner labels, or split the manifests into "
                 "several pipelines (`orchestrate ci gitlab` per manifest group)")


def publish_variables(registry: RegistryConfig | None) -> dict[str, str]:
    """The publish job's registry login, as the environment variables the OCI store reads: the CI/CD variables
    named in ``registry.credentials``; GitLab's own registry with none: the job's registry token."""
    if registry is None:
        return {}
    if registry.credentials is not None:
        names = (registry.credentials.username_secret, registry.credentials.password_secret)
        for name in names:
            if not _VARIABLE.fullmatch(name):
                raise CIError(f"registry credential variable {name!r} cannot be used in a pipeline",
                              hint="name a CI/CD variable: letters, digits and '_', not starting with a digit")
        return {"ORCHESTRATE_REGISTRY_USERNAME": "$" + names[0], "ORCHESTRATE_REGISTRY_PASSWORD": "$" + names[1]}
    if (registry.url or "").startswith(_GITLAB_REGISTRY):
        return {"ORCHESTRATE_REGISTRY_USERNAME": "$CI_REGISTRY_USER",
                "ORCHESTRATE_REGISTRY_PASSWORD": "$CI_REGISTRY_PASSWORD"}
    return {}


def read_variables(registry: RegistryConfig | None) -> dict[str, str]:
    """The registry login of the jobs that read it (plan: the index; build and gate: published caches): the
    ``read_*`` CI/CD variables of ``registry.credentials``, GitLab's own registry with none: the job token (it
    reads the project's registry); else none (anonymous pull). Never the publish login."""
    if registry is None:
        return {}
    creds = registry.credentials
    if creds is not None and creds.read_username_secret and creds.read_password_secret:
        names = (creds.read_username_secret, creds.read_password_secret)
        for name in names:
            if not _VARIABLE.fullmatch(name):
                raise CIError(f"registry credential variable {name!r} cannot be used in a pipeline",
                              hint="name a CI/CD variable: letters, digits and '_', not starting with a digit")
        return {"ORCHESTRATE_REGISTRY_USERNAME": "$" + names[0], "ORCHESTRATE_REGISTRY_PASSWORD": "$" + names[1]}
    if creds is None and (registry.url or "").startswith(_GITLAB_REGISTRY):
        return {"ORCHESTRATE_REGISTRY_USERNAME": "$CI_REGISTRY_USER",
                "ORCHESTRATE_REGISTRY_PASSWORD": "$CI_REGISTRY_PASSWORD"}
    return {}


# -- the regenerate commands (the files' headers) ---------------------------------------------------------------

def parent_command(manifests: Sequence[str], *, tool_spec: str | None, python: str, image: str | None,
                   output_path: str) -> str:
    argv = ["orchestrate", "ci", "gitlab", *manifests]
    if tool_spec is not None:  # only when the user pinned one
        argv += ["--tool-spec", tool_spec]
    if python != DEFAULT_PYTHON:
        argv += ["--python", python]
    if image is not None:
        argv += ["--image", image]
    if output_path != PIPELINE_PATH:
        argv += ["-o", output_path]
    return " ".join(shlex.quote(arg) for arg in argv)


def child_command(*, plan_path: str, output_path: str, tool_spec: str, image: str) -> str:
    argv = ["orchestrate", "ci", "gitlab-child", "--plan", plan_path, "-o", output_path, "--tool-spec", tool_spec,
            "--image", image]
    return " ".join(shlex.quote(arg) for arg in argv)


def _comment(lines: Sequence[str]) -> str:
    for line in lines:
        check_text("header line", line)  # a newline would end the comment
    return "".join(f"# {line}".rstrip() + "\n" for line in lines)


class _Dumper(yaml.SafeDumper):
    """Every job spelled out: no `&anchor`/`*alias` for values two jobs share."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _dump(header: Sequence[str], body: dict[str, Any]) -> str:
    return _comment(header) + yaml.dump(body, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                                        allow_unicode=False, width=10_000)


# -- the child's jobs -------------------------------------------------------------------------------------------

def _literal(value: str) -> dict[str, Any]:
    """A job variable GitLab does not expand: `$` in it stays a `$`."""
    return {"value": value, "expand": False}


def _job_image(toolchain: ResolvedToolchain, tags: list[str], default_image: str) -> str | None:
    if toolchain.kind == "container":
        return toolchain.image
    if toolchain.kind == "pip" or not tags:
        return default_image  # untagged: any runner, e.g. GitLab's instance runners (docker)
    return None  # runner toolchain on tagged machines: their own install (a shell executor needs no image)


def _toolchain_setup(toolchain: ResolvedToolchain) -> tuple[dict[str, Any], list[str], dict[str, Any] | None]:
    """(variables, install lines, the cache of a pip environment) of one toolchain."""
    variables: dict[str, Any] = {"TOOLCHAIN": toolchain.kind}
    lines = list(_INSTALL[toolchain.kind])
    cache = None
    if toolchain.kind == "pip":
        variables["TOOLCHAIN_REQUIREMENTS"] = "\n".join(toolchain.requirements)
        lines.append(_PIP_REQUIREMENTS_INDEX if toolchain.index_url else _PIP_REQUIREMENTS)
        lines.append(_INSTALL_TOOL)
        if toolchain.index_url:
            variables["TOOLCHAIN_INDEX_URL"] = _literal(toolchain.index_url)
        cache = {"key": f"orchestrate-toolchain-{toolchain.digest()}", "paths": [TOOLCHAIN_VENV]}
    return variables, lines, cache


def _shard_jobs(shard: Shard, default_image: str, read: dict[str, str]) -> tuple[dict[str, dict[str, Any]], str]:
    """The shard's build job (and gate job where its gate runners differ), and the name of its last job."""
    _check_shard(shard)
    build_tags = gitlab_tags(shard.build_labels)
    gate_tags = gitlab_tags(shard.gate_labels or shard.build_labels)
    tc_variables, install, tc_cache = _toolchain_setup(shard.toolchain)
    variables = {"SHARD": _literal(shard.id), **tc_variables, **read}
    build_name, gate_name = f"build:{shard.id}", f"gate:{shard.id}"

    build: dict[str, Any] = {"stage": "build"}
    if build_tags:
        build["tags"] = build_tags
    image = _job_image(shard.toolchain, build_tags, default_image)
    if image:
        build["image"] = image
    build["variables"] = dict(variables)
    build["needs"] = [dict(_PLAN_FROM_PARENT)]
    caches = [tc_cache] if tc_cache else []
    # timing and calibration caches, per (builder, exact version, CCs); kept even when the build fails
    caches.append({"key": f"orchestrate-caches-{shard.cache_key or shard.id}", "paths": [CACHES_DIR],
                   "when": "always"})
    build["cache"] = caches
    build["before_script"] = install
    build["script"] = [
        'orchestrate ci verify-shard --plan plan.json --shard "$SHARD" --role build',
        'orchestrate build --plan plan.json --shard "$SHARD"',
        # cells this runner cannot run are reported pending, not failed; the gate job finishes them
        'orchestrate gate --plan plan.json --shard "$SHARD"',
    ]
    build["artifacts"] = {"paths": [NODES_DIR], "when": "always"}
    jobs = {build_name: build}
    if gate_tags == build_tags:
        return jobs, build_name

    gate: dict[str, Any] = {"stage": "gate"}
    if gate_tags:
        gate["tags"] = gate_tags
    image = _job_image(shard.toolchain, gate_tags, default_image)
    if image:
        gate["image"] = image
    gate["variables"] = dict(variables)
    gate["needs"] = [dict(_PLAN_FROM_PARENT), {"job": build_name, "artifacts": True}]
    if tc_cache:
        gate["cache"] = [{**tc_cache, "policy": "pull"}]
    gate["when"] = "always"  # gate what did build, even when other cells of the shard failed
    gate["before_script"] = install
    gate["script"] = [
        'orchestrate ci verify-shard --plan plan.json --shard "$SHARD" --role gate',
        'orchestrate gate --plan plan.json --shard "$SHARD" --verify-runner',
    ]
    gate["artifacts"] = {"paths": [NODES_DIR], "when": "always"}
    jobs[gate_name] = gate
    return jobs, gate_name


def render_child(plan: Plan, *, tool_spec: str, image: str, registry: RegistryConfig | None,
                 plan_path: str = PLAN_PATH, output_path: str = CHILD_PATH) -> str:
    _check_options(tool_spec, image)
    _check_size(plan)
    command = child_command(plan_path=plan_path, output_path=output_path, tool_spec=tool_spec, image=image)
    header = ["Generated in the engines pipeline's plan job from plan.json by", f"  {command}",
              "One build job per shard (tags: its runner labels), a gate job where the gate runs elsewhere, and",
              "one publish job. Do not edit: it is made again by every pipeline run."]
    body: dict[str, Any] = {"stages": ["build", "gate", "publish"],
                            "variables": {"TOOL_SPEC": _literal(tool_spec)}}
    shards = sorted(plan.shards, key=lambda s: s.id)
    if not shards:
        body["nothing-to-build"] = {
            "stage": "build", "image": image,
            "script": ['echo "Nothing to build: every cell is up to date or blocked (the plan job says why)."']}
        return _dump(header, body)
    last_jobs = []
    for shard in shards:
        jobs, last = _shard_jobs(shard, image, read_variables(registry))
        body.update(jobs)
        last_jobs.append(last)
    publish: dict[str, Any] = {"stage": "publish", "image": image}
    credentials = publish_variables(registry)
    if credentials:
        publish["variables"] = credentials
    # A shard's last job (its gate job, else its build job) carries all its nodes: the gate job downloaded the
    # build's and uploads them again with its verdicts.
    publish["needs"] = [dict(_PLAN_FROM_PARENT)] + [{"job": name, "artifacts": True} for name in last_jobs]
    # Runs when shards failed too: `orchestrate publish` publishes the cells that passed and fails the job when
    # any cell was held back.
    publish["when"] = "always"
    publish["before_script"] = [_INSTALL_TOOL]
    publish["script"] = ["orchestrate publish --plan plan.json"]
    body["publish"] = publish
    return _dump(header, body)


# -- the parent -------------------------------------------------------------------------------------------------

def render_parent(plan: Plan, manifests: Sequence[str], *, tool_spec: str | None, python: str, image: str | None,
                  output_path: str, registry: RegistryConfig | None, default_tool_spec: str = DEFAULT_TOOL_SPEC) -> str:
    """``tool_spec`` None: every job installs ``default_tool_spec``, this repository at the pipeline's commit (`.`
    in the job's clone)."""
    if not manifests:
        raise CIError("no manifests given", hint="pass the manifest files the pipeline should plan")
    paths = sorted({check_manifest_path(p) for p in manifests})
    check_manifest_path(output_path)
    if not _SAFE_PYTHON.fullmatch(python):
        raise CIError(f"python version {python!r} is not a plain version", hint="e.g. 3.11")
    job_image = image if image is not None else f"python:{python}-slim"
    spec = tool_spec if tool_spec is not None else default_tool_spec
    _check_options(spec, job_image)
    _check_size(plan)
    for shard in plan.shards:  # refuse at commit time what the child would refuse at run time
        _shard_jobs(shard, job_image, {})
    publish_variables(registry)

    command = parent_command(paths, tool_spec=tool_spec, python=python, image=image, output_path=output_path)
    header = ["Generated by `orchestrate ci gitlab` from the manifests below. Do not edit: regenerate it with",
              f"  {command}",
              "The plan job makes the plan and renders the child pipeline (one job per shard) from it at run time,",
              "so this file changes only when the manifests' list changes.",
              *(f"  {p}" for p in paths)]
    changes = sorted(set(paths) | {"manifests/**", output_path})
    merge_request = {"if": '$CI_PIPELINE_SOURCE == "merge_request_event"', "changes": list(changes)}
    default_push = {"if": '$CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH && $CI_PIPELINE_SOURCE == "push"',
                    "changes": list(changes)}
    manual = {"if": '$CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH && $CI_PIPELINE_SOURCE == "web"'}
    body: dict[str, Any] = {
        "stages": ["plan", "engines"],
        "plan": {
            "stage": "plan",
            "image": job_image,
            # Merge requests plan only; the default branch (pushes, manual runs) plans and builds.
            "rules": [merge_request, default_push, manual],
            # One repo-relative path after another, split by the shell: plain path characters only (checked).
            "variables": {"MANIFESTS": " ".join(paths), "TOOL_SPEC": _literal(spec),
                          "PYTHON_IMAGE": job_image, **read_variables(registry)},
            "script": [
                _INSTALL_TOOL,
                "orchestrate plan $MANIFESTS --out plan.json --json",
                f'orchestrate ci gitlab-child --plan plan.json -o {CHILD_PATH} --tool-spec "$TOOL_SPEC" '
                '--image "$PYTHON_IMAGE"',
            ],
            "artifacts": {"paths": [PLAN_PATH, CHILD_PATH]},
        },
        "engines": {
            "stage": "engines",
            "needs": ["plan"],
            "rules": [{"if": '$CI_PIPELINE_SOURCE == "merge_request_event"', "when": "never"},
                      default_push, manual],
            # the child's jobs fetch plan.json from this pipeline's plan job
            "variables": {"PARENT_PIPELINE_ID": "$CI_PIPELINE_ID"},
            "trigger": {"include": [{"artifact": CHILD_PATH, "job": "plan"}], "strategy": "depend"},
        },
    }
    return _dump(header, body)


@dataclass(frozen=True)
class GitLabEmitter:
    name: str = "gitlab"
    max_shards: int | None = MAX_SHARDS

    def render(self, plan: Plan, manifests: list[str], *, pipeline: Pipeline = "parent",
               tool_spec: str | None = None, python: str = DEFAULT_PYTHON, image: str | None = None,
               output_path: str | None = None, plan_path: str = PLAN_PATH, registry: RegistryConfig | None = None,
               lfs: bool = False, default_tool_spec: str = DEFAULT_TOOL_SPEC) -> dict[str, str]:
        """{path: text}. ``parent``: the committed `.gitlab-ci.yml` (pass a plan made against an empty index,
        ``orchestrator.app.ci.workflow_plan``); ``child``: the child pipeline of a real plan (plan.json).
        ``lfs`` is accepted for the app's common context and needs nothing here: GitLab runners fetch LFS objects
        when git-lfs is installed."""
        if pipeline == "child":
            path = output_path or CHILD_PATH
            child_image = image if image is not None else f"python:{python}-slim"
            return {path: render_child(plan, tool_spec=tool_spec or default_tool_spec, image=child_image,
                                       registry=registry, plan_path=plan_path, output_path=path)}
        if pipeline != "parent":
            raise CIError(f"unknown GitLab pipeline {pipeline!r}", hint="parent or child")
        path = output_path or PIPELINE_PATH
        return {path: render_parent(plan, manifests, tool_spec=tool_spec, python=python, image=image,
                                    output_path=path, registry=registry, default_tool_spec=default_tool_spec)}


emitter = GitLabEmitter()
