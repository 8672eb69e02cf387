"""The ``oci`` store: any OCI registry (distribution, Harbor, GHCR, ...) over the distribution HTTP API.

Layout (``_oci_layout``). ``RegistryConfig.url`` is ``host[:port]/prefix``; each model gets a repository
``<prefix>/<model>``. One record (one engine = build key, with one set of gate verdicts = gate key) = one OCI image
manifest:

- config blob: the metadata JSON (``application/vnd.trt-orchestrator.metadata.v1+json``)
- layer 0: the engine (``application/vnd.trt-orchestrator.engine.v1``, or ``...engine.v1.onnx`` for
  onnxruntime engines), then the build log and extra files as further layers, then the attachments (calibration
  and timing caches) with their own media types (``application/vnd.trt-orchestrator.calibration-cache.v1``,
  ``...timing-cache.v1``); every layer but the engine carries its name (``org.opencontainers.image.title``) and
  role (``io.trt-orchestrator.role``), as the metadata's ``attachments`` list does
- manifest annotations ``io.trt-orchestrator.*`` (model, version, precision, profile, compute-capabilities,
  builder, builder-version, build-key, record-key, gate-key, gate-key-inputs, content-digest, address, format,
  key-inputs, published-at); the key inputs are JSON
- tags: ``bk-<record key>`` (one per record: what machines and the index use) and a readable
  ``<version>-<precision>-<profile set>-<target slug>`` (for people; moves to the newest record of that
  address + version, and always names a manifest some ``bk-`` tag holds). Digests are what ``get`` takes.

Identity. The ``bk-`` tag names the record key (``metadata["record_key"]``). A record published before record keys
has none: its identity, and its tag, is its build key, which is also the record key of a build key without a gate
key, so registries written by older clients read unchanged (their manifests lack the record-key and gate-key
annotations: read as "no gate key"). A re-gated engine (same build key, other gate settings) is a second
manifest under its own ``bk-`` tag, with the same engine layer. ``get_attachment`` downloads one attachment layer,
sha256-verified, under the operation's deadline. A re-gated record whose publisher hands no cache files over
(its engine came from the store) references the cache layers of the earlier record of its build key.

The index is computed by listing (the listing below, ``/v2/<repo>/tags/list``, one manifest GET per ``bk-`` tag),
not kept as a separately tagged JSON document. Why: the distribution API has no conditional manifest PUT
(no If-Match), so a read-modify-write index tag is last-writer-wins; "write then verify" still loses an entry
when a third writer overwrites after the verify. With listing, every publisher writes only its own tags,
so concurrent publishers can neither lose nor duplicate anything. Two publishers of the *same* record key
race only on that tag: it ends on one manifest, the other becomes untagged and invisible; both calls then
return what the tag points to. Cost: one manifest GET per record per index read (8 parallel requests,
cached per store instance); a snapshot cache can be layered on later.

Which repositories. ``/v2/_catalog`` is not in the OCI distribution spec and GHCR / Docker Hub do not serve it,
so the store keeps its own listing: the repository ``<prefix>/trt-orchestrator-index`` holds one tag per model
repository (``m-<repository component>``, or ``h-<sha256>`` when that would pass the 128-character tag limit,
whose manifest names the repository in an annotation). Each entry is a tiny, deterministic manifest written
before the first tag of an artifact in that repository, by every publisher for its own repository only:
concurrent publishers write identical bytes under distinct or identical tags, so no entry can be lost.
``records(model)`` reads the model's repository directly. ``/v2/_catalog`` is only a fallback, used while the
listing does not exist yet (a registry written by an older client), and the publish that creates the listing
carries the catalog's repositories into it. A model whose repository would be the listing's is refused.

Publish order. Blobs, then the listing entry, then the ``bk-`` tag (the commit point, and the only tag reads use),
then the readable tag, pointed at whatever manifest the ``bk-`` tag holds once written. Publishers of one record
key race on its ``bk-`` tag (last writer wins); each, after writing the readable tag, reads the ``bk-`` tag again
and re-points the readable tag until the two agree, so the last readable write always names the manifest the
``bk-`` tag ends on: no readable tag is left on a manifest no ``bk-`` tag holds (a loser's). A publisher killed
anywhere before the ``bk-`` tag leaves nothing visible and a rerun completes everything; a rerun that finds the
``bk-`` tag still re-creates a missing readable tag (never moving one that exists) and a missing listing entry.

Damage stays with its record. A ``bk-`` tag whose manifest is not this store's record (annotations missing or
malformed, another record's key), whose metadata blob is missing, changed or not a record, or (``check``) whose
engine or attachment blobs are missing or no longer hash to their digest is a ``DamagedRecord``: ``records()``
leaves it out and ``damaged()`` lists it, the index marks the address when it is the newest record there, every
other record reads as before. ``quarantine`` (``_oci_check``) tags the damaged manifest ``q-<record key>-<time>``
and points its ``bk-`` tag at a tombstone (a manifest annotated ``io.trt-orchestrator.quarantined`` with why and
where): nothing is deleted, and reads skip tombstones. A publish of that record key writes over a damaged or
tombstoned ``bk-`` tag (keeping the damaged manifest under a ``q-`` tag first).

Is it a registry? Before the first request of a store instance, ``GET /v2/`` must answer 200 (with the
``Docker-Distribution-API-Version`` header or a JSON body) or 401, as the distribution spec says; anything else
(a web server's 404 page, an HTML catch-all) is a ``StoreError`` saying the URL is not an OCI registry, never an
empty registry. HTTP itself (credentials, auth challenges, urllib3's retries, the per-operation deadline
``ORCHESTRATE_REGISTRY_TIMEOUT``) is ``_registry_http``'s.

Transfers stream: oras-py's push reads the whole file into memory (229 MB RSS for a 200 MB engine), so blobs
go up as POST + one streamed ``PUT ?digest=`` (1 MiB pieces from one reused buffer, with Content-Length; the
registry checks the digest) and come down through a pool of 1 MiB buffers into a temp file next to the
destination, each buffer hashed in a second thread right after it was written, verified before the rename; a failure
writing the destination (full disk, read-only, permissions) is a ``StoreError`` naming it, leaving no file.
Nothing of oras-py is used.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from orchestrator.contracts.store import CACHE_ROLES, ArtifactFiles, DamagedRecord, Quarantined, StoredArtifact
from orchestrator.core.model import RegistryConfig
from orchestrator.digests import hash_file
from orchestrator.errors import ArtifactNotFoundError, IntegrityError, StoreError, StoreUnavailableError
from orchestrator.metadata import METADATA_MEDIA_TYPE, utc_now, validate_metadata
from trt_orchestrator_plugins.stores import _oci_check, _referrers
from trt_orchestrator_plugins.stores._atomic import DestinationError, write_error
from trt_orchestrator_plugins.stores._oci_api import DistributionApi
from trt_orchestrator_plugins.stores._oci_layout import (  # noqa: F401 - media types re-exported for callers
    ANN,
    BK_TAG,
    CALIBRATION_CACHE_MEDIA_TYPE,
    EMPTY_DESCRIPTOR,
    LISTING_REPO,
    MANIFEST_MEDIA_TYPE,
    ROLE_MEDIA_TYPES,
    TIMING_CACHE_MEDIA_TYPE,
    TITLE,
    Artifact,
    OciIndex,
    canonical,
    manifest_problem,
    readable_tag,
    repo_component,
)
from trt_orchestrator_plugins.stores._oci_layout import annotations as _annotations
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
)
from trt_orchestrator_plugins.stores._registry_http import ANSWERED, RegistryHttp, body_reader

_body_reader = body_reader  # the name tests and benchmarks know
READABLE_REPOINTS = 8  # times a publisher re-points the readable tag at its bk- tag's manifest before leaving it


class OciStore:
    name = "oci"

    def __init__(self, config: RegistryConfig) -> None:
        if not config.url:
            raise StoreError("the oci store needs registry.url (host[:port]/repository-prefix)",
                             hint="e.g. registry: {store: oci, url: 127.0.0.1:5000/engines, insecure: true}")
        url = re.sub(r"^[a-z]+://", "", config.url).rstrip("/")
        host, _, prefix = url.partition("/")
        self.http = RegistryHttp(host, "http" if config.insecure else "https")
        self.host = host
        self.prefix = "/".join(repo_component(p) for p in prefix.split("/") if p)
        self.base = self.http.base
        self.api = DistributionApi(self.http)
        self._resolved: dict[tuple[str, str], Artifact] = {}  # (repo, bk tag) -> artifact, per instance
        self._metas: dict[str, dict] = {}  # config digest -> metadata (content-addressed: never changes)
        self._listed: set[str] = set()  # repositories whose listing entry this instance has seen or written

    # ---- the transport's knobs, as the store's (tests and callers tune them here) ------------------------------
    @property
    def backoff_s(self) -> float:
        return self.http.backoff_s

    @backoff_s.setter
    def backoff_s(self, value: float) -> None:
        self.http.backoff_s = value

    @property
    def timeout_s(self) -> float:
        return self.http.timeout_s

    @timeout_s.setter
    def timeout_s(self, value: float) -> None:
        self.http.timeout_s = value

    def _send(self, method: str, url: str, **kw: Any):
        return self.http.send(method, url, **kw)

    def _retrying(self, what: str, fn, *, transfer_bytes: int = 0) -> Any:
        return self.http.retrying(what, fn, transfer_bytes=transfer_bytes)

    def _json(self, r, what: str) -> Any:
        return self.http.json(r, what)

    def _check_api(self) -> None:
        self.http.check_api()

    # ---- the distribution API's calls the store's tests and older callers know by these names -----------------
    def _get_manifest(self, repo: str, ref: str) -> tuple[str, dict] | None:
        return self.api.get_manifest(repo, ref)

    def _get_manifest_raw(self, repo: str, ref: str) -> tuple[str, dict, bytes] | None:
        return self.api.get_manifest_raw(repo, ref)

    def _paginated(self, path: str, key: str) -> list[str]:
        return self.api.paginated(path, key)

    def _put_manifest(self, repo: str, ref: str, raw: bytes) -> None:
        self.api.send_manifest(repo, ref, raw)

    def _resolve(self, repo: str, tag: str, *, fresh: bool = False) -> Artifact | None:
        key = (repo, tag)
        if fresh:
            self._resolved.pop(key, None)
        if key not in self._resolved:
            got = self._retrying(f"reading {repo}:{tag}", lambda: self.api.get_manifest_raw(repo, tag))
            if got is None:
                return None
            self._resolved[key] = Artifact(repo, got[0], got[1], got[2])
        return self._resolved[key]

    def _metadata(self, art: Artifact) -> dict:
        """The record's metadata (its config blob), checked: its digest, a record, naming this record's key.
        ``IntegrityError`` (or ``ArtifactNotFoundError`` for a missing blob) when it is damaged."""
        cfg = art.manifest["config"]
        digest = str(cfg.get("digest"))
        if digest in self._metas:
            return self._metas[digest]
        r = self._retrying(f"reading metadata of {art.repo}",
                           lambda: self._send("GET", f"/v2/{art.repo}/blobs/{digest}", ok=(200, 404)))
        if r.status_code == 404:
            r.close()
            raise ArtifactNotFoundError(f"{art.address}: the metadata blob {digest} is missing from "
                                        f"{self.host}/{art.repo}", hint="publish this artifact again")
        raw = r.content
        if "sha256:" + hashlib.sha256(raw).hexdigest() != digest:
            raise IntegrityError(f"{art.address}: metadata blob {digest} failed its integrity check (its bytes "
                                 f"hash to sha256:{hashlib.sha256(raw).hexdigest()})",
                                 hint="publish this artifact again")
        try:
            meta = json.loads(raw)
        except ValueError:
            meta = None
        if not isinstance(meta, dict) or not isinstance(meta.get("engine"), dict):
            raise IntegrityError(f"{art.address}: metadata blob {digest} is not an artifact record",
                                 hint="delete this artifact and republish it")
        named = str(meta.get("record_key") or meta.get("build_key"))
        if named != art.record_key:
            raise IntegrityError(f"{art.address}: the metadata of {art.repo}@{art.manifest_digest} names record "
                                 f"key {named[:64]!r}, its manifest {art.record_key}",
                                 hint="delete this artifact and republish it")
        self._metas[digest] = meta
        return meta

    def _stored(self, art: Artifact, meta: dict | None = None) -> StoredArtifact:
        meta = meta if meta is not None else self._metadata(art)
        return StoredArtifact(digest=meta["engine"]["digest"], metadata=meta,
                              location=f"{self.host}/{art.repo}@{art.manifest_digest}")

    # ---- listing -------------------------------------------------------------------------------------------
    def _repo(self, model: str) -> str:
        return f"{self.prefix}/{repo_component(model)}" if self.prefix else repo_component(model)

    def _listing_repo(self) -> str:
        return f"{self.prefix}/{LISTING_REPO}" if self.prefix else LISTING_REPO

    def _catalog_repositories(self) -> list[str]:
        """The fallback: ``/v2/_catalog`` where the registry serves it (else nothing), under our prefix."""
        out: list[str] = []
        url: str | None = "/v2/_catalog?n=1000"
        while url:
            r = self._retrying("listing /v2/_catalog", lambda u=url: self._send("GET", u, ok=ANSWERED))
            if r.status_code != 200:
                r.close()
                break
            try:
                body = json.loads(r.content)
            except ValueError:
                break
            out.extend(str(i) for i in ((body.get("repositories") if isinstance(body, dict) else None) or []))
            m = re.search(r"<([^>]+)>", r.headers.get("Link", ""))
            url = m.group(1) if m else None
        prefix = self.prefix + "/" if self.prefix else ""
        listing = self._listing_repo()
        return [r for r in out if r.startswith(prefix) and r != listing and "/" not in r[len(prefix):]]

    def _listing_tag(self, repo: str) -> str:
        tag = "m-" + repo.rsplit("/", 1)[-1]
        return tag if len(tag) <= 128 else "h-" + hashlib.sha256(repo.encode()).hexdigest()

    def _repositories(self) -> list[str]:
        """The model repositories: the listing's entries, or the catalog while there is no listing."""
        listing = self._listing_repo()
        tags = self.api.paginated_or_none(f"/v2/{listing}/tags/list", "tags")
        if tags is None:
            return self._catalog_repositories()
        prefix = self.prefix + "/" if self.prefix else ""
        repos = {prefix + t[2:] for t in tags if t.startswith("m-")}
        for t in (t for t in tags if t.startswith("h-")):
            got = self._retrying(f"reading {listing}:{t}", lambda t=t: self._get_manifest(listing, t))
            repo = ((got[1].get("annotations") or {}) if got else {}).get(ANN + "repository")
            if isinstance(repo, str) and repo.startswith(prefix):
                repos.add(repo)
        return sorted(repos)

    def _write_listing_entry(self, repo: str) -> None:
        listing = self._listing_repo()
        manifest = {"schemaVersion": 2, "mediaType": MANIFEST_MEDIA_TYPE, "config": EMPTY_DESCRIPTOR,
                    "layers": [EMPTY_DESCRIPTOR], "annotations": {ANN + "repository": repo}}
        raw = canonical(manifest)  # the same bytes for every writer
        tag = self._listing_tag(repo)

        def write() -> None:  # the shared empty blob first: concurrent publishers all commit it (see _send_manifest)
            self.api.put_empty_blob(listing)
            self.api.send_manifest(listing, tag, raw)

        self._retrying(f"listing {repo}", write)

    def _ensure_listed(self, repo: str) -> None:
        """Make sure the listing names ``repo`` (before any tag is written there). The first entry ever written
        carries over what ``/v2/_catalog`` knows, so repositories of older clients stay visible."""
        if repo in self._listed:
            return
        listing = self._listing_repo()
        got = self._retrying(f"reading the listing entry of {repo}",
                             lambda: self._get_manifest(listing, self._listing_tag(repo)))
        if got is None or (got[1].get("annotations") or {}).get(ANN + "repository") != repo:
            if self.api.paginated_or_none(f"/v2/{listing}/tags/list", "tags") is None:
                for older in self._catalog_repositories():
                    if older != repo:
                        self._write_listing_entry(older)
                        self._listed.add(older)
            self._write_listing_entry(repo)
        self._listed.add(repo)

    def _survey(self, repos: list[str] | None = None) -> tuple[list[Artifact], list[DamagedRecord]]:
        """Every ``bk-`` tag of ``repos`` (all: None) resolved: the sound records by their manifests, and the tags
        whose manifest is no record of this store. Tombstones (quarantined records) are neither."""
        repos = self._repositories() if repos is None else repos
        pairs = [(repo, t) for repo in repos
                 for t in (self.api.paginated_or_none(f"/v2/{repo}/tags/list", "tags") or []) if t.startswith(BK_TAG)]

        def resolve(pair: tuple[str, str]) -> Artifact | DamagedRecord | None:
            repo, tag = pair
            try:
                return self._resolve(repo, tag)
            except StoreError as e:  # its manifest is not JSON, or not an object
                if isinstance(e, StoreUnavailableError):
                    raise
                return DamagedRecord(key=tag[len(BK_TAG):], location=f"{repo}:{tag}", kind="unreadable",
                                     problem=e.message.split(": ", 1)[-1])

        with ThreadPoolExecutor(max_workers=8) as pool:
            found = list(pool.map(resolve, pairs))
        sound: list[Artifact] = []
        damaged: list[DamagedRecord] = []
        for (_, tag), art in zip(pairs, found):
            if art is None or (isinstance(art, Artifact) and art.quarantined):
                continue
            if isinstance(art, DamagedRecord):
                damaged.append(art)
                continue
            problem = manifest_problem(art, tag)
            if problem is None:
                sound.append(art)
            else:
                # a manifest under another record's tag says nothing trustworthy about this one
                damaged.append(art.damaged(tag, "invalid", problem, trusted=problem.startswith("its manifest")))
        return sound, damaged

    def _list_artifacts(self, repos: list[str] | None = None) -> list[Artifact]:
        return self._survey(repos)[0]

    def _verify(self, art: Artifact) -> tuple[str, str] | None:
        """For ``OciIndex``: what is wrong with the newest record of an address (its metadata, its engine)."""
        return _oci_check.record_damage(self, art)

    def index(self) -> OciIndex:
        self._check_api()
        sound, damaged = self._survey()
        return OciIndex(sound, damaged, verify=self._verify)

    # ---- Store API -----------------------------------------------------------------------------------------
    def put(self, files: ArtifactFiles) -> StoredArtifact:
        meta = json.loads(json.dumps(files.metadata))
        meta.pop("published_at", None)
        meta.pop("attachments", None)
        validate_metadata(meta)
        check_record_key(meta)
        check_attachments(files)
        self._check_api()
        repo = self._repo(meta["model"]["name"])
        if repo == self._listing_repo():
            raise StoreError(f"model {meta['model']['name']!r} would be stored in {self.host}/{repo}, the repository "
                             "this store keeps its listing in", hint="rename the model")
        tag = BK_TAG + record_id(meta)
        existing = self._resolve(repo, tag)
        if existing is not None and _oci_check.sound(self, existing, tag, engine=True):
            # idempotent: this record key is already published; complete what a crash left
            self._ensure_listed(repo)
            self._ensure_readable_tag(existing, readable_tag(meta))
            return self._stored(existing)
        if existing is not None and not existing.quarantined:  # damaged: kept under a q- tag, then replaced
            _oci_check.keep_aside(self, existing)

        address = meta["address"]
        engine = meta["engine"]
        self._retrying(f"uploading the engine of {address}",
                       lambda: self.api.upload_blob(repo, Path(files.engine), engine["digest"], engine["size"],
                                                 what=address), transfer_bytes=engine["size"])
        layers = [{"mediaType": engine["media_type"], "digest": engine["digest"], "size": engine["size"],
                   "annotations": {TITLE: engine["filename"]}}]
        attachments: list[dict[str, Any]] = []
        expected = expected_cache_digests(meta)
        named = ([(Path(files.log), "log", Path(files.log).name)] if files.log else []) \
            + [(Path(p), "extra", Path(p).name) for p in files.extra] \
            + [(Path(a.path), a.role, a.name) for a in files.attachments]
        for path, role, name in named:
            try:
                hexdigest, size = hash_file(str(path))[0].split(":", 1)[1], path.stat().st_size
            except OSError as e:
                raise StoreError(f"{address}: cannot read {path}: {e.strerror or e}",
                                 hint="check that the built file still exists and is readable") from None
            digest = f"sha256:{hexdigest}"
            want = expected.get(name) if role in CACHE_ROLES else None
            if want and digest != want[0]:
                raise cache_mismatch(meta, path, digest, want=want)
            self._retrying(f"uploading {name} of {address}",
                           functools.partial(self.api.upload_blob, repo, path, digest, size, what=address),
                           transfer_bytes=size)
            attachments.append({"name": name, "role": role, "digest": digest, "size": size})
        attachments += self._inherited(repo, meta, attachments)
        for a in attachments:
            layers.append({"mediaType": ROLE_MEDIA_TYPES[a["role"]], "digest": a["digest"], "size": a["size"],
                           "annotations": {TITLE: a["name"], ANN + "role": a["role"]}})
        meta["published_at"] = utc_now()
        if attachments:
            meta["attachments"] = attachments
        config = canonical(meta)
        config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
        self._retrying(f"uploading the metadata of {address}",
                       lambda: self.api.upload_blob(repo, None, config_digest, len(config), data=config, what=address))
        manifest = {
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "config": {"mediaType": METADATA_MEDIA_TYPE, "digest": config_digest, "size": len(config)},
            "layers": layers,
            "annotations": _annotations(meta),
        }
        raw = canonical(manifest)
        # Listed first, then the bk- tag (the record's identity and the commit point: reads use bk- tags only, so
        # a crash before it leaves nothing visible and the rerun writes everything again), then the readable tag,
        # pointed at what the bk- tag holds (another publisher of this record key may have written it after us).
        self._ensure_listed(repo)
        self._retrying(f"publishing {address}", lambda: self._put_manifest(repo, tag, raw))
        art = self._resolve(repo, tag, fresh=True)
        if art is None:
            raise StoreError(f"{address}: tag {repo}:{tag} vanished right after it was written")
        art = self._point_readable(art, tag, readable_tag(meta))
        ours = "sha256:" + hashlib.sha256(raw).hexdigest()
        return self._stored(art, meta if art.manifest_digest == ours else None)

    def _point_readable(self, art: Artifact, tag: str, readable: str) -> Artifact:
        """Point the readable tag at the manifest the ``bk-`` tag holds, again until the ``bk-`` tag still holds
        it afterwards (publishers of one record key race on it: see the module docstring). Returns the record."""
        for _ in range(READABLE_REPOINTS):
            self._retrying(f"tagging {art.repo}:{readable}", lambda a=art: self._put_manifest(a.repo, readable, a.raw))
            now = self._resolve(art.repo, tag, fresh=True)
            if now is None or now.manifest_digest == art.manifest_digest:
                return art
            art = now
        return art

    def _inherited(self, repo: str, meta: dict, have: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Cache layers ``meta["caches"]`` names that this publish does not carry, from the newest other record
        of the same build key in ``repo`` (a re-gated engine: its caches are in the registry already)."""
        names = {a["name"] for a in have}
        if all(n in names for n in cache_names(meta)):
            return []
        siblings = sorted((a for a in self._list_artifacts([repo])
                           if a.annotations.get(ANN + "build-key") == meta["build_key"]
                           and a.record_key != record_id(meta)),
                          key=lambda a: a.published_at, reverse=True)
        return inherited(meta, have, (a.cache_layers() for a in siblings))

    def _ensure_readable_tag(self, art: Artifact, tag: str) -> None:
        """Re-create a readable tag a crash left unwritten (an existing one, maybe a newer build's, stays)."""
        if not art.raw:
            return
        if self._retrying(f"reading {art.repo}:{tag}", lambda: self._get_manifest(art.repo, tag)) is None:
            self._retrying(f"tagging {art.repo}:{tag}", lambda: self._put_manifest(art.repo, tag, art.raw))

    def get(self, digest: str, dest: Path) -> StoredArtifact:
        """The engine of the newest sound record with this engine digest (a re-gated engine has several)."""
        digest = normalize_digest(digest)
        self._check_api()
        found = sorted((a for a in self._list_artifacts() if a.annotations.get(ANN + "content-digest") == digest),
                       key=lambda a: a.published_at, reverse=True)
        if not found:
            raise ArtifactNotFoundError(f"no artifact with engine digest {digest} in {self.host}/{self.prefix}",
                                        hint="`orchestrate plan` lists what is published")
        first: StoreError | None = None
        for art in found:
            try:
                stored = self._stored(art)
            except (IntegrityError, ArtifactNotFoundError) as e:  # damaged: another record may serve it
                first = first or e
                continue
            size = next((layer.get("size", 0) for layer in art.manifest.get("layers", [])
                         if layer.get("digest") == digest), 0)
            try:
                self._retrying(f"downloading {art.address}",
                               lambda a=art: self.api.download_blob(a.repo, digest, Path(dest), a.address),
                               transfer_bytes=size if isinstance(size, int) else 0)
            except DestinationError as e:
                raise write_error(f"the engine of {art.address}", e) from None
            return stored
        assert first is not None
        raise first

    def get_attachment(self, record: StoredArtifact, name: str, dest: Path) -> Path:
        """Download the attachment ``name`` of ``record`` (a calibration or timing cache, a log) to ``dest``
        atomically, its sha256 checked against the record, within the operation's deadline."""
        meta = record.metadata
        self._check_api()
        repo = self._repo(str(meta["model"]["name"]))
        entry = find_attachment(meta, name, f"{self.host}/{repo}")
        digest = normalize_digest(str(entry.get("digest")))
        size = entry.get("size") if isinstance(entry.get("size"), int) else 0
        address = str(meta.get("address", repo))
        what = f"{entry.get('role', 'attachment')} {name}"
        dest = Path(dest)
        try:
            self._retrying(f"downloading {what} of {address}",
                           lambda: self.api.download_blob(repo, digest, dest, address, what), transfer_bytes=size)
        except DestinationError as e:
            raise write_error(f"the {what} of {address}", e) from None
        return dest

    def scan(self, model: str | None = None) -> tuple[list[StoredArtifact], list[DamagedRecord]]:
        """(sound records newest first, damaged records). One repository per model, so asking for a model reads
        only that repository."""
        self._check_api()
        repos = [self._repo(model)] if model is not None else None
        arts, damaged = self._survey(repos)
        arts.sort(key=lambda a: a.published_at, reverse=True)

        def read(art: Artifact) -> StoredArtifact | DamagedRecord:
            try:
                return self._stored(art)
            except (IntegrityError, ArtifactNotFoundError) as e:
                return _oci_check.metadata_damage(art, e)

        with ThreadPoolExecutor(max_workers=8) as pool:
            found = list(pool.map(read, arts))
        return ([r for r in found if isinstance(r, StoredArtifact)],
                damaged + [r for r in found if isinstance(r, DamagedRecord)])

    def put_referrer(self, record: StoredArtifact, path: Path, artifact_type: str) -> str:
        """Hang ``path`` (the signed provenance) on ``record``'s manifest as an OCI referrer (``_referrers``)."""
        self._check_api()
        repo = self._repo(str(record.metadata["model"]["name"]))
        art = self._resolve(repo, BK_TAG + record_id(record.metadata))
        if art is None or not art.raw:
            raise ArtifactNotFoundError(f"{record.metadata.get('address')}: no record to refer to in "
                                        f"{self.host}/{repo}")
        ref = _referrers.put_referrer(self, repo, art.manifest_digest, len(art.raw), Path(path), artifact_type)
        return f"{self.host}/{repo}@{ref}"

    def records(self, model: str | None = None) -> list[StoredArtifact]:
        """Newest first; damaged records left out (``damaged``)."""
        return self.scan(model)[0]

    def damaged(self, model: str | None = None) -> list[DamagedRecord]:
        """The records ``records(model)`` leaves out, each with its tag and what is wrong with it."""
        return self.scan(model)[1]

    def check(self, *, verify_blobs: bool = True) -> list[DamagedRecord]:
        """Every damaged record: ``damaged()``, plus records whose engine or attachments are missing or
        (``verify_blobs``: downloaded and hashed, not kept) no longer hash to their digests."""
        return _oci_check.check(self, verify_blobs=verify_blobs)

    def quarantine(self, records: Iterable[DamagedRecord]) -> list[Quarantined]:
        """Tag each damaged manifest ``q-<record key>-<time>`` and point its ``bk-`` tag at a tombstone (nothing
        is deleted); re-checked first, so a record repaired meanwhile stays."""
        return _oci_check.quarantine(self, list(records))

    def delete(self, digests: Iterable[str]) -> int:
        """Delete the manifests of every record with one of these engine digests (a re-gated engine has several;
        their tags go with them); the registry's garbage collector reclaims the blobs no manifest references any
        more (engines, logs, caches), as the distribution spec leaves blob lifetime to it. Only via the
        retention command."""
        wanted = {normalize_digest(d) for d in digests}
        self._check_api()
        doomed = [a for a in self._list_artifacts() if a.annotations.get(ANN + "content-digest") in wanted]
        for a in doomed:
            r = self._retrying(f"deleting {a.repo}@{a.manifest_digest}",
                               lambda a=a: self._send("DELETE", f"/v2/{a.repo}/manifests/{a.manifest_digest}",
                                                      ok=(202, 404)))
            r.close()
        self._resolved.clear()
        return len(doomed)
