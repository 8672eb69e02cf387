"""The matrix report's data: one row per cell with its gate status and the verdicts found on this machine (or
recorded with the published artifact of the same build key)."""

from __future__ import annotations

from typing import Any

from orchestrator import plugins
from orchestrator.app.pipeline import gate_reports, registry_index, runtime_reason
from orchestrator.app.project import Project
from orchestrator.contracts.store import IndexEntry
from orchestrator.core.artifact import gate_status
from orchestrator.core.graph import Cell
from orchestrator.core.query import select
from orchestrator.run.executor import read_result

Report = dict[str, Any]


def _published_gates(project: Project, cell: Cell,
                     index: dict[str, IndexEntry]) -> tuple[Report | None, Report | None] | None:
    """The gate reports recorded with the published artifact of this exact build key, if any."""
    entry = index.get(cell.address)
    if entry is None or entry.build_key != cell.build_key:
        return None
    store = plugins.open_store(project.registry)
    for artifact in select(store.records(cell.model), lambda a: a.metadata, address=cell.address):
        if artifact.metadata["build_key"] == cell.build_key:
            gates = artifact.metadata.get("gates") or {}
            return gates.get("parity"), gates.get("benchmark")
    return None


def report_cells(project: Project) -> list[Report]:
    """One dict per matrix cell for the report: gate status and verdicts found on this machine."""
    fingerprint = None
    published_index = registry_index(project).latest_by_address()
    cells = []
    for cell in project.graph.cells:
        entry: Report = {"address": cell.address, "model": cell.model, "precision": cell.precision.name,
                         "profile_set": cell.profile_set, "target": cell.target.slug, "parity": None,
                         "benchmark": None}
        if cell.blocked:
            cells.append({**entry, "status": "blocked", "note": cell.blocked})
            continue
        build_node = project.graph.nodes[f"build:{cell.address}"]
        if read_result(project.workspace.node_dir(build_node)) is None:
            published = _published_gates(project, cell, published_index)
            if published is None:
                cells.append({**entry, "status": "skipped", "note": "not built on this machine"})
                continue
            parity, bench = published
            entry["note"] = "from the registry"
        else:
            parity, bench = gate_reports(project, cell)
        if parity:
            entry["parity"] = next(iter(parity["profiles"].values()), None)
        if bench:
            entry["benchmark"] = bench["verdict"]
        gates = project.models[cell.model].gate
        status = gate_status(parity["status"] if parity else None, bench["status"] if bench else None,
                             (gates.parity.enabled, gates.benchmark.enabled))
        if status == "skipped":
            status = "passed"  # no gate enabled: nothing stands between the engine and publishing
        if status == "pending":
            fingerprint = fingerprint or plugins.fingerprint()
            reason = runtime_reason(cell, fingerprint)
            entry["note"] = f"gate pending: {reason}" if reason else "not gated yet"
        cells.append({**entry, "status": status})
    return cells
