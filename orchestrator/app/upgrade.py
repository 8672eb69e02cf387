"""``upgrade-check``: rehearse a serving-stack upgrade (``--from triton:25.01 --to triton:26.03``) before it happens.

For the manifests' engines (the newest published record of each address of the models' current versions, and
each cell not published yet as ``plan`` would build it), or for what is deployed (``--inventory``: the output of
``pull --all --json``), every engine is judged on the old stack and on the new one by its own runtime plugin
(``app.judge.judge_engine``: platform, the runtime's ``can_run`` with its TensorRT version, version-compatible,
compute capability and hardware-compatibility rules, the lean runtime), once per GPU it is deployed on.
``core.upgrade`` classifies the answers: it keeps loading, stops loading (with the runtime's reason), starts, or
loads on neither. Nothing here decides compatibility itself, and no plugin is named.

The rebuild set: the targets whose engines stop loading, re-targeted at the new stack's exact builder version
(``core.upgrade.retarget``), resolved and planned against the registry like any manifest (``app.project``,
``app.pipeline.plan``): its entries carry the build keys ``plan`` computes for a manifest that declares the new
stack. Each has a predicted build time: the median of the recorded build durations of the same cell, else of the
same builder and compute capabilities, in the registry's records (``core.upgrade.estimate_build``).

``rehearse`` builds and gates the rebuild set with the ordinary steps (``pipeline.build``, ``gating.gate``: the
drift gate compares each new engine with the old one, its drift baseline) and publishes only when asked: what is
deployed is never touched.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from orchestrator import plugins
from orchestrator.app import gating, pipeline
from orchestrator.app.judge import (
    AS_BUILT,
    SERVING_FORMS,
    LeanRuntime,
    RuntimeSpec,
    built_on_cc,
    built_platform,
    cc_label,
    declared_platform,
    descriptor,
    judge_engine,
    on_platform,
)
from orchestrator.app.matrix import report_cells
from orchestrator.app.project import Project
from orchestrator.app.registry import record_key_of
from orchestrator.app.retarget import Rebuild, build_records, estimate, retargeted_project
from orchestrator.contracts.store import Store, StoredArtifact
from orchestrator.core.artifact import EngineDescriptor
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.graph import Cell
from orchestrator.core.plan import CHANGED, Plan
from orchestrator.core.query import engines
from orchestrator.core.serving import ServingStack, is_serving, resolve_serving
from orchestrator.core.upgrade import STATUSES, GpuAnswer, UpgradeStatus, classify, duration_text
from orchestrator.errors import ExitCode, UsageError
from orchestrator.run.executor import EventFn, RunSummary

FORMAT_VERSION = 1
Source = Literal["published", "planned", "deployed"]


# -- the two stacks -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Stack:
    """One side of the rehearsal: a serving stack (``triton:26.03``: the exact TensorRT it ships) or a runtime and
    release (``ort1.31``, ``rtx1.7.1.116``); ``text`` empty: each engine on the release that built it."""

    text: str
    spec: RuntimeSpec
    serving: ServingStack | None = None

    @property
    def words(self) -> str:
        if not self.text:
            return "each engine's own runtime release (as published)"
        if self.serving is not None:
            return f"{self.serving.name} ({self.spec.runtime} {self.spec.version})"
        return f"{self.spec.runtime} {self.spec.version}"

    def to_json(self) -> dict[str, Any]:
        serving = self.serving
        return {"stack": self.text or None, "runtime": self.spec.runtime or None, "version": self.spec.version or None,
                "serving": None if serving is None else {
                    "name": serving.name, "tensorrt_version": serving.tensorrt, "cuda": serving.cuda,
                    "image": serving.image, "status": serving.status, "source": serving.source, "note": serving.note}}


AS_PUBLISHED = Stack("", AS_BUILT)


def parse_stack(text: str, option: str) -> Stack:
    """``triton:26.03`` / ``ngc-tensorrt:25.01`` / ``jetpack:6.2`` (``core.serving``) or a runtime slug and
    release of an installed runtime plugin (``ort1.31``, ``rtx1.7.1.116``, ``trt10.14.1.48``); anything else is a
    ``UsageError`` naming the option and the forms it takes."""
    text = text.strip()
    try:
        if is_serving(text):
            stack = resolve_serving(text)
            return Stack(stack.name, RuntimeSpec.parse(stack.runtime), stack)
        return Stack(text, RuntimeSpec.parse(text))
    except UsageError as e:
        slugs = plugins.runtime_slugs()
        forms = ", ".join(f"{s}X.Y ({name})" for s, name in sorted(slugs.items()))
        hint = e.hint if is_serving(text) else f"a serving stack ({SERVING_FORMS}) or a runtime and release: {forms}"
        raise UsageError(f"{option}: {e.message.removeprefix('--runtime ')}", hint=hint) from None


def stacks(to: str, from_: str | None) -> tuple[Stack, Stack]:
    """(old, new); the old one defaults to each engine's own release. Both must move one runtime."""
    new = parse_stack(to, "--to")
    old = parse_stack(from_, "--from") if from_ else AS_PUBLISHED
    if old.spec.runtime and old.spec.runtime != new.spec.runtime:
        raise UsageError(f"--from {old.words} and --to {new.words} name different runtimes",
                         hint="an upgrade moves one runtime: name two releases of it (ort1.22 -> ort1.31), or two "
                              "serving stacks (triton:25.01 -> triton:26.03)")
    return old, new


# -- the engines judged ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class JudgedEngine:
    """One engine as the rehearsal judged it: on the old stack and the new one, per GPU it is deployed on."""

    address: str
    model: str
    model_version: str
    precision: str
    profile_set: str
    target: str
    runtime: str
    builder: str
    builder_version: str
    source: Source
    status: UpgradeStatus
    reason: str
    gpus: tuple[GpuAnswer, ...] = ()
    digest: str | None = None
    record_key: str | None = None
    cell: str | None = None  # the manifest cell it is built from; None: no cell in the manifests has its address
    path: str | None = None  # --inventory: the file it is deployed as

    def to_json(self) -> dict[str, Any]:
        return {"address": self.address, "model": self.model, "model_version": self.model_version,
                "precision": self.precision, "profile_set": self.profile_set, "target": self.target,
                "runtime": self.runtime, "builder": {"name": self.builder, "version": self.builder_version},
                "source": self.source, "status": self.status, "reason": self.reason, "digest": self.digest,
                "record_key": self.record_key, "cell": self.cell, "path": self.path,
                "gpus": [{"gpu": a.gpu, "old": {"loads": a.old_ok, "reason": a.old_reason},
                          "new": {"loads": a.new_ok, "reason": a.new_reason}} for a in self.gpus]}


@dataclass(frozen=True)
class _Candidate:
    meta: Mapping[str, Any]  # the record's metadata; {} for an engine not built yet
    engine: EngineDescriptor
    model_version: str
    source: Source
    gpus: tuple[str, ...]  # the GPUs it is deployed on (labels); () -> its own
    cell: Cell | None
    path: str | None = None


def default_gpus(meta: Mapping[str, Any], engine: EngineDescriptor) -> tuple[str, ...]:
    """The GPUs an engine is judged on when the deployment's are not declared: a CPU engine on a machine without
    one; else the compute capabilities it was built for; else (a hardware-compatible or CUDA engine) the GPU it
    was built on, or sm80, the first its level serves."""
    target = engine.target
    if target.device == "cpu":
        return ("cpu",)
    if target.compute_capabilities:
        return tuple(cc_label(c) for c in target.compute_capabilities)
    built = built_on_cc(meta)
    return (cc_label(built) if built else "sm80",)


def _on(fp: RunnerFingerprint, gpu: str, platform: str | None) -> RunnerFingerprint:
    fp = replace(fp, gpus=RunnerFingerprint.parse_gpu_spec(gpu).gpus)
    return on_platform(fp, platform) if platform and platform.count("/") in (1, 2) else fp


def _other_runtime(engine: EngineDescriptor, new: Stack) -> str:
    if new.serving is not None:
        return (f"runs on {engine.runtime}; {new.serving.name} is judged for the {new.spec.runtime} it ships "
                f"({new.spec.version}), the serving table says nothing of its {engine.runtime}: not judged")
    return f"runs on {engine.runtime}; the upgrade moves {new.spec.runtime} only"


def judge_candidate(c: _Candidate, old: Stack, new: Stack, fp: RunnerFingerprint, *, declared: Sequence[str] = (),
                    platform: str | None = None, lean: LeanRuntime | None = None
                    ) -> tuple[UpgradeStatus, str, tuple[GpuAnswer, ...]]:
    """An engine on both stacks, per GPU: the old stack on the platform it was built for, the new one on
    ``platform`` when the deployment declares one; each answer its runtime plugin's own."""
    engine = c.engine
    if engine.runtime != new.spec.runtime:
        return "other-runtime", _other_runtime(engine, new), ()
    built = built_platform(c.meta, engine) if engine.target.platform_specific else None
    answers = []
    for gpu in c.gpus or declared or default_gpus(c.meta, engine):
        was = judge_engine(c.meta, engine, _on(fp, gpu, built), old.spec, lean=lean)
        now = judge_engine(c.meta, engine, _on(fp, gpu, platform or built), new.spec, lean=lean)
        answers.append(GpuAnswer(gpu, was.ok, was.reason, now.ok, now.reason))
    status, reason = classify(answers)
    return status, reason, tuple(answers)


def _published(project: Project, store: Store) -> list[StoredArtifact]:
    """The newest record of each address of the manifests' models, at the version each manifest declares."""
    out: list[StoredArtifact] = []
    for model in project.models.values():
        seen: set[str] = set()
        for art in engines(store.records(model.name), lambda a: a.metadata):  # newest first
            meta = art.metadata
            address = str(meta.get("address"))
            if meta["model"]["name"] != model.name or str(meta["model"]["version"]) != model.version or \
                    address in seen:
                continue
            seen.add(address)
            out.append(art)
    return out


def _from_manifests(project: Project, store: Store) -> list[_Candidate]:
    cells = {c.address: c for c in project.graph.cells}
    found = []
    for art in _published(project, store):
        meta = art.metadata
        found.append(_Candidate(meta, descriptor(meta), str(meta["model"]["version"]), "published", (),
                                cells.get(str(meta["address"]))))
    published = {str(c.meta["address"]) for c in found}
    for cell in project.graph.cells:
        if cell.address in published or cell.blocked:
            continue  # a blocked cell builds nothing: there is no engine to judge
        builder = plugins.builder(cell.target.builder)
        caps = builder.capabilities(cell.target.builder_version)
        engine = EngineDescriptor.for_cell(cell, runtime=builder.runtime, platform_specific=caps.platform_specific)
        found.append(_Candidate({}, engine, project.models[cell.model].version, "planned", (), cell))
    return found


# -- --inventory: what is deployed (``pull --all --json``) -------------------------------------------------

@dataclass(frozen=True)
class Deployed:
    """One engine file of a deployment, as ``pull --all --json`` listed it."""

    digest: str
    gpus: tuple[str, ...]
    model: str
    address: str
    path: str | None


def read_inventory(path: str | os.PathLike[str]) -> tuple[Deployed, ...]:
    """The engines of ``pull --all --json`` outputs (one document, or a list of them: several deployments); a file
    that is not one is a ``UsageError`` naming it and the entry."""
    hint = "pass the output of `orchestrate pull --all ... --json` (or a JSON list of several)"
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise UsageError(f"--inventory {str(path)!r}: {e.strerror or e}", hint=hint) from None
    except ValueError as e:
        raise UsageError(f"--inventory {str(path)!r} is not JSON: {e}", hint=hint) from None
    documents = data if isinstance(data, list) else [data]
    out = []
    for d, doc in enumerate(documents):
        where = f"[{d}]" if isinstance(data, list) else ""
        engines = doc.get("engines") if isinstance(doc, dict) else None
        if not isinstance(engines, list):
            raise UsageError(f"--inventory {str(path)!r}: {where or 'the document'} has no engines list", hint=hint)
        for i, entry in enumerate(engines):
            gpus = entry.get("gpus") if isinstance(entry, dict) else None
            if not (isinstance(entry, dict) and isinstance(entry.get("digest"), str)
                    and isinstance(entry.get("model"), str) and isinstance(gpus, list) and gpus
                    and all(isinstance(g, str) for g in gpus)):
                raise UsageError(f"--inventory {str(path)!r}: {where}engines[{i}] needs a digest, a model and its "
                                 "gpus", hint=hint)
            for g in gpus:
                try:  # a GPU that is not one is refused here, not misjudged later
                    RunnerFingerprint.parse_gpu_spec(g)
                except UsageError as e:
                    raise UsageError(f"--inventory {str(path)!r}: {where}engines[{i}].gpus: {e.message}",
                                     hint=hint) from None
            out.append(Deployed(entry["digest"], tuple(gpus), entry["model"], str(entry.get("address") or ""),
                                str(entry["path"]) if entry.get("path") else None))
    return tuple(out)


def _from_inventory(project: Project, store: Store, deployed: Sequence[Deployed]
                    ) -> tuple[list[_Candidate], list[JudgedEngine]]:
    cells = {c.address: c for c in project.graph.cells}
    by_model: dict[str, dict[str, StoredArtifact]] = {}
    found, unknown = [], []
    for d in deployed:
        if d.model not in by_model:
            by_model[d.model] = {a.digest: a for a in engines(store.records(d.model), lambda a: a.metadata)}
        art = by_model[d.model].get(d.digest)
        if art is None:
            unknown.append(JudgedEngine(d.address, d.model, "", "", "", "", "", "", "", "deployed", "unknown",
                                        f"engine {d.digest[:19]} is not in the registry: cannot be judged",
                                        digest=d.digest, path=d.path))
            continue
        meta = art.metadata
        found.append(_Candidate(meta, descriptor(meta), str(meta["model"]["version"]), "deployed", d.gpus,
                                cells.get(str(meta["address"])), d.path))
    return found, unknown


# -- the rehearsal's report ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class UpgradeReport:
    old: Stack
    new: Stack
    engines: tuple[JudgedEngine, ...]
    rebuild: tuple[Rebuild, ...]
    inventory: str | None = None
    # the re-targeted project and its plan (what --build builds); not part of the JSON
    retargeted: Project | None = field(default=None, compare=False, repr=False)
    plan: Plan | None = field(default=None, compare=False, repr=False)

    def of(self, status: UpgradeStatus) -> tuple[JudgedEngine, ...]:
        return tuple(e for e in self.engines if e.status == status)

    def stops_without_cell(self) -> tuple[JudgedEngine, ...]:
        """Engines that stop loading whose address no manifest cell has (a target since removed, another manifest):
        the rebuild set cannot re-target them."""
        return tuple(e for e in self.of("stops") if e.cell is None)

    @property
    def breaking(self) -> bool:
        return any(e.status == "stops" for e in self.engines)

    def predicted(self) -> tuple[float, int, int]:
        """(seconds predicted for the cells that have records, records they rest on, cells with no record)."""
        known = [r.estimate for r in self.rebuild if r.estimate.seconds is not None and r.entry.status in CHANGED]
        missing = sum(1 for r in self.rebuild if r.estimate.seconds is None and r.entry.status in CHANGED)
        return sum(e.seconds or 0.0 for e in known), sum(e.records for e in known), missing

    def summary(self) -> str:
        counts = {s: len(self.of(s)) for s in STATUSES}
        text = (f"Upgrade {self.old.words} -> {self.new.words}: {counts['stops']} stop loading, {counts['keeps']} keep "
                f"loading, {counts['starts']} start, {counts['never']} load on neither, {counts['other-runtime']} on "
                "another runtime")
        if counts["unknown"]:
            text += f", {counts['unknown']} not in the registry"
        orphans = self.stops_without_cell()
        if orphans:
            text += f" ({len(orphans)} stopping engine(s) have no cell in the manifests: not in the rebuild set)"
        todo = [r for r in self.rebuild if r.entry.status in CHANGED]
        seconds, records, missing = self.predicted()
        text += f"; rebuild {len(todo)} cell(s)"
        if todo:
            known = len(todo) - missing
            text += (f", predicted ~{duration_text(seconds)} from {records} record(s)" if known else
                     ", predicted: no record")
            if known and missing:
                text += f" ({missing} cell(s) with no record)"
        return text

    def to_json(self) -> dict[str, Any]:
        seconds, records, missing = self.predicted()
        counts = {s: len(self.of(s)) for s in STATUSES}
        return {"format_version": FORMAT_VERSION, "from": self.old.to_json(), "to": self.new.to_json(),
                "inventory": self.inventory,
                "summary": {**{k.replace("-", "_"): v for k, v in counts.items()},
                            "rebuild": sum(1 for r in self.rebuild if r.entry.status in CHANGED),
                            "breaking": self.breaking, "stops_without_cell": len(self.stops_without_cell()),
                            "predicted_build_seconds": round(seconds, 3) if records else None,
                            "predicted_from_records": records, "cells_without_record": missing,
                            "text": self.summary()},
                "engines": [e.to_json() for e in self.engines], "rebuild": [r.to_json() for r in self.rebuild]}


def _judged(c: _Candidate, status: UpgradeStatus, reason: str, answers: tuple[GpuAnswer, ...]) -> JudgedEngine:
    meta, engine = c.meta, c.engine
    model = str((meta.get("model") or {}).get("name") or (c.cell.model if c.cell else ""))
    profile_set = str(meta.get("profile_set") or (c.cell.profile_set if c.cell else ""))
    return JudgedEngine(engine.address, model, c.model_version, engine.precision, profile_set, engine.target.name,
                        engine.runtime, engine.builder, engine.builder_version, c.source, status, reason, answers,
                        engine.digest, record_key_of(meta) or None if meta else None,
                        c.cell.address if c.cell else None, c.path)


def upgrade_check(project: Project, *, to: str, from_: str | None = None,
                  inventory: str | os.PathLike[str] | None = None, gpus: Sequence[str] = (),
                  platform: str | None = None, lean_runtime: str | os.PathLike[str] | None = None,
                  fingerprint: RunnerFingerprint | None = None) -> UpgradeReport:
    """Judge every engine on the old stack and the new one, and plan the rebuild set (see the module doc).
    ``gpus``: the deployment's GPUs (default: each engine's own); ``platform``: the new stack's platform (default:
    each engine's own); ``lean_runtime``: the lean runtime library the deployment loads, for both stacks."""
    old, new = stacks(to, from_)
    declared = tuple(cc_label(g.compute_capability) for text in gpus for part in text.split(",") if part.strip()
                     for g in (RunnerFingerprint.parse_gpu_spec(part.strip()),))
    deployment = declared_platform(platform) if platform is not None else None
    lean = LeanRuntime.of(lean_runtime) if lean_runtime is not None else None
    deployed = read_inventory(inventory) if inventory is not None else None
    store = plugins.open_store(project.registry)
    fp = fingerprint or plugins.fingerprint()
    unknown: list[JudgedEngine] = []
    if deployed is None:
        candidates = _from_manifests(project, store)
    else:
        candidates, unknown = _from_inventory(project, store, deployed)
    judged: list[tuple[_Candidate, JudgedEngine]] = []
    for c in candidates:
        status, reason, answers = judge_candidate(c, old, new, fp, declared=declared, platform=deployment, lean=lean)
        judged.append((c, _judged(c, status, reason, answers)))
    engines = tuple(sorted([j for _, j in judged] + unknown, key=lambda e: (
        STATUSES.index(e.status), e.model, e.address, e.gpus[0].gpu if e.gpus else "")))
    stopping = [(c.cell, j) for c, j in judged if j.status == "stops" and c.cell is not None]
    if not stopping:
        return UpgradeReport(old, new, engines, (), str(inventory) if inventory is not None else None)
    moved = {(cell.manifest, cell.target.name) for cell, _ in stopping}
    again = retargeted_project(project, moved, new.serving.tensorrt if new.serving is not None else new.spec.version,
                               new.serving.name if new.serving is not None else None, deployment)
    the_plan = pipeline.plan(again.project)
    entries = {e.address: e for e in the_plan.entries}
    new_cells = {(c.manifest, c.model, c.precision.name, c.profile_set, c.target.name): c
                 for c in again.project.graph.cells}
    records = build_records(store)
    rebuild: dict[str, Rebuild] = {}
    for old_cell, j in stopping:
        name = again.targets[(old_cell.manifest, old_cell.target.name)]
        cell = new_cells.get((old_cell.manifest, old_cell.model, old_cell.precision.name, old_cell.profile_set, name))
        if cell is None or cell.address in rebuild:
            continue
        rebuild[cell.address] = Rebuild(j.address, entries[cell.address], estimate(cell, records),
                                        again.problems.get((old_cell.manifest, old_cell.target.name)))
    return UpgradeReport(old, new, engines, tuple(rebuild.values()), str(inventory) if inventory is not None else None,
                         again.project, the_plan)


# -- --build: build and gate the rebuild set (and publish only when asked) ---------------------------------

@dataclass(frozen=True)
class Rehearsal:
    """What ``--build`` did: the build and gate runs of the rebuild set, each rebuilt cell's report row (its gates
    and the drift gate against the engine it replaces: ``app.matrix``), and the publish when asked."""

    addresses: tuple[str, ...]
    build: RunSummary
    gate: RunSummary
    cells: tuple[dict[str, Any], ...]
    published: pipeline.PublishReport | None = None
    publish_run: RunSummary | None = None
    refused: dict[str, str] = field(default_factory=dict)  # address -> what the manifest checks refuse in it

    def not_built(self) -> dict[str, str]:
        """address -> why its engine was not built here (refused by the manifest checks for the new version;
        skipped: this runner cannot build it; failed)."""
        out = dict(self.refused)
        for r in self.build.reports:
            if r.node.startswith("build:") and r.status in ("skipped", "failed", "interrupted"):
                out[r.node.removeprefix("build:")] = f"{r.status}: {r.reason}"
        return out

    def exit_code(self) -> ExitCode:
        """130 interrupted; 1 a build failed or could not run here; 3 a gate (the drift gate included) failed;
        publish's code when publishing; else 0."""
        if self.build.interrupted or self.gate.interrupted or (self.publish_run and self.publish_run.interrupted):
            return ExitCode.INTERRUPTED
        if not self.build.ok or self.not_built():
            return ExitCode.ERROR
        if gating.failed_gates(self.gate):
            return ExitCode.GATE_FAILED
        if not self.gate.ok:
            return ExitCode.ERROR
        if self.published is not None:
            return self.published.exit_code()
        return ExitCode.OK


def rehearse(report: UpgradeReport, *, publish: bool = False, jobs: int | None = None,
             fingerprint: RunnerFingerprint | None = None, on_event: EventFn | None = None) -> Rehearsal:
    """Build and gate the rebuild set's cells that need it (plan status build / rebuild / re-gate) with the
    ordinary executor and steps, in the project's cache dir (the re-targeted cells have their own addresses and
    keys: nothing of the current cells is overwritten); publish them only with ``publish``. The drift gate's
    baseline of each is the old engine it replaces (same model version, precision, profile set, place, runtime;
    an earlier builder version): its outputs and latency are compared in the gates' verdicts."""
    if report.retargeted is None or report.plan is None:
        raise UsageError("nothing to rebuild: no engine stops loading on the new stack")
    project, the_plan = report.retargeted, report.plan
    addresses = tuple(r.entry.address for r in report.rebuild if r.entry.status in CHANGED and not r.problem)
    refused = {r.entry.address: f"refused: {r.problem}" for r in report.rebuild
               if r.entry.status in CHANGED and r.problem}
    fp = fingerprint or plugins.fingerprint()
    built = pipeline.build(project, the_plan, only=addresses, jobs=jobs, fingerprint=fp, on_event=on_event)
    gated = gating.gate(project, the_plan, only=addresses, fingerprint=fp, on_event=on_event)
    published = publish_run = None
    if publish and addresses:
        publish_run = pipeline.publish(project, the_plan, only=addresses, on_event=on_event)
        published = pipeline.publish_report(project, the_plan, publish_run, only=addresses)
    cells = tuple(_rows(report, project))
    return Rehearsal(addresses, built, gated, cells, published, publish_run, refused)


def rebuild_cells(project: Project, *, to: str, from_: str | None = None) -> tuple[list[dict[str, Any]], str]:
    """The report rows of the rehearsal's rebuild set (``orchestrate report --upgrade-to``): each rebuilt cell's
    gates as this cache dir (or the registry, once published) holds them, with the drift gate against the engine it
    replaces; and the upgrade in words."""
    found = upgrade_check(project, to=to, from_=from_)
    words = f"{found.old.words} -> {found.new.words}"
    return (_rows(found, found.retargeted) if found.retargeted is not None else []), words


def _rows(report: UpgradeReport, project: Project) -> list[dict[str, Any]]:
    wanted = {r.entry.address for r in report.rebuild}
    return [c for c in report_cells(project) if c["address"] in wanted]
