"""What both built-in stores agree on about a record's identity and its attachments.

Identity. A published record is one engine (build key) with one set of gate verdicts (gate key); its identity is
``metadata["record_key"]`` (``core.keys.record_key(build_key, gate key, model version)``; a record published before
the model version was part of it carries ``record_key(build_key, gate key)``). Records published before record keys
have none: their identity is their build key, which is also what ``record_key`` gives for an empty gate key, so a
store written by an older client reads unchanged. A re-gated engine is a second record of the same build key
(same engine digest, other verdicts), never an overwrite of the first.

Attachments. ``meta["attachments"]`` lists every file published with the engine: ``{name, role, digest, size}``
with role ``log``, ``extra`` or one of ``CACHE_ROLES`` (calibration and timing caches), each name unique in its
record (``get_attachment`` finds a file by it). ``meta["caches"]`` names the cache attachments by name; a
re-gated record whose publisher hands no cache files over (the engine came from the store) takes the entries of
the record of the same build key that holds them (:func:`inherited`), so every record can hand its caches back.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from orchestrator.contracts.store import ATTACHMENT_ROLES, CACHE_ROLES, ArtifactFiles
from orchestrator.core.keys import accepted_record_keys
from orchestrator.errors import ArtifactNotFoundError, IntegrityError, InvalidMetadataError, StoreError
from orchestrator.metadata import validate_metadata

_BAD_NAME_CHARS = frozenset("/\\\0")
_HEX = re.compile(r"^[0-9a-f]{64}$")


def record_id(meta: Mapping[str, Any]) -> str:
    """The record's identity: its record key, or its build key when it predates record keys."""
    return str(meta.get("record_key") or meta["build_key"])


def gate_key_of(meta: Mapping[str, Any]) -> str:
    gates = meta.get("gates")
    return str(gates.get("key") or "") if isinstance(gates, Mapping) else ""


def record_key_problem(meta: Mapping[str, Any]) -> str | None:
    """Why ``meta["record_key"]`` is not the record key of its build key, gate key and model version (None: it is,
    or absent)."""
    if "record_key" not in meta:
        return None
    model = meta.get("model")
    version = model.get("version") if isinstance(model, Mapping) else None
    accepted = accepted_record_keys(str(meta.get("build_key")), gate_key_of(meta),
                                    str(version) if version is not None else None)
    if meta["record_key"] not in accepted:
        return (f"record_key {str(meta['record_key'])[:64]!r} is not the record key of its build key and gate key "
                f"with its model version ({accepted[0]})")
    return None


def check_record_key(meta: Mapping[str, Any]) -> None:
    """Refuse metadata whose record key does not follow from its build key and gate key."""
    problem = record_key_problem(meta)
    if problem:
        raise InvalidMetadataError([("$.record_key", problem)], subject=f"metadata of {meta.get('address')}")


def _name_problem(name: str) -> str | None:
    if not name or name in (".", ".."):
        return "is empty or a directory name"
    if any(c in _BAD_NAME_CHARS or ord(c) < 32 or ord(c) == 127 for c in name):
        return "must be a plain file name (no path separator or control character)"
    return None


def check_attachments(files: ArtifactFiles) -> None:
    """Attachments (caches, the signed provenance): a known role and a plain file name unique in the record (logs
    and extras included)."""
    address = files.metadata.get("address")
    names = [n for n in ([files.log.name] if files.log is not None else []) + [p.name for p in files.extra]]
    for a in files.attachments:
        if a.role not in ATTACHMENT_ROLES:
            raise StoreError(f"{address}: attachment {a.name!r} has role {a.role!r}, not one of "
                             f"{', '.join(ATTACHMENT_ROLES)}",
                             hint="logs and extra files go in ArtifactFiles.log / .extra; attachments are caches "
                                  "and the signed provenance")
        problem = _name_problem(a.name)
        if problem:
            raise StoreError(f"{address}: attachment name {a.name!r} {problem}",
                             hint="name attachments like calibration-<key>.cache")
        if a.name in names:
            raise StoreError(f"{address}: two files of one record are named {a.name!r}",
                             hint="give every attachment a name unique in its record")
        names.append(a.name)


def expected_cache_digests(meta: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """{attachment name: (digest, where the metadata says so)} for the caches ``meta["caches"]`` describes: a cache
    file published under that name must have those bytes."""
    caches = meta.get("caches") or {}
    out: dict[str, tuple[str, str]] = {}
    for kind, field in (("calibration", "digest"), ("timing", "written")):
        entry = caches.get(kind)
        if isinstance(entry, Mapping) and entry.get("name") and entry.get(field):
            out[str(entry["name"])] = (str(entry[field]), f"caches.{kind}.{field}")
    return out


def cache_mismatch(meta: Mapping[str, Any], path: object, actual: str, *, want: tuple[str, str]) -> IntegrityError:
    return IntegrityError(
        f"{meta.get('address')}: cache file {path} has {actual} but its metadata says {want[0]} ({want[1]})",
        hint="the cache changed after the metadata was built; build the metadata from this file")


def cache_names(meta: Mapping[str, Any]) -> list[str]:
    """The attachment names ``meta["caches"]`` refers to."""
    caches = meta.get("caches") or {}
    return [str(caches[k]["name"]) for k in ("calibration", "timing")
            if isinstance(caches.get(k), Mapping) and caches[k].get("name")]


def inherited(meta: Mapping[str, Any], have: Iterable[Mapping[str, Any]],
              others: Iterable[Iterable[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Cache attachment entries ``meta["caches"]`` names but ``have`` lacks, taken from ``others`` (the
    attachments of other records of the same build key, newest first): their blobs are in the store already."""
    missing = [n for n in cache_names(meta) if n not in {a["name"] for a in have}]
    found: dict[str, dict[str, Any]] = {}
    for attachments in others:
        if len(found) == len(missing):
            break
        for a in attachments:
            if a.get("name") in missing and a.get("name") not in found and a.get("role") in CACHE_ROLES:
                found[str(a["name"])] = {k: a[k] for k in ("name", "role", "digest", "size")}
    return [found[n] for n in missing if n in found]


def find_attachment(meta: Mapping[str, Any], name: str, where: str) -> dict[str, Any]:
    """The attachment entry ``name`` of a record, or ``ArtifactNotFoundError`` listing what it has."""
    attachments = meta.get("attachments") or []
    for a in attachments:
        if isinstance(a, Mapping) and a.get("name") == name:
            return dict(a)
    have = ", ".join(repr(str(a.get("name"))) for a in attachments if isinstance(a, Mapping)) or "none"
    raise ArtifactNotFoundError(
        f"{meta.get('address')}: the record {record_id(meta)[:16]} in {where} has no attachment {name!r} "
        f"(it has: {have})",
        hint="`orchestrate show ADDRESS` lists a record's attachments; caches a build did not attach are computed "
             "again where needed")


def normalize_digest(digest: str) -> str:
    text = digest.strip().lower()
    if _HEX.match(text):
        text = "sha256:" + text
    algo, _, hexpart = text.partition(":")
    if algo != "sha256" or not _HEX.match(hexpart):
        raise StoreError(f"not a sha256 digest: {digest!r}", hint="digests look like sha256:<64 hex digits>")
    return text


def record_problem(meta: object, key: str, *, full: bool) -> str | None:
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
