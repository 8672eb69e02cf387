"""The ``local`` store: a directory (the embedded default at ``artifacts/``), safe for concurrent publishers.

Layout under ``RegistryConfig.path``::

    blobs/sha256/<hex>       content-addressed engines, build logs, extra files and caches (attachments)
    meta/<record_key>.json   one metadata JSON per record (with its attachments' names, roles and digests)
    index.json               the planner's view, loaded with one json.load (see _empty_index for its shape)
    .index.lock              the filelock serializing index updates

Identity. A record is one engine (build key) with one set of gate verdicts (gate key), named by its record key
(``metadata["record_key"]``, ``core.keys.record_key``). Records published before record keys have none: their
identity is their build key, which is also the record key of a build key with no gate key, so a store written by
an older client (``meta/<build_key>.json``, an index keyed by build keys) reads as it is, with nothing rewritten.
A re-gated engine (same build key, other gate settings) is a second record with the same engine digest.

Publishing writes the blobs first (temp file in the same dir, fsync, rename, fsync dir), then takes the lock,
writes the metadata file and the index last. A crash leaves at worst an unreferenced blob, never an index entry
pointing at a missing or partial file. ``index.json`` is derived from ``meta/``: every read checks that the two
name the same record keys and repairs the index from the records when they do not (a crash between writing a
record and the index must not hide the artifact for good); ``rebuild_index()`` recreates it outright.

Each index record holds the sha256 of its metadata file as written; reading a record checks it, so metadata
edited after publishing (say, another engine's digest) is an ``IntegrityError``, never a wrong engine.

Damage. An ``index.json`` that is not JSON or not the index's shape is rebuilt from the records (keeping the record
digests it still holds), and written back when the store is writable (a read-only store is read through the
repaired copy in memory). A record that is not JSON, not an object, fails the artifact-v1 schema, names another
record key than its file's, or a record key that is not its build key's and gate key's, is an ``IntegrityError``
naming its file, with the fix (restore it, or remove it and publish again): never a traceback, never a silently
missing artifact. Only ``meta/<64 hex>.json`` files are records.

Temp files. A publish killed mid-copy leaves ``blobs/sha256/.incoming.<pid>.<host>.<random>.tmp``; every publish
and read removes the temp files of dead writers on this host and any temp file untouched for
``stale_temp_s`` (an hour) in ``blobs/sha256``, ``meta/`` and the root (``_atomic.remove_stale_temps``).
Writing the engine (or an attachment) on ``get`` (``get_attachment``), or a blob on ``put``, onto a full,
read-only or forbidden filesystem is a ``StoreError`` naming the destination; no partial or temp file stays behind.

Attachments. ``ArtifactFiles.attachments`` (calibration and timing caches) are stored as blobs like the log and
the extra files, listed in ``meta["attachments"]`` with their role and name; ``get_attachment(record, name,
dest)`` writes one back, sha256-verified, atomically. A re-gated record that names caches it was not handed takes
the entries of an earlier record of its build key (``_records.inherited``).

Immutability: a record (one record key) is written once and never modified or overwritten; re-publishing the same
record key returns the stored record unchanged. One (address, model version) pair may hold several build keys
over time (a newer builder patch, a changed option, a salt) and one build key several gate keys, each its own
immutable record. ``latest`` per address is the newest publish for it; a model's ``latest`` version alias is the
version most recently published *for the first time*, so rebuilding an older version does not move it back.
``delete`` (retention only) removes every record of the engines it is given, then every blob no remaining record
references (caches included).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from orchestrator.contracts.store import CACHE_ROLES, ArtifactFiles, IndexEntry, StoredArtifact
from orchestrator.core.model import RegistryConfig
from orchestrator.errors import ArtifactNotFoundError, IntegrityError, StoreError
from orchestrator.metadata import index_entry, utc_now, validate_metadata
from trt_orchestrator_plugins.stores._atomic import (
    STALE_TEMP_S,
    DestinationError,
    atomic_write_json,
    commit,
    remove_stale_temps,
    stage_copy,
    write_error,
)
from trt_orchestrator_plugins.stores._records import (
    cache_mismatch,
    cache_names,
    check_attachments,
    check_record_key,
    expected_cache_digests,
    find_attachment,
    gate_key_of,
    inherited,
    record_id,
    record_key_problem,
)

INDEX_FORMAT = 1
LOCK_TIMEOUT_S = 300.0
_HEX = re.compile(r"^[0-9a-f]{64}$")
_RECORD_NAME = re.compile(r"^[0-9a-f]{64}\.json$")


def normalize_digest(digest: str) -> str:
    text = digest.strip().lower()
    if _HEX.match(text):
        text = "sha256:" + text
    algo, _, hexpart = text.partition(":")
    if algo != "sha256" or not _HEX.match(hexpart):
        raise StoreError(f"not a sha256 digest: {digest!r}", hint="digests look like sha256:<64 hex digits>")
    return text


def _sha256(raw: bytes) -> str:
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def _empty_index() -> dict:
    return {
        "format_version": INDEX_FORMAT,
        "seq": 0,
        # record key -> small record (no key_inputs: those live in meta/ and in "latest"). An index written before
        # record keys is keyed by build keys: the same thing for those records (see the module docstring).
        "artifacts": {},
        # address -> the newest publish for it, with everything IndexEntry needs (key_inputs, gate key included)
        "latest": {},
        # model -> {"latest": version, "versions": {version: {"first_seq": n, "build_keys": [...]}}}; the list
        # holds record keys (its name is the format's from before record keys: for those records the two are one)
        "models": {},
    }


def _record(meta: dict, seq: int, meta_digest: str | None) -> dict:
    return {
        "meta_digest": meta_digest,
        "build_key": meta["build_key"],
        "gate_key": gate_key_of(meta),
        "address": meta["address"],
        "model": meta["model"]["name"],
        "version": meta["model"]["version"],
        "digest": meta["engine"]["digest"],
        "size": meta["engine"]["size"],
        "published_at": meta["published_at"],
        "seq": seq,
        "precision": meta["precision"],
        "profile_set": meta["profile_set"],
        "target": meta["target"]["name"],
        "builder": meta["builder"]["name"],
        "builder_version": meta["builder"]["version"],
        "gate_status": meta["gates"]["status"],
        "blobs": sorted({meta["engine"]["digest"]} | {a["digest"] for a in meta.get("attachments", ())}),
    }


def _latest_entry(meta: dict, seq: int) -> dict:
    e = index_entry(meta)
    return {"address": e.address, "build_key": e.build_key, "key_inputs": e.key_inputs, "model": e.model,
            "version": e.version, "digest": e.digest, "published_at": e.published_at, "seq": seq,
            "record_key": record_id(meta), "gate_key": e.gate_key, "gate_inputs": e.gate_inputs}


def _add_to_index(index: dict, meta: dict, meta_digest: str | None) -> None:
    index["seq"] += 1
    seq = index["seq"]
    bk = record_id(meta)
    index["artifacts"][bk] = _record(meta, seq, meta_digest)
    index["latest"][meta["address"]] = _latest_entry(meta, seq)
    model = index["models"].setdefault(meta["model"]["name"], {"latest": None, "versions": {}})
    version = meta["model"]["version"]
    if version not in model["versions"]:
        model["versions"][version] = {"first_seq": seq, "build_keys": []}
        model["latest"] = version
    model["versions"][version]["build_keys"].append(bk)


def _is(value: object, kind: type | tuple[type, ...]) -> bool:
    return isinstance(value, kind) and not isinstance(value, bool)


_RECORD_FIELDS = {"address": str, "model": str, "version": str, "digest": str, "seq": int, "blobs": list}
_LATEST_FIELDS = {"address": str, "build_key": str, "key_inputs": dict, "model": str, "version": str,
                  "digest": str, "published_at": str}
# written since record keys; an index from before has none of them (read as: no gate key, identity = build key)
_OPTIONAL_FIELDS = {"build_key": str, "gate_key": str, "record_key": str, "gate_inputs": dict}


def _optional_ok(entry: dict) -> bool:
    return all(_is(entry[k], t) for k, t in _OPTIONAL_FIELDS.items() if k in entry)


def _index_shape_ok(data: object) -> bool:
    """Whether parsed index.json has every field this module reads, with its type (else it is rebuilt)."""
    if not (isinstance(data, dict) and data.get("format_version") == INDEX_FORMAT and _is(data.get("seq"), int)):
        return False
    artifacts, latest, models = data.get("artifacts"), data.get("latest"), data.get("models")
    if not (isinstance(artifacts, dict) and isinstance(latest, dict) and isinstance(models, dict)):
        return False
    for bk, rec in artifacts.items():
        if not (_HEX.match(bk) and isinstance(rec, dict)
                and all(_is(rec.get(k), t) for k, t in _RECORD_FIELDS.items()) and _optional_ok(rec)
                and (rec.get("meta_digest") is None or isinstance(rec.get("meta_digest"), str))):
            return False
    for e in latest.values():
        if not (isinstance(e, dict) and all(_is(e.get(k), t) for k, t in _LATEST_FIELDS.items())
                and _optional_ok(e)):
            return False
    for m in models.values():
        if not (isinstance(m, dict) and isinstance(m.get("versions"), dict)
                and all(isinstance(v, dict) and isinstance(v.get("build_keys"), list) and _is(v.get("first_seq"), int)
                        for v in m["versions"].values())):
            return False
    return True


def _parse_index(raw: bytes | None) -> dict | None:
    """index.json parsed and shape-checked; None when missing or damaged."""
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except ValueError:  # includes UnicodeDecodeError
        return None
    return data if _index_shape_ok(data) else None


def _salvage(raw: bytes | None) -> dict:
    """What a damaged index still says about record digests: {"artifacts": {record key: {"meta_digest": ...}}}."""
    try:
        data = json.loads(raw) if raw else None
    except ValueError:
        data = None
    artifacts = data.get("artifacts") if isinstance(data, dict) else None
    kept = {bk: {"meta_digest": rec["meta_digest"]} for bk, rec in (artifacts or {}).items()
            if isinstance(rec, dict) and isinstance(rec.get("meta_digest"), str)} if isinstance(artifacts, dict) else {}
    return {"artifacts": kept}


def _record_problem(meta: object, key: str, *, full: bool) -> str | None:
    """Why parsed record JSON is not the record ``key`` (its record key; the build key of a record from before
    record keys) (``full``: check the whole schema), or None."""
    if not isinstance(meta, dict):
        return f"holds a JSON {type(meta).__name__}, not a record"
    if "record_key" in meta:
        if meta["record_key"] != key:
            return f"names record key {str(meta['record_key'])[:64]!r}, not its own {key}"
        problem = record_key_problem(meta)
        if problem:
            return problem
    elif meta.get("build_key") != key:
        return f"names build key {str(meta.get('build_key'))[:64]!r}, not its own {key}"
    if full:
        try:
            validate_metadata(meta)
        except StoreError as e:
            first = e.message.splitlines()
            return "fails the artifact-v1 schema: " + (first[1].strip() if len(first) > 1 else first[0])
    return None


class LocalIndex:
    """IndexReader over one snapshot of index.json (bytes read once; the token is their sha256)."""

    def __init__(self, raw: bytes | None, data: dict | None = None) -> None:
        if data is None:
            data = _parse_index(raw) if raw else None
        self._data = data if data is not None else _empty_index()
        self._token = ("sha256:" + hashlib.sha256(raw).hexdigest()) if raw else "empty"

    @property
    def data(self) -> dict:
        return self._data

    def latest_by_address(self) -> dict[str, IndexEntry]:
        """The newest publish per address (several records may share a build key: the newest one wins)."""
        return {addr: IndexEntry(address=e["address"], build_key=e["build_key"], key_inputs=e["key_inputs"],
                                 model=e["model"], version=e["version"], digest=e["digest"],
                                 published_at=e["published_at"], gate_key=e.get("gate_key", ""),
                                 gate_inputs=dict(e.get("gate_inputs") or {}),
                                 record_key=e.get("record_key") or e["build_key"])
                for addr, e in self._data["latest"].items()}

    def state_token(self) -> str:
        return self._token

    def record_digests(self) -> dict[str, str]:
        """Every record key -> its engine digest (``contracts.store.RecordKeyIndex``)."""
        return {key: str(rec["digest"]) for key, rec in self._data["artifacts"].items()}


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
        self.stale_temp_s = STALE_TEMP_S

    # ---- paths -------------------------------------------------------------------------------------------
    def blob_path(self, digest: str) -> Path:
        return self.blobs / normalize_digest(digest).split(":", 1)[1]

    def _meta_path(self, key: str) -> Path:
        """The record file of a record key (of a build key, for records from before record keys)."""
        if not _HEX.match(key):
            raise StoreError(f"a record key must be 64 lowercase hex digits, got {key!r}",
                             hint="record keys come from orchestrator.core.keys.record_key")
        return self.meta_dir / f"{key}.json"

    def _sweep(self) -> None:
        """Remove temp files killed writers left (see the module docstring). Never creates anything."""
        for directory in (self.blobs, self.meta_dir, self.root):
            remove_stale_temps(directory, max_age_s=self.stale_temp_s)

    def _damaged(self, path: Path, problem: str) -> IntegrityError:
        return IntegrityError(
            f"the record {path} is damaged ({problem})",
            hint=f"restore it from a backup, or remove {path} and publish that artifact again "
                 "(`orchestrate publish`); the index is rebuilt from the remaining records")

    def _lock(self):
        from filelock import FileLock

        self.root.mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.lock_path), timeout=LOCK_TIMEOUT_S)

    # ---- publish -----------------------------------------------------------------------------------------
    def _store_blob(self, src: Path, expected: str | None, what: str,
                    mismatch: Callable[[str], IntegrityError] | None = None) -> tuple[str, int]:
        """Copy ``src`` into blobs/ (in-kernel copy, the copy hashed and fsync'd, renamed to its content address).
        A copy whose digest is not ``expected`` is dropped: ``mismatch(actual)`` (else an engine's error) says so."""
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
        # content-addressed: an existing blob of that name has the same bytes (verified on every read)
        try:
            commit(tmp, self.blobs / hexdigest, overwrite=False)
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
            return self._stored(self._read_meta(key, self.index().data))

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
            if meta_path.exists():  # another publisher won the race for this record key
                return self._stored(self._read_meta(key, self._load_index_locked()))
            index = self._load_index_locked()
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
            raw = atomic_write_json(meta_path, meta, indent=1)
            _add_to_index(index, meta, _sha256(raw))
            atomic_write_json(self.index_path, index)
        return self._stored(meta)

    def _inherited(self, meta: dict, have: list[dict]) -> list[dict]:
        """Cache entries ``meta["caches"]`` names that this publish does not carry, from the newest other record
        of the same build key that holds them (a re-gated engine: its caches are in the store already)."""
        names = {a["name"] for a in have}
        if all(n in names for n in cache_names(meta)):
            return []
        index = self.index().data
        bk = meta["build_key"]
        siblings = sorted(((rec["seq"], k) for k, rec in index["artifacts"].items()
                           if rec.get("build_key", k) == bk and k != record_id(meta)), reverse=True)
        return inherited(meta, have, (self._read_meta(k, index).get("attachments") or [] for _, k in siblings))

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
        try:
            meta = json.loads(raw)
        except ValueError as e:  # includes UnicodeDecodeError
            reason = "it is empty" if not raw.strip() else f"not JSON: {str(e).splitlines()[0]}"
            return raw, None, reason
        return raw, meta, _record_problem(meta, key, full=full)

    def _read_meta(self, key: str, index: dict) -> dict:
        """The record of record key ``key``, checked against the digest the index holds for it."""
        path = self._meta_path(key)
        recorded = (index["artifacts"].get(key) or {}).get("meta_digest")
        raw, meta, problem = self._load_record(path, key, full=recorded is None)
        if recorded is not None and _sha256(raw) != recorded:
            if problem is not None or meta is None:
                raise self._damaged(path, problem or "unreadable")
            raise self._changed(path, raw, recorded)
        if problem is not None or meta is None:
            raise self._damaged(path, problem or "unreadable")
        return meta

    def _changed(self, path: Path, raw: bytes, recorded: str, problem: str | None = None) -> IntegrityError:
        return IntegrityError(
            f"the record {path} changed after it was published (now {_sha256(raw)[:19]}, published as "
            f"{recorded[:19]})" + (f" and {problem}" if problem else ""),
            hint=f"never edit a published record; restore it, or remove {path} and publish that artifact again")

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

    def _load_index_locked(self) -> dict:
        raw = self._read_index_bytes()
        if raw is None:
            return self._rebuild() if self.meta_dir.is_dir() else _empty_index()
        index = _parse_index(raw)
        if index is None:  # damaged: rebuilt from the records, keeping the record digests it still holds
            return self._rebuild(_salvage(raw))
        if self._recorded_keys() != set(index["artifacts"]):
            index = self._rebuild(index)
        return index

    def _recorded_keys(self) -> set[str]:
        try:
            return {name[:-5] for name in os.listdir(self.meta_dir) if _RECORD_NAME.match(name)}
        except FileNotFoundError:
            return set()
        except OSError as e:
            raise StoreError(f"cannot list the records in {self.meta_dir}: {e.strerror or e}",
                             hint="check the store directory's permissions and disk") from None

    def index(self) -> LocalIndex:
        """The index as written, or repaired from the records when the two disagree or it is damaged (then
        written back; a store we may not write is read through the repaired copy)."""
        raw = self._read_index_bytes()
        if raw is None and not self.meta_dir.is_dir():
            return LocalIndex(None)  # no store yet: reading never creates one
        current = _parse_index(raw)
        if current is not None and set(current["artifacts"]) == self._recorded_keys():
            return LocalIndex(raw, current)
        try:
            with self._lock():
                index = self._load_index_locked()
                raw = atomic_write_json(self.index_path, index)
        except (OSError, DestinationError):  # read-only store, or the lock cannot be taken: repair in memory
            index = self._rebuild(current if current is not None else _salvage(raw))
            raw = json.dumps(index, sort_keys=True, separators=(",", ":")).encode() + b"\n"
        return LocalIndex(raw, index)

    def get(self, digest: str, dest: Path) -> StoredArtifact:
        digest = normalize_digest(digest)
        self._sweep()
        index = self.index().data
        matches = [(rec["seq"], bk) for bk, rec in index["artifacts"].items() if rec["digest"] == digest]
        if not matches:
            raise ArtifactNotFoundError(f"no artifact with engine digest {digest} in {self.root}",
                                        hint="`orchestrate plan` lists what is published")
        meta = self._read_meta(max(matches)[1], index)
        self._copy_verified(digest, Path(dest), meta["address"])
        return self._stored(meta)

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
                hint=f"the blob {src} is corrupt; delete it with the retention command and republish")
        try:
            commit(tmp, dest)
        except DestinationError as e:
            raise write_error(f"the {what} of {address}", e) from None

    def records(self, model: str | None = None) -> list[StoredArtifact]:
        """Newest first (publish order); only ``model``'s when given."""
        self._sweep()
        index = self.index().data
        hits = sorted(((rec["seq"], bk) for bk, rec in index["artifacts"].items()
                       if model is None or rec["model"] == model), reverse=True)
        return [self._stored(self._read_meta(bk, index)) for _, bk in hits]

    # ---- maintenance -------------------------------------------------------------------------------------
    def _rebuild(self, previous: dict | None = None) -> dict:
        """The index from meta/ (the source of truth). Digests the previous index recorded are kept, so a
        record edited after publishing still fails its check; records it never listed are taken as found."""
        known = (previous or {}).get("artifacts", {})
        metas = []
        for key in sorted(self._recorded_keys()):
            path = self._meta_path(key)
            recorded = (known.get(key) or {}).get("meta_digest")
            try:
                raw, meta, problem = self._load_record(path, key, full=recorded is None)
            except ArtifactNotFoundError:
                continue  # removed meanwhile
            if problem is not None or meta is None:
                raise self._damaged(path, problem or "unreadable")
            if recorded is not None and _sha256(raw) != recorded:
                # edited after publishing: indexed as it is when it can be (its read then fails the digest
                # check), refused here when it cannot
                try:
                    _add_to_index(_empty_index(), meta, recorded)
                except (KeyError, TypeError, AttributeError, ValueError) as e:
                    raise self._changed(path, raw, recorded, f"can no longer be indexed ({type(e).__name__}: "
                                                             f"{e})") from None
            metas.append((meta, recorded or _sha256(raw)))
        index = _empty_index()
        for meta, meta_digest in sorted(metas, key=lambda m: (str(m[0].get("published_at", "")), record_id(m[0]))):
            _add_to_index(index, meta, meta_digest)
        return index

    def rebuild_index(self) -> None:
        """Recreate index.json from meta/ (the source of truth), e.g. after it was lost."""
        with self._lock():
            raw = self._read_index_bytes()
            previous = _parse_index(raw) or _salvage(raw)
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
            for d in freed - still:
                self.blob_path(d).unlink(missing_ok=True)
        return len(doomed)
