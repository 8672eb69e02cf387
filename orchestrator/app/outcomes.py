"""What this machine last saw of each cell, read from its cache dir: the gate reports on disk, the gates that
errored (they could not judge the engine), the transformed ONNX files known bad (a cell built from one failed
parity), and each cell's last outcome (for `plan`), from the node cache and the newest run summaries
(``<cache>/runs/*.json``, one per build/gate/publish command, each node with its key)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.app.project import Project
from orchestrator.core.graph import Cell, Node
from orchestrator.fastpath import run_window
from orchestrator.run.workspace import read_gate_report, read_result


def gate_reports(project: Project, cell: Cell, cache: _NodeCache | None = None
                 ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The parity and benchmark reports on disk for a cell (None where not gated here); ``cache``: the node
    folders already listed (`plan` asks for every cell)."""
    out = []
    for kind, name in (("parity", "parity.json"), ("benchmark", "benchmark.json")):
        node = project.graph.node(f"gate:{kind}:{cell.address}")
        if cache is not None:
            found = cache.result(node)
            out.append(read_gate_report(found[1], name) if found else None)
            continue
        d = project.workspace.node_dir(node) if node else None
        out.append(read_gate_report(d, name) if d and read_result(d) is not None else None)
    return out[0], out[1]


def gate_errors(project: Project, runs: list[RunRecord] | None = None) -> dict[str, str]:
    """Cell address -> why a gate of it errored (it could not judge the engine: the gate raised), for the cells
    whose gate has no verdict here and whose newest recorded run of that gate node (its current key) failed."""
    runs = recent_runs(project.workspace.root) if runs is None else runs
    errors: dict[str, str] = {}
    for cell in project.graph.cells:
        if cell.blocked:
            continue
        for kind in ("parity", "benchmark"):
            node = project.graph.node(f"gate:{kind}:{cell.address}")
            if node is None or read_result(project.workspace.node_dir(node)) is not None:
                continue
            last = next((r for r in (run.reports.get(node.id) for run in runs)
                         if r is not None and r.get("key") in (None, node.key)), None)
            if last is not None and last.get("status") == "failed":
                errors[cell.address] = first_line(f"the {kind} gate errored: {last.get('reason') or 'no reason'}")
                break
    return errors


def failed_transform_outputs(project: Project, cache: _NodeCache | None = None) -> dict[str, str]:
    """Transform node -> why its output is known bad: a cell built from it failed parity here (the same ONNX
    every other cell of that transform was built from, so "ungated" must not cover those)."""
    failed: dict[str, str] = {}
    if cache is not None and not cache.listed("gate:parity")[1]:
        return failed  # no parity gate ran here
    for cell in project.graph.cells:
        if not cell.transform_node or cell.transform_node in failed or cell.blocked:
            continue
        parity, _ = gate_reports(project, cell, cache)
        if parity is not None and parity.get("status") == "failed":
            failed[cell.transform_node] = (f"the {cell.precision.name} ONNX it was built from failed parity on "
                                           f"{cell.address}")
    return failed


# -- the last local outcome of each cell (for `plan`) ---------------------------------------------------------

# The newest run summaries are read (``<cache>/runs/*.json``, one per build/gate/publish command; how many and
# within what byte budget: ``fastpath.run_window``): a cell no recent run touched shows what its node cache says.
_NOT_OK = ("failed", "skipped", "interrupted", "pending")


@dataclass(frozen=True)
class LocalOutcome:
    """What this machine last saw happen to a cell, from its cache dir. ``status``: ``built`` (the engine is in
    the node cache, not or not fully gated), ``gated`` (every enabled gate passed here), ``gate-failed`` (a gate
    ran here and failed), ``held`` (never published ungated: the transformed ONNX it was built from failed parity
    on another cell), or, from the newest run summary naming one of the cell's nodes, ``failed`` /
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
                "gate-failed": f"built here; {gate} gate failed", "held": "held back"}.get(self.status)
        if what is None:
            when = f" ({self.at.replace('T', ' ')})" if self.at else ""
            # a gate node that failed could not judge the engine (it raised): that is an error, not a verdict
            status = "errored" if self.status == "failed" and self.step.startswith("gate:") else self.status
            what = f"last {self.step} here {status}{when}"
        return f"{what}: {self.detail}" if self.detail else what

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "step": self.step, "detail": self.detail, "at": self.at, "run": self.run}


def first_line(text: object, limit: int = 200) -> str:
    line = str(text or "").strip().splitlines()[0] if str(text or "").strip() else ""
    return line if len(line) <= limit else line[:limit - 1] + "…"


def first_reason(report: Any, depth: int = 0) -> str:
    """The first failure reason a gate report holds (its verdicts nest them), or ""."""
    if depth > 6:
        return ""
    if isinstance(report, dict):
        reasons = report.get("reasons")
        if isinstance(reasons, list) and reasons:
            return first_line(reasons[0])
        failing = [v for v in report.values() if isinstance(v, (dict, list))
                   and not (isinstance(v, dict) and v.get("status") == "passed")]
        for value in failing:
            found = first_reason(value, depth + 1)
            if found:
                return found
    elif isinstance(report, list):
        for value in report:
            found = first_reason(value, depth + 1)
            if found:
                return found
    return ""


@dataclass(frozen=True)
class RunRecord:
    mtime: float
    path: str  # relative to the cache dir
    reports: dict[str, dict[str, Any]]  # node id -> its report


def recent_runs(root: Path) -> list[RunRecord]:
    """The newest run summaries, newest first (``fastpath.run_window``: which ones, also for the start-up fast
    path's check that they did not move); unreadable or foreign files are passed over."""
    runs: list[RunRecord] = []
    for path, _, _, _ in run_window(str(root / "runs")):
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
            mtime = os.stat(path).st_mtime
        except (OSError, ValueError):
            continue
        nodes = data.get("nodes") if isinstance(data, dict) else None
        if not isinstance(nodes, list):
            continue
        reports = {str(n["node"]): n for n in nodes if isinstance(n, dict) and "node" in n}
        runs.append(RunRecord(mtime, os.path.relpath(path, root), reports))
    return runs


class _NodeCache:
    """Which node directories exist (one listing per kind, not one stat per cell) and their results."""

    def __init__(self, project: Project) -> None:
        self.workspace = project.workspace
        self.listings: dict[str, tuple[Path, set[str]]] = {}  # node kind -> its folder and the names in it

    def listed(self, kind: str) -> tuple[Path, set[str]]:
        found = self.listings.get(kind)
        if found is None:
            folder = self.workspace.kind_dir(kind)
            try:
                found = self.listings[kind] = (folder, set(os.listdir(folder)))
            except OSError:
                found = self.listings[kind] = (folder, set())
        return found

    def result(self, node: Node | None) -> tuple[dict[str, Any], Path, float] | None:
        if node is None:
            return None
        listed = self.listed(node.kind)
        if not listed[1]:
            return None
        name = self.workspace.node_name(node)
        if name not in listed[1]:
            return None
        path = listed[0] / name
        result = read_result(path)
        if result is None:
            return None
        try:
            mtime = (path / "result.json").stat().st_mtime
        except OSError:
            return None
        return result, path, mtime


def _from_cache(project: Project, cell: Cell, cache: _NodeCache) -> tuple[LocalOutcome | None, float]:
    if not cache.listed("build")[1]:
        return None, 0.0  # nothing was built here (the cell's nodes need not be made to tell)
    built = cache.result(project.graph.node(f"build:{cell.address}"))
    if built is None:
        return None, 0.0
    newest = built[2]
    gates = []
    for kind, name in (("parity", "parity.json"), ("benchmark", "benchmark.json")):
        node = project.graph.node(f"gate:{kind}:{cell.address}")
        if node is None:
            continue
        found = cache.result(node)
        report = read_gate_report(found[1], name) if found else None
        if found:
            newest = max(newest, found[2])
        gates.append((kind, report))
    for kind, report in gates:
        if report is not None and report.get("status") == "failed":
            return LocalOutcome("gate-failed", f"gate:{kind}", first_reason(report)), newest
    if gates and all(report is not None and report.get("status") == "passed" for _, report in gates):
        return LocalOutcome("gated", "gate"), newest
    ran = [kind for kind, report in gates if report is not None]
    detail = f"{' and '.join(ran)} passed, " if ran else ""
    missing = [kind for kind, report in gates if report is None]
    detail += f"{' and '.join(missing)} not run here" if missing else ""
    return LocalOutcome("built", "build", detail.rstrip(", ")), newest


def _from_runs(project: Project, cell: Cell, runs: list[RunRecord]) -> tuple[LocalOutcome | None, float]:
    """The newest run that named one of the cell's nodes: its first step that did not succeed, if any."""
    ids = [f"build:{cell.address}", f"gate:parity:{cell.address}", f"gate:benchmark:{cell.address}",
           f"publish:{cell.address}"]
    if not any(i in run.reports for run in runs for i in ids):
        return None, 0.0  # no recent run names the cell
    keys = {i: node.key for i in ids if (node := project.graph.node(i)) is not None}
    for run in runs:
        # summaries that record node keys: a report about other inputs of this address (another build key, other
        # gate settings) is not this cell's
        mine = [r for r in (run.reports.get(i) for i in ids)
                if r is not None and r.get("key") in (None, keys.get(str(r.get("node"))))]
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
            return LocalOutcome(status, step, first_line(reason), at=at, run=run.path), run.mtime
        return None, run.mtime  # the newest run that touched the cell went fine
    return None, 0.0


def local_outcomes(project: Project) -> dict[str, LocalOutcome | None]:
    """Each cell's last outcome on this machine (``None``: never built or tried here), so `plan` can tell "never
    built" from "built but failed". Reads the node cache for the cells' current build keys and the newest run
    summaries under the cache dir; blocked cells are left out (they never run)."""
    cache = _NodeCache(project)
    runs = recent_runs(project.workspace.root)
    failed_inputs = failed_transform_outputs(project, cache)
    out: dict[str, LocalOutcome | None] = {}
    for cell in project.graph.cells:
        if cell.blocked:
            continue
        cached, cached_at = _from_cache(project, cell, cache)
        ran, ran_at = _from_runs(project, cell, runs)
        # the newer of the two; a run that went fine after the cache was written leaves the cache's word
        outcome = ran if ran is not None and ran_at >= cached_at else cached
        held = failed_inputs.get(cell.transform_node or "")
        if held and (outcome is None or outcome.status in ("built", "pending", "skipped")):
            # not gated here (or not at all) and never published ungated: the ONNX it comes from is known bad
            outcome = LocalOutcome("held", "publish", held)
        out[cell.address] = outcome
    return out
