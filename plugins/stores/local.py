"""The ``local`` store: a directory (the embedded default at ``artifacts/``), safe for concurrent publishers.

Layout under ``RegistryConfig.path``::

    blobs/sha256/<hex>       content-addressed engines, build logs, extra files and caches (attachments)
    meta/<record_key>.json   one metadata JSON per record (with its attachments' names, roles and digests)
    index.json               the planner's view, loaded with one json.load (``_local_index``)
    .index.lock              the filelock serializing index updates
    quarantine/              damaged records (and corrupt blobs) moved aside, each with why (``_local_check``)

Identity. A record is one engine (build key) with one set of gate verdicts (gate key), named by its record key
(``metadata["record_key"]``, ``core.keys.record_key``). Records published before record keys have none: their
identity is their build key, which is also the record key of a build key with no gate key, so a store written by
an older client (``meta/<build_key>.json``, an index keyed by build keys) reads as it is, with nothing rewritten.
A re-gated engine (same build key, other gate settings) is a second record with the same engine digest.

Publishing writes the blobs first (temp file in the same dir, fsync, rename), then takes the lock, writes the
metadata file and the index last: their temp files are fsync'd together with the blobs' directory (so every blob
name is durable before anything names it), then the metadata file is renamed (and its directory fsync'd), then the
index. A crash leaves at worst an unreferenced blob, never an index entry pointing at a missing or partial file.
``index.json`` is derived from ``meta/``: every read checks that the two name the same record keys and repairs the
index from the records when they do not (a crash between writing a record and the index must not hide the artifact
for good); ``rebuild_index()`` recreates it outright.

Each index record holds the sha256 of its metadata file as written; reading a record checks it, so metadata
edited after publishing (say, another engine's digest) is never served as a wrong engine.

Damage stays with its record. A record that is not JSON, not an object, fails the artifact-v1 schema, names
another record key than its file's (or a record key that is not its build key's and gate key's), changed since it
was published, or whose engine blob is gone is *damaged*: ``records()`` leaves it out and ``damaged()`` lists it
(a ``DamagedRecord`` naming its file and what is wrong), the index marks its address (``IndexEntry.damage``) so
the plan asks for it again, and every other record reads as before. Only ``get`` of that very engine, when no
sound record of it is left, is an ``IntegrityError`` naming the file, with the fix. ``check()`` also hashes every
blob; ``quarantine()`` moves damaged records aside; a publish of a damaged record's key moves it aside and writes
it anew. An ``index.json`` that is not JSON or not the index's shape is rebuilt from the records (keeping the
record digests it still holds), and written back when the store is writable (a read-only store is read through the
repaired copy in memory). Only ``meta/<64 hex>.json`` files are records.

Where it is. ``index()`` and ``records()`` read a missing directory as an empty store (a first plan before any
publish is normal; the index's ``note`` says so), ``put`` creates it, and readers that need a store (``ls``,
``show``, ``pull``, ``retention``) call ``require_existing()``: a ``StoreError`` naming the path.

Temp files. A publish killed mid-copy leaves ``blobs/sha256/.incoming.<pid>.<host>.<random>.tmp``; every publish
and read removes the temp files of dead writers on this host and any untouched for ``stale_temp_s`` (an hour)
(``_atomic.remove_stale_temps``). Writing onto a full, read-only or forbidden filesystem (``get``, a blob on
``put``) is a ``StoreError`` naming the destination; no partial or temp file stays behind.

Attachments. ``ArtifactFiles.attachments`` (calibration and timing caches) are stored as blobs like the log and
the extra files, listed in ``meta["attachments"]`` with their role and name; ``get_attachment(record, name,
dest)`` writes one back, sha256-verified, atomically. A re-gated record that names caches it was not handed takes
the entries of an earlier record of its build key (``_records.inherited``).

Immutability: a record (one record key) is written once, never modified or overwritten (a damaged one is moved
aside); re-publishing a record key returns the stored record. An (address, model version) may hold several build
keys over time and a build key several gate keys, each its own record. ``latest`` per address is its newest
publish; a model's ``latest`` version is the one most recently published *for the first time*. ``delete``
(retention only) removes every record of the engines it is given, then every blob no record references.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from orchestrator.contracts.store import (
    CACHE_ROLES,
    ArtifactFiles,
    DamagedRecord,
    Quarantined,
    StoredArtifact,
)
from orchestrator.core.model import RegistryConfig
from orchestrator.errors import ArtifactNotFoundError, IntegrityError, StoreError
from orchestrator.metadata import utc_now, validate_metadata
from trt_orchestrator_plugins.stores import _local_check
from trt_orchestrator_plugins.stores._atomic import (
    STALE_TEMP_S,
    DestinationError,
    atomic_write_json,
    commit,
    remove_stale_temps,
    stage_copy,
    store_json,
    write_error,
    write_files_atomic,
)
from trt_orchestrator_plugins.stores._local_index import (
    HEX,
    RECORD_NAME,
    LocalIndex,
    add_to_index,
    damaged_entry,
    empty_index,
    indexed_keys,
    parse_index,
    salvage,
    sha256_of,
)
from trt_orchestrator_plugins.stores._records import (
    cache_mismatch,
    cache_names,
    check_attachments,
    check_record_key,
    expected_cache_digests,
    find_attachment,
    inherited,
    normalize_digest,
    record_id,
    record_problem,
)

LOCK_TIMEOUT_S = 300.0
REPAIR_HINT = ("restore it from a backup, or publish that artifact again (`orchestrate publish` moves the damaged "
               "record aside); `orchestrate store check --quarantine` moves every damaged record aside")

class LocalStore:
    name = "local"

    def __init__(self, config: RegistryConfig) -> None:
        if not config.path:
            raise StoreError("the local store needs registry.path (an absolute directory)",
                             hint="set registry: {store: local, path: artifacts} in the manifest")
        self.root = Path(config.path)
        if not self.root.is_absolute():
            raise StoreError(f"local store path must be absolute, got {config.path!r}",
                             hint="the manifest loader resolves it relative to the manifest file")
        self.blobs = self.root / "blobs" / "sha256"
        self.meta_dir = self.root / "meta"
        self.index_path = self.root / "index.json"
        self.lock_path = self.root / ".index.lock"
        self.quarantine_dir = self.root / "quarantine"
        self.stale_temp_s = STALE_TEMP_S

    # ---- paths -------------------------------------------------------------------------------------------
    def blob_path(self, digest: str) -> Path:
        return self.blobs / normalize_digest(digest).split(":", 1)[1]

    def _meta_path(self, key: str) -> Path:
        """The record file of a record key (of a build key, for records from before record keys)."""
        if not HEX.match(key):
            raise StoreError(f"a record key must be 64 lowercase hex digits, got {key!r}",
                             hint="record keys come from orchestrator.core.keys.record_key")
        return self.meta_dir / f"{key}.json"

    def require_existing(self) -> None:
        """A ``StoreError`` naming the path when it is not a directory (a reader needs a store to read)."""
        if self.root.is_dir():
            return
        if self.root.exists():
            raise StoreError(f"the local store path {self.root} is not a directory",
                             hint="point --registry (or the manifest's registry.path) at the store's directory")
        raise StoreError(f"the local store {self.root} does not exist",
                         hint="check --registry (or the manifest's registry.path) for a typo; `orchestrate "
                              "publish` creates the store with its first artifact")

    def _sweep(self) -> None:  # temp files killed writers left (see the module docstring); creates nothing
        for directory in (self.blobs, self.meta_dir, self.root):
            remove_stale_temps(directory, max_age_s=self.stale_temp_s)

    def _lock(self):
        from filelock import FileLock

        self.root.mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.lock_path), timeout=LOCK_TIMEOUT_S)

    # ---- publish -----------------------------------------------------------------------------------------
    def _store_blob(self, src: Path, expected: str | None, what: str,
                    mismatch: Callable[[str], IntegrityError] | None = None) -> tuple[str, int]:
        """Copy ``src`` into blobs/ in one pass (read, written and hashed from one buffer), fsync'd, renamed to its
        content address. A copy whose digest is not ``expected`` is dropped: ``mismatch(actual)`` (else an engine's
        error) says so."""
        try:
            tmp, hexdigest, size = stage_copy(src, self.blobs)
        except DestinationError as e:
            raise write_error(f"a blob of {what}", e) from None
        except OSError as e:
            raise StoreError(f"{what}: cannot read {src}: {e.strerror or e}",
                             hint="check that the built file still exists and is readable") from None
        digest = f"sha256:{hexdigest}"
        if expected is not None and digest != expected:
            os.unlink(tmp)
            if mismatch is not None:
                raise mismatch(digest)
            raise IntegrityError(
                f"{what}: file {src} has {digest} but its metadata says {expected}",
                hint="the engine changed after its metadata was built; rebuild the metadata from this file")
        # content-addressed: an existing blob of that name has the same bytes (verified on every read); blobs/ is
        # fsync'd once for all of a record's blobs, before the record is renamed into place (_put)
        try:
            commit(tmp, self.blobs / hexdigest, overwrite=False, sync_dir=False)
        except DestinationError as e:
            raise write_error(f"a blob of {what}", e) from None
        return digest, size

    def put(self, files: ArtifactFiles) -> StoredArtifact:
        meta = json.loads(json.dumps(files.metadata))  # our own copy, proven JSON
        meta.pop("published_at", None)
        meta.pop("attachments", None)
        validate_metadata(meta)
        check_record_key(meta)
        check_attachments(files)
        try:
            return self._put(files, meta)
        except DestinationError as e:
            raise write_error(f"the record or index of {meta['address']}", e) from None
        except OSError as e:
            if isinstance(e, TimeoutError):  # filelock's Timeout: another publisher holds the lock too long
                raise StoreError(f"{meta['address']}: the lock {self.lock_path} was held for over "
                                 f"{LOCK_TIMEOUT_S:g} s", hint="another publisher is stuck; retry later") from None
            raise StoreError(f"{meta['address']}: cannot publish to {self.root}: {e.strerror or e}"
                             + (f" ({e.filename})" if e.filename else ""),
                             hint="check that the store directory is writable and has free space") from None

    def _put(self, files: ArtifactFiles, meta: dict) -> StoredArtifact:
        self._sweep()
        key = record_id(meta)
        meta_path = self._meta_path(key)
        if meta_path.exists():  # idempotent fast path: no blob written for an already-published record key
            found, damage = self._inspect(key, self.index().data, engine=True)
            if damage is None and found is not None:
                return self._stored(found)
            # damaged (its engine gone included): published again below, the damaged record moved aside

        # Blobs before the lock (slow, parallel across publishers); the index is written last.
        address = meta["address"]
        sources: dict[str, Path] = {}  # digest -> a file with those bytes (to store it again, see below)
        self._store_blob(Path(files.engine), meta["engine"]["digest"], address)
        sources[meta["engine"]["digest"]] = Path(files.engine)
        expected = expected_cache_digests(meta)
        attachments: list[dict[str, Any]] = []
        named = ([(Path(files.log), "log", Path(files.log).name)] if files.log is not None else []) \
            + [(Path(p), "extra", Path(p).name) for p in files.extra] \
            + [(Path(a.path), a.role, a.name) for a in files.attachments]
        for path, role, name in named:
            want = expected.get(name) if role in CACHE_ROLES else None
            d, size = self._store_blob(path, want[0] if want else None, address,
                                       functools.partial(cache_mismatch, meta, path, want=want) if want else None)
            sources[d] = path
            attachments.append({"name": name, "role": role, "digest": d, "size": size})
        attachments += self._inherited(meta, attachments)

        with self._lock():
            index = self._load_index_locked()
            if meta_path.exists():  # another publisher won the race for this record key, or it is damaged
                found, damage = self._inspect(key, index, engine=True)
                if damage is None and found is not None:
                    return self._stored(found)
                if damage is not None:
                    _local_check.move_aside(self, damage)
            # a retention run may have removed a blob this publish found already stored (and so did not copy):
            # store it again, or drop an inherited cache whose every record went meanwhile
            for d, path in sources.items():
                if not self.blob_path(d).is_file():
                    self._store_blob(path, d, address)
            attachments = [a for a in attachments
                           if a["digest"] in sources or self.blob_path(str(a["digest"])).is_file()]
            meta["published_at"] = utc_now()
            if attachments:
                meta["attachments"] = attachments
            raw = store_json(meta, indent=1)
            add_to_index(index, meta, sha256_of(raw))
            # every blob name durable (one fsync of blobs/, with the two temp files), then the record, then the index
            write_files_atomic([(meta_path, raw), (self.index_path, store_json(index))], sync_first=[self.blobs])
        return self._stored(meta)

    def _inherited(self, meta: dict, have: list[dict]) -> list[dict]:
        """Cache entries ``meta["caches"]`` names that this publish does not carry, from the newest other sound
        record of the same build key (a re-gated engine: its caches are in the store already)."""
        names = {a["name"] for a in have}
        if all(n in names for n in cache_names(meta)):
            return []
        index = self.index().data
        bk = meta["build_key"]
        siblings = sorted(((rec["seq"], k) for k, rec in index["artifacts"].items()
                           if rec.get("build_key", k) == bk and k != record_id(meta)), reverse=True)
        sound = (self._inspect(k, index)[0] for _, k in siblings)
        return inherited(meta, have, ((m.get("attachments") or []) for m in sound if m is not None))

    # ---- read --------------------------------------------------------------------------------------------
    def _load_record(self, path: Path, key: str, *, full: bool) -> tuple[bytes, dict | None, str | None]:
        """(bytes, parsed record or None, what is wrong with it or None)."""
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            raise ArtifactNotFoundError(f"no record with record key {key} in {self.root}",
                                        hint="`orchestrate ls` lists what is published") from None
        except OSError as e:
            raise StoreError(f"cannot read the record {path}: {e.strerror or e}",
                             hint="check the store directory's permissions and disk") from None
        try:  # decoded as UTF-8 first: json.loads would guess UTF-16 from a leading NUL and say something odd
            meta = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            return raw, None, f"not JSON: not UTF-8 text (byte {e.start})"
        except ValueError as e:
            reason = "it is empty" if not raw.strip() else f"not JSON: {str(e).splitlines()[0]}"
            return raw, None, reason
        return raw, meta, record_problem(meta, key, full=full)

    def _judge(self, key: str, recorded: str | None) -> tuple[bytes | None, dict | None, tuple[str, str] | None]:
        """(bytes, record, None) for a sound record file, else (bytes or None, None, (kind, problem)). Its bytes
        must hash to ``recorded`` (the digest the index holds) when there is one, else pass the whole schema."""
        path = self._meta_path(key)
        try:
            raw, meta, problem = self._load_record(path, key, full=recorded is None)
        except ArtifactNotFoundError:
            return None, None, ("unreadable", "its file is missing")
        except StoreError as e:
            return None, None, ("unreadable", e.message.split(": ", 1)[-1])
        changed = None
        if recorded is not None and sha256_of(raw) != recorded:
            changed = f"changed after it was published (now {sha256_of(raw)[:19]}, published as {recorded[:19]})"
        if problem is not None or meta is None:
            return raw, None, ("unreadable" if meta is None else "invalid",
                               (problem or "unreadable") + (f"; it {changed}" if changed else ""))
        if changed:
            return raw, None, ("changed", changed)
        return raw, meta, None

    def _damaged_record(self, key: str, kind: str, problem: str, known: dict | None, blob: str = "") -> DamagedRecord:
        k = known or {}
        return DamagedRecord(key=key, location=str(self._meta_path(key)), kind=kind,  # type: ignore[arg-type]
                             problem=problem, address=str(k.get("address") or ""), model=str(k.get("model") or ""),
                             version=str(k.get("version") or ""), build_key=str(k.get("build_key") or ""),
                             digest=str(k.get("digest") or ""), published_at=str(k.get("published_at") or ""),
                             blob=blob)

    def _inspect(self, key: str, index: dict, *, engine: bool = False) -> tuple[dict | None, DamagedRecord | None]:
        """The record of record key ``key`` (checked against the digest the index holds for it; ``engine``: and
        its engine blob there), or what is wrong with it. Reads judge the metadata only: a missing engine is
        found where it is needed (``get``), by the plan and by ``check``."""
        known = index["artifacts"].get(key) or index["damaged"].get(key)
        _, meta, problem = self._judge(key, (known or {}).get("meta_digest"))
        if problem is not None or meta is None:
            kind, text = problem or ("unreadable", "unreadable")
            return None, self._damaged_record(key, kind, text, known)
        digest = str(meta["engine"]["digest"])
        if engine and not self.blob_path(digest).is_file():
            return None, self._damaged_record(key, "engine-missing", f"its engine blob {digest} is missing from "
                                              f"{self.blobs}", {**(known or {}), "digest": digest}, blob=digest)
        return meta, None

    def _verify(self, key: str, recorded: str | None, engine: str) -> tuple[str, str] | None:
        """For ``LocalIndex``: what is wrong with the newest record of an address (None: sound)."""
        _, meta, problem = self._judge(key, recorded)
        if problem is not None:
            return problem
        if not self.blob_path(engine).is_file():
            return "engine-missing", f"its engine blob {engine} is missing from {self.blobs}"
        return None

    def damage_error(self, d: DamagedRecord) -> IntegrityError:
        """The error a read of damaged record ``d`` raises (when no sound record can stand in for it)."""
        if d.kind == "engine-missing":
            return IntegrityError(f"{d.address or d.location}: engine blob {d.blob} is missing from {self.blobs}",
                                  hint="the store was damaged; republish this artifact")
        if d.kind == "changed":
            return IntegrityError(f"the record {d.location} {d.problem}",
                                  hint=f"never edit a published record; {REPAIR_HINT}")
        return IntegrityError(f"the record {d.location} is damaged ({d.problem})", hint=REPAIR_HINT)

    def _read_meta(self, key: str, index: dict) -> dict:
        """The record of record key ``key``, or the ``IntegrityError`` saying what is wrong with it."""
        meta, damage = self._inspect(key, index)
        if damage is not None or meta is None:
            raise self.damage_error(damage) if damage is not None else ArtifactNotFoundError(key)
        return meta

    def _stored(self, meta: dict) -> StoredArtifact:
        return StoredArtifact(digest=meta["engine"]["digest"], metadata=meta,
                              location=str(self.blob_path(meta["engine"]["digest"])))

    def _read_index_bytes(self) -> bytes | None:
        try:
            return self.index_path.read_bytes()
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            return b""  # damaged beyond use: rebuilt (and reported if it cannot be replaced)
        except OSError as e:
            raise StoreError(f"cannot read the index {self.index_path}: {e.strerror or e}",
                             hint="check the store directory's permissions and disk") from None

    def _consistent(self, index: dict) -> bool:
        """The index names the records on disk, and every record it holds as damaged is still the bytes it saw
        (one restored from a backup is indexed again)."""
        if indexed_keys(index) != self._recorded_keys():
            return False
        for key, d in index["damaged"].items():
            try:
                raw = self._meta_path(key).read_bytes()
            except OSError:
                raw = None
            if (sha256_of(raw) if raw is not None else None) != d.get("seen_digest"):
                return False
        return True

    def _load_index_locked(self) -> dict:
        raw = self._read_index_bytes()
        if raw is None:
            return self._rebuild() if self.meta_dir.is_dir() else empty_index()
        index = parse_index(raw)
        if index is None:  # damaged: rebuilt from the records, keeping the record digests it still holds
            return self._rebuild(salvage(raw))
        if not self._consistent(index):
            index = self._rebuild(index)
        return index

    def _recorded_keys(self) -> set[str]:
        try:
            return {name[:-5] for name in os.listdir(self.meta_dir) if RECORD_NAME.match(name)}
        except FileNotFoundError:
            return set()
        except OSError as e:
            raise StoreError(f"cannot list the records in {self.meta_dir}: {e.strerror or e}",
                             hint="check the store directory's permissions and disk") from None

    def index(self) -> LocalIndex:
        """The index as written, or repaired from the records when the two disagree or it is damaged (then
        written back; a store we may not write is read through the repaired copy). A directory that does not
        exist is an empty index whose ``note`` says so."""
        if not self.root.exists():
            return LocalIndex(None, note=f"the local store {self.root} does not exist yet: it is created by the "
                                         "first `orchestrate publish`", witness=self._witness)
        if not self.root.is_dir():
            self.require_existing()
        raw = self._read_index_bytes()
        if raw is None and not self.meta_dir.is_dir():
            # no record yet: reading never creates anything
            return LocalIndex(None, verify=self._verify, witness=self._witness)
        current = parse_index(raw)
        if current is not None and self._consistent(current):
            return LocalIndex(raw, current, verify=self._verify, witness=self._witness)
        try:
            with self._lock():
                index = self._load_index_locked()
                raw = atomic_write_json(self.index_path, index)
        except (OSError, DestinationError):  # read-only store, or the lock cannot be taken: repair in memory
            index = self._rebuild(current if current is not None else salvage(raw))
            raw = json.dumps(index, sort_keys=True, separators=(",", ":")).encode() + b"\n"
        return LocalIndex(raw, index, verify=self._verify, witness=self._witness)

    def _witness(self, index: dict) -> tuple[str, ...]:
        """What ``index()`` read (``contracts.store.StateWitness``): the store folder, its index, the records'
        folder (records added or removed), each address's newest record and engine (``_verify`` reads them),
        each damaged record (``_consistent`` reads it). Temp files and the lock are not state."""
        paths = [self.root, self.index_path, self.meta_dir, self.blobs]
        try:
            for entry in index.get("latest", {}).values():
                paths.append(self._meta_path(entry.get("record_key") or entry["build_key"]))
                paths.append(self.blob_path(entry["digest"]))
            paths.extend(self._meta_path(key) for key in index.get("damaged", {}))
        except (KeyError, TypeError, ValueError, StoreError):
            return ()  # an entry this cannot name a file of: witness nothing (every plan reads the store)
        return tuple(str(p) for p in paths)

    def get(self, digest: str, dest: Path) -> StoredArtifact:
        """The engine of the newest sound record with this engine digest (a re-gated engine has several)."""
        digest = normalize_digest(digest)
        self._sweep()
        index = self.index().data
        matches = sorted(((rec["seq"], key) for key, rec in index["artifacts"].items() if rec["digest"] == digest),
                         reverse=True)
        if not matches:
            for key, d in index["damaged"].items():  # known only as damaged: say so, not "no such artifact"
                if d.get("digest") == digest:
                    raise self.damage_error(self._damaged_record(key, d["kind"], d["problem"], d))
            raise ArtifactNotFoundError(f"no artifact with engine digest {digest} in {self.root}",
                                        hint="`orchestrate plan` lists what is published")
        first: DamagedRecord | None = None
        for _, key in matches:
            meta, damage = self._inspect(key, index)
            if meta is not None:
                self._copy_verified(digest, Path(dest), meta["address"])
                return self._stored(meta)
            first = first or damage
        assert first is not None
        raise self.damage_error(first)

    def get_attachment(self, record: StoredArtifact, name: str, dest: Path) -> Path:
        """Write the attachment ``name`` of ``record`` (a calibration or timing cache, a log) to ``dest``
        atomically, its sha256 checked against the record as stored here."""
        self._sweep()
        index = self.index().data
        key = record_id(record.metadata)
        if key not in index["artifacts"]:
            raise ArtifactNotFoundError(f"{record.metadata.get('address')}: no record with record key {key} in "
                                        f"{self.root} (deleted since it was read?)",
                                        hint="`orchestrate ls` lists what is published")
        meta = self._read_meta(key, index)
        entry = find_attachment(meta, name, str(self.root))
        dest = Path(dest)
        self._copy_verified(normalize_digest(str(entry["digest"])), dest, meta["address"],
                            f"{entry.get('role', 'attachment')} {name}")
        return dest

    def _copy_verified(self, digest: str, dest: Path, address: str, what: str = "engine") -> None:
        """Copy the blob to a temp file next to ``dest``, hash the copy; rename only if the digest matches."""
        src = self.blob_path(digest)
        if not src.is_file():
            raise IntegrityError(f"{address}: {what} blob {digest} is missing from {self.blobs}",
                                 hint="the store was damaged; republish this artifact")
        try:
            tmp, hexdigest, _ = stage_copy(src, dest.parent, dest)
        except DestinationError as e:
            raise write_error(f"the {what} of {address}", e) from None
        except OSError as e:
            raise StoreError(f"{address}: cannot read the {what} blob {src}: {e.strerror or e}",
                             hint="the store's disk or permissions failed; check them, or republish") from None
        actual = f"sha256:{hexdigest}"
        if actual != digest:
            os.unlink(tmp)
            raise IntegrityError(
                f"{address}: {what} {digest} failed its integrity check (stored bytes hash to {actual}); "
                f"{dest} was not written",
                hint=f"the blob {src} is corrupt; `orchestrate store check --quarantine` moves its records aside, "
                     "then republish them")
        try:
            commit(tmp, dest)
        except DestinationError as e:
            raise write_error(f"the {what} of {address}", e) from None

    def scan(self, model: str | None = None) -> tuple[list[StoredArtifact], list[DamagedRecord]]:
        """(sound records newest first, damaged records), of ``model`` only when given."""
        self._sweep()
        index = self.index().data
        hits = sorted(((rec["seq"], key) for key, rec in index["artifacts"].items()
                       if model is None or rec["model"] == model), reverse=True)
        sound: list[StoredArtifact] = []
        damaged: list[DamagedRecord] = []
        for _, key in hits:
            meta, damage = self._inspect(key, index)
            if meta is not None:
                sound.append(self._stored(meta))
            elif damage is not None:
                damaged.append(damage)
        for key, d in sorted(index["damaged"].items()):
            if model is None or d.get("model") == model:
                damaged.append(self._damaged_record(key, d["kind"], d["problem"], d))
        return sound, damaged

    def records(self, model: str | None = None) -> list[StoredArtifact]:
        """Newest first (publish order); only ``model``'s when given; damaged records left out (``damaged``)."""
        return self.scan(model)[0]

    def damaged(self, model: str | None = None) -> list[DamagedRecord]:
        """The records ``records(model)`` leaves out, each with its file and what is wrong with it."""
        return self.scan(model)[1]

    def check(self, *, verify_blobs: bool = True) -> list[DamagedRecord]:
        """Every damaged record: ``damaged()``, plus attachments missing and (``verify_blobs``) blobs whose bytes
        no longer hash to their name."""
        self.require_existing()
        return _local_check.check(self, verify_blobs=verify_blobs)

    def quarantine(self, records: Iterable[DamagedRecord]) -> list[Quarantined]:
        """Move these records (and corrupt blobs) into ``quarantine/``, each with a note of why; re-checked first,
        so a record repaired meanwhile stays. The index is rebuilt from what remains."""
        self.require_existing()
        return _local_check.quarantine(self, list(records))

    # ---- maintenance -------------------------------------------------------------------------------------
    def _rebuild(self, previous: dict | None = None) -> dict:
        """The index from meta/ (the source of truth). Digests the previous index recorded are kept, so a
        record edited after publishing is still found changed; records it never listed are taken as found.
        Records that cannot be indexed are kept under ``damaged`` with what the previous index knew of them."""
        known = (previous or {}).get("artifacts", {})
        known_damaged = (previous or {}).get("damaged") or {}
        metas = []
        damaged: dict[str, dict] = {}
        for key in sorted(self._recorded_keys()):
            prev = known.get(key) or known_damaged.get(key)
            recorded = (prev or {}).get("meta_digest")
            raw, meta, problem = self._judge(key, recorded)
            if problem is not None and problem[1] == "its file is missing":
                continue  # removed meanwhile
            if problem is not None or meta is None:
                kind, text = problem or ("unreadable", "unreadable")
                damaged[key] = {**damaged_entry(kind, text, recorded, prev),
                                "seen_digest": sha256_of(raw) if raw is not None else None}
                continue
            metas.append((meta, recorded or sha256_of(raw or b"")))
        index = empty_index()
        for meta, meta_digest in sorted(metas, key=lambda m: (str(m[0].get("published_at", "")), record_id(m[0]))):
            add_to_index(index, meta, meta_digest)
        index["damaged"] = damaged
        return index

    def rebuild_index(self) -> None:
        """Recreate index.json from meta/ (the source of truth), e.g. after it was lost."""
        with self._lock():
            raw = self._read_index_bytes()
            previous = parse_index(raw) or salvage(raw)
            atomic_write_json(self.index_path, self._rebuild(previous))

    def delete(self, digests: Iterable[str]) -> int:
        """Remove every record whose engine has one of ``digests`` (a re-gated engine has several; only via the
        retention command).

        Metadata and index go first, then the blobs (engines, logs, caches) no remaining record references.
        Returns the records removed.
        """
        wanted = {normalize_digest(d) for d in digests}
        with self._lock():
            index = self._load_index_locked()
            doomed = [bk for bk, rec in index["artifacts"].items() if rec["digest"] in wanted]
            if not doomed:
                return 0
            for bk in doomed:
                self._meta_path(bk).unlink(missing_ok=True)
            freed = {d for bk in doomed for d in index["artifacts"][bk]["blobs"]}
            index = self._rebuild(index)  # recomputes latest per address and per model from what remains
            atomic_write_json(self.index_path, index)
            still = {d for rec in index["artifacts"].values() for d in rec["blobs"]}
            still |= {str(d["digest"]) for d in index["damaged"].values() if d.get("digest")}  # may be restored
            for d in freed - still:
                self.blob_path(d).unlink(missing_ok=True)
        return len(doomed)
