"""Build on miss: the gate before an engine built on a deployment is handed over, and the handing over.

The verdict (``gate_outcome``) is made of the manifest's own gates, run by ``gating.gate`` where the engine's runtime
runs here: parity against the reference on the model version's published ONNX (the samples its gate settings draw,
the same seeded ones every gate of the version drew), the task metric where the model declares one, the benchmark;
and of a check against what a published engine of the version *recorded* on those samples (``outputs.npz``, published
with every gated engine; ``gates.refit_check``, which a refit at deployment uses the same way). The recorded outputs
are another engine's, itself within its tolerance of the reference, so the two are held to the sum of the tolerances
(``core.tolerances.through_recorded``). The most precise record is taken (fp32 first, ``core.select``). A sample
whose inputs, drawn again, do not hash to the recorded ones is said and not compared.

Any gate failed: ``failed`` (exit 3, nothing written). The runtime cannot run the engine here (an RTX engine built
on a machine without a GPU for a declared one): ``pending``, said, and refused by ``--require-gate``.

``write_engine`` copies the gated engine into place through a hidden file beside it, checks its digest and its
runtime's own header check (``verify_engine``), then renames it: a failed check leaves nothing.
"""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from orchestrator import plugins
from orchestrator.app import outputs, pipeline
from orchestrator.app.project import Project
from orchestrator.contracts.runtime import RuntimeOptions, Session
from orchestrator.contracts.store import AttachmentReader, Store, StoredArtifact
from orchestrator.core.artifact import EngineDescriptor, gate_status
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.gatekeys import DRIFT_OUTPUTS_FILE
from orchestrator.core.graph import Cell
from orchestrator.core.query import engines
from orchestrator.core.select import precision_rank
from orchestrator.core.tolerances import ResolvedTolerance, through_recorded
from orchestrator.digests import hash_file
from orchestrator.errors import GateError, IntegrityError, OrchestratorError
from orchestrator.gates.drift import load_outputs
from orchestrator.gates.refit_check import check_refitted
from orchestrator.run.executor import NodeReport, RunSummary
from orchestrator.run.workspace import read_result

Status = Literal["passed", "failed", "pending", "skipped"]


@dataclass(frozen=True)
class GateOutcome:
    """The verdict on an engine built on a deployment, and the engine it is about."""

    status: Status
    engine: Path
    digest: str
    descriptor: EngineDescriptor
    parity: dict[str, Any] | None = None
    benchmark: dict[str, Any] | None = None
    recorded: dict[str, Any] | None = None  # the check against a published engine's recorded outputs
    reasons: tuple[str, ...] = ()  # why it failed
    pending: str | None = None  # why it is not gated here
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        def verdict(report: Mapping[str, Any] | None) -> dict[str, Any] | None:
            return None if report is None else {"status": report.get("status")}  # why: ``reasons``

        return {"status": self.status, "parity": verdict(self.parity), "benchmark": verdict(self.benchmark),
                "recorded_outputs": self.recorded, "reasons": list(self.reasons), "pending": self.pending,
                "notes": list(self.notes)}


def _tolerances(mine: Mapping[str, Any], theirs: Mapping[str, Any], gpu_fp32: bool) -> dict[str, Any]:
    """Each output's tolerance against the recorded outputs: this cell's plus the recorded engine's (a GPU fp32
    engine may have run in TF32: its TF32 tolerance)."""
    def of(t: Mapping[str, Any], output: str | None, tf32: bool) -> ResolvedTolerance:
        chosen = (t.get("per_output") or {}).get(output) if output else None
        return ResolvedTolerance.from_json(dict(chosen or t.get("engine_tf32" if tf32 else "engine") or {}))

    outputs_named = sorted(set(mine.get("per_output") or {}) | set(theirs.get("per_output") or {}))
    return {"engine": through_recorded(of(mine, None, False), of(theirs, None, gpu_fp32)).to_json(),
            "engine_tf32": through_recorded(of(mine, None, True), of(theirs, None, gpu_fp32)).to_json(),
            "per_output": {o: through_recorded(of(mine, o, False), of(theirs, o, gpu_fp32)).to_json()
                           for o in outputs_named}}


def _recorded_by(store: Store, cell: Cell) -> StoredArtifact | None:
    """The published engine of the cell's model version and profile set whose parity gate passed and recorded its
    outputs, the most precise first (fp32: the closest to the reference), then the newest."""
    found = [r for r in engines(store.records(cell.model), lambda a: a.metadata)
             if str(r.metadata["model"]["version"]) == cell.model_version
             and r.metadata.get("profile_set") == cell.profile_set
             and ((r.metadata.get("gates") or {}).get("parity") or {}).get("status") == "passed"
             and any(a.get("name") == DRIFT_OUTPUTS_FILE for a in r.metadata.get("attachments") or ())]
    if not found:
        return None
    return min(enumerate(found), key=lambda item: (precision_rank(str(item[1].metadata.get("precision"))),
                                                  item[0]))[1]


def recorded_check(store: Store, cell: Cell, engine: Path, descriptor: EngineDescriptor) -> dict[str, Any] | None:
    """The engine against the outputs a published engine of the version recorded on its gate's samples (None: no
    published engine recorded any)."""
    record = _recorded_by(store, cell) if isinstance(store, AttachmentReader) else None
    if record is None or not isinstance(store, AttachmentReader):
        return None
    meta = copy.deepcopy(record.metadata)
    parity = ((meta.get("gates") or {}).get("key_inputs") or {}).get("parity")
    mine = (cell.gate_inputs.get("parity") or {}).get("tolerances")
    against = {"address": meta.get("address"), "record_key": meta.get("record_key"),
               "precision": meta.get("precision")}
    if not isinstance(parity, dict) or not isinstance(mine, Mapping):
        return {"against": against, "compared": 0, "passed": False,
                "problems": ["parity is off for this cell or for the recorded engine: not compared"]}
    gpu_fp32 = meta.get("precision") == "fp32" and (meta.get("target") or {}).get("device") != "cpu"
    parity["tolerances"] = _tolerances(mine, parity.get("tolerances") or {}, gpu_fp32)
    runtime = plugins.runtime_for(descriptor)
    device: Literal["cpu", "cuda"] = "cpu" if descriptor.target.device == "cpu" else "cuda"

    def session_for(index: int) -> Session:
        return runtime.load(engine, descriptor, RuntimeOptions(profile_index=index, device=device))

    with tempfile.TemporaryDirectory(prefix="orchestrate-recorded-") as tmp:
        dest = Path(tmp) / DRIFT_OUTPUTS_FILE
        store.get_attachment(record, DRIFT_OUTPUTS_FILE, dest)
        recorded = load_outputs(dest)
    check = check_refitted(meta, recorded, session_for)
    return {"against": against, **check.to_json(),
            "tolerance": parity["tolerances"]["engine"]["source"]}


def _reasons(report: NodeReport | None) -> list[str]:
    """A gate node's failure reasons (which output or shape, which metric, against which threshold)."""
    if report is None or report.status not in ("done", "cached") or report.data.get("status") != "failed":
        return []
    return [str(r) for r in report.data.get("reasons") or ()] or ["(no reason recorded: see the verdict)"]


def gate_outcome(project: Project, cell: Cell, gated: RunSummary, store: Store,
                 actual: RunnerFingerprint) -> GateOutcome:
    """The verdict on the built cell from its gate run (``gating.gate``) and the recorded-outputs check."""
    build_dir = project.workspace.node_dir(project.graph.nodes[f"build:{cell.address}"])
    result = read_result(build_dir)
    if result is None:
        raise GateError(f"{cell.address}: its build result is no longer in the work directory",
                        hint="pull --build-on-miss again")
    data = result["data"]
    engine = build_dir / str(data["engine"])
    descriptor = EngineDescriptor.for_cell(
        cell, runtime=pipeline.runtime_of(cell), builder_version=str(data["builder_version"]),
        digest=str(data["engine_digest"]), size=int(data["engine_size"]),
        platform_specific=plugins.builder(cell.target.builder).capabilities(
            cell.target.builder_version).platform_specific)
    nodes = {r.node: r for r in gated.reports}
    pending: list[str] = []
    for kind in ("parity", "benchmark"):
        report = nodes.get(f"gate:{kind}:{cell.address}")
        if report is None:
            continue
        if report.status == "failed":  # the gate could not judge the engine
            raise GateError(f"{cell.address}: the {kind} gate could not run here: {report.reason}",
                            hint="see its log in the work directory; nothing was written")
        if report.status == "pending" and not pending:  # the first says why (the benchmark waits on parity)
            pending.append(report.reason.removeprefix("gate pending: "))
    parity, bench = pipeline.gate_reports(project, cell)
    enabled = (f"gate:parity:{cell.address}" in project.graph.nodes,
               f"gate:benchmark:{cell.address}" in project.graph.nodes)
    status: Status = gate_status((parity or {}).get("status"), (bench or {}).get("status"), enabled)
    reasons = [f"{kind}: {r}" for kind in ("parity", "benchmark")
               for r in _reasons(nodes.get(f"gate:{kind}:{cell.address}"))]
    recorded = None
    notes: list[str] = []
    if not pending and pipeline.runtime_reason(cell, actual) is None:
        recorded = recorded_check(store, cell, engine, descriptor)
        if recorded is None:
            notes.append("no published engine of this version recorded outputs to check against")
        elif recorded["compared"] and not recorded["passed"]:
            status = "failed"
            reasons += [f"recorded outputs of {recorded['against']['address']}: {p}" for p in recorded["problems"]]
        elif not recorded["compared"]:
            notes += [f"recorded outputs not compared: {p}" for p in recorded["problems"]]
        elif status == "skipped":
            status = "passed"  # no manifest gate is on, and the recorded outputs were reproduced
    return GateOutcome(status, engine, str(data["engine_digest"]), descriptor, parity, bench, recorded,
                       tuple(reasons), "; ".join(dict.fromkeys(pending)) or None, tuple(notes))


def write_engine(outcome: GateOutcome, out: str | os.PathLike[str]) -> Path:
    """The gated engine at ``out``, its digest and header checked first (``IntegrityError``: nothing written)."""
    path = outputs.check_file(out)
    created = outputs.probe_file(path, "-o", str(out))
    staging = path.with_name(f".{path.name}.partial")
    try:
        shutil.copyfile(outcome.engine, staging)
        digest = hash_file(str(staging))[0]
        problem = None if digest == outcome.digest else \
            f"the engine in the work directory is {digest[:19]}, the build wrote {outcome.digest[:19]}"
        try:
            problem = problem or plugins.runtime_for(outcome.descriptor).verify_engine(staging, outcome.descriptor)
        except OrchestratorError as e:
            problem = e.message
        if problem:
            raise IntegrityError(f"{outcome.descriptor.address}: engine check failed: {problem}",
                                 hint="pull --build-on-miss again (the work directory's build is then checked "
                                      "anew)")
        os.replace(staging, path)
    except BaseException:
        outputs.remove_empty(created)
        raise
    finally:
        staging.unlink(missing_ok=True)
    return path
