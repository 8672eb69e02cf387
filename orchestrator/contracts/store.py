"""The store port: bytes and records, nothing else.

A store plugin (entry-point group ``trt_orchestrator.stores``) is a factory ``(RegistryConfig) -> Store``.
Artifacts are immutable: an engine file + its metadata JSON (schema ``orchestrator/schemas/artifact-v1``),
gate verdicts and the build log. The registry is keyed by build key (builds are not bit-reproducible); the
engine's sha256 is its content digest, verified on every read. Queries (address, model, version, "latest",
labels) and retention are decided once for every store in ``orchestrator.core.query``.

Damage stays with its record. A record a store holds but cannot serve (not JSON, not the schema, changed since it
was published, its engine gone) is data, never an exception of the whole read: ``records()`` leaves it out, the
index marks its address (``IndexEntry.damage``) so the planner asks for it again, and a store that can say so
(``StoreChecker``) lists it (``DamagedRecord``) and moves it aside (``quarantine``), never deleting it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from orchestrator.core.artifact import IndexEntry

__all__ = ["ArtifactFiles", "Attachment", "AttachmentReader", "DamageKind", "DamagedRecord", "EmptyIndex",
           "ExistenceCheck", "IndexEntry", "IndexReader", "Quarantined", "RecordKeyIndex", "ReferrerWriter", "Store",
           "StoreChecker", "StoredArtifact", "CACHE_ROLES", "ATTACHMENT_ROLES", "SIGNATURE_ROLE", "registry_note"]

# Attachment roles beside "log" and "extra": caches published with the engines they built (metadata ``caches``
# links them by digest). A record is identified by its record key (``core.keys.record_key``: build key + gate key).
CACHE_ROLES = ("calibration-cache", "timing-cache")
# The signed provenance (a DSSE envelope, or a signer's document carrying one: ``contracts.signer``), published with
# its engine like a cache and read back with ``AttachmentReader.get_attachment``.
SIGNATURE_ROLE = "signature"
ATTACHMENT_ROLES = (*CACHE_ROLES, SIGNATURE_ROLE)


class IndexReader(Protocol):
    """Read side the planner uses: latest artifact per address, and a token for the index state. An address whose
    newest record is damaged maps to an entry with ``damage`` set (what is wrong), never to an exception."""

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


@runtime_checkable
class StateWitness(Protocol):
    """An index whose whole state lives in local files. ``orchestrate`` keeps a plan's answer for as long as none
    of them moves (the start-up fast path, ``orchestrator.fastpath``: their stat, or their absence, is checked
    before anything is imported); an index without it (a remote registry) is read on every plan."""

    def witness(self) -> tuple[str, ...]:
        """Every path whose stat moves when what the index says could move (``latest_by_address``,
        ``record_digests``, ``note``): its files, each record it reads, folders whose entries it lists."""
        ...


@dataclass(frozen=True)
class EmptyIndex:
    """No registry yet: every cell plans as ``+ build``. ``note`` says why there is none (e.g. the local store's
    directory does not exist yet), for the plan to show."""

    note: str = ""

    def latest_by_address(self) -> dict[str, IndexEntry]:
        return {}

    def state_token(self) -> str:
        return "empty"

    def record_digests(self) -> dict[str, str]:
        return {}


def registry_note(index: IndexReader) -> str:
    """What an index says about the registry as a whole (a store that does not exist yet), or "" (an index
    without a ``note`` attribute says nothing)."""
    note = getattr(index, "note", "")
    return note if isinstance(note, str) else ""


# What is wrong with a damaged record: unreadable (not JSON, not an object, cannot be read), invalid (fails the
# artifact-v1 schema, names another record than its own, or its manifest lacks what the index reads), changed
# (its bytes are not the ones published), metadata-missing (a registry lost its metadata blob), engine-missing,
# engine-corrupt (the engine's bytes do not hash to the record's digest), attachment-missing, attachment-corrupt.
DamageKind = Literal["unreadable", "invalid", "changed", "metadata-missing", "engine-missing", "engine-corrupt",
                     "attachment-missing", "attachment-corrupt"]


@dataclass(frozen=True)
class DamagedRecord:
    """A record a store holds but cannot serve, with what is still known of it (from the index or the registry's
    manifest: "" where nothing is) and why."""

    key: str  # the record key its file or tag names
    location: str  # where it is: the record file, or repository:tag@manifest digest
    kind: DamageKind
    problem: str  # one line: what is wrong, for people
    address: str = ""
    model: str = ""
    version: str = ""
    build_key: str = ""
    digest: str = ""  # the engine digest the record names
    published_at: str = ""
    blob: str = ""  # the digest of the missing or corrupt blob (engine-* and attachment-* kinds)

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "location": self.location, "kind": self.kind, "problem": self.problem,
                "address": self.address or None, "model": self.model or None, "version": self.version or None,
                "build_key": self.build_key or None, "digest": self.digest or None,
                "published_at": self.published_at or None, "blob": self.blob or None}


@dataclass(frozen=True)
class Quarantined:
    """A damaged record moved aside: where it went (nothing is deleted)."""

    record: DamagedRecord
    moved_to: str

    def to_json(self) -> dict[str, Any]:
        return {**self.record.to_json(), "moved_to": self.moved_to}


@dataclass(frozen=True)
class Attachment:
    """A file published with an engine under a role (one of ``ATTACHMENT_ROLES``) and a name unique in its
    record."""

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
        key is ``metadata["record_key"]``, or the build key for metadata that has none. A damaged record under
        that key is repaired: moved aside as ``StoreChecker.quarantine`` does, then written anew."""
        ...

    def get(self, digest: str, dest: Path) -> StoredArtifact:
        """Write the engine to ``dest`` (atomically), verifying its sha256; IntegrityError on mismatch."""
        ...

    def records(self, model: str | None = None) -> list[StoredArtifact]:
        """Every published artifact (of ``model`` only, when given: a store may narrow cheaply), newest first.
        Damaged records are left out (a ``StoreChecker`` lists them); a store that does not exist yet has none."""
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


@runtime_checkable
class StoreChecker(Protocol):
    """A store that can name its damaged records and move them aside (the built-in ones can): ``ls`` flags them,
    ``orchestrate store check`` lists and quarantines them."""

    def damaged(self, model: str | None = None) -> list[DamagedRecord]:
        """The records ``records(model)`` leaves out because they are damaged (their metadata read and checked;
        no engine is hashed)."""
        ...

    def check(self, *, verify_blobs: bool = True) -> list[DamagedRecord]:
        """Every damaged record: ``damaged()`` plus records whose engine or attachments are missing, or (with
        ``verify_blobs``) whose bytes no longer hash to their digests."""
        ...

    def quarantine(self, records: Iterable[DamagedRecord]) -> list[Quarantined]:
        """Move these records aside, where no read finds them and nothing deletes them; their addresses then plan
        from what remains. Returns where each went."""
        ...


@runtime_checkable
class ExistenceCheck(Protocol):
    """A store that can be absent (a local directory): readers that need it (``ls``, ``show``, ``pull``,
    ``retention``) call this; ``index()`` and ``records()`` still read an absent store as empty, and ``put``
    creates it."""

    def require_existing(self) -> None:
        """A ``StoreError`` naming the store when it does not exist (or is not a store)."""
        ...


@runtime_checkable
class ReferrerWriter(Protocol):
    """A store that can also hang a file on a published record the way its registry's own tools look for it (the
    OCI store: a referrer manifest whose ``subject`` is the record's manifest, with ``artifactType``, found by
    ``oras discover`` and the referrers API). Optional: the attachment in the record is what ``pull`` reads."""

    def put_referrer(self, record: StoredArtifact, path: Path, artifact_type: str) -> str:
        """Publish ``path`` as a referrer of ``record`` (idempotent); returns where it is."""
        ...
