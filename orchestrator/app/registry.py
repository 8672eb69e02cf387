"""The registry verbs: list, show and retention, over any store (queries decided in ``core.query``), and the
caches published with the engines (``metadata["caches"]`` + the attachments that carry the files)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator import plugins
from orchestrator.app.store_check import damage_error, damaged_matching
from orchestrator.contracts.store import DamagedRecord, Store, StoreChecker, StoredArtifact
from orchestrator.core.model import RegistryConfig
from orchestrator.core.query import engines, expired, select
from orchestrator.core.weights import blob_of, is_engine
from orchestrator.errors import ArtifactNotFoundError, UsageError


def _meta(artifact: StoredArtifact) -> dict:  # type: ignore[type-arg]
    return artifact.metadata


def list_artifacts(registry: RegistryConfig, *, model: str | None = None) -> list[StoredArtifact]:
    """Published artifacts, newest first (one model's when given)."""
    return plugins.open_existing_store(registry).records(model)


@dataclass(frozen=True)
class CalibrationCache:
    """One distinct calibration cache (by content digest) and the published engines built with it."""

    name: str
    digest: str
    key: str  # the calibration key it was computed under
    calibrator: str = ""
    size: int | None = None
    engines: tuple[str, ...] = ()  # engine digests of the records that link it (re-gated engines counted once)
    addresses: tuple[str, ...] = ()
    stored: bool = False  # some record carries the file as an attachment (else it is only described)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "digest": self.digest, "key": self.key, "calibrator": self.calibrator,
                "size": self.size, "engines": len(self.engines), "addresses": list(self.addresses),
                "stored": self.stored}


@dataclass(frozen=True)
class TimingCache:
    """One distinct timing cache (by scope and content digest): GPU, GPU model and exact builder version."""

    scope: str
    digest: str
    name: str = ""
    size: int | None = None
    pinned: bool = False
    engines: tuple[str, ...] = ()
    addresses: tuple[str, ...] = ()
    stored: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"scope": self.scope, "digest": self.digest, "name": self.name, "size": self.size,
                "pinned": self.pinned, "engines": len(self.engines), "addresses": list(self.addresses),
                "stored": self.stored}


@dataclass(frozen=True)
class WeightsBlob:
    """One weights record (``core.weights``): a model version's ONNX published once, and the engines that need it."""

    record: StoredArtifact
    engines: tuple[str, ...] = ()  # addresses of the engine records that point at it

    def to_json(self) -> dict[str, Any]:
        meta = self.record.metadata
        blob = meta.get("blob") or {}
        return {"address": meta["address"], "model": meta["model"]["name"], "version": meta["model"]["version"],
                "source": blob.get("source"), "digest": meta["engine"]["digest"], "size": meta["engine"]["size"],
                "graph_digest": blob.get("graph_digest"), "tensors": blob.get("tensors"),
                "record_key": record_key_of(meta), "published_at": meta.get("published_at"),
                "engines": list(self.engines)}


@dataclass(frozen=True)
class Listing:
    artifacts: list[StoredArtifact]  # newest first (engine records)
    calibration: tuple[CalibrationCache, ...] = ()
    timing: tuple[TimingCache, ...] = ()
    damaged: tuple[DamagedRecord, ...] = ()  # records the store holds but cannot serve (flagged, not listed)
    weights: tuple[WeightsBlob, ...] = ()  # weights records, newest first, each with the engines that need it


def weights_blobs(records: Iterable[StoredArtifact]) -> tuple[WeightsBlob, ...]:
    """The weights records among ``records``, each with the addresses of the engine records pointing at it."""
    records = list(records)
    users: dict[str, list[str]] = {}
    for r in records:
        pointer = blob_of(r.metadata) if is_engine(r.metadata) else None
        if pointer is not None:
            users.setdefault(str(pointer.get("record_key")), []).append(str(r.metadata["address"]))
    return tuple(WeightsBlob(r, tuple(dict.fromkeys(users.get(record_key_of(r.metadata), ()))))
                 for r in records if not is_engine(r.metadata))


def _attachment(meta: Mapping[str, Any], name: object) -> Mapping[str, Any] | None:
    for a in meta.get("attachments") or ():
        if isinstance(a, Mapping) and name and a.get("name") == name:
            return a
    return None


def _size(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def caches_of(records: Iterable[StoredArtifact]) -> tuple[tuple[CalibrationCache, ...], tuple[TimingCache, ...]]:
    """Every distinct calibration cache (by digest) and timing cache (by scope and digest) the records name,
    with the engines that link each; in the order first met (records come newest first)."""
    calib: dict[str, dict[str, Any]] = {}
    timing: dict[tuple[str, str], dict[str, Any]] = {}
    for record in records:
        meta = record.metadata
        found = meta.get("caches")
        caches: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        engine = str((meta.get("engine") or {}).get("digest", ""))
        address = str(meta.get("address", ""))
        c = caches.get("calibration")
        if isinstance(c, Mapping) and c.get("digest"):
            att = _attachment(meta, c.get("name"))
            seen = calib.setdefault(str(c["digest"]), {
                "name": str(c.get("name") or ""), "digest": str(c["digest"]), "key": str(c.get("key") or ""),
                "calibrator": str(c.get("calibrator") or ""), "size": _size(c.get("size")),
                "engines": [], "addresses": [], "stored": False})
            seen["stored"] = seen["stored"] or att is not None
            if engine not in seen["engines"]:
                seen["engines"].append(engine)
            if address not in seen["addresses"]:
                seen["addresses"].append(address)
        t = caches.get("timing")
        if isinstance(t, Mapping):
            att = _attachment(meta, t.get("name"))
            digest = str((att or {}).get("digest") or t.get("written") or t.get("read") or "")
            if not digest:
                continue
            scope = str(t.get("scope") or "")
            seen = timing.setdefault((scope, digest), {
                "scope": scope, "digest": digest, "name": str(t.get("name") or ""),
                "size": _size((att or {}).get("size", t.get("size"))), "pinned": bool(t.get("pinned")),
                "engines": [], "addresses": [], "stored": False})
            seen["stored"] = seen["stored"] or att is not None
            if engine not in seen["engines"]:
                seen["engines"].append(engine)
            if address not in seen["addresses"]:
                seen["addresses"].append(address)
    return (tuple(CalibrationCache(**{**v, "engines": tuple(v["engines"]), "addresses": tuple(v["addresses"])})
                  for v in calib.values()),
            tuple(TimingCache(**{**v, "engines": tuple(v["engines"]), "addresses": tuple(v["addresses"])})
                  for v in timing.values()))


def listing(registry: RegistryConfig, *, model: str | None = None) -> Listing:
    """``ls``: the published records (newest first), the caches published with them, and the damaged records
    (a damaged record never hides the others: issue 23.1)."""
    store = plugins.open_existing_store(registry)
    records = store.records(model)
    damaged = tuple(store.damaged(model)) if isinstance(store, StoreChecker) else ()
    calibration, timing = caches_of(records)
    return Listing(engines(records, _meta), calibration, timing, damaged, weights_blobs(records))


def find(registry: RegistryConfig, *, address: str | None = None, model: str | None = None,
         version: str | None = None, labels: dict[str, str] | None = None) -> list[StoredArtifact]:
    records = plugins.open_existing_store(registry).records(model)
    return select(records, _meta, address=address, model=model, version=version, labels=labels, weights=True)


def record_key_of(meta: Mapping[str, Any]) -> str:
    """A record's identity: its record key, or its build key when it was published before record keys."""
    return str(meta.get("record_key") or meta.get("build_key") or "")


def _engine_match(a: StoredArtifact) -> str:
    return f"{a.metadata.get('address')}: engine {a.digest[:19]} (record {record_key_of(a.metadata)[:12]})"


def _record_match(a: StoredArtifact) -> str:
    return f"{a.metadata.get('address')}: record {record_key_of(a.metadata)[:12]} (engine {a.digest[:19]})"


def _refuse_damaged(store: Store, ref: str) -> None:
    """A reference that names a damaged record gets the damage, not "no artifact"."""
    hexpart = ref.strip().lower().removeprefix("sha256:")
    damaged = damaged_matching(store, lambda d: ref in (d.address, d.key, d.digest) or bool(
        hexpart and re.fullmatch(r"[0-9a-f]+", hexpart)
        and (d.key.startswith(hexpart) or d.digest.removeprefix("sha256:").startswith(hexpart))))
    if damaged:
        raise damage_error(ref, damaged)


def show(registry: RegistryConfig, ref: str) -> StoredArtifact:
    """One record by what ``ls`` prints: its address (the newest publish), its engine digest (``sha256:…`` or hex:
    the newest record of that engine; a re-gated engine has several) or its record key, the last two by any
    unique prefix (``ls`` prints ``sha256:`` + 12 hex and 12 hex). A prefix that starts the digests or keys of
    several records is a ``UsageError`` listing them."""
    store = plugins.open_existing_store(registry)
    records = store.records()
    text = ref.strip().lower()
    hexpart = text.removeprefix("sha256:")
    if not re.fullmatch(r"[0-9a-f]+", hexpart):
        hits = select(records, _meta, address=ref, weights=True)
        if hits:
            return hits[0]
        _refuse_damaged(store, ref)
        close = difflib.get_close_matches(ref, sorted({str(a.metadata["address"]) for a in records}), n=3)
        raise ArtifactNotFoundError(f"no artifact {ref!r} in the registry",
                                    hint=(f"did you mean {' or '.join(close)}? " if close else "")
                                    + "give an address, an engine digest or a record key as `orchestrate ls` "
                                      "prints them")
    # engines by digest prefix (newest record of each first: records come newest first), records by key prefix
    engines: dict[str, StoredArtifact] = {}
    for a in records:
        if a.digest.removeprefix("sha256:").startswith(hexpart):
            engines.setdefault(a.digest, a)
    keyed = [] if text.startswith("sha256:") else [a for a in records if record_key_of(a.metadata).startswith(hexpart)]
    if len(keyed) == 1 and set(engines) <= {keyed[0].digest}:
        return keyed[0]
    if not keyed and len(engines) == 1:
        return next(iter(engines.values()))
    if not keyed and not engines:
        _refuse_damaged(store, ref)
        raise ArtifactNotFoundError(f"no artifact {ref!r} in the registry",
                                    hint="give an address, an engine digest or a record key as `orchestrate ls` "
                                         "prints them (any unique prefix of a digest or key)")
    matches = [_engine_match(a) for a in engines.values()] + [_record_match(a) for a in keyed]
    raise UsageError(f"{ref!r} is ambiguous: it starts {len(matches)} engine digests or record keys:\n"
                     + "\n".join(f"  - {m}" for m in matches),
                     hint="give more of the digest or record key")


@dataclass(frozen=True)
class RetentionResult:
    doomed: tuple[StoredArtifact, ...]
    removed: int  # 0 on a dry run


def retention(registry: RegistryConfig, *, keep_versions: int, delete: bool) -> RetentionResult:
    """Keep each model's newest ``keep_versions`` versions; delete the rest only when ``delete`` is set. A weights
    record stays while an engine that stays points at it, and no record goes whose file a staying record shares
    (stores delete by digest: a stripped engine of an old version can be byte for byte a newer one's)."""
    store = plugins.open_existing_store(registry)
    records = store.records()
    doomed = expired(records, _meta, keep_versions=keep_versions)
    gone = {id(a) for a in doomed}
    kept = [a for a in records if id(a) not in gone]
    needed = {a.digest for a in kept} | {str(p["digest"]) for a in kept if (p := blob_of(a.metadata)) is not None}
    doomed = [a for a in doomed if a.digest not in needed]
    removed = store.delete([a.digest for a in doomed]) if delete and doomed else 0
    return RetentionResult(tuple(doomed), removed)
