"""The OCI store's check and quarantine: which records are damaged, their blobs included, and moving them aside.

What reads already find (``OciStore.scan``): a ``bk-`` tag whose manifest is not this store's record, a record
whose metadata blob is missing, changed or not a record. What ``check`` adds: each record's engine and attachment
blobs asked for (``HEAD``) and, with ``verify_blobs``, downloaded and hashed (nothing kept; each distinct blob of a
repository once), so ``engine-missing``, ``engine-corrupt``, ``attachment-missing`` and ``attachment-corrupt``.

Quarantine moves, never deletes (the distribution API has no rename, and deleting a tag alone is not portable):
the damaged manifest is tagged ``q-<record key>-<UTC time>`` in its repository (where the registry takes it; one
whose blobs are gone is refused, and stays reachable by its digest until the registry's garbage collection),
then the record's ``bk-`` tag is pointed at a tombstone: a manifest of the empty blob annotated
``io.trt-orchestrator.quarantined`` (why) and ``io.trt-orchestrator.moved-to`` (where). Reads skip tombstones, so
the record's address plans from what remains, and a publish of its record key writes over the tombstone. Every
record is checked again right before it moves, so one repaired meanwhile stays.
"""

from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING

from orchestrator.contracts.store import DamagedRecord, Quarantined
from orchestrator.errors import ArtifactNotFoundError, IntegrityError, StoreError, StoreUnavailableError
from trt_orchestrator_plugins.stores._oci_layout import (
    BK_TAG,
    QUARANTINE_TAG,
    Artifact,
    canonical,
    manifest_problem,
    sanitize_tag,
    tombstone,
)

if TYPE_CHECKING:
    from trt_orchestrator_plugins.stores.oci import OciStore


def _metadata_kind(e: StoreError) -> str:
    if isinstance(e, ArtifactNotFoundError):
        return "metadata-missing"
    return "changed" if "failed its integrity check" in e.message else "invalid"


def metadata_damage(art: Artifact, e: StoreError) -> DamagedRecord:
    """A record whose metadata blob could not be read as its record (``e`` says why)."""
    return art.damaged(BK_TAG + art.record_key, _metadata_kind(e), e.message.split(": ", 1)[-1])


def sound(store: OciStore, art: Artifact, tag: str, *, engine: bool = False) -> bool:
    """Whether ``art`` (the manifest under ``tag``) is a record this store can serve: no tombstone, the
    manifest a record of that key, its metadata readable (``engine``: and its engine blob there)."""
    if art.quarantined or manifest_problem(art, tag) is not None:
        return False
    if engine:
        return record_damage(store, art) is None
    try:
        store._metadata(art)
    except (IntegrityError, ArtifactNotFoundError):
        return False
    return True


def record_damage(store: OciStore, art: Artifact) -> tuple[str, str] | None:
    """What is wrong with a sound manifest's record: its metadata (missing, changed, not a record) or its engine
    blob (missing); None when both can be had."""
    try:
        meta = store._metadata(art)
    except (IntegrityError, ArtifactNotFoundError) as e:
        return _metadata_kind(e), e.message.split(": ", 1)[-1]
    engine = str(meta["engine"]["digest"])
    if not store._retrying(f"asking for the engine of {art.address}", lambda: store.api.blob_exists(art.repo, engine)):
        return "engine-missing", f"its engine blob {engine} is missing from {store.host}/{art.repo}"
    return None


class _Blobs:
    """Each blob of a repository as it is: its digest as hashed (``verify``) or as named when it is there, None
    when it is missing; asked once per (repository, digest)."""

    def __init__(self, store: OciStore, verify: bool) -> None:
        self.store, self.verify = store, verify
        self.seen: dict[tuple[str, str], str | None] = {}

    def __call__(self, repo: str, digest: str, size: int, address: str, what: str) -> str | None:
        key = (repo, digest)
        if key not in self.seen:
            store = self.store
            if not self.verify:
                there = store._retrying(f"asking for {what} of {address}", lambda: store.api.blob_exists(repo, digest))
                self.seen[key] = digest if there else None
            else:
                try:
                    self.seen[key] = store._retrying(
                        f"hashing {what} of {address}",
                        lambda: store.api.download_blob(repo, digest, None, address, what), transfer_bytes=size)
                except ArtifactNotFoundError:
                    self.seen[key] = None
        return self.seen[key]


def _blob_damage(art: Artifact, meta: dict, blobs: _Blobs) -> DamagedRecord | None:
    tag = BK_TAG + art.record_key
    engine = meta["engine"]
    got = blobs(art.repo, str(engine["digest"]), int(engine.get("size") or 0), art.address, "engine")
    if got is None:
        return art.damaged(tag, "engine-missing", f"its engine blob {engine['digest']} is missing from "
                           f"{blobs.store.host}/{art.repo}", blob=str(engine["digest"]))
    if got != engine["digest"]:
        return art.damaged(tag, "engine-corrupt", f"its engine blob {engine['digest']} hashes to {got}",
                           blob=str(engine["digest"]))
    for a in meta.get("attachments") or ():
        digest, name = str(a.get("digest")), str(a.get("name"))
        got = blobs(art.repo, digest, int(a.get("size") or 0), art.address, f"attachment {name}")
        if got is None:
            return art.damaged(tag, "attachment-missing", f"its attachment {name!r} (blob {digest}) is missing from "
                               f"{blobs.store.host}/{art.repo}", blob=digest)
        if got != digest:
            return art.damaged(tag, "attachment-corrupt", f"its attachment {name!r} (blob {digest}) hashes to {got}",
                               blob=digest)
    return None


def check(store: OciStore, *, verify_blobs: bool) -> list[DamagedRecord]:
    store._check_api()
    arts, found = store._survey()
    blobs = _Blobs(store, verify_blobs)
    for art in arts:
        try:
            meta = store._metadata(art)
        except (IntegrityError, ArtifactNotFoundError) as e:
            found.append(metadata_damage(art, e))
            continue
        damage = _blob_damage(art, meta, blobs)
        if damage is not None:
            found.append(damage)
    return found


def _current(store: OciStore, d: DamagedRecord) -> tuple[str, str, Artifact | None, bool]:
    """(repository, tag, what the tag holds now (None: unreadable), still damaged)."""
    repo, _, rest = d.location.partition(":")
    tag = rest.split("@", 1)[0]
    try:
        art = store._resolve(repo, tag, fresh=True)
    except StoreUnavailableError:
        raise
    except StoreError:
        return repo, tag, None, True  # not a JSON object: damaged still
    if art is None or art.quarantined:
        return repo, tag, art, False  # gone, or moved aside already
    if manifest_problem(art, tag) is not None or record_damage(store, art) is not None:
        return repo, tag, art, True
    if d.kind in ("engine-corrupt", "attachment-corrupt", "attachment-missing"):
        return repo, tag, art, _blob_damage(art, store._metadata(art), _Blobs(store, verify=True)) is not None
    return repo, tag, art, False


def keep_aside(store: OciStore, art: Artifact) -> str:
    """Tag a damaged manifest ``q-<record key>-<time>`` (where the registry takes it again); returns where it is."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    qtag = sanitize_tag(f"{QUARANTINE_TAG}{art.record_key or 'unnamed'}-{stamp}")

    def put():
        return store._send("PUT", f"/v2/{art.repo}/manifests/{qtag}", body=art.raw,
                           headers={"Content-Type": art.manifest.get("mediaType") or "application/json"},
                           ok=(201, 400))

    r = store._retrying(f"tagging {art.repo}:{qtag}", put) if art.raw else None
    if r is not None and r.status_code == 201:
        r.close()
        return f"{store.host}/{art.repo}:{qtag}"
    refused = r.text[:200] if r is not None else "no manifest bytes"
    if r is not None:
        r.close()
    return f"{store.host}/{art.repo}@{art.manifest_digest} (untagged: the registry refused to tag it again: {refused})"


def quarantine(store: OciStore, records: list[DamagedRecord]) -> list[Quarantined]:
    store._check_api()
    moved: list[Quarantined] = []
    for d in records:
        repo, tag, art, damaged = _current(store, d)
        if not damaged:
            continue
        where = keep_aside(store, art) if art is not None else f"{store.host}/{repo}:{tag} (unreadable, not kept)"
        raw = canonical(tombstone(tag[len(BK_TAG):], f"{d.kind}: {d.problem}", where))
        store._retrying(f"empty blob in {repo}", functools.partial(store.api.put_empty_blob, repo))
        store._retrying(f"moving {repo}:{tag} aside", functools.partial(store._put_manifest, repo, tag, raw))
        store._resolved.pop((repo, tag), None)
        moved.append(Quarantined(record=d, moved_to=where))
    return moved
