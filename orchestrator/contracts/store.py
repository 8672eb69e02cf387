"""The store contract and the small index-reading interface the planner uses.

A store plugin (entry-point group ``trt_orchestrator.stores``) is a factory ``(RegistryConfig) -> Store``.
Artifacts are immutable: an engine file + its metadata JSON (schema ``orchestrator/schemas/artifact-v1``),
gate verdicts and the build log. The registry is keyed by build key (builds are not bit-reproducible); the
engine's sha256 is its content digest, verified on every read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Protocol, runtime_checkable


@dataclass(frozen=True)
class IndexEntry:
    """What the planner needs of one published artifact."""

    address: str
    build_key: str
    key_inputs: dict  # the canonical inputs the build key was made from (to name what changed)
    model: str
    version: str
    digest: str  # sha256:<hex> of the engine bytes
    published_at: str = ""


class IndexReader(Protocol):
    """Read side the planner uses: latest artifact per address, and a token for the index state."""

    def latest_by_address(self) -> dict[str, IndexEntry]: ...

    def state_token(self) -> str: ...


@dataclass(frozen=True)
class EmptyIndex:
    """No registry yet: every cell plans as ``+ build``."""

    def latest_by_address(self) -> dict[str, IndexEntry]:
        return {}

    def state_token(self) -> str:
        return "empty"


@dataclass(frozen=True)
class ArtifactFiles:
    """What a publisher hands to ``Store.put``."""

    engine: Path
    metadata: dict  # validated against the artifact metadata schema by the store
    log: Path | None = None
    extra: tuple[Path, ...] = ()  # layer info, gate verdicts as files


@dataclass(frozen=True)
class StoredArtifact:
    digest: str  # sha256:<hex> of the engine
    metadata: dict
    location: str  # store-specific (path or oci reference)


@runtime_checkable
class Store(Protocol):
    name: str

    def put(self, files: ArtifactFiles) -> StoredArtifact:
        """Publish; idempotent for an already-published build key (returns the existing artifact)."""
        ...

    def get(self, digest: str, dest: Path) -> StoredArtifact:
        """Write the engine to ``dest`` (atomically), verifying its sha256; IntegrityError on mismatch."""
        ...

    def find(self, *, address: str | None = None, model: str | None = None, version: str | None = None,
             labels: dict | None = None) -> list[StoredArtifact]: ...

    def list(self) -> Iterator[StoredArtifact]: ...

    def index(self) -> IndexReader: ...

    def delete(self, digests: Iterable[str]) -> int:
        """Only through the explicit retention command."""
        ...
