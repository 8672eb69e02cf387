"""The local store's ``index.json``: its shape, how a publish adds to it, how a damaged copy is checked and salvaged,
and the planner's view of it (:class:`LocalIndex`).

The index is derived from ``meta/`` (the records are the source of truth) and holds, per record key, a small
record with the sha256 of its metadata file as written (``meta_digest``: reading a record checks it), the newest
publish per address (``latest``, with everything ``IndexEntry`` needs) and per model its versions. Records that
could not be indexed when it was rebuilt (not JSON, not the schema, edited so they can no longer be read) are kept
under ``damaged`` with their problem and what the previous index still said of them (address, model, engine
digest...): they are recorded keys like any other, so a damaged record never makes every read rebuild the index,
and the planner can still see which address it was the newest of. An index from before ``damaged`` has none.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from orchestrator.contracts.store import IndexEntry
from orchestrator.metadata import index_entry
from trt_orchestrator_plugins.stores._records import gate_key_of, record_id

INDEX_FORMAT = 1
HEX = re.compile(r"^[0-9a-f]{64}$")
RECORD_NAME = re.compile(r"^[0-9a-f]{64}\.json$")
# what a damaged entry keeps of the record it was, when the previous index knew it (all strings)
DAMAGED_FIELDS = ("address", "model", "version", "build_key", "digest", "published_at")


def sha256_of(raw: bytes) -> str:
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def empty_index() -> dict:
    return {
        "format_version": INDEX_FORMAT,
        "seq": 0,
        # record key -> small record (no key_inputs: those live in meta/ and in "latest"). An index written before
        # record keys is keyed by build keys: the same thing for those records (see local.py's docstring).
        "artifacts": {},
        # address -> the newest publish for it, with everything IndexEntry needs (key_inputs, gate key included)
        "latest": {},
        # model -> {"latest": version, "versions": {version: {"first_seq": n, "build_keys": [...]}}}; the list
        # holds record keys (its name is the format's from before record keys: for those records the two are one)
        "models": {},
        # record key -> {"problem", "kind", "meta_digest", and DAMAGED_FIELDS where known}: records on disk that
        # could not be indexed (see the module docstring)
        "damaged": {},
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


def add_to_index(index: dict, meta: dict, meta_digest: str | None) -> None:
    """Index one record (a repaired record replaces the damaged one of its key, listed once)."""
    index["seq"] += 1
    seq = index["seq"]
    key = record_id(meta)
    index.setdefault("damaged", {}).pop(key, None)
    index["artifacts"][key] = _record(meta, seq, meta_digest)
    index["latest"][meta["address"]] = _latest_entry(meta, seq)
    model = index["models"].setdefault(meta["model"]["name"], {"latest": None, "versions": {}})
    version = meta["model"]["version"]
    if version not in model["versions"]:
        model["versions"][version] = {"first_seq": seq, "build_keys": []}
        model["latest"] = version
    if key not in model["versions"][version]["build_keys"]:
        model["versions"][version]["build_keys"].append(key)


def damaged_entry(kind: str, problem: str, meta_digest: str | None, known: Mapping[str, Any] | None) -> dict:
    """An entry of ``index["damaged"]``: the problem, and what ``known`` (the previous index's record) said."""
    entry: dict[str, Any] = {"kind": kind, "problem": problem, "meta_digest": meta_digest}
    for field in DAMAGED_FIELDS:
        value = (known or {}).get(field)
        if isinstance(value, str):
            entry[field] = value
    return entry


def _is(value: object, kind: type | tuple[type, ...]) -> bool:
    return isinstance(value, kind) and not isinstance(value, bool)


_RECORD_FIELDS = {"address": str, "model": str, "version": str, "digest": str, "seq": int, "blobs": list}
_LATEST_FIELDS = {"address": str, "build_key": str, "key_inputs": dict, "model": str, "version": str,
                  "digest": str, "published_at": str}
# written since record keys; an index from before has none of them (read as: no gate key, identity = build key)
_OPTIONAL_FIELDS = {"build_key": str, "gate_key": str, "record_key": str, "gate_inputs": dict}


def _optional_ok(entry: dict) -> bool:
    return all(_is(entry[k], t) for k, t in _OPTIONAL_FIELDS.items() if k in entry)


def _damaged_ok(damaged: object) -> bool:
    return isinstance(damaged, dict) and all(
        HEX.match(k) and isinstance(v, dict) and isinstance(v.get("problem"), str) and isinstance(v.get("kind"), str)
        and all(isinstance(v.get(f, ""), str) for f in DAMAGED_FIELDS) for k, v in damaged.items())


def index_shape_ok(data: object) -> bool:
    """Whether parsed index.json has every field this module reads, with its type (else it is rebuilt)."""
    if not (isinstance(data, dict) and data.get("format_version") == INDEX_FORMAT and _is(data.get("seq"), int)):
        return False
    artifacts, latest, models = data.get("artifacts"), data.get("latest"), data.get("models")
    if not (isinstance(artifacts, dict) and isinstance(latest, dict) and isinstance(models, dict)):
        return False
    if not _damaged_ok(data.get("damaged", {})):
        return False
    for bk, rec in artifacts.items():
        if not (HEX.match(bk) and isinstance(rec, dict)
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


def parse_index(raw: bytes | None) -> dict | None:
    """index.json parsed and shape-checked (``damaged`` added when it predates it); None when missing or
    damaged."""
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except ValueError:  # includes UnicodeDecodeError
        return None
    if not index_shape_ok(data):
        return None
    data.setdefault("damaged", {})
    return data


def indexed_keys(index: Mapping[str, Any]) -> set[str]:
    """Every record key the index accounts for: indexed records and damaged ones."""
    return set(index["artifacts"]) | set(index.get("damaged") or {})


def salvage(raw: bytes | None) -> dict:
    """What a damaged index still says about its records: {"artifacts": {record key: {"meta_digest", and the
    record's address, model, version, build key, engine digest, publish time where it holds them}}}."""
    try:
        data = json.loads(raw) if raw else None
    except ValueError:
        data = None
    artifacts = data.get("artifacts") if isinstance(data, dict) else None
    kept: dict[str, dict] = {}
    for key, rec in (artifacts.items() if isinstance(artifacts, dict) else ()):
        if isinstance(rec, dict) and isinstance(rec.get("meta_digest"), str):
            kept[key] = {"meta_digest": rec["meta_digest"],
                         **{f: rec[f] for f in DAMAGED_FIELDS if isinstance(rec.get(f), str)}}
    return {"artifacts": kept}


# (record key, its metadata digest as recorded or None, its engine digest) -> None when the record is sound, else
# (kind, problem)
Verifier = Callable[[str, str | None, str], tuple[str, str] | None]


class LocalIndex:
    """IndexReader over one snapshot of index.json (bytes read once; the token is their sha256).

    ``verify(record key, recorded meta digest, engine digest)`` says what is wrong with a record (None: sound):
    ``latest_by_address`` asks it for each address's newest record, so a record damaged since it was indexed
    plans as damaged, not up to date. ``note`` says why there is no index (the store does not exist yet)."""

    def __init__(self, raw: bytes | None, data: dict | None = None, *, verify: Verifier | None = None,
                 note: str = "", witness: Callable[[dict], tuple[str, ...]] | None = None) -> None:
        if data is None:
            data = parse_index(raw) if raw else None
        self._data = data if data is not None else empty_index()
        self._data.setdefault("damaged", {})
        self._token = sha256_of(raw) if raw else "empty"
        self._verify = verify
        self.note = note
        self._witness = witness

    @property
    def data(self) -> dict:
        return self._data

    def record_digests(self) -> dict[str, str]:
        """Every record key -> its engine digest (``contracts.store.RecordKeyIndex``)."""
        return {key: str(rec["digest"]) for key, rec in self._data["artifacts"].items()}

    def latest_by_address(self) -> dict[str, IndexEntry]:
        """The newest publish per address (several records may share a build key: the newest one wins), with
        ``damage`` set where that record is damaged: checked now, or found damaged when the index was rebuilt
        (then the entry holds what is still known of it)."""
        out: dict[str, IndexEntry] = {}
        for addr, e in self._data["latest"].items():
            key = e.get("record_key") or e["build_key"]
            recorded = (self._data["artifacts"].get(key) or {}).get("meta_digest")
            found = self._verify(key, recorded, e["digest"]) if self._verify is not None else None
            out[addr] = IndexEntry(address=e["address"], build_key=e["build_key"], key_inputs=e["key_inputs"],
                                   model=e["model"], version=e["version"], digest=e["digest"],
                                   published_at=e["published_at"], gate_key=e.get("gate_key", ""),
                                   gate_inputs=dict(e.get("gate_inputs") or {}), record_key=key,
                                   damage=found[1] if found else "")
        for key, d in self._data["damaged"].items():
            addr = d.get("address")
            if not addr:
                continue  # nothing says which address it was the newest of: `store check` lists it
            have = out.get(addr)
            if have is not None and have.published_at > d.get("published_at", ""):
                continue  # a newer sound record serves that address
            out[addr] = IndexEntry(address=addr, build_key=d.get("build_key", ""), key_inputs={},
                                   model=d.get("model", ""), version=d.get("version", ""), digest=d.get("digest", ""),
                                   published_at=d.get("published_at", ""), record_key=key, damage=d["problem"])
        return out

    def state_token(self) -> str:
        return self._token

    def witness(self) -> tuple[str, ...]:
        """``contracts.store.StateWitness``: the files the store says this index was read from and checked
        against (empty: no store to witness, nothing is kept)."""
        return self._witness(self._data) if self._witness is not None else ()
