"""What a published engine is, as data (pure): the descriptor runtimes judge, the artifact metadata record and
its provenance, the index entry the planner reads, and the one gate-status rule.

The metadata (schema ``orchestrator/schemas/artifact-v1.schema.json``, ``schema_version: 1``) says exactly what
an engine is and where it can run: address, model (name, version, digest), precision, profiles, target, the
builder and its exact version, the runtime that runs it, the build key and its inputs, the engine's content
digest, the fingerprint of the runner that built it, gate verdicts, timings, the manifest + git commit, and an
in-toto Statement v1 with a SLSA Provenance v1 predicate. It is a sidecar: never prepended to the engine bytes.

Shape (abridged)::

    {"schema_version": 1, "address": "ocr-det/fp16/default@sm89+trt10.13",
     "model": {"name", "version", "digest": "sha256:..."}, "precision": "fp16", "profile_set": "default",
     "profiles": ["default"], "target": {"name", "compute_capabilities", "hardware_compatibility", "device",
     "version_compatible"}, "builder": {"name", "version"}, "runtime": "<runtime plugin>", "build_key": "<hex>",
     "key_inputs": {...}, "engine": {"digest": "sha256:...", "size", "filename", "media_type"},
     "runner": RunnerFingerprint.to_json(),
     "gates": {"parity", "benchmark", "status", "ungated_publish_allowed", "parity_device"?, "caveats"?},
     "timings": {"build_seconds", ...}, "manifest": {"path", "git_commit"}, "created_at",
     "reused_from": {"record_key", "model_version"} (only on a version bump's record: whose engine it reuses),
     "provenance": {in-toto Statement v1},
     # added by the store when publishing:
     "published_at", "attachments": [{"name", "role": "log"|"extra", "digest", "size"}]}
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.graph import Cell
from orchestrator.core.keys import record_key
from orchestrator.core.model import Target
from orchestrator.errors import InvalidMetadataError

GateStatus = Literal["passed", "failed", "pending", "skipped"]

SCHEMA_VERSION = 1
ENGINE_MEDIA_TYPE = "application/vnd.trt-orchestrator.engine.v1"
# onnxruntime "engines" are optimized ONNX files, not TensorRT plans: a distinct media type so no TensorRT
# loader is ever handed one.
ONNX_ENGINE_MEDIA_TYPE = "application/vnd.trt-orchestrator.engine.v1.onnx"
METADATA_MEDIA_TYPE = "application/vnd.trt-orchestrator.metadata.v1+json"

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
SLSA_PROVENANCE_V1 = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://trt-orchestrator.dev/buildtypes/engine/v1"

def gate_status(parity: str | None, benchmark: str | None, enabled: tuple[bool, bool]) -> GateStatus:
    """The one rule: an engine's gate status from its gates' own statuses (None: that gate has no verdict).

    Only enabled gates count: any failed -> failed; any without a verdict -> pending; all passed -> passed; no
    gate enabled -> skipped."""
    statuses = [s for s, on in zip((parity, benchmark), enabled) if on]
    if any(s == "failed" for s in statuses):
        return "failed"
    if any(s is None for s in statuses):
        return "pending"
    return "passed" if statuses else "skipped"


@dataclass(frozen=True)
class EngineTarget:
    """Where an engine was built to run, as recorded in its metadata."""

    name: str
    compute_capabilities: tuple[str, ...] = ()
    hardware_compatibility: str = "none"
    device: str = "gpu"
    version_compatible: bool = False
    # os/arch[/variant] it was built for; None: recorded before platforms were (or the builder's engines are
    # portable: then every platform takes them)
    platform: str | None = None
    platform_specific: bool = True
    gpu_match: str = "cc"  # "sku": only the GPU model it was built on
    # version-compatible engines built without the lean runtime need that TensorRT version's lean runtime loaded
    # explicitly by the deployment: its version, None when it needs none
    lean_runtime: str | None = None

    @classmethod
    def of(cls, target: Target, *, platform_specific: bool = True, builder_version: str | None = None) -> EngineTarget:
        o = target.options
        lean = (builder_version or target.builder_version) if o.version_compatible and o.exclude_lean_runtime else None
        return cls(target.name, tuple(target.compute_capabilities), target.hardware_compatibility, target.device,
                   bool(o.version_compatible), target.platform, platform_specific, target.gpu_match, lean)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "compute_capabilities": list(self.compute_capabilities),
                               "hardware_compatibility": self.hardware_compatibility, "device": self.device,
                               "version_compatible": self.version_compatible,
                               "platform_specific": self.platform_specific, "gpu_match": self.gpu_match,
                               "lean_runtime": self.lean_runtime}
        if self.platform is not None:
            out["platform"] = self.platform
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EngineTarget:
        platform = data.get("platform")
        lean = data.get("lean_runtime")
        return cls(str(data.get("name", "")), tuple(str(c) for c in data.get("compute_capabilities") or ()),
                   str(data.get("hardware_compatibility", "none")), str(data.get("device", "gpu")),
                   bool(data.get("version_compatible", False)), str(platform) if platform else None,
                   bool(data.get("platform_specific", True)), str(data.get("gpu_match") or "cc"),
                   str(lean) if lean else None)


@dataclass(frozen=True)
class EngineDescriptor:
    """What a runtime needs to judge and load an engine: the one typed shape for a cell not built yet (runner
    checks), a built engine (gates) and a published artifact (pull)."""

    address: str
    precision: str
    builder: str
    builder_version: str
    runtime: str  # the runtime plugin that runs it (declared by the builder)
    target: EngineTarget
    digest: str | None = None  # sha256:<hex> of the engine bytes, once built
    size: int | None = None
    built_on_gpu: str | None = None  # the GPU model (SKU) of the runner that built it, when it had one

    @classmethod
    def for_cell(cls, cell: Cell, *, runtime: str, builder_version: str | None = None, digest: str | None = None,
                 size: int | None = None, platform_specific: bool = True,
                 built_on_gpu: str | None = None) -> EngineDescriptor:
        t = cell.target
        version = builder_version or t.builder_version
        return cls(cell.address, cell.precision.name, t.builder, version, runtime,
                   EngineTarget.of(t, platform_specific=platform_specific, builder_version=version), digest, size,
                   built_on_gpu)

    @classmethod
    def from_json(cls, meta: Mapping[str, Any], *, runtime: str | None = None) -> EngineDescriptor:
        """From artifact metadata. ``runtime`` stands in when the metadata predates the ``runtime`` field."""
        builder = meta.get("builder") or {}
        engine = meta.get("engine") or {}
        gpus = (meta.get("runner") or {}).get("gpus") or []
        built_on = gpus[0].get("name") if gpus and isinstance(gpus[0], Mapping) else None
        return cls(str(meta.get("address", "")), str(meta.get("precision", "")), str(builder.get("name", "")),
                   str(builder.get("version", "")), str(meta.get("runtime") or runtime or builder.get("name", "")),
                   EngineTarget.from_json(meta.get("target") or {}), engine.get("digest"), engine.get("size"),
                   str(built_on) if built_on else None)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"address": self.address, "precision": self.precision,
                               "builder": {"name": self.builder, "version": self.builder_version},
                               "runtime": self.runtime, "target": self.target.to_json()}
        if self.digest is not None:
            out["engine"] = {"digest": self.digest, "size": self.size}
        return out


@dataclass(frozen=True)
class IndexEntry:
    """What the planner needs of one published artifact."""

    address: str
    build_key: str
    key_inputs: dict[str, Any]  # the canonical inputs the build key was made from (to name what changed)
    model: str
    version: str
    digest: str  # sha256:<hex> of the engine bytes
    published_at: str = ""
    gate_key: str = ""  # "" for records published before gate keys
    gate_inputs: dict[str, Any] = field(default_factory=dict)
    record_key: str = ""  # the record's identity (``core.keys.record_key``); "" read as the build key
    # "": a sound record. Else what is wrong with it (not JSON, changed since published, its engine gone): the
    # store still knows it is the newest at its address, but cannot serve it, so the planner asks for it again
    damage: str = ""


@dataclass(frozen=True)
class EngineFile:
    """The engine's content descriptor: sha256 of its bytes, size, file name, media type."""

    digest: str  # sha256:<hex>
    size: int
    filename: str
    media_type: str = ENGINE_MEDIA_TYPE

    def to_json(self) -> dict[str, Any]:
        return {"digest": self.digest, "size": self.size, "filename": self.filename, "media_type": self.media_type}


@dataclass(frozen=True)
class GateSummary:
    """Gate verdicts as recorded: each verdict is its ``to_json()`` dict, or None when that gate did not run."""

    status: GateStatus
    parity: Mapping[str, Any] | None = None
    benchmark: Mapping[str, Any] | None = None
    ungated_publish_allowed: bool = False
    key: str = ""  # the cell's gate key (``core.gatekeys``) the verdicts were given under
    key_inputs: Mapping[str, Any] | None = None
    parity_device: str | None = None  # "cpu" / "gpu": where the parity verdict was given (core.gpu_parity)
    caveats: tuple[str, ...] = ()  # what the verdicts do not show (a reduced precision judged on a CPU only)

    def to_json(self) -> dict[str, Any]:
        out = {
            "parity": _plain(self.parity),
            "benchmark": _plain(self.benchmark),
            "status": self.status,
            "ungated_publish_allowed": self.ungated_publish_allowed,
        }
        if self.key:
            out["key"] = self.key
            out["key_inputs"] = _plain(dict(self.key_inputs or {}))
        if self.parity_device is not None:
            out["parity_device"] = self.parity_device
        if self.caveats:
            out["caveats"] = list(self.caveats)
        return out


def _plain(value: Any) -> Any:
    if value is None:
        return None
    if hasattr(value, "to_json"):
        return value.to_json()
    return json.loads(json.dumps(value))  # deep copy, and proves it is JSON


def _hex(digest: str) -> str:
    algo, _, hexpart = digest.partition(":")
    if algo != "sha256" or len(hexpart) != 64:
        raise InvalidMetadataError([("digest", f"expected sha256:<64 hex>, got {digest!r}")])
    return hexpart


def resource_descriptor(name: str, digest: str, uri: str | None = None) -> dict[str, Any]:
    """An in-toto ResourceDescriptor for a material (model, calibration data)."""
    rd: dict[str, Any] = {"name": name, "digest": {"sha256": _hex(digest)}}
    if uri:
        rd["uri"] = uri
    return rd


def provenance_statement(
    *,
    subject_name: str,
    subject_digest: str,
    external_parameters: Mapping[str, Any],
    model_name: str,
    model_digest: str,
    model_uri: str | None = None,
    calibration_digest: str | None = None,
    calibration_uri: str | None = None,
    builder_id: str,
    invocation_id: str,
    started_on: str,
    finished_on: str,
    internal_parameters: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """An in-toto Statement v1 whose predicate is SLSA Provenance v1 for one engine.

    Materials (``resolvedDependencies``) are the model and, for int8 calibration, the calibration data, each as a
    ResourceDescriptor with its sha256.
    """
    deps = [resource_descriptor(f"model:{model_name}", model_digest, model_uri)]
    if calibration_digest:
        deps.append(resource_descriptor(f"calibration:{model_name}", calibration_digest, calibration_uri))
    build_definition: dict[str, Any] = {
        "buildType": BUILD_TYPE,
        "externalParameters": _plain(dict(external_parameters)),
        "resolvedDependencies": deps,
    }
    if internal_parameters:
        build_definition["internalParameters"] = _plain(dict(internal_parameters))
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": subject_name, "digest": {"sha256": _hex(subject_digest)}}],
        "predicateType": SLSA_PROVENANCE_V1,
        "predicate": {
            "buildDefinition": build_definition,
            "runDetails": {
                "builder": {"id": builder_id},
                "metadata": {"invocationId": invocation_id, "startedOn": started_on, "finishedOn": finished_on},
            },
        },
    }


def build_metadata(
    *,
    address: str,
    model_name: str,
    model_version: str,
    model_digest: str,
    precision: str,
    profile_set: str,
    profiles: tuple[str, ...] | list[str],
    target: Target,
    builder_version: str,
    build_key: str,
    key_inputs: Mapping[str, Any],
    engine: EngineFile,
    runner: RunnerFingerprint,
    gates: GateSummary,
    timings: Mapping[str, float],
    manifest_path: str,
    git_commit: str | None,
    started_on: str,
    finished_on: str,
    created_at: str,
    invocation_id: str,
    runtime: str,
    calibration_digest: str | None = None,
    model_uri: str | None = None,
    builder_id: str | None = None,
    platform_specific: bool = True,
    caches: Mapping[str, Any] | None = None,
    io: Mapping[str, Any] | None = None,
    weights: Mapping[str, Any] | None = None,
    reused_from: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The metadata dict for one engine (the one constructor; ``orchestrator.metadata.new_metadata`` fills the
    clock and invocation id and validates it against the schema).

    ``builder_version`` is the exact version really used (``BuildResult.builder_version``), which may be more
    precise than the target's. ``runtime`` is the runtime plugin that runs the engine (the builder declares it).
    ``timings`` must contain ``build_seconds``. ``io``: the engine's input and output tensors as the ONNX it was
    built from declares them (``{"inputs": [{"name", "dtype", "shape"}], "outputs": [...]}``, a dim that is not a
    fixed number is -1), what a deployment needs to call the engine without opening it (``export triton``).
    ``weights``: ``core.weights.engine_weights`` for an engine that is not ``embedded``.
    ``reused_from``: ``{"record_key", "model_version"}`` of the record whose engine and verdicts this one publishes
    again for another model version (a version bump of an unchanged model); None for an engine built for it.
    """
    builder_id = builder_id or f"https://trt-orchestrator.dev/builders/{target.builder}@{builder_version}"
    target_json = EngineTarget.of(target, platform_specific=platform_specific,
                                  builder_version=builder_version).to_json()
    meta = {
        "schema_version": SCHEMA_VERSION,
        "record_key": record_key(build_key, gates.key, model_version),
        "address": address,
        "model": {"name": model_name, "version": model_version, "digest": model_digest},
        "precision": precision,
        "profile_set": profile_set,
        "profiles": list(profiles),
        "target": target_json,
        "builder": {"name": target.builder, "version": builder_version},
        "runtime": runtime,
        "build_key": build_key,
        "key_inputs": _plain(dict(key_inputs)),
        "engine": engine.to_json(),
        "runner": runner.to_json(),
        "gates": gates.to_json(),
        "caches": _plain(dict(caches or {})),
        **({"io": _plain(dict(io))} if io else {}),
        # where its weights live (``core.weights.engine_weights``); absent: embedded, as before weights modes
        **({"weights": _plain(dict(weights))} if weights else {}),
        **({"reused_from": dict(reused_from)} if reused_from else {}),
        "timings": {k: float(v) for k, v in timings.items()},
        "manifest": {"path": manifest_path, "git_commit": git_commit},
        "created_at": created_at,
        "provenance": provenance_statement(
            subject_name=engine.filename,
            subject_digest=engine.digest,
            external_parameters={
                "manifest": {"path": manifest_path, "git_commit": git_commit},
                "address": address,
                "precision": precision,
                "profile_set": profile_set,
                "target": target_json,
                "build_key": build_key,
            },
            internal_parameters={"builder": {"name": target.builder, "version": builder_version}},
            model_name=model_name,
            model_digest=model_digest,
            model_uri=model_uri,
            calibration_digest=calibration_digest,
            builder_id=builder_id,
            invocation_id=invocation_id,
            started_on=started_on,
            finished_on=finished_on,
        ),
    }
    return meta


def index_entry(meta: Mapping[str, Any]) -> IndexEntry:
    """What the planner needs of one artifact, from its metadata."""
    return IndexEntry(
        address=meta["address"],
        build_key=meta["build_key"],
        key_inputs=dict(meta["key_inputs"]),
        model=meta["model"]["name"],
        version=meta["model"]["version"],
        digest=meta["engine"]["digest"],
        published_at=meta.get("published_at", ""),
        gate_key=str((meta.get("gates") or {}).get("key") or ""),
        record_key=str(meta.get("record_key") or meta["build_key"]),
        gate_inputs=dict((meta.get("gates") or {}).get("key_inputs") or {}),
    )
