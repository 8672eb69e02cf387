"""The gate verb: parity and benchmark gates for built engines (apart from the other pipeline verbs because its
steps import the numeric gate code, numpy included, which `plan` and `build` never need)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from orchestrator import plugins
from orchestrator.app.pipeline import (
    Prepared,
    cells_in_scope,
    fetch_sources,
    no_events,
    registry_index,
    runtime_of,
    runtime_reason,
)
from orchestrator.app.project import Project
from orchestrator.app.sources import FetchProgress
from orchestrator.contracts.store import AttachmentReader, StoredArtifact
from orchestrator.core.fingerprint import RunnerFingerprint, same_gpu_model
from orchestrator.core.graph import Cell, Node
from orchestrator.core.model import Model
from orchestrator.core.plan import RUNNER_WORK, Plan
from orchestrator.core.query import engines, select
from orchestrator.core.versions import parse_version, same_version
from orchestrator.gates.drift import OUTPUTS_FILE
from orchestrator.run.executor import EventFn, Executor, RunSummary, StepOutcome
from orchestrator.run.gate import GatePayload, step_benchmark, step_parity


def _gate_nodes(project: Project, cells: Iterable[Cell]) -> list[str]:
    return [nid for c in cells for nid in (f"gate:parity:{c.address}", f"gate:benchmark:{c.address}")
            if nid in project.graph.nodes]


def _baseline(project: Project, cell: Cell, model: Model, fingerprint: RunnerFingerprint) -> dict[str, Any] | None:
    """The benchmark verdict of the last engine published at this address that was benchmarked on this runner's
    GPU model (``runner_facts``' ``gpu``: None for a CPU engine), when a regression bound is set. Timings of another
    GPU model are no baseline: none on this model, no regression check. A record from before benchmark verdicts
    named their GPU is judged by the GPU of the runner that built it."""
    if model.gate.benchmark.max_regression_pct is None:
        return None
    if cell.address not in registry_index(project).latest_by_address():
        return None
    here = runner_facts("gate:benchmark", cell, fingerprint).get("gpu")
    store = plugins.open_store(project.registry)
    for artifact in select(store.records(cell.model), lambda a: a.metadata, address=cell.address):
        bench = (artifact.metadata.get("gates") or {}).get("benchmark")
        if not (bench and bench.get("verdict")):
            continue
        facts = bench.get("runner")
        if isinstance(facts, dict):
            timed_on = facts.get("gpu")
        elif cell.target.device == "cpu":
            timed_on = None
        else:
            gpus = (artifact.metadata.get("runner") or {}).get("gpus") or []
            timed_on = gpus[0].get("name") if gpus and isinstance(gpus[0], dict) else None
        if timed_on == here or (here is not None and same_gpu_model(timed_on, here)):
            verdict: dict[str, Any] = bench["verdict"]
            return verdict
    return None


def _timed_on(artifact: StoredArtifact, cell: Cell) -> str | None:
    """The GPU model a record's benchmark verdict was timed on (None: a CPU engine or no GPU named)."""
    bench = (artifact.metadata.get("gates") or {}).get("benchmark") or {}
    facts = bench.get("runner")
    if isinstance(facts, dict):
        gpu = facts.get("gpu")
        return str(gpu) if gpu is not None else None
    if cell.target.device == "cpu":
        return None
    gpus = (artifact.metadata.get("runner") or {}).get("gpus") or []
    return gpus[0].get("name") if gpus and isinstance(gpus[0], dict) else None


def _drift_candidate(meta: dict[str, Any], cell: Cell, model: Model) -> bool:
    """Same model version, precision, profile set, device, compute capabilities and runtime; an earlier builder
    version (``core.gatekeys.DRIFT_BASELINE_RULE``)."""
    target = meta.get("target") or {}
    theirs = parse_version(str((meta.get("builder") or {}).get("version") or ""))
    ours = parse_version(cell.target.builder_version)
    return (meta.get("model", {}).get("version") == model.version and meta.get("precision") == cell.precision.name
            and meta.get("profile_set") == cell.profile_set
            and target.get("device", "cuda") == cell.target.device
            and sorted(target.get("compute_capabilities") or []) == sorted(cell.target.compute_capabilities)
            and (meta.get("runtime") or plugins.runtime_name_of(str(meta["builder"]["name"]))) == runtime_of(cell)
            and bool(theirs) and not same_version(theirs, ours) and theirs < ours)


def drift_baseline(project: Project, cell: Cell, model: Model, fingerprint: RunnerFingerprint,
                   *, fetch: bool = True, records: Callable[[str], list[StoredArtifact]] | None = None
                   ) -> dict[str, Any] | None:
    """The cell's drift baseline (docs/gates.md, "Drift"): the newest published engine of an earlier builder version
    of the same model version, precision, profile set, device, CCs and runtime — its identity, its recorded outputs
    (fetched into the workspace cache when ``fetch``) and its benchmark verdict when it was timed on this runner's
    GPU model. None: drift off, or no such record."""
    if not model.gate.drift.enabled:
        return None
    store = plugins.open_store(project.registry)
    found = [a for a in (records or store.records)(cell.model) if _drift_candidate(a.metadata, cell, model)]
    if not found:
        return None
    best = max(found, key=lambda a: (parse_version(str(a.metadata["builder"]["version"])),
                                     str(a.metadata.get("published_at") or "")))
    meta = best.metadata
    record = {"address": meta["address"], "builder": meta["builder"]["name"],
              "builder_version": meta["builder"]["version"], "engine_digest": meta["engine"]["digest"],
              "record_key": meta.get("record_key") or meta["build_key"]}
    attachment = next((a for a in meta.get("attachments") or () if a.get("name") == OUTPUTS_FILE), None)
    outputs = None
    if attachment is not None and fetch and isinstance(store, AttachmentReader):
        dest = project.workspace.caches / "drift" / f"{str(attachment['digest']).partition(':')[2]}.npz"
        if not dest.is_file():
            dest.parent.mkdir(parents=True, exist_ok=True)
            store.get_attachment(best, OUTPUTS_FILE, dest)
        outputs = str(dest)
    here = runner_facts("gate:benchmark", cell, fingerprint).get("gpu")
    timed_on = _timed_on(best, cell)
    bench = (meta.get("gates") or {}).get("benchmark") or {}
    same_gpu = timed_on == here or (here is not None and same_gpu_model(timed_on, here))
    return {"record": record, "outputs": outputs if attachment is not None else None,
            "benchmark": bench.get("verdict") if same_gpu and bench.get("verdict") else None}


def kept_verdicts(project: Project, the_plan: Plan, cells: Iterable[Cell],
                  records: Callable[[str], list[StoredArtifact]]) -> dict[str, dict[str, Any]]:
    """Gate node id -> the published verdict it keeps: for a cell to re-gate (its published engine is current), each
    gate whose own settings and runtime did not move since that record's verdicts keeps its verdict (a parity-only
    change re-runs no benchmark); only the gates whose settings moved run again."""
    regate = {e.address for e in the_plan.entries if e.status == "regate"}
    wanted = [c for c in cells if c.address in regate]
    if not wanted:
        return {}
    latest = registry_index(project).latest_by_address()
    kept: dict[str, dict[str, Any]] = {}
    for cell in wanted:
        published = latest.get(cell.address)
        if published is None or published.build_key != cell.build_key or not published.gate_inputs:
            continue
        old, new = published.gate_inputs, cell.gate_inputs
        same = [kind for kind in ("parity", "benchmark") if new.get(kind) is not None
                and old.get(kind) == new.get(kind) and old.get("runtime") == new.get("runtime")]
        if not same:
            continue
        record = next((a for a in select(records(cell.model), lambda a: a.metadata, address=cell.address)
                       if str(a.metadata.get("record_key") or a.metadata.get("build_key")) == published.record_key),
                      None)
        for kind in same:
            verdict = ((record.metadata.get("gates") or {}).get(kind) if record is not None else None)
            if isinstance(verdict, dict) and verdict.get("status") in ("passed", "failed"):
                kept[f"gate:{kind}:{cell.address}"] = verdict
    return kept


def gate(project: Project, the_plan: Plan, *, shard: str | None = None, only: Iterable[str] = (),
         jobs: int | None = None, fingerprint: RunnerFingerprint | None = None, on_event: EventFn | None = None,
         in_process: bool = False, on_fetch: FetchProgress | None = None) -> RunSummary:
    """Parity and benchmark gates for the built engines in scope. An engine this runner cannot run is
    ``pending`` (e.g. RTX AOT engines on a machine without an RTX/Ampere+ GPU), never run wrong."""
    cells = cells_in_scope(project, the_plan, shard=shard, only=only, statuses=RUNNER_WORK)
    selected = set(_gate_nodes(project, cells))
    runner = fingerprint or (plugins.fingerprint() if selected else RunnerFingerprint(os="", arch=""))
    published: dict[str, list[StoredArtifact]] = {}

    def records(model: str) -> list[StoredArtifact]:  # one registry read per model for this run
        if model not in published:
            published[model] = engines(plugins.open_store(project.registry).records(model), lambda a: a.metadata)
        return published[model]

    def facts(node: Node) -> dict[str, Any]:
        cell = project.graph.cell(str(node.address))
        out = runner_facts(node.kind, cell, runner)
        # a verdict judged against one drift baseline is not reused once another is the newest (or the first)
        base = drift_baseline(project, cell, project.model_of(cell), runner, fetch=False, records=records)
        out["drift_baseline"] = base["record"]["record_key"] if base else None
        return out

    kept = kept_verdicts(project, the_plan, cells, records) if selected else {}

    def reuse(node: Node, result: dict[str, Any]) -> bool:
        # a verdict is reused only from this runtime (and reference) version, and for a benchmark this GPU model;
        # a kept published verdict (``kept_verdicts``) is its record's, wherever it was given
        data = result.get("data") or {}
        if data.get("kept"):
            return node.id in kept and data.get("runner") == kept[node.id].get("runner")
        return bool(data.get("runner") == facts(node))

    def prepare_task(node: Node) -> Prepared:
        cell = project.graph.cell(str(node.address))
        model = project.model_of(cell)
        if node.id in kept:  # its settings did not move: the published verdict stands, whatever runner this is
            return GatePayload(cell=cell, model=model, caches=project.workspace.caches, runtime=runtime_of(cell),
                               kept=kept[node.id]), None
        reason = runtime_reason(cell, runner)
        if reason:
            return None, StepOutcome(status="pending", reason=f"gate pending: {reason}")
        baseline = _baseline(project, cell, model, runner) if node.kind == "gate:benchmark" else None
        return GatePayload(cell=cell, model=model, caches=project.workspace.caches, runtime=runtime_of(cell),
                           baseline=baseline, runner=facts(node),
                           drift=drift_baseline(project, cell, model, runner, records=records)), None

    def needs_gpu(node: Node) -> bool:
        return project.graph.cell(str(node.address)).target.device != "cpu"

    fetch_sources(project, project.graph.nodes, selected, on_fetch)  # parity runs the original model
    # Gates time engines: by default one at a time, so a benchmark never shares the CPU with other work.
    executor = Executor(workspace=project.workspace,
                        steps={"gate:parity": step_parity, "gate:benchmark": step_benchmark},
                        prepare_task=prepare_task, jobs=jobs or 1, keep_going=True, needs_gpu=needs_gpu,
                        on_event=on_event or no_events, in_process=in_process, reuse=reuse)
    return executor.run(project.graph.nodes, project.graph.order, selected)


def runner_facts(kind: str, cell: Cell, runner: RunnerFingerprint) -> dict[str, Any]:
    """What of the gate runner a verdict depends on beyond its gate key: the runtime version that ran the engine,
    the reference runtime's (parity), the GPU model (benchmark), and for a CPU engine the CPU's model and
    kernel-selecting ISA features. Recorded with the verdict; a cached verdict with other facts is not reused."""
    runtime = runtime_of(cell)
    out: dict[str, Any] = {"runtime": runtime, "version": runner.runtime_version(runtime)}
    if cell.target.device == "cpu":
        # a CPU engine's numbers follow the kernels onnxruntime picks for this CPU's instruction set (int8 most of
        # all: issue 22.5): every CPU verdict states them, and a cached one from another ISA is not reused
        out["cpu"] = runner.cpu.to_json() if runner.cpu is not None else None
    if kind == "gate:parity":
        out["reference"] = runner.runtime_version(plugins.REFERENCE_RUNTIME)
    if kind == "gate:benchmark":
        gpu = runner.gpus[0] if runner.gpus and cell.target.device != "cpu" else None
        out["gpu"] = gpu.name if gpu else None
        out["platform"] = runner.platform
    return out


def failed_gates(summary: RunSummary) -> list[str]:
    """Gate nodes that ran (now or cached) and whose engine failed the gate."""
    return [r.node for r in summary.reports
            if r.status in ("done", "cached") and r.data.get("status") == "failed"]


def noisy_gates(summary: RunSummary) -> list[str]:
    """Benchmark nodes whose timing blocks disagreed past the spread limit: no verdict, pending (not cached)."""
    return [r.node for r in summary.reports if r.status == "pending" and r.data.get("status") == "noisy"]
