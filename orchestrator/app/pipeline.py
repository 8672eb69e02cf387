"""The pipeline verbs: plan, build, gate, publish (and the checks a shard's runner makes first), and what a publish
did with each cell.

Each takes a loaded ``Project`` and returns data; the CLI renders it. This layer wires the pure core (resolve,
plan, gate status) to the executor, the steps and the plugins; it names no plugin. What this machine last saw of
each cell (its cache dir) is ``app.outcomes``.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from orchestrator import plugins
from orchestrator.app import sources
from orchestrator.app.model_blob import ensure_model_version
from orchestrator.app.outcomes import (  # re-exported: `plan` and `publish` render them
    LocalOutcome,
    RunRecord,
    failed_transform_outputs,
    first_line,
    first_reason,
    gate_errors,
    gate_reports,
    local_outcomes,
    recent_runs,
)
from orchestrator.app.project import Project, display_path
from orchestrator.contracts.store import AttachmentReader, IndexReader, RecordKeyIndex, StoredArtifact, registry_note
from orchestrator.core.artifact import EngineDescriptor
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.graph import BuildGraph, Cell, Node
from orchestrator.core.plan import CHANGED, RUNNER_WORK, Plan, model_digests, plan_against
from orchestrator.errors import ExitCode, OrchestratorError, PlanError, PluginError, RunnerMismatchError, UsageError
from orchestrator.run.build import BuildPayload, step_build
from orchestrator.run.executor import EventFn, Executor, NodeReport, RunSummary, StepOutcome
from orchestrator.run.prepare import CalibratePayload, ModelPayload, step_calibrate, step_prepare, step_transform
from orchestrator.run.publish import PublishPayload, step_publish
from orchestrator.run.workspace import read_result

Prepared = tuple[object, StepOutcome | None]


def registry_index(project: Project) -> IndexReader:
    return plugins.registry_index(project.registry)


def plan(project: Project, index: IndexReader | None = None, *, max_shards: int | None = None,
         max_cells_per_shard: int = 0) -> Plan:
    """Every cell against the registry: build, rebuild (naming what changed), re-gate, publish (a new model version
    of a current engine), up to date, blocked."""
    index = index or registry_index(project)
    records = index.record_digests() if isinstance(index, RecordKeyIndex) else None
    return plan_against(project.graph, index.latest_by_address(), index.state_token(), project.manifest_digests,
                        max_shards=max_shards, max_cells_per_shard=max_cells_per_shard, records=records,
                        registry_note=registry_note(index))


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
                   statuses: tuple[str, ...] = CHANGED) -> list[Cell]:
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


def _regate_builds(project: Project, the_plan: Plan, cells: Iterable[Cell]) -> dict[str, Node]:
    """Build nodes of re-gate cells (the published engine is current): fetched from the store, so they need none
    of the model, calibration or transform nodes a build would."""
    regate = {e.address for e in the_plan.entries if e.status == "regate" and e.published_digest}
    return {f"build:{c.address}": replace(project.graph.nodes[f"build:{c.address}"], deps=())
            for c in cells if c.address in regate and f"build:{c.address}" in project.graph.nodes}


def build_scope(project: Project, the_plan: Plan, *, shard: str | None = None, only: Iterable[str] = ()) -> set[str]:
    """The nodes ``build`` would consider (for progress totals)."""
    cells = cells_in_scope(project, the_plan, shard=shard, only=only, statuses=RUNNER_WORK)
    fetched = _regate_builds(project, the_plan, cells)
    return closure(project.graph, [f"build:{c.address}" for c in cells if f"build:{c.address}" not in fetched]) \
        | set(fetched)


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
    if node.kind != "transform":
        model = project.models[str(node.model)]
        return ModelPayload(model=model, caches=project.workspace.caches,
                            stands_for=project.stand_ins.get(model.source.path))
    cell = next(c for c in project.graph.cells if c.transform_node == node.id)
    tools = cell.key_inputs["transform"]["settings"].get("tools") or {}
    return ModelPayload(model=project.models[str(node.model)], caches=project.workspace.caches,
                        precision=cell.precision, tools=tuple(sorted(tools.items())))


def _published_with(project: Project, model: str, found: Callable[[dict[str, Any]], str | None]
                    ) -> tuple[StoredArtifact, str] | None:
    """The newest published record of ``model`` for which ``found(metadata)`` names an attachment, with that name
    (None when there is none, or the store cannot be read: the cache is then computed here)."""
    try:
        for record in plugins.open_store(project.registry).records(model):
            name = found(record.metadata)
            if name:
                return record, name
    except OrchestratorError:
        return None
    return None


def _calibrate_payload(project: Project, node: Node) -> CalibratePayload:
    cell = next(c for c in project.graph.cells if c.calibrate_node == node.id)
    inputs = cell.key_inputs["calibration"]
    tools = (inputs.get("calibrator") or {}).get("tools") or {}

    def same_key(meta: dict[str, Any]) -> str | None:
        calib = (meta.get("caches") or {}).get("calibration") or {}
        return str(calib["name"]) if calib.get("key") == node.key and calib.get("name") else None

    published = _published_with(project, cell.model, same_key)
    return CalibratePayload(model=project.models[cell.model], precision=cell.precision,
                            shapes=tuple((k, tuple(v)) for k, v in sorted(inputs["shapes"].items())),
                            tools=tuple(sorted(tools.items())), registry=project.registry,
                            published=published[0] if published else None,
                            attachment=published[1] if published else None)


def _pinned_timing_cache(project: Project, cell: Cell, runner: RunnerFingerprint) -> tuple[Path | None, str | None]:
    """A pinned target's published timing cache for this runner's GPU and the target's builder version, fetched
    into the workspace (None: none published yet — this build makes the first)."""
    gpu = runner.gpus[0] if runner.gpus else None
    prefix = f"sm{(gpu.compute_capability if gpu else 'none').replace('.', '')}/{gpu.name if gpu else 'no GPU'}/" \
             f"{cell.target.builder} {cell.target.builder_version}"

    def same_scope(meta: dict[str, Any]) -> str | None:
        timing = (meta.get("caches") or {}).get("timing") or {}
        scope = str(timing.get("scope") or "")
        if timing.get("name") and (scope == prefix or scope.startswith(prefix + ".")):
            return str(timing["name"])
        return None

    found = _published_with(project, cell.model, same_scope)
    if found is None:
        return None, None
    record, name = found
    store = plugins.open_store(project.registry)
    if not isinstance(store, AttachmentReader):
        return None, None
    if Path(name).name != name or name in (".", ".."):  # registry data: never a path
        raise UsageError(f"the published timing cache of {record.metadata.get('address')} is named {name!r}, "
                         "which is not a file name", hint="republish that engine with this orchestrate")
    dest = project.workspace.caches / "pinned-timing" / name
    store.get_attachment(record, name, dest)
    return dest, f"{name} published with {record.metadata.get('address')}"


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


def fetch_sources(project: Project, nodes: dict[str, Node], selected: Iterable[str],
                  progress: sources.FetchProgress | None = None) -> None:
    """Download (or find, verified) the url-sourced models the selected nodes read: here, in the main process,
    before any worker starts (plan never downloads; a failed download names its manifest line)."""
    names = sorted({str(nodes[n].model) for n in selected if n in nodes and nodes[n].model})
    sources.fetch_models([project.models[m] for m in names if m in project.models], project.workspace.root,
                         progress=progress or sources.terminal_progress())


def build(project: Project, the_plan: Plan, *, shard: str | None = None, only: Iterable[str] = (),
          jobs: int | None = None, keep_going: bool = False, fingerprint: RunnerFingerprint | None = None,
          on_event: EventFn | None = None, in_process: bool = False,
          on_fetch: sources.FetchProgress | None = None) -> RunSummary:
    """Build the engines the plan calls for; a node this runner cannot build is skipped with its reason."""
    selected = build_scope(project, the_plan, shard=shard, only=only)
    runner = fingerprint or (plugins.fingerprint() if selected else RunnerFingerprint(os="", arch=""))
    regate = {e.address: e for e in the_plan.entries if e.status == "regate"}
    refit = {e.address: e.published_digest for e in the_plan.entries if e.status == "refit" and e.published_digest}

    def prepare_task(node: Node) -> Prepared:
        if node.kind == "calibrate":
            return _calibrate_payload(project, node), None
        if node.kind != "build":
            return _model_payload(project, node), None
        cell = project.graph.cell(str(node.address))
        entry = regate.get(cell.address)
        if entry is not None and entry.published_digest:
            # re-gate: the published engine is the one to judge again (same build key); never a rebuild
            return BuildPayload(cell=cell, model=project.models[cell.model], fingerprint=runner,
                                caches=project.workspace.caches, registry=project.registry,
                                published_digest=entry.published_digest), None
        reason = builder_reason(cell, runner)
        if reason:
            return None, StepOutcome(status="skipped", reason=reason)
        timing, source = (None, None)
        if cell.target.options.timing_cache_pin:
            timing, source = _pinned_timing_cache(project, cell, runner)
        return BuildPayload(cell=cell, model=project.models[cell.model], fingerprint=runner,
                            caches=project.workspace.caches, timing_cache=timing, timing_cache_source=source,
                            # ~ refit: the published refittable engine takes the new weights (run.refit)
                            registry=project.registry if cell.address in refit else None,
                            refit_digest=refit.get(cell.address)), None

    nodes = {**project.graph.nodes, **_regate_builds(project, the_plan, project.graph.cells)}
    fetch_sources(project, nodes, selected, on_fetch)
    executor = Executor(
        workspace=project.workspace,
        steps={"prepare": step_prepare, "calibrate": step_calibrate, "transform": step_transform,
               "build": step_build},
        prepare_task=prepare_task, jobs=jobs or max(1, os.cpu_count() or 1), keep_going=keep_going,
        needs_gpu=_needs_gpu_to_build(project), on_event=on_event or no_events, in_process=in_process)
    return executor.run(nodes, project.graph.order, selected)


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


def publish(project: Project, the_plan: Plan, *, shard: str | None = None, only: Iterable[str] = (),
            force: bool = False, on_event: EventFn | None = None, in_process: bool = False,
            built_on_device: Mapping[str, Mapping[str, Any]] | None = None) -> RunSummary:
    """Publish built engines whose gates passed (or are pending where the manifest allows ungated publish). With
    ``registry.publish_onnx``, each model version with an engine published puts its ONNX beside it once
    (``app.model_blob.ensure_model_version``). ``built_on_device``: address -> what ``pull --build-on-miss``
    records of a cell it built on a deployment (``app.heal``), kept in its record as ``built_on_device``."""
    only = list(only)
    cells = cells_in_scope(project, the_plan, shard=shard, only=only)
    nodes = dict(project.graph.nodes)
    payloads: dict[str, PublishPayload] = {}
    failed_inputs = failed_transform_outputs(project)
    errored = gate_errors(project)
    # a new model version of a current engine: published from the store, needing nothing built or gated here
    reused = {e.address: e.published_digest for e in the_plan.entries if e.status == "publish" and e.published_digest}
    for cell in cells:
        pub = f"publish:{cell.address}"
        # the step reads the gates' verdicts itself: pending gates are a decision for it, not a missing input
        nodes[pub] = replace(nodes[pub], deps=() if cell.address in reused else (f"build:{cell.address}",))
        dirs = []
        for kind in ("parity", "benchmark"):
            gnode = project.graph.nodes.get(f"gate:{kind}:{cell.address}")
            dirs.append(str(project.workspace.node_dir(gnode)) if gnode else None)
        builder = plugins.builder(cell.target.builder)
        caps = builder.capabilities(cell.target.builder_version)
        payloads[pub] = PublishPayload(
            cell=cell, model=project.model_of(cell), registry=project.registry,
            manifest_file=display_path(cell.manifest), runtime=builder.runtime,
            media_type=caps.engine_media_type, platform_specific=caps.platform_specific,
            calibration_dir=(str(project.workspace.node_dir(project.graph.nodes[cell.calibrate_node]))
                             if cell.calibrate_node in project.graph.nodes else None),
            gate_dirs=(dirs[0], dirs[1]), force=force, reuse_digest=reused.get(cell.address),
            gate_error=errored.get(cell.address),
            failed_input=failed_inputs.get(cell.transform_node) if cell.transform_node else None,
            built_on_device=(built_on_device or {}).get(cell.address))

    def prepare_task(node: Node) -> Prepared:
        return payloads[node.id], None

    registry_id = project.registry.url or project.registry.path or ""
    executor = Executor(workspace=project.workspace, steps={"publish": step_publish}, prepare_task=prepare_task,
                        jobs=1, keep_going=True, on_event=on_event or no_events, in_process=in_process,
                        dir_salt=lambda node: registry_id if node.kind == "publish" else "",
                        always_run=lambda node: node.kind == "publish")
    order = [n for n in project.graph.order if n in payloads]
    summary = executor.run(nodes, order, set(payloads))
    if project.registry.publish_onnx:  # the models with an engine in the registry now: landed, or up to date
        scope = set(the_plan.shard(shard).addresses) if shard else None
        wanted = set(only) or None
        current = {e.address for e in the_plan.entries if e.status == "up-to-date"
                   and (scope is None or e.address in scope) and (wanted is None or e.address in wanted)}
        landed = {r.node.removeprefix("publish:") for r in summary.reports
                  if r.node.startswith("publish:") and r.status in ("done", "cached")}
        for model in sorted({project.graph.cell(a).model for a in current | landed}):
            ensure_model_version(project, model)
    return summary


def no_events(event: str, node: Node, report: object) -> None:
    return None


# -- per-cell publishing: what went to the store, what was held back and why (issue 14) -------------------------

# Why a cell in scope was not published. "blocked" (the plan itself blocked the cell: no run can publish it) is
# listed but does not turn the run red; every other reason does.
HeldBackWhy = Literal["gate failed", "gate errored", "gate pending", "not built here", "build failed", "blocked",
                      "blocked here", "publish failed"]


@dataclass(frozen=True)
class PublishedCell:
    address: str
    digest: str  # the engine's digest
    location: str  # the store reference (an OCI reference or a local store path)
    gates: str  # "passed", "pending" (published ungated, as the manifest allows) or "failed" (forced)
    version: str = ""  # the model version the record publishes
    reused_from: str | None = None  # the model version whose engine and verdicts it reuses (a version bump)

    def to_json(self) -> dict[str, Any]:
        return {"address": self.address, "digest": self.digest, "location": self.location, "gates": self.gates,
                "version": self.version, "reused_from": self.reused_from}


@dataclass(frozen=True)
class HeldBackCell:
    address: str
    why: HeldBackWhy
    detail: str = ""  # one line

    def text(self) -> str:
        return f"{self.why}: {self.detail}" if self.detail else self.why

    def to_json(self) -> dict[str, Any]:
        return {"address": self.address, "why": self.why, "detail": self.detail, "reason": self.text()}


@dataclass(frozen=True)
class PublishReport:
    """Every cell in a publish's scope, once: published, held back (with why), or already up to date."""

    published: tuple[PublishedCell, ...]
    held_back: tuple[HeldBackCell, ...]
    up_to_date: tuple[str, ...] = ()
    # cells whose record was in the store before this publish put it (another publisher, or an earlier run):
    # nothing new landed for them
    already: tuple[PublishedCell, ...] = ()

    @property
    def red(self) -> tuple[HeldBackCell, ...]:
        """The held-back cells that make the run fail (all but those the plan blocked)."""
        return tuple(h for h in self.held_back if h.why != "blocked")

    def exit_code(self) -> ExitCode:
        """OK when nothing was held back (plan-blocked cells aside); GATE_FAILED (3) when every cell held back
        failed a gate, as `gate` exits; ERROR (1) when any was held back for another reason (not built, pending,
        a publish error)."""
        red = self.red
        if not red:
            return ExitCode.OK
        return ExitCode.GATE_FAILED if all(h.why == "gate failed" for h in red) else ExitCode.ERROR

    def to_json(self) -> dict[str, Any]:
        return {"published": [p.to_json() for p in self.published],
                "held_back": [h.to_json() for h in self.held_back], "up_to_date": list(self.up_to_date),
                "already_published": [p.to_json() for p in self.already]}


def _build_outcome(cell: Cell, runs: list[RunRecord]) -> HeldBackCell | None:
    """Why a cell has no build result here, from the newest run summary that recorded its build node (None when
    no run here did: its shard's build artifact never arrived, or it was never built)."""
    node = f"build:{cell.address}"
    for run in runs:
        report = run.reports.get(node)
        if report is None or report.get("key") not in (None, cell.build_key):
            continue
        status, reason = str(report.get("status")), str(report.get("reason") or "")
        cause = run.reports.get(reason.rsplit(" ", 1)[0]) if reason.endswith(" failed") else None
        if status == "skipped" and cause is not None and cause.get("status") == "failed":
            step = str(cause.get("kind") or cause.get("node"))
            return HeldBackCell(cell.address, "build failed", first_line(f"{step}: {cause.get('reason') or ''}"))
        if status in ("failed", "interrupted"):
            return HeldBackCell(cell.address, "build failed",
                                first_line(reason.removeprefix(f"{cell.address}: ") or status))
        if status in ("skipped", "pending"):
            return HeldBackCell(cell.address, "not built here", first_line(f"build {status}: {reason}"))
        return HeldBackCell(cell.address, "not built here", "its build result is no longer in the cache")
    return None


def _reused_held_back(cell: Cell, report: NodeReport | None) -> HeldBackCell:
    """A new model version of a published engine that was not published again: its published verdicts decided
    (failed, or ungated where the manifest no longer allows it), or the store could not hand the record back."""
    why = first_line(report.reason.removeprefix("not published: ")) if report is not None else "not run"
    if report is not None and report.status == "pending":
        return HeldBackCell(cell.address, "gate pending", why)
    return HeldBackCell(cell.address, "gate failed" if report is not None and report.status == "skipped"
                        else "publish failed", why)


def _held_back(project: Project, cell: Cell, report: NodeReport | None, runs: list[RunRecord],
               failed_inputs: dict[str, str], errored: dict[str, str]) -> HeldBackCell:
    build = project.graph.nodes.get(f"build:{cell.address}")
    if build is None or read_result(project.workspace.node_dir(build)) is None:
        return _build_outcome(cell, runs) or HeldBackCell(
            cell.address, "not built here", "no build result in the cache (the shard's build artifact did not "
                                            "arrive, or the cell was never built)")
    parity, bench = gate_reports(project, cell)
    for kind, verdict in (("parity", parity), ("benchmark", bench)):
        if verdict is not None and verdict.get("status") == "failed":
            first = first_reason(verdict)
            return HeldBackCell(cell.address, "gate failed", f"{kind}: {first}" if first else kind)
    if report is not None and report.status == "skipped" and cell.transform_node in failed_inputs:
        return HeldBackCell(cell.address, "gate failed", first_line(failed_inputs[cell.transform_node]))
    if report is not None and report.status == "skipped" and cell.address in errored:
        return HeldBackCell(cell.address, "gate errored", errored[cell.address])
    if report is not None and report.status == "pending":
        return HeldBackCell(cell.address, "gate pending", first_line(report.reason.removeprefix(
            "not published: gate pending — ")))
    why = report.reason.removeprefix("not published: ") if report is not None else "not run"
    return HeldBackCell(cell.address, "publish failed", first_line(why))


def publish_report(project: Project, the_plan: Plan, summary: RunSummary, *, shard: str | None = None,
                   only: Iterable[str] = ()) -> PublishReport:
    """What ``publish`` did with each cell of the same scope: published (digest, store reference) or held back
    with a one-line reason — a failed gate (which, and its first reason), no build result here (its shard's
    artifact never arrived), a failed build (from this machine's run summaries), a pending gate, blocked."""
    only = list(only)
    reports = {r.node: r for r in summary.reports}
    in_scope = cells_in_scope(project, the_plan, shard=shard, only=only)
    runs = recent_runs(project.workspace.root)
    failed_inputs = failed_transform_outputs(project)
    errored = gate_errors(project, runs)
    published: list[PublishedCell] = []
    already: list[PublishedCell] = []
    held: list[HeldBackCell] = []
    reused = {e.address: e for e in the_plan.entries if e.status == "publish"}
    for cell in in_scope:
        report = reports.get(f"publish:{cell.address}")
        if report is not None and report.status in ("done", "cached"):
            entry = reused.get(cell.address)
            done = PublishedCell(cell.address, str(report.data.get("digest") or ""),
                                 str(report.data.get("location") or ""), str(report.data.get("gates") or ""),
                                 cell.model_version, entry.published_version if entry is not None else None)
            # a store that already held the record hands it back: that is not a publish (outcomes recorded
            # before ``new`` existed count as published)
            (published if report.data.get("new", True) else already).append(done)
        else:
            held.append(_reused_held_back(cell, report) if cell.address in reused
                        else _held_back(project, cell, report, runs, failed_inputs, errored))
    # cells the plan blocked, and cells it wants published that are blocked on this machine (cells_in_scope
    # leaves both out): never silently missing from the list
    scope = set(the_plan.shard(shard).addresses) if shard else None
    wanted = set(only) if only else None
    cells = {c.address: c for c in project.graph.cells}
    up_to_date: list[str] = []
    for entry in the_plan.entries:
        if (scope is not None and entry.address not in scope) or (wanted is not None and entry.address not in wanted):
            continue
        here = cells.get(entry.address)
        if entry.status == "blocked":
            held.append(HeldBackCell(entry.address, "blocked", first_line(entry.reason)))
        elif entry.status in CHANGED and here is not None and here.blocked:
            held.append(HeldBackCell(entry.address, "blocked here", first_line(here.blocked)))
        elif entry.status == "up-to-date" and wanted is None:
            up_to_date.append(entry.address)
    return PublishReport(tuple(published), tuple(held), tuple(up_to_date), tuple(already))



__all__ = ["HeldBackCell", "LocalOutcome", "PublishReport", "PublishedCell", "build", "build_scope", "cells_in_scope",
           "check_plan_current", "failed_transform_outputs", "gate_errors", "gate_reports", "local_outcomes", "plan",
           "publish", "publish_report", "registry_index", "runtime_of", "runtime_reason", "verify_shard_runner"]
