"""The registry verbs: list, show and retention, over any store (queries decided in ``core.query``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestrator import plugins
from orchestrator.contracts.store import StoredArtifact
from orchestrator.core.model import RegistryConfig
from orchestrator.core.query import expired, select
from orchestrator.errors import ArtifactNotFoundError


def _meta(artifact: StoredArtifact) -> dict:  # type: ignore[type-arg]
    return artifact.metadata


def list_artifacts(registry: RegistryConfig, *, model: str | None = None) -> list[StoredArtifact]:
    """Published artifacts, newest first (one model's when given)."""
    return plugins.open_store(registry).records(model)


def find(registry: RegistryConfig, *, address: str | None = None, model: str | None = None,
         version: str | None = None, labels: dict[str, str] | None = None) -> list[StoredArtifact]:
    records = plugins.open_store(registry).records(model)
    return select(records, _meta, address=address, model=model, version=version, labels=labels)


def show(registry: RegistryConfig, ref: str) -> StoredArtifact:
    """One artifact by address (the newest publish) or by engine digest (``sha256:…`` or 64 hex digits)."""
    records = plugins.open_store(registry).records()
    if ref.startswith("sha256:") or re.fullmatch(r"[0-9a-f]{64}", ref):
        digest = ref if ref.startswith("sha256:") else f"sha256:{ref}"
        hits = [a for a in records if a.digest == digest]
    else:
        hits = select(records, _meta, address=ref)
    if not hits:
        raise ArtifactNotFoundError(f"no artifact {ref!r} in the registry", hint="see `orchestrate ls`")
    return hits[0]


@dataclass(frozen=True)
class RetentionResult:
    doomed: tuple[StoredArtifact, ...]
    removed: int  # 0 on a dry run


def retention(registry: RegistryConfig, *, keep_versions: int, delete: bool) -> RetentionResult:
    """Keep each model's newest ``keep_versions`` versions; delete the rest only when ``delete`` is set."""
    store = plugins.open_store(registry)
    doomed = expired(store.records(), _meta, keep_versions=keep_versions)
    removed = store.delete([a.digest for a in doomed]) if delete and doomed else 0
    return RetentionResult(tuple(doomed), removed)
