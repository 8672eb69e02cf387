"""Registry queries (pure), one set of semantics for every store: which published artifacts match an address,
a model, a version ("latest" included) and labels; and which ones a retention policy removes.

Stores only hand over their records (metadata dicts, newest first); filtering happens here, so a label means
the same thing on the local store and on an OCI registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from orchestrator.core.weights import is_engine
from orchestrator.errors import StoreError

T = TypeVar("T")
Meta = Mapping[str, Any]

# label -> how to read it from artifact metadata
LABELS: dict[str, Callable[[Meta], str]] = {
    "precision": lambda m: str(m["precision"]),
    "profile_set": lambda m: str(m["profile_set"]),
    "target": lambda m: str(m["target"]["name"]),
    "builder": lambda m: str(m["builder"]["name"]),
    "builder_version": lambda m: str(m["builder"]["version"]),
    "gate_status": lambda m: str(m["gates"]["status"]),
}


def check_labels(labels: Mapping[str, object]) -> None:
    unknown = sorted(set(labels) - set(LABELS))
    if unknown:
        raise StoreError(f"unknown label(s) {', '.join(unknown)}", hint=f"labels: {', '.join(LABELS)}")


def _first_published(metas: Iterable[Meta], model: str | None) -> dict[str, str]:
    """Each version of ``model`` (None: of every model the records are of) -> when it was first published."""
    first_seen: dict[str, str] = {}
    for meta in metas:
        if model is not None and meta["model"]["name"] != model:
            continue
        version, when = str(meta["model"]["version"]), str(meta.get("published_at", ""))
        if version not in first_seen or when < first_seen[version]:
            first_seen[version] = when
    return first_seen


def latest_version(metas: Iterable[Meta], model: str) -> str | None:
    """The model version published most recently for the first time (re-publishing an old version's engine
    for a new target does not make it the latest)."""
    first_seen = _first_published(metas, model)
    if not first_seen:
        return None
    return max(first_seen, key=lambda v: (first_seen[v], v))


def versions_newest_first(metas: Iterable[Meta]) -> list[str]:
    """The versions of one model's records, ``latest_version``'s order: the newest first."""
    first_seen = _first_published(metas, None)
    return sorted(first_seen, key=lambda v: (first_seen[v], v), reverse=True)


def matches_profile(meta: Meta, profile: str) -> bool:
    """Whether a record serves ``profile``: its profile set's name, or one of the profiles in it."""
    return profile == meta.get("profile_set") or profile in (meta.get("profiles") or ())


@dataclass(frozen=True)
class Published:
    """What a set of records offers: its precisions and profile sets (sorted)."""

    precisions: tuple[str, ...]
    profile_sets: tuple[str, ...]


def published_values(metas: Iterable[Meta]) -> Published:
    metas = list(metas)
    return Published(tuple(sorted({str(m["precision"]) for m in metas})),
                     tuple(sorted({str(m.get("profile_set")) for m in metas})))


def engines(records: Iterable[T], meta_of: Callable[[T], Meta]) -> list[T]:
    """The engine records of ``records``: weights records (``core.weights``) are not engines to plan, pick or
    judge."""
    return [r for r in records if is_engine(meta_of(r))]


def select(records: Sequence[T], meta_of: Callable[[T], Meta], *, address: str | None = None,
           model: str | None = None, version: str | None = None,
           labels: Mapping[str, object] | None = None, weights: bool = False) -> list[T]:
    """The records matching every given criterion, in the order given (stores give newest first).
    ``version="latest"`` needs ``model``. Engine records only, unless ``weights`` (``ls``/``show``)."""
    labels = dict(labels or {})
    check_labels(labels)
    if not weights:
        records = engines(records, meta_of)
    if version == "latest":
        if model is None:
            raise StoreError("version 'latest' needs a model name", hint="pass the model too")
        version = latest_version((meta_of(r) for r in records), model)
        if version is None:
            return []
    hits = []
    for record in records:
        meta = meta_of(record)
        if address is not None and meta["address"] != address:
            continue
        if model is not None and meta["model"]["name"] != model:
            continue
        if version is not None and meta["model"]["version"] != version:
            continue
        if any(LABELS[k](meta) != str(v) for k, v in labels.items()):
            continue
        hits.append(record)
    return hits


def expired(records: Sequence[T], meta_of: Callable[[T], Meta], *, keep_versions: int) -> list[T]:
    """Retention: the records of every model version older than that model's newest ``keep_versions`` ones
    (versions ordered by when they were last published)."""
    if keep_versions < 1:
        raise StoreError(f"keep_versions must be at least 1, got {keep_versions}")
    by_model: dict[str, list[T]] = {}
    for record in records:
        by_model.setdefault(str(meta_of(record)["model"]["name"]), []).append(record)
    doomed: list[T] = []
    for group in by_model.values():
        versions: list[str] = []
        for record in sorted(group, key=lambda r: str(meta_of(r).get("published_at", "")), reverse=True):
            v = str(meta_of(record)["model"]["version"])
            if v not in versions:
                versions.append(v)
        old = set(versions[keep_versions:])
        doomed += [r for r in group if meta_of(r)["model"]["version"] in old]
    return doomed
