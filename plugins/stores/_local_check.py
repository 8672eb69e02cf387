"""The local store's check and quarantine: which records are damaged, blobs included, and moving them aside.

``check`` adds to what every read already finds (a record that is not JSON, not the schema, changed since it was
published, or whose engine blob is gone) what only hashing finds: blobs whose bytes no longer hash to their name
(``engine-corrupt``, ``attachment-corrupt``) and attachments whose blob is gone. Each distinct blob is hashed once.

Quarantine moves, never deletes. Each damaged record goes to ``quarantine/<UTC time>-<record key>/`` in the
store's root, as its record file (``<record key>.json``, byte for byte), the blob that was corrupt (``<hex>.blob``;
a blob several records share moves with the first of them) and ``reason.json`` (the ``DamagedRecord``, and when it
was moved). Nothing reads ``quarantine/``: its records leave the index, so their addresses plan from what remains,
and restoring one is moving its file back into ``meta/``. Every record is checked again under the store's lock
before it moves, so one repaired meanwhile (published again) stays where it is.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.atomic import fsync_dir
from orchestrator.contracts.store import DamagedRecord, Quarantined
from orchestrator.digests import hash_file
from trt_orchestrator_plugins.stores._atomic import atomic_write_json
from trt_orchestrator_plugins.stores._records import record_id

if TYPE_CHECKING:
    from trt_orchestrator_plugins.stores.local import LocalStore

_RECORD_KINDS = ("unreadable", "invalid", "changed", "engine-missing")


def _known(meta: dict) -> dict:
    return {"address": meta.get("address"), "model": (meta.get("model") or {}).get("name"),
            "version": (meta.get("model") or {}).get("version"), "build_key": meta.get("build_key"),
            "digest": (meta.get("engine") or {}).get("digest"), "published_at": meta.get("published_at")}


class _Hashes:
    """Each blob's actual digest, computed once: None when it is missing, "unreadable: why" when it cannot be read
    (``verify``: hash; else only whether it is there)."""

    def __init__(self, store: LocalStore, verify: bool) -> None:
        self.store, self.verify = store, verify
        self.seen: dict[str, str | None] = {}

    def __call__(self, digest: str) -> str | None:
        if digest not in self.seen:
            path = self.store.blob_path(digest)
            if not path.is_file():
                self.seen[digest] = None
            elif not self.verify:
                self.seen[digest] = digest
            else:
                try:
                    self.seen[digest] = hash_file(str(path))[0]
                except OSError as e:
                    self.seen[digest] = f"unreadable: {e.strerror or e}"
        return self.seen[digest]


def _blob_damage(store: LocalStore, meta: dict, actual: _Hashes) -> DamagedRecord | None:
    key, known = record_id(meta), _known(meta)
    engine = str(meta["engine"]["digest"])
    got = actual(engine)
    if got is None:
        return store._damaged_record(key, "engine-missing", f"its engine blob {engine} is missing from "
                                     f"{store.blobs}", known, blob=engine)
    if got != engine:
        return store._damaged_record(key, "engine-corrupt", f"its engine blob {engine} hashes to {got}", known,
                                     blob=engine)
    for a in meta.get("attachments") or ():
        digest, name = str(a.get("digest")), str(a.get("name"))
        got = actual(digest)
        if got is None:
            return store._damaged_record(key, "attachment-missing", f"its attachment {name!r} (blob {digest}) is "
                                         f"missing from {store.blobs}", known, blob=digest)
        if got != digest:
            return store._damaged_record(key, "attachment-corrupt", f"its attachment {name!r} (blob {digest}) "
                                         f"hashes to {got}", known, blob=digest)
    return None


def check(store: LocalStore, *, verify_blobs: bool) -> list[DamagedRecord]:
    sound, damaged = store.scan()
    actual = _Hashes(store, verify_blobs)
    found = list(damaged)
    for record in sound:
        damage = _blob_damage(store, record.metadata, actual)
        if damage is not None:
            found.append(damage)
    return found


def _still_damaged(store: LocalStore, d: DamagedRecord, index: dict) -> DamagedRecord | None:
    """``d`` as it is now (None: repaired, or its file gone meanwhile)."""
    meta, damage = store._inspect(d.key, index, engine=True)
    if damage is not None:
        return None if damage.problem == "its file is missing" else damage
    if meta is None or d.kind in _RECORD_KINDS:
        return None
    return _blob_damage(store, meta, _Hashes(store, verify=True))


def move_aside(store: LocalStore, d: DamagedRecord) -> Quarantined:
    """Move one damaged record (and its blob, when that is corrupt) into ``quarantine/`` with a note of why.
    The caller holds the store's lock and rewrites the index."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    where = store.quarantine_dir / f"{stamp}-{d.key}-{secrets.token_hex(2)}"
    where.mkdir(parents=True)
    atomic_write_json(where / "reason.json", {**d.to_json(), "moved_at": stamp}, indent=1)
    moves = [(store._meta_path(d.key), where / f"{d.key}.json")]
    if d.kind in ("engine-corrupt", "attachment-corrupt") and d.blob:
        moves.append((store.blob_path(d.blob), where / f"{d.blob.split(':', 1)[1]}.blob"))
    for src, dest in moves:
        try:
            os.rename(src, dest)
        except FileNotFoundError:
            continue  # a shared corrupt blob already moved with another record
        fsync_dir(Path(src).parent)
    fsync_dir(where)
    fsync_dir(store.quarantine_dir)
    return Quarantined(record=d, moved_to=str(where))


def quarantine(store: LocalStore, records: list[DamagedRecord]) -> list[Quarantined]:
    moved: list[Quarantined] = []
    with store._lock():
        index = store._load_index_locked()
        for d in records:
            current = _still_damaged(store, d, index)
            if current is not None:
                moved.append(move_aside(store, current))
        if moved:
            atomic_write_json(store.index_path, store._rebuild(index))
    return moved
