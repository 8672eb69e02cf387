"""The ``local`` store: a directory (the embedded default at ``artifacts/``), safe for concurrent publishers.

Layout under ``RegistryConfig.path``::

    blobs/sha256/<hex>       content-addressed engines, build logs and extra files
    meta/<build_key>.json    one metadata JSON per artifact (with its log/extra blobs' digests under attachments)
    index.json               the planner's view, loaded with one json.load (see _empty_index for its shape)
    .index.lock              the filelock serializing index updates

Publishing writes the blobs first (temp file in the same dir, fsync, rename, fsync dir), then takes the lock,
writes the metadata file and the index last. A crash leaves at worst an unreferenced blob, never an index entry
pointing at a missing or partial file. ``index.json`` is derived from ``meta/``: every read checks that the two
name the same build keys and repairs the index from the records when they do not (a crash between writing a
record and the index must not hide the artifact for good); ``rebuild_index()`` recreates it outright.

Each index record holds the sha256 of its metadata file as written; reading a record checks it, so metadata
edited after publishing (say, another engine's digest) is an ``IntegrityError``, never a wrong engine.

Damage. An ``index.json`` that is not JSON or not the index's shape is rebuilt from the records (keeping the record
digests it still holds), and written back when the store is writable (a read-only store is read through the
repaired copy in memory). A record that is not JSON, not an object, fails the artifact-v1 schema or names another
build key is an ``IntegrityError`` naming its file, with the fix (restore it, or remove it and publish again):
never a traceback, never a silently missing artifact. Only ``meta/<64 hex>.json`` files are records.

Temp files. A publish killed mid-copy leaves ``blobs/sha256/.incoming.<pid>.<host>.<random>.tmp``; every publish
and read removes the temp files of dead writers on this host and any temp file untouched for
``stale_temp_s`` (an hour) in ``blobs/sha256``, ``meta/`` and the root (``_atomic.remove_stale_temps``).
Writing the engine on ``get`` (or a blob on ``put``) onto a full, read-only or forbidden filesystem is a
``StoreError`` naming the destination; no partial or temp file stays behind.

Immutability: an artifact (one build key) is written once and never modified or overwritten; re-publishing
the same build key returns the stored artifact unchanged. One (address, model version) pair may hold several
build keys over time (a newer builder patch, a changed option, a salt), each its own immutable artifact.
``latest`` per address is the newest publish for it; a model's ``latest`` version alias is the version most
recently published *for the first time*, so rebuilding an older version does not move it back.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path

from orchestrator.contracts.store import ArtifactFiles, IndexEntry, StoredArtifact
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
        # build key -> small record (no key_inputs: those live in meta/ and in "latest")
        "artifacts": {},
        # address -> the newest publish for it, with everything IndexEntry needs (key_inputs included)
        "latest": {},
        # model -> {"latest": version, "versions": {version: {"first_seq": n, "build_keys": [...]}}}
        "models": {},
    }


def _record(meta: dict, seq: int, meta_digest: str | None) -> dict:
    return {
        "meta_digest": meta_digest,
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
            "version": e.version, "digest": e.digest, "published_at": e.published_at, "seq": seq}


def _add_to_index(index: dict, meta: dict, meta_digest: str | None) -> None:
    index["seq"] += 1
    seq = index["seq"]
    bk = meta["build_key"]
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


def _index_shape_ok(data: object) -> bool:
    """Whether parsed index.json has every field this module reads, with its type (else it is rebuilt)."""
    if not (isinstance(data, dict) and data.get("format_version") == INDEX_FORMAT and _is(data.get("seq"), int)):
        return False
    artifacts, latest, models = data.get("artifacts"), data.get("latest"), data.get("models")
    if not (isinstance(artifacts, dict) and isinstance(latest, dict) and isinstance(models, dict)):
        return False
    for bk, rec in artifacts.items():
        if not (_HEX.match(bk) and isinstance(rec, dict)
                and all(_is(rec.get(k), t) for k, t in _RECORD_FIELDS.items())
                and (rec.get("meta_digest") is None or isinstance(rec.get("meta_digest"), str))):
            return False
    for e in latest.values():
        if not (isinstance(e, dict) and all(_is(e.get(k), t) for k, t in _LATEST_FIELDS.items())):
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
    """What a damaged index still says about record digests: {"artifacts": {build key: {"meta_digest": ...}}}."""
    try:
        data = json.loads(raw) if raw else None
    except ValueError:
        data = None
    artifacts = data.get("artifacts") if isinstance(data, dict) else None
    kept = {bk: {"meta_digest": rec["meta_digest"]} for bk, rec in (artifacts or {}).items()
            if isinstance(rec, dict) and isinstance(rec.get("meta_digest"), str)} if isinstance(artifacts, dict) else {}
    return {"artifacts": kept}


def _record_problem(meta: object, build_key: str, *, full: bool) -> str | None:
    """Why parsed record JSON is not the record of ``build_key`` (``full``: check the whole schema), or None."""
    if not isinstance(meta, dict):
        return f"holds a JSON {type(meta).__name__}, not a record"
    if meta.get("build_key") != build_key:
        return f"names build key {str(meta.get('build_key'))[:64]!r}, not its own {build_key}"
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
        return {addr: IndexEntry(address=e["address"], build_key=e["build_key"], key_inputs=e["key_inputs"],
                                 model=e["model"], version=e["version"], digest=e["digest"],
                                 published_at=e["published_at"])
                for addr, e in self._data["latest"].items()}

    def state_token(self) -> str:
        return self._token


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

    def _meta_path(self, build_key: str) -> Path:
        if not _HEX.match(build_key):
            raise StoreError(f"build key must be 64 lowercase hex digits, got {build_key!r}")
        return self.meta_dir / f"{build_key}.json"

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
    def _store_blob(self, src: Path, expected: str | None, what: str) -> tuple[str, int]:
        """Copy ``src`` into blobs/ (in-kernel copy, the copy hashed and fsync'd, renamed to its content address)."""
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
        build_key = meta["build_key"]
        meta_path = self._meta_path(build_key)
        if meta_path.exists():  # idempotent fast path: no blob written for an already-published build key
            return self._stored(self._read_meta(build_key, self.index().data))

        # Blobs before the lock (slow, parallel across publishers); the index is written last.
        self._store_blob(Path(files.engine), meta["engine"]["digest"], meta["address"])
        attachments = []
        if files.log is not None:
            d, size = self._store_blob(Path(files.log), None, meta["address"])
            attachments.append({"name": Path(files.log).name, "role": "log", "digest": d, "size": size})
        for extra in files.extra:
            d, size = self._store_blob(Path(extra), None, meta["address"])
            attachments.append({"name": Path(extra).name, "role": "extra", "digest": d, "size": size})

        with self._lock():
            if meta_path.exists():  # another publisher won the race for this build key
                return self._stored(self._read_meta(build_key, self._load_index_locked()))
            index = self._load_index_locked()
            meta["published_at"] = utc_now()
            if attachments:
                meta["attachments"] = attachments
            raw = atomic_write_json(meta_path, meta, indent=1)
            _add_to_index(index, meta, _sha256(raw))
            atomic_write_json(self.index_path, index)
        return self._stored(meta)

    # ---- read --------------------------------------------------------------------------------------------
    def _load_record(self, path: Path, build_key: str, *, full: bool) -> tuple[bytes, dict | None, str | None]:
        """(bytes, parsed record or None, what is wrong with it or None)."""
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            raise ArtifactNotFoundError(f"no artifact with build key {build_key} in {self.root}") from None
        except OSError as e:
            raise StoreError(f"cannot read the record {path}: {e.strerror or e}",
                             hint="check the store directory's permissions and disk") from None
        try:
            meta = json.loads(raw)
        except ValueError as e:  # includes UnicodeDecodeError
            reason = "it is empty" if not raw.strip() else f"not JSON: {str(e).splitlines()[0]}"
            return raw, None, reason
        return raw, meta, _record_problem(meta, build_key, full=full)

    def _read_meta(self, build_key: str, index: dict) -> dict:
        """The record of ``build_key``, checked against the digest the index holds for it."""
        path = self._meta_path(build_key)
        recorded = (index["artifacts"].get(build_key) or {}).get("meta_digest")
        raw, meta, problem = self._load_record(path, build_key, full=recorded is None)
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

    def _copy_verified(self, digest: str, dest: Path, address: str) -> None:
        """Copy the blob to a temp file next to ``dest``, hash the copy; rename only if the digest matches."""
        src = self.blob_path(digest)
        if not src.is_file():
            raise IntegrityError(f"{address}: engine blob {digest} is missing from {self.blobs}",
                                 hint="the store was damaged; republish this artifact")
        try:
            tmp, hexdigest, _ = stage_copy(src, dest.parent, dest)
        except DestinationError as e:
            raise write_error(f"the engine of {address}", e) from None
        except OSError as e:
            raise StoreError(f"{address}: cannot read the engine blob {src}: {e.strerror or e}",
                             hint="the store's disk or permissions failed; check them, or republish") from None
        actual = f"sha256:{hexdigest}"
        if actual != digest:
            os.unlink(tmp)
            raise IntegrityError(
                f"{address}: engine {digest} failed its integrity check (stored bytes hash to {actual}); "
                f"{dest} was not written",
                hint=f"the blob {src} is corrupt; delete it with the retention command and republish")
        try:
            commit(tmp, dest)
        except DestinationError as e:
            raise write_error(f"the engine of {address}", e) from None

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
        for build_key in sorted(self._recorded_keys()):
            path = self._meta_path(build_key)
            recorded = (known.get(build_key) or {}).get("meta_digest")
            try:
                raw, meta, problem = self._load_record(path, build_key, full=recorded is None)
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
        for meta, meta_digest in sorted(metas, key=lambda m: (str(m[0].get("published_at", "")), m[0]["build_key"])):
            _add_to_index(index, meta, meta_digest)
        return index

    def rebuild_index(self) -> None:
        """Recreate index.json from meta/ (the source of truth), e.g. after it was lost."""
        with self._lock():
            raw = self._read_index_bytes()
            previous = _parse_index(raw) or _salvage(raw)
            atomic_write_json(self.index_path, self._rebuild(previous))

    def delete(self, digests: Iterable[str]) -> int:
        """Remove the artifacts whose engine has one of ``digests`` (only via the retention command).

        Metadata and index go first, then blobs no remaining artifact references. Returns artifacts removed.
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
