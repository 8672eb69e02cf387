"""``adopt FILE --model M --target T``: gate an engine built elsewhere like one built here, then register it.

The file is identified first (``app.identify``): the engine inside (the plan behind an Ultralytics prefix, the engine
in an EPContext model, or the file itself) is what is gated and stored, alone — metadata is never prepended. It
must be an engine the target's runtime runs. The gates are the existing steps (``run.gate``: parity against the
model's ONNX on the manifest's parity data, the task metric, the benchmark) run on this runner.

Registered with what the bytes and the gating runner established, under ``adopted`` in the metadata. Its build key
is not ours (it was not built from the cell's recipe): it is a key over the engine's digest and the model, under
the address ``<model>/<precision>/<profile>@adopted-<digest>``, so it never satisfies a plan cell — unless the user
pins it with ``--as-cell ADDR``, accepted only when the builder version read from the engine and its compute
capabilities match the cell's; then it is recorded under the cell's address and build key.

Refusals: a parity or benchmark failure (exit 3, the failing output and metric named, nothing registered); an
engine this runner cannot run (an RTX engine on a machine without an RTX/Ampere+ GPU) is registered with its gates
``pending`` only where the model's gate allows ungated publishing (``gate.allow_ungated_publish``, recorded as for
any ungated publish), and refused otherwise (exit 1), so adopting never loosens what publishing allows.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from orchestrator import plugins
from orchestrator.app.gating import runner_facts
from orchestrator.app.identify import Identified, identify_engine
from orchestrator.app.pipeline import runtime_of
from orchestrator.app.project import Project
from orchestrator.contracts.store import ArtifactFiles, StoredArtifact
from orchestrator.core.artifact import EngineDescriptor, GateStatus, GateSummary, gate_status
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.graph import Cell
from orchestrator.core.keys import canonical_json
from orchestrator.core.versions import same_version
from orchestrator.errors import GateError, UsageError
from orchestrator.metadata import engine_file, model_io, new_metadata, utc_now, validate_metadata
from orchestrator.run.executor import StepOutcome, StepTask
from orchestrator.run.gate import GatePayload, step_benchmark, step_parity
from orchestrator.run.publish import git_commit
from orchestrator.run.signing import attach_referrer, sign_statement

CHUNK = 8 * 2**20


@dataclass(frozen=True)
class AdoptResult:
    address: str
    status: str  # "registered" | "failed" (a gate failed: nothing registered)
    gates: str  # passed / pending / failed
    identified: Identified
    reasons: tuple[str, ...] = ()  # why a gate failed, or why gates are pending
    stored: StoredArtifact | None = None
    pinned: bool = False
    verdicts: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"address": self.address, "status": self.status, "gates": self.gates, "reasons": list(self.reasons),
                "pinned_to_cell": self.pinned, "digest": self.stored.digest if self.stored else None,
                "location": self.stored.location if self.stored else None,
                "identified": self.identified.to_json(), "verdicts": self.verdicts}


def _cell(project: Project, model: str, target: str, precision: str | None, profile: str | None,
          as_cell: str | None) -> Cell:
    if as_cell is not None:
        found = [c for c in project.graph.cells if c.address == as_cell]
        if not found:
            raise UsageError(f"--as-cell {as_cell}: no such cell in the manifests",
                             hint="`orchestrate plan` lists them")
        cell = found[0]
        if (cell.model, cell.target.name) != (model, target):
            raise UsageError(f"--as-cell {as_cell} is a cell of model {cell.model} and target {cell.target.name}, "
                             f"not {model} and {target}")
        return cell
    cells = [c for c in project.graph.cells if c.model == model and c.target.name == target
             and (precision is None or c.precision.name == precision)
             and (profile is None or c.profile_set == profile)]
    if len(cells) != 1:
        listed = ", ".join(c.address for c in cells) or "none"
        raise UsageError(f"model {model!r} on target {target!r}"
                         + (f" ({precision or 'any precision'}, {profile or 'any profile'})") +
                         f" matches {len(cells)} cells: {listed}",
                         hint="name the model and target as the manifest does; pick one cell with --precision "
                              "and --profile")
    return cells[0]


def _pin_problem(cell: Cell, version: str | None, ccs: list[str] | None) -> str | None:
    """Why the engine may not stand for ``cell`` (None: its builder version and CCs are the cell's)."""
    if version is None or not same_version(version, cell.target.builder_version):
        return (f"the engine was built by {version or 'an unknown version'}, the cell's target names "
                f"{cell.target.builder} {cell.target.builder_version}")
    if cell.target.device == "cpu":
        return None
    want = sorted(cell.target.compute_capabilities)
    if ccs is None or sorted(ccs) != want:
        return (f"the engine's compute capabilities are {', '.join(ccs) if ccs else 'unknown'}, the cell's are "
                f"{', '.join(want) or 'none'}")
    return None


def _copy(blob: Any, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "wb") as out:
        offset = 0
        while offset < blob.size:
            chunk = blob.read(offset, CHUNK)
            if not chunk:
                break
            out.write(chunk)
            offset += len(chunk)


def _run_gate(project: Project, cell: Cell, kind: str, build_dir: Path, payload: GatePayload, work: Path
              ) -> tuple[StepOutcome, dict[str, Any] | None]:
    node = project.graph.nodes[f"{kind}:{cell.address}"]
    out = work / kind.replace(":", "-")
    out.mkdir(parents=True, exist_ok=True)
    step = step_parity if kind == "gate:parity" else step_benchmark
    outcome = step(StepTask(node=node, out_dir=out, dep_dirs={f"build:{cell.address}": str(build_dir)},
                            log_path=out / "gate.log", payload=payload))
    name = "parity.json" if kind == "gate:parity" else "benchmark.json"
    report = json.loads((out / name).read_text()) if (out / name).is_file() else None
    return outcome, report


def adopt(project: Project, file: str | os.PathLike[str], *, model: str, target: str, precision: str | None = None,
          profile: str | None = None, as_cell: str | None = None,
          fingerprint: RunnerFingerprint | None = None) -> AdoptResult:
    """Gate ``file`` for the cell of ``model`` on ``target`` and register it, marked ``adopted``."""
    identified, blob = identify_engine(file)
    if identified.error:
        raise UsageError(identified.error)
    engine_layer = identified.engine
    if engine_layer is None or blob is None:
        raise UsageError(f"{file} is not an engine any runtime runs: it is {identified.kind} "
                         f"({identified.layers[0].summary if identified.layers else 'unreadable'})",
                         hint="`orchestrate identify FILE` says what it is")
    if engine_layer.problems:
        raise UsageError(f"{file}: {engine_layer.problems[0]}", hint="adopt the whole engine file")
    cell = _cell(project, model, target, precision, profile, as_cell)
    runtime = runtime_of(cell)
    if engine_layer.runtime != runtime:
        raise UsageError(f"{file} is a {engine_layer.kind} (run by {engine_layer.runtime}); target {target} builds "
                         f"engines {runtime} runs", hint="name a target whose builder makes this kind of engine")
    ccs = engine_layer.facts.get("compute_capabilities")
    version = engine_layer.builder_version
    pinned = as_cell is not None
    if pinned:
        problem = _pin_problem(cell, version, ccs if isinstance(ccs, list) else None)
        if problem:
            raise UsageError(f"--as-cell {as_cell}: refused: {problem}",
                             hint="adopt it without --as-cell: it is registered under its own address")
    model_spec = project.model_of(cell)
    fp = fingerprint or plugins.fingerprint()
    with tempfile.TemporaryDirectory(prefix="orchestrate-adopt-", dir=_tmp_root(project)) as tmp:
        work = Path(tmp)
        suffix = plugins.builder(cell.target.builder).capabilities(cell.target.builder_version).engine_suffix
        build_dir = work / "build"
        engine_path = build_dir / f"engine{suffix}"
        _copy(blob, engine_path)
        caps = plugins.builder(cell.target.builder).capabilities(cell.target.builder_version)
        described = engine_file(engine_path, media_type=caps.engine_media_type)
        recorded = version or fp.runtime_version(runtime) or ""
        probe = EngineDescriptor.for_cell(cell, runtime=runtime, builder_version=recorded or None,
                                          digest=described.digest, size=described.size)
        compat = plugins.runtime_for(probe).can_run(probe, fp)
        (build_dir / "result.json").write_text(json.dumps({"data": {
            "builder_version": recorded, "engine_digest": described.digest, "engine_size": described.size,
            "engine": engine_path.name}}))
        reports: dict[str, dict[str, Any] | None] = {"parity": None, "benchmark": None}
        enabled = (f"gate:parity:{cell.address}" in project.graph.nodes,
                   f"gate:benchmark:{cell.address}" in project.graph.nodes)
        reasons: list[str] = []
        if not compat.ok:
            if not model_spec.gate.allow_ungated_publish:
                raise GateError(f"{file} cannot be gated on this runner: {compat.reason}; nothing registered",
                                hint="adopt it on a runner that runs it, or set gate.allow_ungated_publish in the "
                                     "manifest to register it with its gates pending (recorded)")
            reasons.append(f"gates pending: {compat.reason}")
            if version is None:
                raise GateError(f"{file}: the {runtime} version that built it is not in its bytes and no runner ran it",
                                hint="adopt it on a runner that runs it")
        else:
            for kind, key in (("gate:parity", "parity"), ("gate:benchmark", "benchmark")):
                if f"{kind}:{cell.address}" not in project.graph.nodes:
                    continue
                payload = GatePayload(cell=cell, model=model_spec, caches=project.workspace.caches, runtime=runtime,
                                      runner=runner_facts(kind, cell, fp))
                outcome, report = _run_gate(project, cell, kind, build_dir, payload, work)
                reports[key] = report if outcome.status == "done" else None
                if outcome.data.get("status") == "failed":
                    reasons += [f"{key}: {r}" for r in outcome.data.get("reasons", [])]
        status = gate_status((reports["parity"] or {}).get("status"), (reports["benchmark"] or {}).get("status"),
                             enabled)
        address = cell.address if pinned else \
            f"{cell.model}/{cell.precision.name}/{cell.profile_set}@adopted-{described.digest[7:19]}"
        verdicts = {k: v for k, v in reports.items() if v is not None}
        if status == "failed":
            return AdoptResult(address, "failed", status, identified, tuple(reasons), verdicts=verdicts)
        stored = _register(project, cell, file, identified, engine_path, described, recorded, fp, status, reports,
                           address, pinned, runtime, caps.platform_specific, work, version is not None)
    return AdoptResult(address, "registered", status, identified, tuple(reasons), stored, pinned, verdicts)


def _tmp_root(project: Project) -> str:
    root = project.workspace.tmp
    root.mkdir(parents=True, exist_ok=True)
    return str(root)


def _register(project: Project, cell: Cell, file: str | os.PathLike[str], identified: Identified, engine_path: Path,
              described: Any, version: str, fp: RunnerFingerprint, status: GateStatus,
              reports: dict[str, dict[str, Any] | None], address: str, pinned: bool, runtime: str,
              platform_specific: bool, work: Path, version_from_bytes: bool) -> StoredArtifact:
    model = project.model_of(cell)
    manifest = project.manifest_of(cell).file
    layer = identified.engine
    assert layer is not None
    adopted = {"source": os.path.basename(str(file)), "kind": identified.kind,
               "layers": [x.kind for x in identified.layers],
               "builder_version_from": "the engine's header" if version_from_bytes else "the runner that gated it",
               "compute_capabilities": layer.facts.get("compute_capabilities"),
               "pinned_cell": cell.address if pinned else None,
               "facts": json.loads(json.dumps(dict(layer.facts), default=str))}
    key_inputs: dict[str, Any] = dict(cell.key_inputs) if pinned else {
        "adopted": {"engine_digest": described.digest, "model": cell.key_inputs["model"], "cell": cell.address}}
    build_key = cell.build_key if pinned else hashlib.sha256(canonical_json(key_inputs).encode()).hexdigest()
    target = cell.target
    if not pinned and isinstance(layer.facts.get("compute_capabilities"), list):
        target = replace(target, compute_capabilities=tuple(layer.facts["compute_capabilities"]))
    extras = tuple(p for p in (work / "gate-parity" / "parity.json", work / "gate-benchmark" / "benchmark.json")
                   if p.is_file())
    meta = new_metadata(
        address=address, model_name=model.name, model_version=model.version,
        model_digest=cell.key_inputs["model"]["digest"], precision=cell.precision.name, profile_set=cell.profile_set,
        profiles=[p.name for p in cell.profiles] or [cell.profile_set], target=target, builder_version=version,
        build_key=build_key, key_inputs=key_inputs, engine=described, runtime=runtime, runner=fp,
        gates=GateSummary(status=status, parity=reports["parity"], benchmark=reports["benchmark"],
                          ungated_publish_allowed=status != "passed", key=cell.gate_key,
                          key_inputs=cell.gate_inputs),
        timings={"build_seconds": 0.0}, manifest_path=manifest, git_commit=git_commit(manifest),
        started_on=utc_now(), finished_on=utc_now(), platform_specific=platform_specific,
        io=model_io(model.source.path), builder_id="https://trt-orchestrator.dev/adopted")
    meta["adopted"] = adopted
    validate_metadata(meta)
    signed = sign_statement(meta, project.registry, work)
    store = plugins.open_store(project.registry)
    stored = store.put(ArtifactFiles(engine=engine_path, metadata=meta, extra=extras,
                                     attachments=(signed.attachment,) if signed else ()))
    attach_referrer(store, stored, signed)
    shutil.rmtree(work / "build", ignore_errors=True)
    return stored
