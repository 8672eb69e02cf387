"""CI generation: resolve and plan what an emitter renders, then hand it the data (emitters never load
manifests).

Two kinds of plans: a committed workflow (GitHub Actions) must depend only on the manifests, so it is planned
against an empty registry with placeholder model digests and every builder assumed capable (the run-time plan
inside the workflow blocks what a real builder cannot do); an emitter that runs the current plan (Kubernetes
Indexed Jobs) gets the project's real plan. Either way the emitter's own ``max_shards`` bounds the plan.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from orchestrator import plugins
from orchestrator.app.ci_checks import CIWarning, checkout_warnings, default_tool_spec, git_origin, tool_spec_warnings
from orchestrator.app.pipeline import plan as plan_project
from orchestrator.app.project import Project, display_path, load_manifests
from orchestrator.app.sources import lfs_tracked
from orchestrator.atomic import write_bytes_atomic
from orchestrator.core.capabilities import BuilderCapabilities, TargetKind
from orchestrator.core.model import PRECISIONS, Manifest
from orchestrator.core.plan import Plan, plan_against
from orchestrator.core.resolve import ResolveInputs, resolve
from orchestrator.digests import hash_file
from orchestrator.errors import CIError, PlanError


def every_builder_capable(builder: str, version: str) -> BuilderCapabilities:
    """The workflow covers every label set a manifest names, whether or not that builder plugin is installed
    where the workflow is generated: cells the real builder cannot do are blocked by the run-time plan."""
    every = frozenset(PRECISIONS)
    real = plugins.builder_capabilities(builder, version)  # pure; None when that plugin is not installed here
    return BuilderCapabilities(native=every, via_transform=every, target_kinds=frozenset(get_args(TargetKind)),
                               needs_gpu=False, runs_on="(workflow generation)",
                               provisioning=real.provisioning if real is not None else None)


def workflow_plan(manifests: Sequence[Manifest], *, max_shards: int | None) -> Plan:
    """Resolve and plan against an EMPTY index: the committed workflow must not depend on registry state,
    on model bytes (digests are placeholders: they change build keys, never label sets) or on plugins."""
    digests = {m.source.path: "sha256:" + "0" * 64 for manifest in manifests for m in manifest.models}
    graph = resolve(manifests, ResolveInputs(model_digests=digests), every_builder_capable)
    try:
        return plan_against(graph, {}, "empty", max_shards=max_shards)
    except PlanError as e:
        files = ", ".join(sorted(m.file for m in manifests))
        raise CIError(f"{e.message} (manifests: {files})",
                      hint=f"{e.hint}; or group several targets' cells under one label set with "
                           "`runners.build` shared by the machines that can build them") from e


@dataclass(frozen=True)
class Workflow:
    """A committed-workflow emitter's files (paths relative to the repository root -> text) and what the
    repository lacks for them to run (``ci_checks``)."""

    files: dict[str, str]
    warnings: tuple[CIWarning, ...]


def workflow(emitter_name: str, manifest_paths: Sequence[str | Path], repo_root: str | Path,
             **options: Any) -> Workflow:
    """What a committed-workflow emitter writes for these manifests, and the warnings about them. ``tool_spec``
    None (the default): the repository itself at the workflow's commit (``ci_checks.default_tool_spec``)."""
    emitter = plugins.ci_emitter(emitter_name)
    root = Path(repo_root).resolve()
    files = [Path(p) if Path(p).is_absolute() else root / p for p in manifest_paths]
    relative = []
    for f in files:
        try:
            relative.append(f.resolve().relative_to(root).as_posix())
        except ValueError as e:
            raise CIError(f"manifest {str(f)!r} is outside the repository {str(root)!r}",
                          hint="the workflow checks the repository out: keep manifests inside it") from e
    manifests = load_manifests([str(f) for f in files], capabilities=every_builder_capable)
    context = workflow_context(manifests, root)
    rendered = emitter.render(workflow_plan(manifests, max_shards=emitter.max_shards), relative, **context,
                              **options)
    warnings = [*tool_spec_warnings(options.get("tool_spec"), context["default_tool_spec"], root),
                *checkout_warnings(manifests, root)]
    return Workflow(files=rendered, warnings=tuple(warnings))


def workflow_files(emitter_name: str, manifest_paths: Sequence[str | Path], repo_root: str | Path,
                   **options: Any) -> dict[str, str]:
    """What a committed-workflow emitter writes for these manifests: paths relative to ``repo_root`` -> text."""
    return workflow(emitter_name, manifest_paths, repo_root, **options).files


def workflow_context(manifests: Sequence[Manifest], root: Path) -> dict[str, Any]:
    """What a committed workflow needs from the manifests beyond the plan: the registry (its login), whether any
    model file is stored in Git LFS (checkouts then fetch LFS objects), and the tool spec to install when the user
    pins none."""
    paths = [m.source.path for manifest in manifests for m in manifest.models if m.source.url is None]
    return {"registry": manifests[0].registry if manifests else None, "lfs": bool(lfs_tracked(paths, root)),
            "default_tool_spec": default_tool_spec(manifests)}


def plan_workflow(emitter_name: str, project: Project, repo_root: str | Path = ".", **options: Any) -> Workflow:
    """What an emitter of the current plan writes (paths relative to the working directory -> text), given what
    it needs from the manifests (targets and runner pools: where shards run; the default tool spec; the
    repository's URL and commit, which the pods check out), and the warnings about the repository. Options that
    are None leave the context's value."""
    emitter = plugins.ci_emitter(emitter_name)
    try:
        the_plan = plan_project(project, max_shards=emitter.max_shards)
    except PlanError as e:
        raise CIError(e.message, hint=e.hint) from e
    manifests = project.manifests
    context: dict[str, Any] = {
        "targets": {t.name: t for m in manifests for t in m.targets},
        "pools": tuple(p for m in manifests for p in m.runner_pools),
        "registry": manifests[0].registry if manifests else None,
        "default_tool_spec": default_tool_spec(manifests),
        **git_origin(repo_root),
    }
    context.update({k: v for k, v in options.items() if v is not None})
    files = emitter.render(the_plan, [display_path(m.file) for m in manifests], **context)
    warnings = [*tool_spec_warnings(options.get("tool_spec"), context["default_tool_spec"], repo_root),
                *checkout_warnings(manifests, repo_root)]
    return Workflow(files=files, warnings=tuple(warnings))


def plan_files(emitter_name: str, project: Project, **options: Any) -> dict[str, str]:
    """What an emitter of the current plan writes (paths relative to the working directory -> text)."""
    return plan_workflow(emitter_name, project, **options).files


def write_files(files: dict[str, str], root: str, main_path: str | None, main_key: str) -> list[str]:
    """Write each file atomically under ``root`` (the main one at ``main_path`` when given); ``-`` is stdout.
    Returns what was written."""
    written = []
    for rel, text in sorted(files.items()):
        dest = main_path if (main_path and rel == main_key) else os.path.join(root, rel)
        if dest == "-":
            print(text, end="")
            continue
        write_bytes_atomic(dest, text.encode())
        written.append(dest)
    return written


def child_files(emitter_name: str, the_plan: Plan, **options: Any) -> dict[str, str]:
    """What a run-time child pipeline (GitLab's, rendered by the parent's plan job) writes for a saved plan. The
    registry login comes from the manifests the plan was made from, which must be unchanged since."""
    emitter = plugins.ci_emitter(emitter_name)
    paths = sorted(the_plan.manifests)
    registry = None
    if paths:
        for path in paths:
            try:
                now = hash_file(path)[0].split(":", 1)[1]
            except OSError as e:
                raise CIError(f"cannot read {path}, which the plan was made from: {e.strerror}",
                              hint="run in the checkout the plan was made in") from e
            if now != the_plan.manifests[path]:
                raise CIError(f"{path} changed since the plan was made",
                              hint="re-run `orchestrate plan --out plan.json`, then render from the new plan")
        registry = load_manifests(paths, capabilities=every_builder_capable)[0].registry
    return emitter.render(the_plan, paths, pipeline="child", registry=registry, **options)
