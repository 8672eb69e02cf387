"""The pipeline verbs: plan, build, gate, publish (and the checks a shard's runner makes first).

Each takes a loaded ``Project`` and returns data; the CLI renders it. This layer wires the pure core (resolve,
plan, gate status) to the executor, the steps and the plugins; it names no plugin.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from orchestrator import plugins
from orchestrator.app.project import Project, display_path
from orchestrator.contracts.store import IndexReader
from orchestrator.core.artifact import EngineDescriptor
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.graph import BuildGraph, Cell, Node
from orchestrator.core.plan import Plan, model_digests, plan_against
from orchestrator.errors import PlanError, PluginError, RunnerMismatchError, UsageError
from orchestrator.run.build import BuildPayload, step_build
from orchestrator.run.executor import EventFn, Executor, RunSummary, StepOutcome, read_gate_report, read_result
from orchestrator.run.prepare import ModelPayload, step_prepare, step_transform
from orchestrator.run.publish import PublishPayload, step_publish

Prepared = tuple[object, StepOutcome | None]


def registry_index(project: Project) -> IndexReader:
    return plugins.registry_index(project.registry)


def plan(project: Project, index: IndexReader | None = None, *, max_shards: int | None = None,
         max_cells_per_shard: int = 0) -> Plan:
    """Every cell against the registry: build, rebuild (naming what changed), up to date, blocked."""
    index = index or registry_index(project)
    return plan_against(project.graph, index.latest_by_address(), index.state_token(), project.manifest_digests,
                        max_shards=max_shards, max_cells_per_shard=max_cells_per_shard)


def check_plan_current(project: Project, saved: Plan, index: IndexReader | None = None) -> None:
    """Refuse a saved plan whose manifests or registry state have moved since it was made."""
    for path, digest in saved.manifests.items():
        now = project.manifest_digests.get(path)
        if now is None:
            raise PlanError(f"the plan was made from {path}, which is not loaded now",
                            hint="pass the same manifests as when planning, or re-plan")
        if now != digest:
            raise PlanError(f"{path} changed since the plan was made", hint="re-run `orchestrate plan --out`")
    current = model_digests(project.graph)
    for model, digest in saved.models.items():
        if model in current and current[model] != digest:
            raise PlanError(f"model {model} changed since the plan was made ({digest[:19]} in the plan, "
                            f"{current[model][:19]} now): the plan's build keys are not the ones that would be "
                            "built", hint="re-run `orchestrate plan --out` and build from the new plan")
    index = index or registry_index(project)
    if index.state_token() != saved.registry_state:
        raise PlanError("the registry changed since the plan was made (another publish landed)",
                        hint="re-run `orchestrate plan --out` and build from the new plan")


def cells_in_scope(project: Project, the_plan: Plan, *, shard: str | None = None, only: Iterable[str] = (),
                   statuses: tuple[str, ...] = ("build", "rebuild")) -> list[Cell]:
    wanted = {e.address for e in the_plan.entries if e.status in statuses}
    if shard:
        wanted &= set(the_plan.shard(shard).addresses)
    only = list(only)
    if only:
        known = {c.address for c in project.graph.cells}
        unknown = [a for a in only if a not in known]
        if unknown:
            close = difflib.get_close_matches(unknown[0], list(known), n=1)
            raise UsageError(f"unknown cell address {unknown[0]!r}",
                             hint=f"did you mean {close[0]!r}?" if close else "see `orchestrate plan`")
        # naming a cell builds it whatever its plan status (e.g. to rebuild an up-to-date one locally)
        wanted = set(only) & set(the_plan.shard(shard).addresses) if shard else set(only)
    return [c for c in project.graph.cells if c.address in wanted and not c.blocked]


def closure(graph: BuildGraph, roots: Iterable[str]) -> set[str]:
    """The node ids ``roots`` need, themselves included."""
    seen: set[str] = set()
    stack = list(roots)
    while stack:
        nid = stack.pop()
        if nid in seen or nid not in graph.nodes:
            continue
        seen.add(nid)
        stack.extend(graph.nodes[nid].deps)
    return seen


def build_scope(project: Project, the_plan: Plan, *, shard: str | None = None, only: Iterable[str] = ()) -> set[str]:
    """The nodes ``build`` would consider (for progress totals)."""
    cells = cells_in_scope(project, the_plan, shard=shard, only=only)
    return closure(project.graph, [f"build:{c.address}" for c in cells])


def runtime_of(cell: Cell) -> str:
    """The runtime plugin that runs a cell's engines, as its builder declares it."""
    return plugins.runtime_name_of(cell.target.builder)


def engine_probe(cell: Cell) -> EngineDescriptor:
    """What a runtime judges for a cell not built yet (the target's version stands in for the real one)."""
    return EngineDescriptor.for_cell(cell, runtime=runtime_of(cell))


def builder_reason(cell: Cell, fingerprint: RunnerFingerprint) -> str | None:
    """None when this runner can build the cell now, else why not."""
    try:
        builder = plugins.builder(cell.target.builder)
    except PluginError as e:
        return str(e)
    return builder.available(fingerprint, cell.target)


def runtime_reason(cell: Cell, fingerprint: RunnerFingerprint) -> str | None:
    """None when this runner can run the cell's engines, else why not."""
    try:
        engine = engine_probe(cell)
        compat = plugins.runtime_for(engine).can_run(engine, fingerprint)
    except PluginError as e:
        return str(e)
    return None if compat.ok else compat.reason


def _model_payload(project: Project, node: Node) -> ModelPayload:
    precision = None
    if node.kind == "transform":
        precision = next(c.precision for c in project.graph.cells if c.transform_node == node.id)
    return ModelPayload(model=project.models[str(node.model)], caches=project.workspace.caches, precision=precision)


def _needs_gpu_to_build(project: Project) -> Callable[[Node], bool]:
    def needs(node: Node) -> bool:
        if node.kind != "build":
            return False
        cell = project.graph.cell(str(node.address))
        try:
            return plugins.builder(cell.target.builder).capabilities(cell.target.builder_version).needs_gpu
        except PluginError:
            return False

    return needs


def build(project: Project, the_plan: Plan, *, shard: str | None = None, only: Iterable[str] = (),
          jobs: int | None = None, keep_going: bool = False, fingerprint: RunnerFingerprint | None = None,
          on_event: EventFn | None = None, in_process: bool = False) -> RunSummary:
    """Build the engines the plan calls for; a node this runner cannot build is skipped with its reason."""
    selected = build_scope(project, the_plan, shard=shard, only=only)
    runner = fingerprint or (plugins.fingerprint() if selected else RunnerFingerprint(os="", arch=""))

    def prepare_task(node: Node) -> Prepared:
        if node.kind != "build":
            return _model_payload(project, node), None
        cell = project.graph.cell(str(node.address))
        reason = builder_reason(cell, runner)
        if reason:
            return None, StepOutcome(status="skipped", reason=reason)
        return BuildPayload(cell=cell, model=project.models[cell.model], fingerprint=runner,
                            caches=project.workspace.caches), None

    executor = Executor(
        workspace=project.workspace,
        steps={"prepare": step_prepare, "transform": step_transform, "build": step_build},
        prepare_task=prepare_task, jobs=jobs or max(1, os.cpu_count() or 1), keep_going=keep_going,
        needs_gpu=_needs_gpu_to_build(project), on_event=on_event or no_events, in_process=in_process)
    return executor.run(project.graph.nodes, project.graph.order, selected)


def verify_shard_runner(project: Project, the_plan: Plan, shard_id: str, fingerprint: RunnerFingerprint, *,
                        role: str = "build") -> None:
    """A shard's runner checks itself before doing anything: a wrong GPU or TensorRT fails the job clearly
    instead of building (or gating) a wrong engine."""
    shard = the_plan.shard(shard_id)
    problems = []
    for address in shard.addresses:
        cell = project.graph.cell(address)
        reason = builder_reason(cell, fingerprint) if role == "build" else runtime_reason(cell, fingerprint)
        if reason:
            problems.append(f"{cell.target.name} ({address}): {reason}")
    if problems:
        more = f"\n  … and {len(problems) - 20} more" if len(problems) > 20 else ""
        labels = shard.build_labels if role == "build" else shard.gate_labels
        raise RunnerMismatchError(
            f"this runner ({fingerprint.describe()}) cannot {role} shard {shard_id!r}:\n  "
            + "\n  ".join(problems[:20]) + more,
            hint=f"run this shard on a runner with labels [{', '.join(labels)}] whose hardware matches the targets")


def gate_reports(project: Project, cell: Cell) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The parity and benchmark reports on disk for a cell (None where not gated here)."""
    out = []
    for kind, name in (("parity", "parity.json"), ("benchmark", "benchmark.json")):
        node = project.graph.nodes.get(f"gate:{kind}:{cell.address}")
        d = project.workspace.node_dir(node) if node else None
        out.append(read_gate_report(d, name) if d and read_result(d) is not None else None)
    return out[0], out[1]


def _failed_transform_outputs(project: Project) -> dict[str, str]:
    """Transform node -> why its output is known bad: a cell built from it failed parity here (the same ONNX
    every other cell of that transform was built from, so "ungated" must not cover those)."""
    failed: dict[str, str] = {}
    for cell in project.graph.cells:
        if not cell.transform_node or cell.transform_node in failed or cell.blocked:
            continue
        parity, _ = gate_reports(project, cell)
        if parity is not None and parity.get("status") == "failed":
            failed[cell.transform_node] = (f"the {cell.precision.name} ONNX it was built from failed parity on "
                                           f"{cell.address}")
    return failed


def publish(project: Project, the_plan: Plan, *, shard: str | None = None, only: Iterable[str] = (),
            force: bool = False, on_event: EventFn | None = None, in_process: bool = False) -> RunSummary:
    """Publish built engines whose gates passed (or are pending where the manifest allows ungated publish)."""
    cells = cells_in_scope(project, the_plan, shard=shard, only=only)
    nodes = dict(project.graph.nodes)
    payloads: dict[str, PublishPayload] = {}
    failed_inputs = _failed_transform_outputs(project)
    for cell in cells:
        pub = f"publish:{cell.address}"
        # the step reads the gates' verdicts itself: pending gates are a decision for it, not a missing input
        nodes[pub] = replace(nodes[pub], deps=(f"build:{cell.address}",))
        dirs = []
        for kind in ("parity", "benchmark"):
            gnode = project.graph.nodes.get(f"gate:{kind}:{cell.address}")
            dirs.append(str(project.workspace.node_dir(gnode)) if gnode else None)
        builder = plugins.builder(cell.target.builder)
        payloads[pub] = PublishPayload(
            cell=cell, model=project.models[cell.model], registry=project.registry,
            manifest_file=display_path(cell.manifest), runtime=builder.runtime,
            media_type=builder.capabilities(cell.target.builder_version).engine_media_type,
            gate_dirs=(dirs[0], dirs[1]), force=force,
            failed_input=failed_inputs.get(cell.transform_node) if cell.transform_node else None)

    def prepare_task(node: Node) -> Prepared:
        return payloads[node.id], None

    registry_id = project.registry.url or project.registry.path or ""
    executor = Executor(workspace=project.workspace, steps={"publish": step_publish}, prepare_task=prepare_task,
                        jobs=1, keep_going=True, on_event=on_event or no_events, in_process=in_process,
                        dir_salt=lambda node: registry_id if node.kind == "publish" else "",
                        always_run=lambda node: node.kind == "publish")
    order = [n for n in project.graph.order if n in payloads]
    return executor.run(nodes, order, set(payloads))


def no_events(event: str, node: Node, report: object) -> None:
    return None
