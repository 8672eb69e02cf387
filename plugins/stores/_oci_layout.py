"""What the OCI store writes into a registry, as data: media types, tags, annotations, one record's manifest read
back (:class:`Artifact`), why a manifest under a ``bk-`` tag is not a sound record, and the planner's view of a
listing (:class:`OciIndex`). No HTTP here (``oci.py`` talks to the registry)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from orchestrator.contracts.store import CACHE_ROLES, DamagedRecord, IndexEntry
from orchestrator.metadata import ONNX_ENGINE_MEDIA_TYPE
from trt_orchestrator_plugins.stores._records import gate_key_of, record_id

MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
LOG_MEDIA_TYPE = "application/vnd.trt-orchestrator.log.v1+text"
EXTRA_MEDIA_TYPE = "application/vnd.trt-orchestrator.file.v1"
CALIBRATION_CACHE_MEDIA_TYPE = "application/vnd.trt-orchestrator.calibration-cache.v1"
TIMING_CACHE_MEDIA_TYPE = "application/vnd.trt-orchestrator.timing-cache.v1"
ROLE_MEDIA_TYPES = {"log": LOG_MEDIA_TYPE, "extra": EXTRA_MEDIA_TYPE,
                    "calibration-cache": CALIBRATION_CACHE_MEDIA_TYPE, "timing-cache": TIMING_CACHE_MEDIA_TYPE,
                    "signature": "application/vnd.dsse.envelope.v1+json"}  # the signed provenance (docs/trust.md)
TITLE = "org.opencontainers.image.title"
ANN = "io.trt-orchestrator."
BK_TAG = "bk-"
QUARANTINE_TAG = "q-"
QUARANTINED = ANN + "quarantined"  # the annotation of a tombstone: the bk- tag of a record moved aside
LISTING_REPO = "trt-orchestrator-index"
EMPTY_BLOB = b"{}"
EMPTY_DESCRIPTOR = {"mediaType": "application/vnd.oci.empty.v1+json",
                    "digest": "sha256:" + hashlib.sha256(EMPTY_BLOB).hexdigest(), "size": len(EMPTY_BLOB)}
_REQUIRED_ANNOTATIONS = ("address", "build-key", "model", "version", "content-digest")
_REPO_COMPONENT = re.compile(r"[^a-z0-9._-]+")


def sanitize_tag(text: str) -> str:
    """OCI tags: ``[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}``."""
    tag = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip(".-") or "_"
    if not re.match(r"[A-Za-z0-9_]", tag[0]):
        tag = "_" + tag
    return tag[:128]


def repo_component(name: str) -> str:
    """A model name as one repository path component (lowercase alnum separated by . _ -)."""
    comp = _REPO_COMPONENT.sub("-", name.lower())
    comp = re.sub(r"[._-]*([._-])[._-]*", r"\1", comp).strip("._-")
    return comp or "model"


def readable_tag(meta: dict) -> str:
    where = meta["address"].split("@", 1)[1] if "@" in meta["address"] else meta["target"]["name"]
    return sanitize_tag(f"{meta['model']['version']}-{meta['precision']}-{meta['profile_set']}-{where}")


def canonical(obj: object) -> bytes:
    """The bytes the store writes for a JSON document (the same for every writer of the same content)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def annotations(meta: dict) -> dict[str, str]:
    return {
        ANN + "model": meta["model"]["name"],
        ANN + "version": meta["model"]["version"],
        ANN + "precision": meta["precision"],
        ANN + "profile": meta["profile_set"],
        ANN + "target": meta["target"]["name"],
        ANN + "compute-capabilities": ",".join(meta["target"]["compute_capabilities"]),
        ANN + "builder": meta["builder"]["name"],
        ANN + "builder-version": meta["builder"]["version"],
        ANN + "build-key": meta["build_key"],
        ANN + "record-key": record_id(meta),
        ANN + "gate-key": gate_key_of(meta),
        ANN + "gate-key-inputs": json.dumps((meta.get("gates") or {}).get("key_inputs") or {}, sort_keys=True,
                                            separators=(",", ":")),
        ANN + "content-digest": meta["engine"]["digest"],
        ANN + "address": meta["address"],
        ANN + "format": "onnx" if meta["engine"]["media_type"] == ONNX_ENGINE_MEDIA_TYPE else "tensorrt-plan",
        ANN + "key-inputs": json.dumps(meta["key_inputs"], sort_keys=True, separators=(",", ":")),
        ANN + "published-at": meta["published_at"],
        "org.opencontainers.image.created": meta["published_at"],
    }


def tombstone(key: str, reason: str, moved_to: str) -> dict:
    """The manifest a quarantined record's ``bk-`` tag holds: no engine, only where the record went and why."""
    return {"schemaVersion": 2, "mediaType": MANIFEST_MEDIA_TYPE, "config": EMPTY_DESCRIPTOR,
            "layers": [EMPTY_DESCRIPTOR],
            "annotations": {QUARANTINED: reason[:1000], ANN + "record-key": key, ANN + "moved-to": moved_to}}


@dataclass(frozen=True)
class Artifact:
    """One ``bk-`` tag resolved: where it is and what its manifest says."""

    repo: str
    manifest_digest: str
    manifest: dict
    raw: bytes = b""

    @property
    def annotations(self) -> dict:
        found = self.manifest.get("annotations")
        return found if isinstance(found, dict) else {}

    @property
    def record_key(self) -> str:
        """The record's identity: the record-key annotation, or the build key of a record from before them."""
        a = self.annotations
        return str(a.get(ANN + "record-key") or a.get(ANN + "build-key") or "")

    @property
    def address(self) -> str:
        return str(self.annotations.get(ANN + "address") or self.repo)

    @property
    def published_at(self) -> str:
        return str(self.annotations.get(ANN + "published-at", ""))

    @property
    def quarantined(self) -> bool:
        return QUARANTINED in self.annotations

    def entry(self, damage: str = "") -> IndexEntry:
        a = self.annotations
        return IndexEntry(address=a[ANN + "address"], build_key=a[ANN + "build-key"],
                          key_inputs=json.loads(a.get(ANN + "key-inputs", "{}")), model=a[ANN + "model"],
                          version=a[ANN + "version"], digest=a[ANN + "content-digest"],
                          published_at=a.get(ANN + "published-at", ""), gate_key=a.get(ANN + "gate-key", ""),
                          gate_inputs=json.loads(a.get(ANN + "gate-key-inputs", "{}")),
                          record_key=self.record_key, damage=damage)

    def damaged(self, tag: str, kind: str, problem: str, *, trusted: bool = True, blob: str = "") -> DamagedRecord:
        """This record as damaged; what its annotations say of it only when ``trusted`` (its manifest is the
        record of its tag)."""
        a = self.annotations if trusted else {}
        return DamagedRecord(key=tag[len(BK_TAG):], location=f"{self.repo}:{tag}@{self.manifest_digest}",
                             kind=kind, problem=problem,  # type: ignore[arg-type]
                             address=str(a.get(ANN + "address", "")), model=str(a.get(ANN + "model", "")),
                             version=str(a.get(ANN + "version", "")), build_key=str(a.get(ANN + "build-key", "")),
                             digest=str(a.get(ANN + "content-digest", "")),
                             published_at=str(a.get(ANN + "published-at", "")), blob=blob)

    def cache_layers(self) -> list[dict[str, Any]]:
        """The cache attachments its manifest lists, as metadata ``attachments`` entries."""
        roles = {m: r for r, m in ROLE_MEDIA_TYPES.items() if r in CACHE_ROLES}
        out = []
        for layer in self.manifest.get("layers", [])[1:]:
            title = (layer.get("annotations") or {}).get(TITLE) if isinstance(layer, dict) else None
            if isinstance(title, str) and layer.get("mediaType") in roles:
                out.append({"name": title, "role": roles[layer["mediaType"]], "digest": layer.get("digest"),
                            "size": layer.get("size")})
        return out


def manifest_problem(art: Artifact, tag: str) -> str | None:
    """Why the manifest under ``bk-`` tag ``tag`` is not a sound record of this store (None: it is)."""
    a = art.annotations
    missing = [k for k in _REQUIRED_ANNOTATIONS if not isinstance(a.get(ANN + k), str)]
    if missing:
        return "its manifest lacks the annotation(s) " + ", ".join(ANN + k for k in missing)
    if not all(isinstance(a.get(ANN + k, ""), str) for k in ("record-key", "gate-key", "published-at")):
        return "its manifest's record-key, gate-key or published-at annotation is not a string"
    try:
        inputs_ok = (isinstance(json.loads(a.get(ANN + "key-inputs", "{}")), dict)
                     and isinstance(json.loads(a.get(ANN + "gate-key-inputs", "{}")), dict))
    except (TypeError, ValueError):
        inputs_ok = False
    if not inputs_ok:
        return "its manifest's key-inputs or gate-key-inputs annotation is not a JSON object"
    layers = art.manifest.get("layers")
    if not (isinstance(layers, list) and layers and isinstance(layers[0], dict)
            and isinstance(art.manifest.get("config"), dict)):
        return "its manifest has no engine layer or no config"
    if tag != BK_TAG + art.record_key:  # a bk- tag names its record's key (else: moved or forged)
        return (f"the tag holds the record of record key {art.record_key[:64]!r}, not its own "
                f"{tag[len(BK_TAG):]}")
    return None


# one sound record -> None, or (kind, problem) when its metadata or engine cannot be had
Verifier = Callable[[Artifact], tuple[str, str] | None]


class OciIndex:
    """IndexReader over one listing of the registry: the sound records (by their manifests) and the damaged ones.
    ``verify`` checks each address's newest record (its metadata and its engine blob) when the planner asks."""

    def __init__(self, artifacts: list[Artifact], damaged: list[DamagedRecord] | None = None,
                 verify: Verifier | None = None) -> None:
        self.artifacts = artifacts
        self.damaged = list(damaged or ())
        self._entries = [a.entry() for a in artifacts]
        self._verify = verify

    def entries(self) -> list[IndexEntry]:
        return list(self._entries)

    def record_digests(self) -> dict[str, str]:
        """Every record key -> its engine digest (``contracts.store.RecordKeyIndex``)."""
        return {e.record_key: e.digest for e in self._entries}

    def latest_by_address(self) -> dict[str, IndexEntry]:
        """The newest publish per address (several records may share a build key: the newest one wins), with
        ``damage`` set where that record's metadata or engine cannot be had."""
        newest: dict[str, tuple[IndexEntry, Artifact]] = {}
        for e, art in sorted(zip(self._entries, self.artifacts), key=lambda p: (p[0].published_at, p[0].record_key)):
            newest[e.address] = (e, art)
        if self._verify is None:
            return {addr: e for addr, (e, _) in newest.items()}
        verify = self._verify
        with ThreadPoolExecutor(max_workers=8) as pool:
            found = list(pool.map(lambda pair: verify(pair[1]), newest.values()))
        return {addr: (e if problem is None else art.entry(damage=problem[1]))
                for (addr, (e, art)), problem in zip(newest.items(), found)}

    def latest_version(self, model: str) -> str | None:
        """The version most recently published for the first time (rebuilding an older one keeps it)."""
        first: dict[str, str] = {}
        for e in self._entries:
            if e.model == model:
                first[e.version] = min(first.get(e.version, e.published_at), e.published_at)
        return max(first, key=lambda v: (first[v], v)) if first else None

    def state_token(self) -> str:
        lines = sorted(f"{a.repo}:{a.record_key}@{a.manifest_digest}" for a in self.artifacts)
        return "sha256:" + hashlib.sha256("\n".join(lines).encode()).hexdigest()
