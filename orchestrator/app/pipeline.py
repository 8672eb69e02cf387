"""The pipeline verbs: plan, build, gate, publish (and the checks a shard's runner makes first).

Each takes a loaded ``Project`` and returns data; the CLI renders it. This layer wires the pure core (resolve,
plan, gate status) to the executor, the steps and the plugins; it names no plugin.
"""

from __future__ import annotations

import difflib
import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from orchestrator import plugins
from orchestrator.app import sources
from orchestrator.app.project import Project, display_path
from orchestrator.contracts.store import AttachmentReader, IndexReader, StoredArtifact, registry_note
from orchestrator.core.artifact import EngineDescriptor
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.graph import BuildGraph, Cell, Node
from orchestrator.core.plan import CHANGED, Plan, model_digests, plan_against
from orchestrator.errors import ExitCode, OrchestratorError, PlanError, PluginError, RunnerMismatchError, UsageError
from orchestrator.run.build import BuildPayload, step_build
from orchestrator.run.executor import (
    EventFn,
    Executor,
    NodeReport,
    RunSummary,
    StepOutcome,
    read_gate_report,
    read_result,
)
from orchestrator.run.prepare import CalibratePayload, ModelPayload, step_calibrate, step_prepare, step_transform
from orchestrator.run.publish import PublishPayload, step_publish

Prepared = tuple[object, StepOutcome | None]


def registry_index(project: Project) -> IndexReader:
    return plugins.registry_index(project.registry)


def plan(project: Project, index: IndexReader | None = None, *, max_shards: int | None = None,
         max_cells_per_shard: int = 0) -> Plan:
    """Every cell against the registry: build, rebuild (naming what changed), up to date, blocked."""
    index = index or registry_index(project)
    return plan_against(project.graph, index.latest_by_address(), index.state_token(), project.manifest_digests,
                        max_shards=max_shards, max_cells_per_shard=max_cells_per_shard,
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
    cells = cells_in_scope(project, the_plan, shard=shard, only=only)
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
        return ModelPayload(model=project.models[str(node.model)], caches=project.workspace.caches)
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
                            caches=project.workspace.caches, timing_cache=timing, timing_cache_source=source), None

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
        caps = builder.capabilities(cell.target.builder_version)
        payloads[pub] = PublishPayload(
            cell=cell, model=project.model_of(cell), registry=project.registry,
            manifest_file=display_path(cell.manifest), runtime=builder.runtime,
            media_type=caps.engine_media_type, platform_specific=caps.platform_specific,
            calibration_dir=(str(project.workspace.node_dir(project.graph.nodes[cell.calibrate_node]))
                             if cell.calibrate_node in project.graph.nodes else None),
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


# -- the last local outcome of each cell (for `plan`) ---------------------------------------------------------

# The newest run summaries read (``<cache>/runs/*.json``, one per build/gate/publish command), within a byte budget:
# a cell no recent run touched shows what its node cache says, or nothing.
_RUNS_READ = 20
_RUNS_BYTES = 64 << 20
_NOT_OK = ("failed", "skipped", "interrupted", "pending")


@dataclass(frozen=True)
class LocalOutcome:
    """What this machine last saw happen to a cell, from its cache dir. ``status``: ``built`` (the engine is in
    the node cache, not or not fully gated), ``gated`` (every enabled gate passed here), ``gate-failed`` (a gate
    ran here and failed), or, from the newest run summary naming one of the cell's nodes, ``failed`` /
    ``skipped`` / ``interrupted`` / ``pending`` at ``step``. ``detail`` says why (one line); ``at`` and ``run``
    name the run that recorded it (None: read from the node cache)."""

    status: str
    step: str
    detail: str = ""
    at: str | None = None  # ISO 8601 local time the run summary was written
    run: str | None = None  # that summary, relative to the cache dir

    def text(self) -> str:
        gate = self.step.removeprefix("gate:")
        what = {"built": "built here", "gated": "built and gated here",
                "gate-failed": f"built here; {gate} gate failed"}.get(self.status)
        if what is None:
            when = f" ({self.at.replace('T', ' ')})" if self.at else ""
            what = f"last {self.step} here {self.status}{when}"
        return f"{what}: {self.detail}" if self.detail else what

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "step": self.step, "detail": self.detail, "at": self.at, "run": self.run}


def _first_line(text: object, limit: int = 200) -> str:
    line = str(text or "").strip().splitlines()[0] if str(text or "").strip() else ""
    return line if len(line) <= limit else line[:limit - 1] + "…"


def _first_reason(report: Any, depth: int = 0) -> str:
    """The first failure reason a gate report holds (its verdicts nest them), or ""."""
    if depth > 6:
        return ""
    if isinstance(report, dict):
        reasons = report.get("reasons")
        if isinstance(reasons, list) and reasons:
            return _first_line(reasons[0])
        failing = [v for v in report.values() if isinstance(v, (dict, list))
                   and not (isinstance(v, dict) and v.get("status") == "passed")]
        for value in failing:
            found = _first_reason(value, depth + 1)
            if found:
                return found
    elif isinstance(report, list):
        for value in report:
            found = _first_reason(value, depth + 1)
            if found:
                return found
    return ""


@dataclass(frozen=True)
class _Run:
    mtime: float
    path: str  # relative to the cache dir
    reports: dict[str, dict[str, Any]]  # node id -> its report


def _recent_runs(root: Path) -> list[_Run]:
    """The newest run summaries, newest first; unreadable or foreign files are passed over."""
    try:
        entries = [(e.stat().st_mtime, e) for e in os.scandir(root / "runs") if e.name.endswith(".json")
                   and e.is_file(follow_symlinks=False)]
    except OSError:
        return []
    runs: list[_Run] = []
    budget = _RUNS_BYTES
    for mtime, entry in sorted(entries, key=lambda pair: pair[0], reverse=True)[:_RUNS_READ]:
        try:
            size = entry.stat().st_size
            if size > budget:
                break
            budget -= size
            data = json.loads(Path(entry.path).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        nodes = data.get("nodes") if isinstance(data, dict) else None
        if not isinstance(nodes, list):
            continue
        reports = {str(n["node"]): n for n in nodes if isinstance(n, dict) and "node" in n}
        runs.append(_Run(mtime, os.path.relpath(entry.path, root), reports))
    return runs


class _NodeCache:
    """Which node directories exist (one listing per kind, not one stat per cell) and their results."""

    def __init__(self, project: Project) -> None:
        self.workspace = project.workspace
        self.listings: dict[Path, set[str]] = {}

    def result(self, node: Node | None) -> tuple[dict[str, Any], Path, float] | None:
        if node is None:
            return None
        path = self.workspace.node_dir(node)
        if path.parent not in self.listings:
            try:
                self.listings[path.parent] = set(os.listdir(path.parent))
            except OSError:
                self.listings[path.parent] = set()
        if path.name not in self.listings[path.parent]:
            return None
        result = read_result(path)
        if result is None:
            return None
        try:
            mtime = (path / "result.json").stat().st_mtime
        except OSError:
            return None
        return result, path, mtime


def _from_cache(project: Project, cell: Cell, cache: _NodeCache) -> tuple[LocalOutcome | None, float]:
    nodes = project.graph.nodes
    built = cache.result(nodes.get(f"build:{cell.address}"))
    if built is None:
        return None, 0.0
    newest = built[2]
    gates = []
    for kind, name in (("parity", "parity.json"), ("benchmark", "benchmark.json")):
        node = nodes.get(f"gate:{kind}:{cell.address}")
        if node is None:
            continue
        found = cache.result(node)
        report = read_gate_report(found[1], name) if found else None
        if found:
            newest = max(newest, found[2])
        gates.append((kind, report))
    for kind, report in gates:
        if report is not None and report.get("status") == "failed":
            return LocalOutcome("gate-failed", f"gate:{kind}", _first_reason(report)), newest
    if gates and all(report is not None and report.get("status") == "passed" for _, report in gates):
        return LocalOutcome("gated", "gate"), newest
    ran = [kind for kind, report in gates if report is not None]
    detail = f"{' and '.join(ran)} passed, " if ran else ""
    missing = [kind for kind, report in gates if report is None]
    detail += f"{' and '.join(missing)} not run here" if missing else ""
    return LocalOutcome("built", "build", detail.rstrip(", ")), newest


def _from_runs(project: Project, cell: Cell, runs: list[_Run]) -> tuple[LocalOutcome | None, float]:
    """The newest run that named one of the cell's nodes: its first step that did not succeed, if any."""
    ids = [f"build:{cell.address}", f"gate:parity:{cell.address}", f"gate:benchmark:{cell.address}",
           f"publish:{cell.address}"]
    for run in runs:
        # summaries that record node keys: a report about another build key of this address is not this cell's
        mine = [r for r in (run.reports.get(i) for i in ids)
                if r is not None and r.get("key") in (None, cell.build_key)]
        if not mine:
            continue
        for report in mine:
            status = str(report.get("status"))
            if status not in _NOT_OK:
                continue
            step, reason = str(report.get("kind") or report["node"]).strip(), str(report.get("reason") or "")
            cause = run.reports.get(reason.rsplit(" ", 1)[0]) if reason.endswith(" failed") else None
            if status == "skipped" and cause is not None and cause.get("status") == "failed":
                # skipped because a dependency failed (a transform of its model): that failure is the outcome
                status, step, reason = "failed", str(cause.get("kind") or cause.get("node")), str(cause.get("reason"))
            at = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(run.mtime))
            reason = reason.removeprefix(f"{cell.address}: ")  # BuildError names its node; the row already does
            return LocalOutcome(status, step, _first_line(reason), at=at, run=run.path), run.mtime
        return None, run.mtime  # the newest run that touched the cell went fine
    return None, 0.0


def local_outcomes(project: Project) -> dict[str, LocalOutcome | None]:
    """Each cell's last outcome on this machine (``None``: never built or tried here), so `plan` can tell "never
    built" from "built but failed". Reads the node cache for the cells' current build keys and the newest run
    summaries under the cache dir; blocked cells are left out (they never run)."""
    cache = _NodeCache(project)
    runs = _recent_runs(project.workspace.root)
    out: dict[str, LocalOutcome | None] = {}
    for cell in project.graph.cells:
        if cell.blocked:
            continue
        cached, cached_at = _from_cache(project, cell, cache)
        ran, ran_at = _from_runs(project, cell, runs)
        # the newer of the two; a run that went fine after the cache was written leaves the cache's word
        out[cell.address] = ran if ran is not None and ran_at >= cached_at else cached
    return out


# -- per-cell publishing: what went to the store, what was held back and why (issue 14) -------------------------

# Why a cell in scope was not published. "blocked" (the plan itself blocked the cell: no run can publish it) is
# listed but does not turn the run red; every other reason does.
HeldBackWhy = Literal["gate failed", "gate pending", "not built here", "build failed", "blocked",
                      "blocked here", "publish failed"]


@dataclass(frozen=True)
class PublishedCell:
    address: str
    digest: str  # the engine's digest
    location: str  # the store reference (an OCI reference or a local store path)
    gates: str  # "passed", "pending" (published ungated, as the manifest allows) or "failed" (forced)

    def to_json(self) -> dict[str, Any]:
        return {"address": self.address, "digest": self.digest, "location": self.location, "gates": self.gates}


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
                "held_back": [h.to_json() for h in self.held_back], "up_to_date": list(self.up_to_date)}


def _build_outcome(cell: Cell, runs: list[_Run]) -> HeldBackCell | None:
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
            return HeldBackCell(cell.address, "build failed", _first_line(f"{step}: {cause.get('reason') or ''}"))
        if status in ("failed", "interrupted"):
            return HeldBackCell(cell.address, "build failed",
                                _first_line(reason.removeprefix(f"{cell.address}: ") or status))
        if status in ("skipped", "pending"):
            return HeldBackCell(cell.address, "not built here", _first_line(f"build {status}: {reason}"))
        return HeldBackCell(cell.address, "not built here", "its build result is no longer in the cache")
    return None


def _held_back(project: Project, cell: Cell, report: NodeReport | None, runs: list[_Run],
               failed_inputs: dict[str, str]) -> HeldBackCell:
    build = project.graph.nodes.get(f"build:{cell.address}")
    if build is None or read_result(project.workspace.node_dir(build)) is None:
        return _build_outcome(cell, runs) or HeldBackCell(
            cell.address, "not built here", "no build result in the cache (the shard's build artifact did not "
                                            "arrive, or the cell was never built)")
    parity, bench = gate_reports(project, cell)
    for kind, verdict in (("parity", parity), ("benchmark", bench)):
        if verdict is not None and verdict.get("status") == "failed":
            first = _first_reason(verdict)
            return HeldBackCell(cell.address, "gate failed", f"{kind}: {first}" if first else kind)
    if report is not None and report.status == "skipped" and cell.transform_node in failed_inputs:
        return HeldBackCell(cell.address, "gate failed", _first_line(failed_inputs[cell.transform_node]))
    if report is not None and report.status == "pending":
        return HeldBackCell(cell.address, "gate pending", _first_line(report.reason.removeprefix(
            "not published: gate pending — ")))
    why = report.reason.removeprefix("not published: ") if report is not None else "not run"
    return HeldBackCell(cell.address, "publish failed", _first_line(why))


def publish_report(project: Project, the_plan: Plan, summary: RunSummary, *, shard: str | None = None,
                   only: Iterable[str] = ()) -> PublishReport:
    """What ``publish`` did with each cell of the same scope: published (digest, store reference) or held back
    with a one-line reason — a failed gate (which, and its first reason), no build result here (its shard's
    artifact never arrived), a failed build (from this machine's run summaries), a pending gate, blocked."""
    only = list(only)
    reports = {r.node: r for r in summary.reports}
    in_scope = cells_in_scope(project, the_plan, shard=shard, only=only)
    runs = _recent_runs(project.workspace.root)
    failed_inputs = _failed_transform_outputs(project)
    published: list[PublishedCell] = []
    held: list[HeldBackCell] = []
    for cell in in_scope:
        report = reports.get(f"publish:{cell.address}")
        if report is not None and report.status in ("done", "cached"):
            published.append(PublishedCell(cell.address, str(report.data.get("digest") or ""),
                                           str(report.data.get("location") or ""),
                                           str(report.data.get("gates") or "")))
        else:
            held.append(_held_back(project, cell, report, runs, failed_inputs))
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
            held.append(HeldBackCell(entry.address, "blocked", _first_line(entry.reason)))
        elif entry.status in CHANGED and here is not None and here.blocked:
            held.append(HeldBackCell(entry.address, "blocked here", _first_line(here.blocked)))
        elif entry.status == "up-to-date" and wanted is None:
            up_to_date.append(entry.address)
    return PublishReport(tuple(published), tuple(held), tuple(up_to_date))
