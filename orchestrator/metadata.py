"""Artifact metadata at the edge: the clock and invocation id, the engine file's digest, and validation against
the artifact-v1 JSON Schema. The record itself is built by ``orchestrator.core.artifact.build_metadata``;
``new_metadata`` is that constructor with the clock filled in and the result validated."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from datetime import datetime, timezone
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from orchestrator.core.artifact import (
    ENGINE_MEDIA_TYPE,
    METADATA_MEDIA_TYPE,
    ONNX_ENGINE_MEDIA_TYPE,
    EngineFile,
    GateSummary,
    build_metadata,
    index_entry,
    provenance_statement,
)
from orchestrator.digests import hash_file
from orchestrator.errors import InvalidMetadataError

__all__ = ["ENGINE_MEDIA_TYPE", "METADATA_MEDIA_TYPE", "ONNX_ENGINE_MEDIA_TYPE", "EngineFile", "GateSummary",
           "InvalidMetadataError", "build_metadata", "engine_file", "index_entry", "new_metadata",
           "provenance_statement", "utc_now", "validate_metadata"]

def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def engine_file(path: str | Path, *, media_type: str = ENGINE_MEDIA_TYPE) -> EngineFile:
    """The engine's content descriptor, hashed with the one file hasher (``orchestrator.digests``)."""
    digest, _ = hash_file(str(path))
    return EngineFile(digest, Path(path).stat().st_size, Path(path).name, media_type)


def new_metadata(**fields: Any) -> dict[str, Any]:
    """``core.artifact.build_metadata`` with ``created_at`` and ``invocation_id`` defaulted, then validated."""
    fields.setdefault("created_at", utc_now())
    fields.setdefault("invocation_id", f"urn:uuid:{uuid.uuid4()}")
    meta = build_metadata(**fields)
    validate_metadata(meta)
    return meta


@lru_cache(maxsize=1)
def _validator() -> Any:
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


