"""The matrix report's data: one row per cell with its gate status and the verdicts found on this machine (or
recorded with the published artifact of the same build key).

A cell that has no build result here says why, from the last recorded outcome of its nodes (the run records
``runs/*.json`` that every build, gate and publish writes, newest first, each node with its key): a build that
failed is ``failed`` with the error's first line; a build that was skipped says why (this runner cannot build
it, a transform it needs failed); a gate that could not run is ``error``; a benchmark whose blocks disagreed past
the spread limit is ``noisy``; a cell not gated here whose transformed ONNX failed parity on another cell is
``held`` (never published ungated), with that reason. An outcome recorded for other inputs (another node key) is
not this cell's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from orchestrator import plugins
from orchestrator.app.outcomes import failed_transform_outputs, gate_reports
from orchestrator.app.pipeline import registry_index, runtime_reason
from orchestrator.app.project import Project
from orchestrator.contracts.store import IndexEntry
from orchestrator.core.artifact import gate_status
from orchestrator.core.gpu_parity import parity_caveat, parity_device
from orchestrator.core.graph import Cell, Node
from orchestrator.core.query import select
from orchestrator.run.executor import read_result

Report = dict[str, Any]
Outcome = dict[str, Any]


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


def _run_records(runs: Path) -> list[Path]:
    """The run records, newest first (modification time, then name: names carry the start time)."""
    try:
        files = [p for p in runs.glob("*.json") if p.is_file()]
    except OSError:
        return []

    def when(path: Path) -> tuple[float, str]:
        try:
            return os.stat(path).st_mtime, path.name
        except OSError:
            return 0.0, path.name

    return sorted(files, key=when, reverse=True)


def last_outcomes(project: Project) -> dict[str, Outcome]:
    """node id -> the newest recorded outcome of that node for its current key (records without keys, written
    before they carried one, count as current). Unreadable records are passed over."""
    nodes = project.graph.nodes
    found: dict[str, Outcome] = {}
    for path in _run_records(project.workspace.root / "runs"):
        try:
            data = json.loads(path.read_text())
            entries = data.get("nodes", []) if isinstance(data, dict) else []
        except (OSError, ValueError):
            continue
        for entry in entries:
            if not isinstance(entry, dict):
                continue
            node_id = entry.get("node")
            if not isinstance(node_id, str) or node_id in found or node_id not in nodes:
                continue
            key = entry.get("key")
            if key is not None and key != nodes[node_id].key:
                continue
            found[node_id] = entry
        if len(found) == len(nodes):
            break
    return found


def first_line(text: object, *, strip_prefix: str = "") -> str:
    line = next((ln.strip() for ln in str(text or "").splitlines() if ln.strip()), "")
    if strip_prefix and line.startswith(strip_prefix + ": "):
        line = line[len(strip_prefix) + 2:]
    return line


def _unbuilt_reason(cell: Cell, build: Node, outcomes: dict[str, Outcome]) -> tuple[str, str] | None:
    """(status, note) for a cell with no build result, from the last outcomes of its build and what it needs."""
    outcome = outcomes.get(build.id)
    if outcome is None:
        return None
    status, reason = outcome.get("status"), str(outcome.get("reason") or "")
    if status == "failed":
        return "failed", f"build failed: {first_line(reason, strip_prefix=cell.address)}"
    if status in ("skipped", "pending"):
        # "<dependency> failed": the first failed node up the chain names the real error
        dep_id = reason[: -len(" failed")] if reason.endswith(" failed") else None
        seen: set[str] = set()
        while dep_id and dep_id not in seen:
            seen.add(dep_id)
            dep = outcomes.get(dep_id) or {}
            dep_reason = str(dep.get("reason") or "")
            if dep.get("status") == "failed":
                return "failed", f"{dep_id} failed: {first_line(dep_reason)}"
            dep_id = dep_reason[: -len(" failed")] if dep_reason.endswith(" failed") else None
        if reason:
            return "skipped", f"not built: {first_line(reason)}"
    return None


def _gate_problem(cell: Cell, project: Project, outcomes: dict[str, Outcome]) -> tuple[str, str, list[str]] | None:
    """(status, note, reasons) when a gate of this cell could not judge it on its last run: it failed to run
    (``error``) or its benchmark was noisy (``noisy``)."""
    for kind in ("parity", "benchmark"):
        node_id = f"gate:{kind}:{cell.address}"
        outcome = outcomes.get(node_id)
        if outcome is None or node_id not in project.graph.nodes:
            continue
        raw = outcome.get("data")
        data: dict[str, Any] = raw if isinstance(raw, dict) else {}
        if outcome.get("status") == "failed":
            return "error", f"{kind} gate could not run: {first_line(outcome.get('reason'))}", []
        if outcome.get("status") == "pending" and data.get("status") == "noisy":
            reasons = [str(r) for r in data.get("reasons") or []]
            return "noisy", "benchmark noisy: the timing blocks disagree (no verdict; run `orchestrate gate` " \
                            "again)", reasons
    return None


def _parity_view(parity: Report) -> tuple[Report | None, list[str]]:
    """The profile verdict the grid shows (the first failed one, else the first) and the other failed profiles'
    reasons (a failure in a second profile must not vanish from the report)."""
    profiles: dict[str, Report] = parity.get("profiles") or {}
    failed = [(name, v) for name, v in profiles.items() if v.get("status") == "failed"]
    shown = failed[0][1] if failed else next(iter(profiles.values()), None)
    extra = [f"profile {name}: {r}" for name, v in failed[1:] for r in v.get("reasons", ())]
    return shown, extra


def gated_cpu(*verdicts: Report | None) -> Report | None:
    """The CPU (model, kernel-selecting ISA features, where they were read) a CPU engine's verdicts were given on, as
    their runner facts record it (``app.gating.runner_facts``); None for a GPU engine or a verdict from before."""
    for verdict in verdicts:
        facts = (verdict or {}).get("runner")
        if isinstance(facts, dict) and isinstance(facts.get("cpu"), dict):
            cpu: Report = facts["cpu"]
            return cpu
    return None


def report_cells(project: Project) -> list[Report]:
    """One dict per matrix cell for the report: gate status and verdicts found on this machine."""
    fingerprint = None
    published_index = registry_index(project).latest_by_address()
    outcomes = last_outcomes(project)
    failed_inputs = failed_transform_outputs(project)
    cells = []
    for cell in project.graph.cells:
        entry: Report = {"address": cell.address, "model": cell.model, "precision": cell.precision.name,
                         "profile_set": cell.profile_set, "target": cell.target.slug, "parity": None,
                         "benchmark": None, "reasons": []}
        if cell.blocked:
            cells.append({**entry, "status": "blocked", "note": cell.blocked})
            continue
        build_node = project.graph.nodes[f"build:{cell.address}"]
        if read_result(project.workspace.node_dir(build_node)) is None:
            unbuilt = _unbuilt_reason(cell, build_node, outcomes)
            if unbuilt is not None and unbuilt[0] == "failed":
                cells.append({**entry, "status": "failed", "note": unbuilt[1], "reasons": [unbuilt[1]]})
                continue
            published = _published_gates(project, cell, published_index)
            if published is None:
                note = unbuilt[1] if unbuilt is not None else "not built on this machine"
                cells.append({**entry, "status": "skipped", "note": note})
                continue
            parity, bench = published
            entry["note"] = "from the registry"
        else:
            parity, bench = gate_reports(project, cell)
        if parity:
            entry["parity"], entry["reasons"] = _parity_view(parity)
        # a reduced precision judged on a CPU only: no evidence for its numerics on a GPU (issue 23.16)
        judged_on = parity_device(cell.target.device, parity["status"] if parity else None)
        caveat = parity_caveat(cell.precision.name, cell.target.device, parity["status"]) \
            if parity and judged_on == "cpu" else None
        entry["caveats"] = [caveat] if caveat else []
        if bench:
            entry["benchmark"] = bench["verdict"]
        for section in ("memory", "soak"):  # the memory gate at the max shape, and the soak (run.gate)
            found = (bench or {}).get(section)
            if found:
                entry[section] = found
                entry["reasons"] = [*entry["reasons"], *found.get("reasons", ())]
        cpu = gated_cpu(parity, bench)
        if cpu is not None:  # a CPU engine's verdict holds for the ISA it was given on (issue 22.5)
            entry["cpu"] = cpu
        drift = {"outputs": (parity or {}).get("drift"), "latency": (bench or {}).get("drift")}
        if any(drift.values()):
            entry["drift"] = drift
            entry["reasons"] = [*entry["reasons"], *(f"drift: {r}" for side in drift.values() if side
                                                      for r in side.get("reasons", ()))]
        gates = project.model_of(cell).gate
        status: str = gate_status(parity["status"] if parity else None, bench["status"] if bench else None,
                                  (gates.parity.enabled, gates.benchmark.enabled))
        if status == "skipped":
            status = "passed"  # no gate enabled: nothing stands between the engine and publishing
        if status == "pending":
            problem = _gate_problem(cell, project, outcomes) if entry.get("note") is None else None
            held = failed_inputs.get(cell.transform_node or "") if entry.get("note") is None else None
            if problem is not None:
                status, entry["note"] = problem[0], problem[1]
                entry["reasons"] = [*entry["reasons"], *problem[2]]
            elif held:  # never published ungated: the ONNX it was built from is known bad
                status, entry["note"] = "held", f"held back: {held}"
                entry["reasons"] = [*entry["reasons"], entry["note"]]
            else:
                fingerprint = fingerprint or plugins.fingerprint()
                reason = runtime_reason(cell, fingerprint)
                entry["note"] = f"gate pending: {reason}" if reason else "not gated yet"
        cells.append({**entry, "status": status})
    return cells
