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
from orchestrator.core.weights import weights_record
from orchestrator.digests import hash_file
from orchestrator.errors import InvalidMetadataError

__all__ = ["ENGINE_MEDIA_TYPE", "METADATA_MEDIA_TYPE", "ONNX_ENGINE_MEDIA_TYPE", "EngineFile", "GateSummary",
           "InvalidMetadataError", "build_metadata", "engine_file", "index_entry", "new_metadata",
           "model_io", "new_weights_metadata", "provenance_statement", "utc_now", "validate_metadata"]

def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def engine_file(path: str | Path, *, media_type: str = ENGINE_MEDIA_TYPE) -> EngineFile:
    """The engine's content descriptor, hashed with the one file hasher (``orchestrator.digests``)."""
    digest, _ = hash_file(str(path))
    return EngineFile(digest, Path(path).stat().st_size, Path(path).name, media_type)


def model_io(path: str | Path) -> dict[str, list[dict[str, Any]]]:
    """The graph inputs (initializers excluded) and outputs of an ONNX file: name, numpy dtype name, shape with -1
    for a dim that is not a fixed number (``build_metadata``'s ``io``). Weights are not loaded."""
    import onnx  # edge dependency; only the build step reads a model's I/O

    model = onnx.load(str(path), load_external_data=False)
    graph = model.graph
    weights = {init.name for init in graph.initializer}

    def tensor(value: Any) -> dict[str, Any]:
        kind = value.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(kind.elem_type).name if kind.elem_type else "undefined"
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else -1 for d in kind.shape.dim]
        return {"name": value.name, "dtype": dtype, "shape": dims}

    return {"inputs": [tensor(v) for v in graph.input if v.name not in weights],
            "outputs": [tensor(v) for v in graph.output]}


def _stamped(make: Any, fields: dict[str, Any]) -> dict[str, Any]:
    """``make(**fields)`` with ``created_at`` and ``invocation_id`` defaulted, then validated."""
    fields.setdefault("created_at", utc_now())
    fields.setdefault("invocation_id", f"urn:uuid:{uuid.uuid4()}")
    meta: dict[str, Any] = make(**fields)
    validate_metadata(meta)
    return meta


def new_weights_metadata(**fields: Any) -> dict[str, Any]:
    """``core.weights.weights_record`` with the clock filled in, validated (a weights record, ``core.weights``)."""
    return _stamped(weights_record, fields)


def new_metadata(**fields: Any) -> dict[str, Any]:
    """``core.artifact.build_metadata`` with ``created_at`` and ``invocation_id`` defaulted, then validated."""
    return _stamped(build_metadata, fields)


@lru_cache(maxsize=1)
def _validator() -> Any:
    import jsonschema  # edge dependency; only needed when metadata is built or checked

    # The shipped schema is checked against the 2020-12 metaschema by a test, not here: that check cost 70-90 ms
    # in every process that publishes or reads a record (bench/NOTES-registry.md).
    text = resources.files("orchestrator.schemas").joinpath("artifact-v1.schema.json").read_text()
    return jsonschema.Draft202012Validator(json.loads(text))


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


