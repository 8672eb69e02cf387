"""The store port: bytes and records, nothing else.

A store plugin (entry-point group ``trt_orchestrator.stores``) is a factory ``(RegistryConfig) -> Store``.
Artifacts are immutable: an engine file + its metadata JSON (schema ``orchestrator/schemas/artifact-v1``),
gate verdicts and the build log. The registry is keyed by build key (builds are not bit-reproducible); the
engine's sha256 is its content digest, verified on every read. Queries (address, model, version, "latest",
labels) and retention are decided once for every store in ``orchestrator.core.query``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from orchestrator.core.artifact import IndexEntry

__all__ = ["ArtifactFiles", "Attachment", "AttachmentReader", "EmptyIndex", "IndexEntry", "IndexReader",
           "RecordKeyIndex", "Store", "StoredArtifact", "CACHE_ROLES"]

# Attachment roles beside "log" and "extra": caches published with the engines they built (metadata ``caches``
# links them by digest). A record is identified by its record key (``core.keys.record_key``: build key + gate key).
CACHE_ROLES = ("calibration-cache", "timing-cache")


class IndexReader(Protocol):
    """Read side the planner uses: latest artifact per address, and a token for the index state."""

    def latest_by_address(self) -> dict[str, IndexEntry]: ...

    def state_token(self) -> str: ...


@runtime_checkable
class RecordKeyIndex(Protocol):
    """An index that names every record it holds (the built-in ones do): ``plan`` then sees a record that is not
    the newest at its address (a model version published again after a newer one) as published. An index without
    it is planned against its newest record per address alone."""

    def record_digests(self) -> dict[str, str]:
        """Every record key -> the engine digest of that record."""
        ...


@dataclass(frozen=True)
class EmptyIndex:
    """No registry yet: every cell plans as ``+ build``."""

    def latest_by_address(self) -> dict[str, IndexEntry]:
        return {}

    def state_token(self) -> str:
        return "empty"

    def record_digests(self) -> dict[str, str]:
        return {}


@dataclass(frozen=True)
class Attachment:
    """A file published with an engine under a role (one of ``CACHE_ROLES``) and a name unique in its record."""

    path: Path
    role: str
    name: str


@dataclass(frozen=True)
class ArtifactFiles:
    """What a publisher hands to ``Store.put``: metadata already validated against the schema."""

    engine: Path
    metadata: dict[str, Any]
    log: Path | None = None
    extra: tuple[Path, ...] = ()  # layer info, gate verdicts as files
    attachments: tuple[Attachment, ...] = ()  # calibration and timing caches


@dataclass(frozen=True)
class StoredArtifact:
    digest: str  # sha256:<hex> of the engine
    metadata: dict[str, Any]
    location: str  # store-specific (path or oci reference)


@runtime_checkable
class Store(Protocol):
    name: str

    def put(self, files: ArtifactFiles) -> StoredArtifact:
        """Publish; idempotent for an already-published record key (returns the existing artifact). The record
        key is ``metadata["record_key"]``, or the build key for metadata that has none."""
        ...

    def get(self, digest: str, dest: Path) -> StoredArtifact:
        """Write the engine to ``dest`` (atomically), verifying its sha256; IntegrityError on mismatch."""
        ...

    def records(self, model: str | None = None) -> list[StoredArtifact]:
        """Every published artifact (of ``model`` only, when given: a store may narrow cheaply), newest first."""
        ...

    def index(self) -> IndexReader:
        """The planner's view; a store that does not exist yet is an empty index (never created by reading)."""
        ...

    def delete(self, digests: Iterable[str]) -> int:
        """Only through the explicit retention command."""
        ...


@runtime_checkable
class AttachmentReader(Protocol):
    """A store that can hand back a record's attachments (the built-in ones can): how a calibration or timing
    cache published by one runner is reused by another. A store without it still publishes them; caches are
    then computed where they are needed."""

    def get_attachment(self, record: StoredArtifact, name: str, dest: Path) -> Path:
        """Write the attachment ``name`` of ``record`` to ``dest`` (atomically), verifying its sha256 against the
        record; ``ArtifactNotFoundError`` when the record has no such attachment."""
        ...
