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
from trt_orchestrator_plugins.stores._atomic import atomic_write_json, commit, stage_copy

INDEX_FORMAT = 1
LOCK_TIMEOUT_S = 300.0
_HEX = re.compile(r"^[0-9a-f]{64}$")



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


class LocalIndex:
    """IndexReader over one snapshot of index.json (bytes read once; the token is their sha256)."""

    def __init__(self, raw: bytes | None) -> None:
        self._data = json.loads(raw) if raw else _empty_index()
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

    # ---- paths -------------------------------------------------------------------------------------------
    def blob_path(self, digest: str) -> Path:
        return self.blobs / normalize_digest(digest).split(":", 1)[1]

    def _meta_path(self, build_key: str) -> Path:
        if not _HEX.match(build_key):
            raise StoreError(f"build key must be 64 lowercase hex digits, got {build_key!r}")
        return self.meta_dir / f"{build_key}.json"

    def _lock(self):
        from filelock import FileLock

        self.root.mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.lock_path), timeout=LOCK_TIMEOUT_S)

    # ---- publish -----------------------------------------------------------------------------------------
    def _store_blob(self, src: Path, expected: str | None, what: str) -> tuple[str, int]:
        """Copy ``src`` into blobs/ (in-kernel copy, the copy hashed and fsync'd, renamed to its content address)."""
        tmp, hexdigest, size = stage_copy(src, self.blobs)
        digest = f"sha256:{hexdigest}"
        if expected is not None and digest != expected:
            os.unlink(tmp)
            raise IntegrityError(
                f"{what}: file {src} has {digest} but its metadata says {expected}",
                hint="the engine changed after its metadata was built; rebuild the metadata from this file")
        # content-addressed: an existing blob of that name has the same bytes (verified on every read)
        commit(tmp, self.blobs / hexdigest, overwrite=False)
        return digest, size

    def put(self, files: ArtifactFiles) -> StoredArtifact:
        meta = json.loads(json.dumps(files.metadata))  # our own copy, proven JSON
        meta.pop("published_at", None)
        meta.pop("attachments", None)
        validate_metadata(meta)
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
    def _read_meta(self, build_key: str, index: dict) -> dict:
        """The record of ``build_key``, checked against the digest the index holds for it."""
        try:
            with open(self._meta_path(build_key), "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            raise ArtifactNotFoundError(f"no artifact with build key {build_key} in {self.root}") from None
        recorded = (index["artifacts"].get(build_key) or {}).get("meta_digest")
        if recorded is not None and _sha256(raw) != recorded:
            raise IntegrityError(
                f"the metadata of build key {build_key} in {self.root} changed after it was published "
                f"(now {_sha256(raw)[:19]}, published as {recorded[:19]})",
                hint="never edit a published record; delete it with `orchestrate retention` and republish")
        try:
            meta: dict = json.loads(raw)
        except ValueError as e:
            raise IntegrityError(f"the metadata of build key {build_key} in {self.root} is not JSON: {e}",
                                 hint="delete it with `orchestrate retention` and republish") from e
        return meta

    def _stored(self, meta: dict) -> StoredArtifact:
        return StoredArtifact(digest=meta["engine"]["digest"], metadata=meta,
                              location=str(self.blob_path(meta["engine"]["digest"])))

    def _read_index_bytes(self) -> bytes | None:
        try:
            return self.index_path.read_bytes()
        except FileNotFoundError:
            return None

    def _load_index_locked(self) -> dict:
        raw = self._read_index_bytes()
        if raw is None:
            return self._rebuild() if self.meta_dir.is_dir() else _empty_index()
        index: dict = json.loads(raw)
        if self._recorded_keys() != set(index["artifacts"]):
            index = self._rebuild(index)
        return index

    def _recorded_keys(self) -> set[str]:
        try:
            return {name[:-5] for name in os.listdir(self.meta_dir) if name.endswith(".json")}
        except FileNotFoundError:
            return set()

    def index(self) -> LocalIndex:
        """The index as written, or repaired from the records when the two disagree (then written back)."""
        raw = self._read_index_bytes()
        if raw is None and not self.meta_dir.is_dir():
            return LocalIndex(None)  # no store yet: reading never creates one
        try:
            current = json.loads(raw) if raw is not None else None
        except ValueError:
            current = None
        if current is not None and set(current.get("artifacts", {})) == self._recorded_keys():
            return LocalIndex(raw)
        with self._lock():
            index = self._load_index_locked() if current is not None else self._rebuild()
            raw = atomic_write_json(self.index_path, index)
        return LocalIndex(raw)

    def get(self, digest: str, dest: Path) -> StoredArtifact:
        digest = normalize_digest(digest)
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
        tmp, hexdigest, _ = stage_copy(src, dest.parent)
        actual = f"sha256:{hexdigest}"
        if actual != digest:
            os.unlink(tmp)
            raise IntegrityError(
                f"{address}: engine {digest} failed its integrity check (stored bytes hash to {actual}); "
                f"{dest} was not written",
                hint=f"the blob {src} is corrupt; delete it with the retention command and republish")
        commit(tmp, dest)

    def records(self, model: str | None = None) -> list[StoredArtifact]:
        """Newest first (publish order); only ``model``'s when given."""
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
        for p in self.meta_dir.glob("*.json"):
            raw = p.read_bytes()
            try:
                meta = json.loads(raw)
            except ValueError:
                continue  # not a record (a torn write cannot happen: records are written atomically)
            recorded = (known.get(meta.get("build_key")) or {}).get("meta_digest")
            metas.append((meta, recorded or _sha256(raw)))
        index = _empty_index()
        for meta, meta_digest in sorted(metas, key=lambda m: (m[0].get("published_at", ""), m[0]["build_key"])):
            _add_to_index(index, meta, meta_digest)
        return index

    def rebuild_index(self) -> None:
        """Recreate index.json from meta/ (the source of truth), e.g. after it was lost."""
        with self._lock():
            raw = self._read_index_bytes()
            try:
                previous = json.loads(raw) if raw else None
            except ValueError:
                previous = None
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
