"""Artifact metadata: building the sidecar JSON of a published engine, validating it, and its provenance.

The metadata (schema ``orchestrator/schemas/artifact-v1.schema.json``, ``schema_version: 1``) says exactly what
an engine is and where it can run: address, model (name, version, digest), precision, profiles, target, the
builder and its exact version, the build key and its inputs, the engine's content digest, the fingerprint of
the runner that built it, gate verdicts, timings, the manifest + git commit, and an in-toto Statement v1 with a
SLSA Provenance v1 predicate. It is a sidecar: never prepended to the engine bytes (that breaks every loader).

Shape (abridged)::

    {"schema_version": 1, "address": "ocr-det/fp16/default@sm89+trt10.13",
     "model": {"name", "version", "digest": "sha256:..."}, "precision": "fp16", "profile_set": "default",
     "profiles": ["default"], "target": {"name", "compute_capabilities", "hardware_compatibility", "device",
     "version_compatible"}, "builder": {"name", "version"}, "build_key": "<hex>", "key_inputs": {...},
     "engine": {"digest": "sha256:...", "size", "filename", "media_type"}, "runner": RunnerFingerprint.to_json(),
     "gates": {"parity", "benchmark", "status", "ungated_publish_allowed"}, "timings": {"build_seconds", ...},
     "manifest": {"path", "git_commit"}, "created_at", "provenance": {in-toto Statement v1},
     # added by the store when publishing:
     "published_at", "attachments": [{"name", "role": "log"|"extra", "digest", "size"}]}
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Mapping

from orchestrator.errors import StoreError
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.model import Target
from orchestrator.contracts.store import IndexEntry

SCHEMA_VERSION = 1
ENGINE_MEDIA_TYPE = "application/vnd.trt-orchestrator.engine.v1"
# onnxruntime "engines" are optimized ONNX files, not TensorRT plans: a distinct media type so no TensorRT
# loader is ever handed one.
ONNX_ENGINE_MEDIA_TYPE = "application/vnd.trt-orchestrator.engine.v1.onnx"
METADATA_MEDIA_TYPE = "application/vnd.trt-orchestrator.metadata.v1+json"

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
SLSA_PROVENANCE_V1 = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://trt-orchestrator.dev/buildtypes/engine/v1"

GateStatus = Literal["passed", "failed", "pending", "skipped"]


class InvalidMetadataError(StoreError):
    """Artifact metadata does not match the artifact-v1 schema. ``problems``: (json path, message) pairs."""

    def __init__(self, problems: list[tuple[str, str]], *, subject: str = "artifact metadata") -> None:
        self.problems = problems
        lines = [f"{subject} is invalid ({len(problems)} problem{'s' if len(problems) != 1 else ''}):"]
        lines += [f"  {path}: {msg}" for path, msg in problems]
        super().__init__("\n".join(lines),
                         hint="build metadata with orchestrator.metadata.build_metadata(); "
                              "schema: orchestrator/schemas/artifact-v1.schema.json")


@dataclass(frozen=True)
class EngineFile:
    """The engine's content descriptor: sha256 of its bytes, size, file name, media type."""

    digest: str  # sha256:<hex>
    size: int
    filename: str
    media_type: str = ENGINE_MEDIA_TYPE

    @classmethod
    def from_path(cls, path: Path, *, builder: str) -> "EngineFile":
        """Hash the engine in 8 MiB chunks (never loaded whole)."""
        h = hashlib.sha256()
        size = 0
        with open(path, "rb") as f:
            while chunk := f.read(8 * 1024 * 1024):
                h.update(chunk)
                size += len(chunk)
        return cls(f"sha256:{h.hexdigest()}", size, Path(path).name, media_type_for(builder))

    def to_json(self) -> dict:
        return {"digest": self.digest, "size": self.size, "filename": self.filename, "media_type": self.media_type}


@dataclass(frozen=True)
class GateSummary:
    """Gate verdicts as recorded: each verdict is its ``to_json()`` dict, or None when that gate did not run."""

    status: GateStatus
    parity: Mapping[str, Any] | None = None
    benchmark: Mapping[str, Any] | None = None
    ungated_publish_allowed: bool = False

    def to_json(self) -> dict:
        return {
            "parity": _plain(self.parity),
            "benchmark": _plain(self.benchmark),
            "status": self.status,
            "ungated_publish_allowed": self.ungated_publish_allowed,
        }


def media_type_for(builder: str) -> str:
    return ONNX_ENGINE_MEDIA_TYPE if builder == "onnxruntime" else ENGINE_MEDIA_TYPE


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


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


def resource_descriptor(name: str, digest: str, uri: str | None = None) -> dict:
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
) -> dict:
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
    created_at: str | None = None,
    calibration_digest: str | None = None,
    model_uri: str | None = None,
    invocation_id: str | None = None,
    builder_id: str | None = None,
) -> dict:
    """The metadata dict for one engine, validated against the schema before it is returned.

    ``builder_version`` is the exact version really used (``BuildResult.builder_version``), which may be more
    precise than the target's. ``timings`` must contain ``build_seconds``.
    """
    invocation_id = invocation_id or f"urn:uuid:{uuid.uuid4()}"
    builder_id = builder_id or f"https://trt-orchestrator.dev/builders/{target.builder}@{builder_version}"
    target_json = {
        "name": target.name,
        "compute_capabilities": list(target.compute_capabilities),
        "hardware_compatibility": target.hardware_compatibility,
        "device": target.device,
        "version_compatible": bool(target.options.version_compatible),
    }
    meta = {
        "schema_version": SCHEMA_VERSION,
        "address": address,
        "model": {"name": model_name, "version": model_version, "digest": model_digest},
        "precision": precision,
        "profile_set": profile_set,
        "profiles": list(profiles),
        "target": target_json,
        "builder": {"name": target.builder, "version": builder_version},
        "build_key": build_key,
        "key_inputs": _plain(dict(key_inputs)),
        "engine": engine.to_json(),
        "runner": runner.to_json(),
        "gates": gates.to_json(),
        "timings": {k: float(v) for k, v in timings.items()},
        "manifest": {"path": manifest_path, "git_commit": git_commit},
        "created_at": created_at or utc_now(),
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
    validate_metadata(meta)
    return meta


@lru_cache(maxsize=1)
def _validator():
    import jsonschema  # edge dependency; only needed when metadata is built or checked

    text = resources.files("orchestrator.schemas").joinpath("artifact-v1.schema.json").read_text()
    schema = json.loads(text)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def validate_metadata(meta: Mapping[str, Any], *, subject: str | None = None) -> None:
    """Raise InvalidMetadataError listing every schema problem at once; also check the provenance subject
    names the engine's digest (a statement about other bytes is worse than none)."""
    if not isinstance(meta, Mapping):
        raise InvalidMetadataError([("$", f"expected an object, got {type(meta).__name__}")])
    label = subject or f"metadata of {meta.get('address', '<no address>')}"
    problems = []
    for err in sorted(_validator().iter_errors(meta), key=lambda e: (list(e.absolute_path), e.message)):
        path = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path)
        problems.append((path, err.message))
    if not problems:
        subject_hex = meta["provenance"]["subject"][0]["digest"]["sha256"]
        if f"sha256:{subject_hex}" != meta["engine"]["digest"]:
            problems.append(("$.provenance.subject[0].digest.sha256",
                             f"names sha256:{subject_hex} but the engine digest is {meta['engine']['digest']}"))
    if problems:
        raise InvalidMetadataError(problems, subject=label)


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
    )
