"""``pull --build-on-miss``: where no published engine fits a deployment, build it there with the cell's recipe, gate
it before handing it over, and (``publish_back``) publish it for the next deployment like it. docs/deploy.md ("Build
on miss") tells the story.

Composed from the pipeline's own steps, not a second pipeline:

1. The manifest is read as a deployment's copy (``absent_files_ok``: its model and data files need not be here).
   The ordinary ``pull`` runs first, for the model version the manifest declares; only its exit 4 (engines are
   published, none fits) goes on.
2. The recipe (``recipe``): the model version's ONNX as published in the registry (``app.model_blob``), checked to be
   the model the version's engine records were built from (their model digest keys the build, so the fetched file
   stands for it: ``Project.stand_ins``); the digests of calibration and parity data the deployment does not have,
   from those records. One target per installed builder (``core.ondevice``: what it builds for the deployment, with
   the builder options of the nearest declared target of the same builder), resolved with the manifest like any
   target (``app.project.project_of``: build key, gate key, transforms, calibration), judged by its runtime plugin
   for the deployment (``app.judge``) and ranked as ``pull`` ranks (``core.select``).
3. Under a file lock keyed by the build key (two pulls at once on one machine build once; a pull that waited looks
   in the registry again first), the cell is built (``pipeline.build``: prepare, transforms, calibration and pinned
   timing caches where published, the build) and gated (``gating.gate`` and ``app.heal_gate``); a failed gate
   writes nothing, an engine the deployment's runtime cannot run here stays pending and is written with that said,
   unless ``require_gate``.
4. ``publish_back``: ``pipeline.publish`` of that one cell, its record marked ``built_on_device``; its build key is
   the one ``plan`` computes for a manifest declaring the target (``core.ondevice.manifest_entry``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from filelock import FileLock, Timeout

from orchestrator import plugins
from orchestrator.app import deploy, gating, outputs, pipeline, signatures
from orchestrator.app.heal_gate import GateOutcome, gate_outcome, write_engine
from orchestrator.app.judge import check_precision, judge_engine
from orchestrator.app.model_blob import ensure_model_version, model_version_record
from orchestrator.app.project import Project, default_workspace, load_manifests, project_of
from orchestrator.contracts.store import Store, StoredArtifact
from orchestrator.core.artifact import EngineDescriptor
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.graph import Cell
from orchestrator.core.model import Manifest, Model, Target
from orchestrator.core.ondevice import NEAREST_RULE, device_target, manifest_entry, nearest_target
from orchestrator.core.query import engines
from orchestrator.core.select import Compat, rank_candidates
from orchestrator.digests import hash_file
from orchestrator.errors import (
    ArtifactNotFoundError,
    BuildError,
    ExitCode,
    GateError,
    IntegrityError,
    NoCompatibleEngineError,
    PluginError,
    UsageError,
)
from orchestrator.run.executor import RunSummary
from orchestrator.run.weights_blob import BLOB_DIR, fetch_blob
from orchestrator.weights_file import DATA_NAME, GRAPH_NAME, WeightsFileError, reassemble

FLAG = "--build-on-miss"
BY = "pull --build-on-miss"
Say = Callable[[str], None]


def _quiet(text: str) -> None:
    return None


@dataclass(frozen=True)
class BuilderChoice:
    """An installed builder as build-on-miss weighed it: the target it would build for the deployment, the declared
    target whose options it takes, and why it cannot build here (None: it can)."""

    builder: str
    target: str | None
    nearest: str | None
    reason: str | None

    def to_json(self) -> dict[str, Any]:
        return {"builder": self.builder, "target": self.target, "nearest_target": self.nearest,
                "reason": self.reason}


@dataclass(frozen=True)
class Recipe:
    """What a deployment builds: the project (the manifest with the on-device targets and the published ONNX as the
    model), the chosen cell, why it was chosen, and what was weighed."""

    project: Project
    cell: Cell
    reason: str
    nearest: Target | None
    builders: tuple[BuilderChoice, ...]
    record: StoredArtifact  # the model version's ONNX in the registry
    fetched: Path  # where it is fetched to (its model.onnx is the model the cell builds from)
    runner_ups: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class BuildOnMiss:
    """What ``pull --build-on-miss`` did: a published engine fitted (``pulled``), or it built, gated and (maybe)
    wrote and published one."""

    model: str
    version: str
    pulled: deploy.PullResult | None = None
    waited: bool = False  # another pull held the build's lock first
    address: str | None = None
    build_key: str | None = None
    built: Literal["built", "cached"] | None = None  # cached: this machine had built it already
    engine: Path | None = None  # the engine in the work directory
    digest: str | None = None
    path: Path | None = None  # where it was written (None: not asked, or the gate failed)
    gate: GateOutcome | None = None
    reason: str = ""
    target: dict[str, Any] = field(default_factory=dict)  # the target as a manifest declares it
    nearest: str | None = None
    builders: tuple[BuilderChoice, ...] = ()
    candidates: tuple[tuple[str, str], ...] = ()  # the other cells it could have built, and why not (or lower)
    miss: tuple[dict[str, Any], ...] = ()  # the published candidates and why none fitted
    published: pipeline.PublishedCell | None = None
    held_back: pipeline.HeldBackCell | None = None
    facts: dict[str, Any] = field(default_factory=dict)  # what a published record keeps as ``built_on_device``

    def exit_code(self) -> ExitCode:
        """3 when its gate failed (nothing written); with ``publish_back``, publish's code for a held-back cell."""
        if self.gate is not None and self.gate.status == "failed":
            return ExitCode.GATE_FAILED
        if self.held_back is not None:
            return pipeline.PublishReport((), (self.held_back,)).exit_code()
        return ExitCode.OK

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "version": self.version, "address": self.address, "build_key": self.build_key,
                "built": self.built, "waited": self.waited, "path": str(self.path) if self.path else None,
                "engine": str(self.engine) if self.engine else None, "digest": self.digest, "reason": self.reason,
                "target": self.target, "nearest_target": self.nearest, "nearest_rule": NEAREST_RULE,
                "gate": self.gate.to_json() if self.gate else None,
                "builders": [b.to_json() for b in self.builders],
                "build_candidates": [{"address": a, "reason": why} for a, why in self.candidates],
                "published_candidates": list(self.miss),
                "published": self.published.to_json() if self.published else None,
                "held_back": self.held_back.to_json() if self.held_back else None}


# -- the manifest, the model version and its ONNX ------------------------------------------------------------------

def _model_of(manifest: Manifest, model: str, version: str | None) -> Model:
    found = next((m for m in manifest.models if m.name == model), None)
    if found is None:
        raise UsageError(f"{manifest.file} declares no model {model!r}",
                         hint=f"{FLAG} builds with the recipe of the manifest that declares the model (--manifest); "
                              f"this one declares: {', '.join(m.name for m in manifest.models) or 'none'}")
    if version is not None and version != found.version:
        raise UsageError(f"--version {version}: {manifest.file} declares {model} {found.version}",
                         hint=f"{FLAG} builds the version its manifest declares; pass that manifest's version, or the "
                              "manifest of the version you want")
    return found


def _version_records(store: Store, model: Model) -> list[StoredArtifact]:
    return [r for r in engines(store.records(model.name), lambda a: a.metadata)
            if r.metadata["model"]["name"] == model.name and str(r.metadata["model"]["version"]) == model.version]


def _onnx_record(store: Store, model: Model, digest: str, manifest: Manifest, ws_root: Path,
                 publish_back: bool) -> StoredArtifact:
    """The model version's ONNX in the registry, checked to be the model its engines were built from (``digest``):
    with ``publish_back`` and the model file here (and the one the version was built from), published first."""
    try:
        record = model_version_record(store, model.name, model.version)
    except ArtifactNotFoundError:
        record = None
    if record is None and publish_back and model.source.url is None and os.path.isfile(model.source.path):
        here = project_of((replace(manifest, models=(model,), include=(), exclude=()),),
                          default_workspace(ws_root))
        mine = next((c.key_inputs["model"]["digest"] for c in here.graph.cells), None)
        if mine != digest:
            raise UsageError(f"{model.source.path} is not the model {model.name} {model.version} was built from "
                             f"({str(mine)[:19]} here, {digest[:19]} in its records): its ONNX is not published",
                             hint="publish from the checkout that built the version (registry.publish_onnx: true)")
        ensure_model_version(here, model.name)
        record = model_version_record(store, model.name, model.version)
    if record is None:
        raise ArtifactNotFoundError(
            f"{model.name} {model.version}: its ONNX is not in the registry, so {FLAG} has nothing to build from",
            hint="publish it once per model version: set registry.publish_onnx: true in the manifest and run "
                 "`orchestrate publish` again (CI), or pull --build-on-miss --publish-back where the model file "
                 "and registry credentials are")
    if record.metadata["model"].get("digest") != digest:
        theirs = str(record.metadata["model"].get("digest"))
        raise IntegrityError(f"{model.name} {model.version}: the ONNX published for it ({theirs[:19]}) is not the "
                             f"model its engines were built from ({digest[:19]})",
                             hint="publish the version again from the checkout that built it (registry.publish_onnx)")
    return record


def _known_digests(model: Model, records: list[StoredArtifact], fetched: Path, digest: str) -> dict[str, str]:
    """Path -> digest for the files the build keys name and the deployment does not hash: the fetched ONNX stands for
    the model, absent calibration and parity data for the data the version's records were built and gated with."""
    known = {str(fetched / GRAPH_NAME): digest}

    def first(get: Callable[[Mapping[str, Any]], object]) -> str | None:
        for r in records:
            value = get(r.metadata)
            if isinstance(value, str) and value:
                return value
        return None

    calibration = model.calibration
    if calibration is not None and calibration.path and not os.path.exists(calibration.path):
        found = first(lambda m: (((m.get("key_inputs") or {}).get("calibration") or {}).get("data") or {})
                      .get("digest"))
        if found:
            known[calibration.path] = found
    data = model.gate.parity.data

    def parity(m: Mapping[str, Any]) -> Mapping[str, Any]:
        return (((m.get("gates") or {}).get("key_inputs") or {}).get("parity") or {}).get("data") or {}

    for path, part in ((data.path, "digest"), (data.labels, "labels")):
        if path and not os.path.exists(path):
            found = first(lambda m, part=part: parity(m).get(part))  # type: ignore[misc]
            if found:
                known[path] = found
    return known


def _fetch_onnx(store: Store, record: StoredArtifact, dest: Path) -> None:
    """The model version's ONNX as ``dest/model.onnx``, self-contained (its weights put back from the blob's
    ``weights.bin``: a builder that saves the model it optimized, as onnxruntime's does, writes no file pointing
    outside its engine), once per machine: a lock per record (concurrent pulls of other cells share it); a copy
    already there is used when the blob beside it still hashes to the record's digests and the model to the digest
    noted when it was put together, else it is fetched again. A model too large to hold its weights (protobuf's
    2 GiB) stays in the blob's two files."""
    meta = record.metadata
    blob = meta["blob"]
    want = {GRAPH_NAME: str(blob["graph_digest"]), DATA_NAME: str(meta["engine"]["digest"])}
    dest.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(dest.parent / f".{dest.name}.lock")):
        if _fetched(dest, want):
            return
        staging = dest.with_name(f".{dest.name}.fetch")
        shutil.rmtree(staging, ignore_errors=True)
        pointer = {"record_key": meta["record_key"], "digest": meta["engine"]["digest"],
                   "graph_digest": blob["graph_digest"], "size": meta["engine"]["size"]}
        fetch_blob(store, record, pointer, staging / BLOB_DIR)
        try:
            reassemble(staging / BLOB_DIR / GRAPH_NAME, staging / BLOB_DIR / DATA_NAME, staging / GRAPH_NAME)
        except WeightsFileError:  # over protobuf's limit: the blob's own files, which load with external data
            shutil.copyfile(staging / BLOB_DIR / GRAPH_NAME, staging / GRAPH_NAME)
            shutil.copyfile(staging / BLOB_DIR / DATA_NAME, staging / DATA_NAME)
        (staging / _NOTED).write_text(hash_file(str(staging / GRAPH_NAME))[0])
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(staging, dest)


_NOTED = "model.onnx.sha256"


def _fetched(dest: Path, want: Mapping[str, str]) -> bool:
    """``dest`` holds the blob the record names and the model put together from it, unchanged."""
    try:
        noted = (dest / _NOTED).read_text().strip()
    except OSError:
        return False
    return (all((dest / BLOB_DIR / name).is_file() and hash_file(str(dest / BLOB_DIR / name))[0] == digest
                for name, digest in want.items())
            and (dest / GRAPH_NAME).is_file() and hash_file(str(dest / GRAPH_NAME))[0] == noted)


# -- the recipe: on-device targets, resolved with the manifest, judged for the deployment ---------------------------

def _targets(manifest: Manifest, deploy_fp: RunnerFingerprint, actual: RunnerFingerprint
             ) -> tuple[list[Target], tuple[BuilderChoice, ...], dict[str, Target | None]]:
    """One target per installed builder that can build here for the deployment (``core.ondevice``), what each
    builder said, and target name -> the declared target whose options it takes."""
    found: list[Target] = []
    nearest_of: dict[str, Target | None] = {}
    said: list[BuilderChoice] = []
    for name in plugins.names(plugins.BUILDERS):
        try:
            builder = plugins.builder(name)
            probe = builder.probe_target(deploy_fp)
        except PluginError as e:
            said.append(BuilderChoice(name, None, None, e.message))
            continue
        if probe is None:
            said.append(BuilderChoice(name, None, None, f"{name} is not installed here"))
            continue
        probes = [probe]
        if probe.device != "cpu" and "cpu" in builder.capabilities(probe.builder_version).target_kinds:
            # a builder of GPU and CPU engines (onnxruntime with its CUDA provider): its CPU engine is a candidate
            # too, for a deployment declared without a GPU (--gpu none) or taking one (--allow-cpu)
            probes.append(replace(probe, device="cpu", compute_capabilities=()))
        for each in probes:
            nearest = nearest_target(manifest.targets, each)
            target = device_target(each, nearest, platform=deploy_fp.platform)
            reason = builder.available(actual, target)
            said.append(BuilderChoice(name, target.slug, nearest.name if nearest is not None else None, reason))
            if reason is None:
                found.append(target)
                nearest_of[target.name] = nearest
    return found, tuple(said), nearest_of


def _with_targets(manifest: Manifest, model: Model, targets: list[Target]) -> Manifest:
    """The manifest with only ``model`` and the on-device targets beside the declared ones (a declared target at
    the same place as an on-device one gives way to it: their cells would share addresses), its matrix rules kept
    where they still name something."""
    places = {t.slug for t in targets}
    kept = [t for t in manifest.targets if t.slug not in places] + list(targets)
    names = {t.name for t in kept}

    def keeps(rule: Any) -> bool:
        return rule.model in (None, model.name) and (rule.target is None or rule.target in names)

    return replace(manifest, models=(model,), targets=tuple(kept),
                   include=tuple(r for r in manifest.include if keeps(r)),
                   exclude=tuple(r for r in manifest.exclude if keeps(r)))


def descriptor_of(cell: Cell, **facts: Any) -> EngineDescriptor:
    """What a runtime judges for a cell of this project (built or not)."""
    builder = plugins.builder(cell.target.builder)
    caps = builder.capabilities(cell.target.builder_version)
    return EngineDescriptor.for_cell(cell, runtime=builder.runtime, platform_specific=caps.platform_specific, **facts)


def recipe(manifest: Manifest, model: Model, store: Store, *, where: deploy.Deployment, actual: RunnerFingerprint,
           ws_root: Path, precision: str | None = None, profile: str | None = None, publish_back: bool = False,
           miss: NoCompatibleEngineError | None = None) -> Recipe:
    """The cell a deployment builds (see the module doc); ``NoCompatibleEngineError`` when none can be built here
    that its runtime runs there, with every published candidate (``miss``) and every build candidate's reason."""
    records = _version_records(store, model)
    if not records:
        raise ArtifactNotFoundError(f"no engine of {model.name} {model.version} is published: there is no recorded "
                                    "build and gate to build from", hint="publish the version first")
    digest = str(records[0].metadata["model"]["digest"])
    record = _onnx_record(store, model, digest, manifest, ws_root, publish_back)
    ws = default_workspace(ws_root)
    fetched = ws.caches / "model-versions" / f"{model.name}-{str(record.metadata['record_key'])[:16]}"
    stand_in = replace(model, source=replace(model.source, path=str(fetched / GRAPH_NAME), url=None, sha256=None))
    deploy_fp = where.on(actual)
    targets, said, nearest_of = _targets(manifest, deploy_fp, actual)
    project = project_of((_with_targets(manifest, stand_in, targets),), ws,
                         known=_known_digests(model, records, fetched, digest))
    names = {t.name for t in targets}
    cells = [c for c in project.graph.cells if c.target.name in names and c.model == model.name
             and (precision is None or c.precision.name == precision) and (profile is None or c.profile_set == profile)]

    def judge(cell: Cell) -> Compat:
        if cell.blocked:
            return Compat.no(f"cannot be built: {cell.blocked}")
        return judge_engine({}, descriptor_of(cell), deploy_fp, where.spec, lean=where.lean, cpu=where.cpu)

    ranking = rank_candidates([(c.address, c) for c in cells], judge, precision_of=lambda c: c.precision.name)
    if ranking.best is None:
        if not cells and (precision or profile) and targets:
            raise UsageError(f"{manifest.file} declares no {precision or ''} {profile or ''} cell of {model.name}"
                             .replace("  ", " "), hint="--precision and --profile name what the manifest declares")
        built = [(f"build {who}", why) for who, why in ranking.rejected]
        builders = [(f"builder {b.builder}", b.reason) for b in said if b.reason]
        published = list(miss.rejections) if miss is not None else []
        raise NoCompatibleEngineError(
            f"no published engine of {model.name} {model.version} fits this runner ({deploy_fp.describe()}), and "
            "none can be built here that runs there. Candidates:", rejections=published + built + builders,
            candidates=(list(miss.candidates) if miss is not None else [])
            + [{"build": True, "id": who, "reason": why} for who, why in built + builders],
            hint="install a builder whose runtime runs on this deployment, or declare the deployment with "
                 "--gpu/--platform/--runtime")
    cell = ranking.best.item
    return Recipe(project, cell, ranking.best.compat.reason, nearest_of.get(cell.target.name), said, record, fetched,
                  ranking.explanations())


# -- build, gate, write, publish -------------------------------------------------------------------------------

def _first_failure(summary: RunSummary, address: str) -> str:
    build = next((r for r in summary.reports if r.node == f"build:{address}"), None)
    failed = next((r for r in summary.reports if r.status == "failed"), None)
    if failed is not None:
        return f"{failed.node}: {failed.reason}"
    return f"build {build.status}: {build.reason}" if build is not None else "the build did not run"


def _build(project: Project, cell: Cell, actual: RunnerFingerprint, say: Say
           ) -> tuple[Literal["built", "cached"], Any]:
    """Build the cell (``pipeline.build``); ("built" | "cached", the plan it was built against)."""
    the_plan = pipeline.plan(project)
    say(f"building {cell.address} here (build key {cell.build_key[:12]})")
    built = pipeline.build(project, the_plan, only=[cell.address], fingerprint=actual)
    if built.interrupted:
        raise KeyboardInterrupt
    report = next((r for r in built.reports if r.node == f"build:{cell.address}"), None)
    if report is None or report.status not in ("done", "cached"):
        raise BuildError(f"{cell.address}: {FLAG} could not build it: {_first_failure(built, cell.address)}",
                         hint="see the build log in the work directory (--cache-dir)")
    return ("built" if report.status == "done" else "cached"), the_plan


def pull_or_build(model: str, *, manifest: str | os.PathLike[str], registry: plugins.RegistryRef | None = None,
                  version: str | None = None, precision: str | None = None, profile: str | None = None,
                  gpu: str = "auto", gpu_model: str | None = None, platform: str | None = None,
                  runtime: str = "auto", lean_runtime: str | os.PathLike[str] | None = None, allow_cpu: bool = False,
                  out: str | os.PathLike[str] | None = None, publish_back: bool = False, require_gate: bool = False,
                  require_signature: str | None = None, cache_dir: str | os.PathLike[str] | None = None,
                  fingerprint: RunnerFingerprint | None = None, say: Say | None = None) -> BuildOnMiss:
    """``pull`` the published engine of ``model`` that fits (see ``app.deploy.pull`` for the declarations), or,
    where none does, build it here with the recipe of ``manifest``, gate it and write it (see the module doc).
    ``require_gate``: an engine this runner cannot gate is refused (``GateError``, nothing written)."""
    say = say or _quiet
    check_precision(precision)
    found = load_manifests([manifest], absent_files_ok=True)[0]
    wanted = _model_of(found, model, version)
    config = plugins.registry_config(registry, os.getcwd()) if registry is not None else found.registry
    found = replace(found, registry=config)
    where = deploy.deployment(gpu=gpu, gpu_model=gpu_model, runtime=runtime, platform=platform,
                              lean_runtime=lean_runtime, allow_cpu=allow_cpu)
    if out is not None:
        outputs.check_file(out)
    actual = fingerprint or plugins.fingerprint()

    def pull() -> deploy.PullResult:
        return deploy.pull(model, registry=config, version=wanted.version, precision=precision, profile=profile,
                           gpu=gpu, runtime=runtime, out=out, fingerprint=actual, platform=platform,
                           gpu_model=gpu_model, lean_runtime=lean_runtime, allow_cpu=allow_cpu,
                           require_signature=require_signature)

    try:
        return BuildOnMiss(model, wanted.version, pulled=pull())
    except NoCompatibleEngineError as e:
        miss = e
    trusted = signatures.required(require_signature, config)
    if trusted is not None:
        raise IntegrityError(f"no published engine of {model} {wanted.version} fits, and one built here would not be "
                             f"signed by {trusted} ({signatures.FLAG})",
                             hint=f"publish an engine for this deployment, or pull without {signatures.FLAG}")
    store = plugins.open_existing_store(config)
    ws_root = default_workspace(cache_dir).root
    chosen = recipe(found, wanted, store, where=where, actual=actual, ws_root=ws_root, precision=precision,
                    profile=profile, publish_back=publish_back, miss=miss)
    cell = chosen.cell
    say(f"no published engine of {model} {wanted.version} fits this machine: its cell here is {cell.address} "
        f"({chosen.reason})")
    locks = ws_root / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(locks / f"build-on-miss-{cell.build_key}.lock"))
    waited = False
    try:
        lock.acquire(timeout=0)
    except Timeout:
        waited = True
        say(f"another pull is building {cell.address}: waiting for it")
        lock.acquire()
    try:
        if waited:  # it may have published the engine back: then there is nothing to build
            try:
                return BuildOnMiss(model, wanted.version, pulled=pull(), waited=True)
            except NoCompatibleEngineError:
                pass
        return _heal(chosen, store, where, actual, wanted, miss, out=out, publish_back=publish_back,
                     require_gate=require_gate, waited=waited, say=say)
    finally:
        lock.release()


def _heal(chosen: Recipe, store: Store, where: deploy.Deployment,
          actual: RunnerFingerprint, model: Model, miss: NoCompatibleEngineError, *,
          out: str | os.PathLike[str] | None, publish_back: bool, require_gate: bool, waited: bool,
          say: Say) -> BuildOnMiss:
    project, cell = chosen.project, chosen.cell
    _fetch_onnx(store, chosen.record, chosen.fetched)
    status, the_plan = _build(project, cell, actual, say)
    gated = gating.gate(project, the_plan, only=[cell.address], fingerprint=actual)
    outcome = gate_outcome(project, cell, gated, store, actual)
    facts = {"by": BY, "runner": where.on(actual).to_json(),
             "nearest_target": chosen.nearest.name if chosen.nearest is not None else None, "rule": NEAREST_RULE,
             "target": manifest_entry(cell.target), "gate": outcome.to_json()}
    done = BuildOnMiss(model.name, model.version, waited=waited, address=cell.address, build_key=cell.build_key,
                       built=status, engine=outcome.engine, digest=outcome.digest, gate=outcome,
                       reason=chosen.reason, target=manifest_entry(cell.target),
                       nearest=chosen.nearest.name if chosen.nearest is not None else None,
                       builders=chosen.builders, candidates=chosen.runner_ups, miss=tuple(miss.candidates),
                       facts=facts)
    if outcome.status == "failed":
        return done  # nothing written, nothing published: exit 3
    if outcome.status != "passed":
        if require_gate:
            raise GateError(f"{cell.address} was built here but not gated: {outcome.pending or outcome.status}; "
                            "--require-gate refuses an ungated engine (nothing written)",
                            hint="pull on a machine whose runtime runs the engine, or drop --require-gate to take "
                                 "it ungated")
    path = write_engine(outcome, out) if out is not None else None
    done = replace(done, path=path)
    if not publish_back:
        return done
    run = pipeline.publish(project, the_plan, only=[cell.address], built_on_device={cell.address: facts})
    report = pipeline.publish_report(project, the_plan, run, only=[cell.address])
    landed = (report.published or report.already or (None,))[0]
    held = report.held_back[0] if report.held_back else None
    return replace(done, published=landed, held_back=held)


__all__ = ["BuildOnMiss", "BuilderChoice", "Recipe", "pull_or_build", "recipe"]
