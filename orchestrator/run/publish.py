"""Publish nodes: an engine whose gates passed (or, where the manifest allows it explicitly, whose gates are
pending — recorded in its metadata) goes to the store with its metadata, verdicts and build log. A failed gate
is never published unless forced, and forcing is recorded too.

A new model version of an engine that is current (same build key and gate key: a ``version:`` bump of an
unchanged ONNX, ``plan``'s ``+ publish``) is published from the store itself: the published engine, its verdicts
and its files become a new record for the new version (``reused_from`` names the record they came from); nothing
is rebuilt or gated again. Every outcome says whether a record really landed (``new``): a store already holding the
record key returns the existing record, and that is "already published", never a second "published"."""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator import plugins
from orchestrator.contracts.store import ArtifactFiles, Attachment, AttachmentReader, Store, StoredArtifact
from orchestrator.core.artifact import GateStatus, GateSummary, gate_status
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.gatekeys import DRIFT_OUTPUTS_FILE as OUTPUTS_FILE
from orchestrator.core.gpu_parity import gpu_parity_hold, parity_caveat, parity_device
from orchestrator.core.graph import Cell
from orchestrator.core.model import Model, RegistryConfig
from orchestrator.core.query import select
from orchestrator.errors import PlanError
from orchestrator.metadata import engine_file, new_metadata, utc_now
from orchestrator.run.executor import StepOutcome, StepTask
from orchestrator.run.signing import attach_referrer, sign_statement
from orchestrator.run.weights_blob import engine_weights_entry, republished_weights
from orchestrator.run.workspace import read_gate_report


@dataclass(frozen=True)
class PublishPayload:
    cell: Cell
    model: Model
    registry: RegistryConfig
    manifest_file: str
    runtime: str  # the runtime plugin that runs the engine (the builder declares it)
    media_type: str  # the builder's engine media type
    gate_dirs: tuple[str | None, str | None]  # parity node dir, benchmark node dir (None: gate disabled)
    force: bool = False  # publish despite failed gates (recorded)
    failed_input: str | None = None  # why the (transformed) ONNX this engine was built from is known bad
    platform_specific: bool = True  # the builder's engines are tied to the platform they were built for
    calibration_dir: str | None = None  # the node dir of the cell's calibrate node (int8)
    # a new model version of a current engine: the digest of the published engine whose record (same build key and
    # gate key, another model version) is published again for this version (None: publish the engine built here)
    reuse_digest: str | None = None
    # why a gate of this cell errored on its last run here (it could not judge the engine), when it has no verdict
    gate_error: str | None = None
    # an engine ``pull --build-on-miss`` built on a deployment: what it records of that (``app.heal``), kept in the
    # record as ``built_on_device`` (None: built by the pipeline)
    built_on_device: Mapping[str, Any] | None = None


def git_commit(path: str) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(path).parent, capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _engine_mismatch(actual: str, built: str, parity: dict[str, Any] | None,
                     bench: dict[str, Any] | None) -> str | None:
    """Why the engine file may not be published under its verdicts: its bytes are not the ones built, or a
    verdict was given to other bytes. None when file, build result and every verdict name the same digest."""
    if actual != built:
        return (f"the engine in the build cache is {actual[:19]}, but the build produced {built[:19]}: it "
                "changed after the build (rebuild it: `orchestrate build --only ADDR`)")
    for name, report in (("parity", parity), ("benchmark", bench)):
        if report is not None and report.get("engine_digest") != actual:
            return (f"the {name} verdict was given to engine {str(report.get('engine_digest'))[:19]}, not to "
                    f"{actual[:19]} (re-run `orchestrate gate`)")
    return None


def timing_scope(runner: dict[str, Any], builder: str, version: str) -> str:
    """What a timing cache is valid for: the GPU (CC and model) and the exact builder version."""
    gpus = runner.get("gpus") or []
    gpu = gpus[0] if gpus else {}
    cc = str(gpu.get("compute_capability") or "none").replace(".", "")
    return f"sm{cc}/{gpu.get('name') or 'no GPU'}/{builder} {version}"


def _caches(payload: PublishPayload, build_dir: Path, build: dict[str, Any]
            ) -> tuple[tuple[Attachment, ...], dict[str, Any]]:
    """The calibration and timing caches this engine was built with, as attachments and metadata ``caches``."""
    attachments: list[Attachment] = []
    caches: dict[str, Any] = {}
    if build.get("from_store"):  # a re-gated engine: the caches it was built with are already in the store
        return (), dict(build["from_store"].get("caches") or {})
    calib = build.get("calibration")
    if calib and payload.calibration_dir:
        path = Path(payload.calibration_dir) / "calibration.cache"
        if path.is_file():
            name = f"calibration-{str(calib['key'])[:16]}.cache"
            if calib.get("publish", True):  # a cache that is the calibration data itself stays on the runner
                attachments.append(Attachment(path, "calibration-cache", name))
            caches["calibration"] = {"key": calib["key"], "digest": calib["digest"], "name": name,
                                     "calibrator": str(calib.get("calibrator") or ""), "size": int(calib["size"])}
    timing = build.get("timing_cache")
    if timing:
        scope = timing_scope(build.get("runner") or {}, payload.cell.target.builder, build["builder_version"])
        entry: dict[str, Any] = {"read": timing.get("read"), "written": timing.get("written"),
                                 "pinned": bool(timing.get("pinned")), "scope": scope}
        if timing.get("file") and (build_dir / timing["file"]).is_file():
            name = "timing-" + "".join(c if c.isalnum() or c in "._-" else "_" for c in scope) + ".cache"
            attachments.append(Attachment(build_dir / timing["file"], "timing-cache", name))
            entry.update(name=name, size=(build_dir / timing["file"]).stat().st_size)
        caches["timing"] = entry
    return tuple(attachments), caches


def _invocation(meta: dict[str, Any]) -> object:
    return ((((meta.get("provenance") or {}).get("predicate") or {}).get("runDetails") or {}).get("metadata")
            or {}).get("invocationId")


def _outcome(stored: StoredArtifact, meta: dict[str, Any], cell: Cell, status: str,
             signed_by: str | None = None) -> StepOutcome:
    """What a put did: ``new`` is False when the store already held this record key (it hands the existing record
    back, made by another invocation)."""
    landed = _invocation(stored.metadata) == _invocation(meta)
    return StepOutcome(data={"digest": stored.digest, "location": stored.location, "gates": status,
                             "build_key": cell.build_key, "record_key": cell.record_key, "new": landed,
                             "published_at": stored.metadata.get("published_at"), "signed_by": signed_by})


def _reused_record(store: Store, cell: Cell, digest: str) -> StoredArtifact:
    """The newest published record of this cell's engine and verdicts (any model version)."""
    for record in select(store.records(cell.model), lambda a: a.metadata, address=cell.address):
        meta = record.metadata
        gates = meta.get("gates") or {}
        if (meta.get("build_key") == cell.build_key and gates.get("key") == cell.gate_key
                and record.digest == digest):
            return record
    raise PlanError(f"{cell.address}: the published engine {digest[:19]} with this build key and gate key is no "
                    "longer in the store", hint="re-run `orchestrate plan` (the cell is then built again)")


def _fetch_files(store: Store, record: StoredArtifact, out: Path) -> tuple[Path | None, tuple[Path, ...]]:
    """The record's build log and extra files (verdict files, recorded outputs, layer info), fetched and verified
    (none from a store that cannot hand attachments back; caches are the store's to carry over)."""
    if not isinstance(store, AttachmentReader):
        return None, ()
    log: Path | None = None
    extras: list[Path] = []
    for entry in record.metadata.get("attachments") or ():
        name, role = str(entry.get("name") or ""), entry.get("role")
        if role not in ("log", "extra") or Path(name).name != name or name in ("", ".", ".."):
            continue  # registry data: never a path
        dest = store.get_attachment(record, name, out / name)
        if role == "log":
            log = dest
        else:
            extras.append(dest)
    return log, tuple(extras)


def _republish(task: StepTask, payload: PublishPayload) -> StepOutcome:
    """The published record of this engine and its verdicts, published again as the cell's model version."""
    assert payload.reuse_digest is not None
    cell, model = payload.cell, payload.model
    store = plugins.open_store(payload.registry)
    try:
        record = _reused_record(store, cell, payload.reuse_digest)
    except PlanError as e:
        return StepOutcome(status="failed", reason=f"not published: {e.message}")
    old = record.metadata
    gates = old.get("gates") or {}
    status: GateStatus = gates.get("status") or "pending"
    if status == "failed" and not payload.force:
        return StepOutcome(status="skipped", reason=f"not published: version {old['model']['version']} of this "
                                                    "engine failed its gates (published by --force); --force "
                                                    "publishes this version too, and records it")
    if status == "pending" and not (model.gate.allow_ungated_publish or payload.force):
        return StepOutcome(status="pending", reason="not published: gate pending — the engine was published "
                                                    "ungated; gate it on a runner that can run it, or set "
                                                    "gate.allow_ungated_publish in the manifest")
    parity_status = (gates.get("parity") or {}).get("status")
    hold = gpu_parity_hold(payload.cell.precision.name, payload.cell.target.device, parity_status,
                           model.gate.require_gpu_parity)
    if hold and not payload.force:  # the new version is held back as the first one would be (issue 23.16)
        return StepOutcome(status="pending", reason=f"not published: gate pending — {hold}")
    # fetched into a temporary folder the node's result does not keep: the store has these bytes already
    with tempfile.TemporaryDirectory(dir=task.out_dir) as tmp:
        return _put_again(store, record, payload, Path(tmp), status)


def _put_again(store: Store, record: StoredArtifact, payload: PublishPayload, out: Path,
               status: GateStatus) -> StepOutcome:
    cell, model, old = payload.cell, payload.model, record.metadata
    gates = old.get("gates") or {}
    name = str(old["engine"].get("filename") or "")
    engine = out / (name if name and Path(name).name == name and name not in (".", "..")
                    else f"engine-{record.digest[7:23]}")
    store.get(record.digest, engine)
    files = out / "files"
    files.mkdir()
    log, extras = _fetch_files(store, record, files)
    descriptor = engine_file(engine, media_type=payload.media_type)
    if descriptor.digest != payload.reuse_digest:
        return StepOutcome(status="failed", reason=f"not published: the store delivered {descriptor.digest[:19]} "
                                                   f"for {str(payload.reuse_digest)[:19]}")
    calib = ((cell.key_inputs.get("calibration") or {}).get("data") or {}).get("digest")
    meta = new_metadata(
        address=cell.address, model_name=model.name, model_version=model.version,
        model_digest=cell.key_inputs["model"]["digest"], precision=cell.precision.name,
        profile_set=cell.profile_set, profiles=[p.name for p in cell.profiles] or [cell.profile_set],
        target=cell.target, builder_version=old["builder"]["version"], build_key=cell.build_key,
        key_inputs=cell.key_inputs, engine=descriptor, runtime=payload.runtime,
        runner=RunnerFingerprint.from_json(old.get("runner") or {}),
        gates=GateSummary(status=status, parity=gates.get("parity"), benchmark=gates.get("benchmark"),
                          ungated_publish_allowed=bool(gates.get("ungated_publish_allowed")), key=cell.gate_key,
                          key_inputs=cell.gate_inputs, parity_device=gates.get("parity_device"),
                          caveats=tuple(str(c) for c in gates.get("caveats") or ())),
        timings={k: float(v) for k, v in (old.get("timings") or {"build_seconds": 0.0}).items()},
        manifest_path=payload.manifest_file, git_commit=git_commit(payload.manifest_file), started_on=utc_now(),
        finished_on=utc_now(), calibration_digest=calib, platform_specific=payload.platform_specific,
        caches=old.get("caches") or {}, io=old.get("io"),
        weights=republished_weights(store, old, model.name, model.version, out, payload.manifest_file,
                                    git_commit(payload.manifest_file)),
        reused_from={"record_key": str(old.get("record_key") or old["build_key"]),
                     "model_version": str(old["model"]["version"])})
    signed = sign_statement(meta, payload.registry, out)  # the new version's statement, signed like any other
    stored = store.put(ArtifactFiles(engine=engine, metadata=meta, log=log, extra=extras,
                                     attachments=(signed.attachment,) if signed is not None else ()))
    attach_referrer(store, stored, signed)
    return _outcome(stored, meta, cell, status, signed.signer if signed else None)


def step_publish(task: StepTask) -> StepOutcome:
    payload = task.payload
    assert isinstance(payload, PublishPayload)
    if payload.reuse_digest is not None:
        return _republish(task, payload)
    cell, model = payload.cell, payload.model
    build_dir = Path(task.dep_dirs[f"build:{cell.address}"])
    build = json.loads((build_dir / "result.json").read_text())["data"]
    parity_dir, bench_dir = payload.gate_dirs
    parity = read_gate_report(parity_dir, "parity.json") if parity_dir else None
    bench = read_gate_report(bench_dir, "benchmark.json") if bench_dir else None
    status = gate_status(parity["status"] if parity else None, bench["status"] if bench else None,
                         (parity_dir is not None, bench_dir is not None))
    allowed = model.gate.allow_ungated_publish
    if status == "failed" and not payload.force:
        which = " and ".join(name for name, report in (("parity", parity), ("benchmark", bench))
                             if report is not None and report.get("status") == "failed")
        return StepOutcome(status="skipped", reason=f"not published: {f'the {which}' if which else 'a'} gate "
                                                    "failed (see `orchestrate report`; --force publishes anyway "
                                                    "and records it)")
    if status == "pending" and payload.gate_error and not payload.force:
        return StepOutcome(status="skipped", reason=f"not published: {payload.gate_error} (fix that and run "
                                                    "`orchestrate gate` again; --force publishes anyway and records "
                                                    "it)")
    if status == "pending" and payload.failed_input and not payload.force:
        return StepOutcome(status="skipped", reason=f"not published ungated: {payload.failed_input} (see "
                                                    "`orchestrate report`; --force publishes anyway and records it)")
    parity_status = parity["status"] if parity else None
    device, precision = cell.target.device, cell.precision.name
    hold = gpu_parity_hold(precision, device, parity_status, model.gate.require_gpu_parity)
    if hold and not payload.force:  # CPU parity is no evidence for GPU numerics (issue 23.16)
        return StepOutcome(status="pending", reason=f"not published: gate pending — {hold}")
    if status == "pending" and not (allowed or payload.force):
        return StepOutcome(status="pending", reason="not published: gate pending — gate it on a runner that can "
                                                    "run it, or set gate.allow_ungated_publish in the manifest")
    engine = build_dir / build["engine"]
    descriptor = engine_file(engine, media_type=payload.media_type)
    problem = _engine_mismatch(descriptor.digest, build["engine_digest"], parity, bench)
    if problem:
        return StepOutcome(status="failed", reason=f"not published: {problem}")
    log = build_dir / build["log"] if build.get("log") else None
    extras = tuple(p for p in (Path(parity_dir) / "parity.json" if parity and parity_dir else None,
                               Path(parity_dir) / OUTPUTS_FILE if parity and parity_dir else None,
                               Path(bench_dir) / "benchmark.json" if bench and bench_dir else None,
                               build_dir / build["layer_info"] if build.get("layer_info") else None)
                   if p is not None and p.exists())
    attachments, caches = _caches(payload, build_dir, build)
    manifest_path = payload.manifest_file
    calib_data = (cell.key_inputs.get("calibration") or {}).get("data") or {}
    calib = calib_data.get("digest")
    store = plugins.open_store(payload.registry)
    # an engine that is not embedded: its weights record first (once per blob), then the engine pointing at it
    weights = engine_weights_entry(store, build_dir, build, cell, model, manifest_path, git_commit(manifest_path))
    meta = new_metadata(
        address=cell.address, model_name=model.name, model_version=model.version,
        model_digest=cell.key_inputs["model"]["digest"], precision=cell.precision.name,
        profile_set=cell.profile_set, profiles=[p.name for p in cell.profiles] or [cell.profile_set],
        target=cell.target, builder_version=build["builder_version"], build_key=cell.build_key,
        key_inputs=cell.key_inputs, engine=descriptor,
        runtime=payload.runtime, runner=RunnerFingerprint.from_json(build["runner"]),
        gates=GateSummary(status=status, parity=parity, benchmark=bench, ungated_publish_allowed=status != "passed",
                          key=cell.gate_key, key_inputs=cell.gate_inputs,
                          parity_device=parity_device(device, parity_status),
                          caveats=tuple(c for c in (parity_caveat(precision, device, parity_status),) if c)),
        timings={"build_seconds": float(build.get("build_seconds", 0.0))}, manifest_path=manifest_path,
        git_commit=git_commit(manifest_path), started_on=utc_now(), finished_on=utc_now(),
        calibration_digest=calib, platform_specific=payload.platform_specific, caches=caches, io=build.get("io"),
        weights=weights)
    if payload.built_on_device is not None:
        meta["built_on_device"] = dict(payload.built_on_device)
    signed = sign_statement(meta, payload.registry, task.out_dir)  # registry.signing (docs/trust.md)
    if signed is not None:
        attachments += (signed.attachment,)
    # a forced publish of a failed engine stays visible: gates.status "failed" with the override recorded
    stored = store.put(ArtifactFiles(engine=engine, metadata=meta, log=log, extra=extras, attachments=attachments))
    attach_referrer(store, stored, signed)
    return _outcome(stored, meta, cell, status, signed.signer if signed else None)
