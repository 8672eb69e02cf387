"""The ``oci`` store: any OCI registry (distribution, Harbor, GHCR, ...) over the distribution HTTP API.

Layout. ``RegistryConfig.url`` is ``host[:port]/prefix``; each model gets a repository ``<prefix>/<model>``.
One artifact = one OCI image manifest:

- config blob: the metadata JSON (``application/vnd.trt-orchestrator.metadata.v1+json``)
- layer 0: the engine (``application/vnd.trt-orchestrator.engine.v1``, or ``...engine.v1.onnx`` for
  onnxruntime engines), then the build log and extra files as further layers
- manifest annotations ``io.trt-orchestrator.*`` (model, version, precision, profile, compute-capabilities,
  builder, builder-version, build-key, content-digest, address, format, key-inputs, published-at)
- tags: ``bk-<build key>`` (one per artifact, written once: what machines and the index use) and a readable
  ``<version>-<precision>-<profile set>-<target slug>`` (for people; moves to the newest build of that
  address + version). Digests are what ``get`` takes.

The index is computed by listing (``/v2/_catalog``, ``/v2/<repo>/tags/list``, one manifest GET per ``bk-`` tag),
not kept as a separately tagged JSON document. Why: the distribution API has no conditional manifest PUT
(no If-Match), so a read-modify-write index tag is last-writer-wins; "write then verify" still loses an entry
when a third writer overwrites after the verify. With listing, every publisher writes only its own ``bk-`` tag,
so 8 concurrent publishers can neither lose nor duplicate anything. Two publishers of the *same* build key
race only on that tag: it ends on one manifest, the other becomes untagged and invisible; both calls then
return what the tag points to. Cost: one manifest GET per artifact per index read (8 parallel requests,
cached per store instance since ``bk-`` tags are immutable); a snapshot cache can be layered on later.

Transfers stream: oras-py's push reads the whole file into memory (229 MB RSS for a 200 MB engine), so blobs
go up as POST + one streamed ``PUT ?digest=`` and come down through one reused 1 MiB buffer into a temp file
next to the destination, hashed in a second thread as it is written and verified before the rename. Credentials: env
``ORCHESTRATE_REGISTRY_USERNAME``/``_PASSWORD``, else the docker config (``DOCKER_CONFIG`` or
``~/.docker/config.json``, read with oras-py's loader), used for Basic or Bearer-token challenges.
Transient failures (connection errors, 429, 5xx) are retried with exponential backoff and jitter, then
reported as ``StoreUnavailableError``.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import random
import re
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.contracts.store import ArtifactFiles, IndexEntry, StoredArtifact
from orchestrator.core.model import RegistryConfig
from orchestrator.digests import hash_file
from orchestrator.errors import ArtifactNotFoundError, IntegrityError, StoreError, StoreUnavailableError
from orchestrator.metadata import (
    METADATA_MEDIA_TYPE,
    ONNX_ENGINE_MEDIA_TYPE,
    utc_now,
    validate_metadata,
)
from trt_orchestrator_plugins.stores._atomic import atomic_writer

MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
LOG_MEDIA_TYPE = "application/vnd.trt-orchestrator.log.v1+text"
EXTRA_MEDIA_TYPE = "application/vnd.trt-orchestrator.file.v1"
ANN = "io.trt-orchestrator."
BK_TAG = "bk-"
_TRANSIENT_STATUS = {429, 500, 502, 503, 504}
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


class _Transient(Exception):
    """One attempt failed in a way worth retrying; ``reason`` is short and human."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _connection_reason(e: Exception) -> str:
    text = str(e).lower()
    for needle, reason in (("refused", "connection refused"), ("reset", "connection reset"),
                           ("aborted", "connection aborted"), ("broken pipe", "connection broken"),
                           ("timed out", "timed out"), ("name or service", "unknown host"),
                           ("remotedisconnected", "connection closed")):
        if needle in text:
            return reason
    return type(e).__name__


@dataclass(frozen=True)
class _Artifact:
    """One ``bk-`` tag resolved: where it is and what its manifest says."""

    repo: str
    manifest_digest: str
    manifest: dict

    @property
    def annotations(self) -> dict:
        return self.manifest.get("annotations", {})

    def entry(self) -> IndexEntry:
        a = self.annotations
        return IndexEntry(address=a[ANN + "address"], build_key=a[ANN + "build-key"],
                          key_inputs=json.loads(a.get(ANN + "key-inputs", "{}")), model=a[ANN + "model"],
                          version=a[ANN + "version"], digest=a[ANN + "content-digest"],
                          published_at=a.get(ANN + "published-at", ""))


class OciIndex:
    """IndexReader over one listing of the registry."""

    def __init__(self, artifacts: list[_Artifact]) -> None:
        self.artifacts = artifacts
        self._entries = [a.entry() for a in artifacts]

    def entries(self) -> list[IndexEntry]:
        return list(self._entries)

    def latest_by_address(self) -> dict[str, IndexEntry]:
        latest: dict[str, IndexEntry] = {}
        for e in sorted(self._entries, key=lambda e: (e.published_at, e.build_key)):
            latest[e.address] = e
        return latest

    def latest_version(self, model: str) -> str | None:
        """The version most recently published for the first time (rebuilding an older one keeps it)."""
        first: dict[str, str] = {}
        for e in self._entries:
            if e.model == model:
                first[e.version] = min(first.get(e.version, e.published_at), e.published_at)
        return max(first, key=lambda v: (first[v], v)) if first else None

    def state_token(self) -> str:
        lines = sorted(f"{a.repo}:{a.annotations.get(ANN + 'build-key')}@{a.manifest_digest}"
                       for a in self.artifacts)
        return "sha256:" + hashlib.sha256("\n".join(lines).encode()).hexdigest()


class OciStore:
    name = "oci"

    attempts = 4
    backoff_s = 0.25  # first retry waits ~0.25 s, then 0.5, 1 (each +-50% jitter)
    timeout_s = (5.0, 120.0)  # connect, read

    def __init__(self, config: RegistryConfig) -> None:
        if not config.url:
            raise StoreError("the oci store needs registry.url (host[:port]/repository-prefix)",
                             hint="e.g. registry: {store: oci, url: 127.0.0.1:5000/engines, insecure: true}")
        url = re.sub(r"^[a-z]+://", "", config.url).rstrip("/")
        self.host, _, prefix = url.partition("/")
        self.prefix = "/".join(repo_component(p) for p in prefix.split("/") if p)
        self.scheme = "http" if config.insecure else "https"
        self.base = f"{self.scheme}://{self.host}"
        self._session = None
        self._auth_header: dict[str, str] = {}
        self._resolved: dict[tuple[str, str], _Artifact] = {}  # (repo, bk tag) -> artifact; bk tags are immutable

    # ---- HTTP: one attempt, auth, retries ------------------------------------------------------------------
    @property
    def session(self):
        if self._session is None:
            import requests

            self._session = requests.Session()
        return self._session

    def _credentials(self) -> tuple[str, str] | None:
        user = os.environ.get("ORCHESTRATE_REGISTRY_USERNAME")
        password = os.environ.get("ORCHESTRATE_REGISTRY_PASSWORD")
        if user and password:
            return user, password
        try:
            from oras.auth.utils import load_configs  # reads DOCKER_CONFIG or ~/.docker/config.json

            auths = load_configs().get("auths", {})
        except Exception:  # an unreadable docker config means "no credentials", as docker itself treats it
            return None
        for key in (self.host, f"{self.scheme}://{self.host}", f"https://{self.host}", f"http://{self.host}"):
            entry = auths.get(key)
            if entry and entry.get("auth"):
                user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
                return user, password
        return None

    def _authenticate(self, challenge: str) -> bool:
        """Answer a 401's WWW-Authenticate (Basic or Bearer token); True if a new header was set."""
        creds = self._credentials()
        scheme, _, params = challenge.partition(" ")
        if scheme.lower() == "basic":
            if not creds:
                return False
            token = base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode()
            new = {"Authorization": f"Basic {token}"}
        elif scheme.lower() == "bearer":
            fields = dict(re.findall(r'(\w+)="([^"]*)"', params))
            if "realm" not in fields:
                return False
            query = {k: v for k, v in fields.items() if k in ("service", "scope")}
            r = self.session.get(fields["realm"], params=query, auth=creds, timeout=self.timeout_s)
            if r.status_code != 200:
                return False
            body = r.json()
            new = {"Authorization": f"Bearer {body.get('token') or body.get('access_token')}"}
        else:
            return False
        if new == self._auth_header:
            return False
        self._auth_header = new
        return True

    def _send(self, method: str, url: str, *, body: Callable[[], Any] | bytes | None = None,
              headers: dict | None = None, stream: bool = False, ok: tuple[int, ...] = (200,)):
        """One attempt (plus one re-send after an auth challenge). Raises _Transient for retryable failures,
        StoreError for the others; returns the response when its status is in ``ok`` (or 404 if asked)."""
        import requests

        url = url if url.startswith("http") else self.base + url
        for _ in range(2):
            data = body() if callable(body) else body
            try:
                r = self.session.request(method, url, data=data, headers={**self._auth_header, **(headers or {})},
                                         stream=stream, timeout=self.timeout_s)
            except (requests.ConnectionError, requests.Timeout) as e:
                raise _Transient(_connection_reason(e)) from e
            finally:
                if hasattr(data, "close"):
                    data.close()
            if r.status_code == 401 and self._authenticate(r.headers.get("WWW-Authenticate", "")):
                r.close()
                continue
            break
        if r.status_code in ok:
            return r
        if r.status_code in _TRANSIENT_STATUS:
            r.close()
            raise _Transient(f"HTTP {r.status_code}")
        detail = r.text[:300] if not stream else ""
        r.close()
        if r.status_code in (401, 403):
            raise StoreError(f"registry {self.host} refused {method} {url.split(self.host, 1)[-1]} "
                             f"(HTTP {r.status_code})",
                             hint="log in with `docker login` or set ORCHESTRATE_REGISTRY_USERNAME/_PASSWORD")
        raise StoreError(f"registry {self.host}: {method} {url.split(self.host, 1)[-1]} failed with HTTP "
                         f"{r.status_code}: {detail}")

    def _retrying(self, what: str, fn: Callable[[], Any]) -> Any:
        """Run a whole idempotent operation with bounded retries, exponential backoff and jitter."""
        last = ""
        for attempt in range(1, self.attempts + 1):
            try:
                return fn()
            except _Transient as e:
                last = e.reason
                if attempt < self.attempts:
                    delay = self.backoff_s * (2 ** (attempt - 1))
                    time.sleep(delay * random.uniform(0.5, 1.5))
        raise StoreUnavailableError(
            f"registry {self.host} is not reachable ({last}) after {self.attempts} attempts while {what}",
            hint=f"check that the registry at {self.base} is running and registry.url is right; "
                 "publishing again is safe (it is idempotent)")

    # ---- blobs ---------------------------------------------------------------------------------------------
    def _blob_exists(self, repo: str, digest: str) -> bool:
        r = self._send("HEAD", f"/v2/{repo}/blobs/{digest}", ok=(200, 404))
        r.close()
        return r.status_code == 200

    def _upload_blob(self, repo: str, path: Path | None, digest: str, size: int, data: bytes | None = None,
                     what: str = "") -> None:
        """POST an upload session, then one streamed ``PUT ?digest=`` of the file (never read whole)."""
        if self._blob_exists(repo, digest):
            return
        r = self._send("POST", f"/v2/{repo}/blobs/uploads/", headers={"Content-Length": "0"}, ok=(202,))
        location = r.headers["Location"]
        r.close()
        sep = "&" if "?" in location else "?"
        body = (lambda: open(path, "rb")) if data is None else data
        try:
            r = self._send("PUT", f"{location}{sep}digest={digest}", body=body,
                           headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)},
                           ok=(201,))
        except StoreError as e:
            if "DIGEST_INVALID" in str(e) or "BLOB_UPLOAD_INVALID" in str(e):
                raise IntegrityError(f"{what}: the registry computed a different digest than {digest} for "
                                     f"{path or 'the metadata'}",
                                     hint="the file changed after its metadata was built") from e
            raise
        r.close()

    def _download_blob(self, repo: str, digest: str, dest: Path, address: str) -> None:
        r = self._send("GET", f"/v2/{repo}/blobs/{digest}", stream=True, ok=(200, 404))
        if r.status_code == 404:
            r.close()
            raise ArtifactNotFoundError(f"{address}: blob {digest} is missing from {self.host}/{repo}")
        import requests
        import urllib3

        try:
            with r, atomic_writer(dest) as w:
                # Eight reused 1 MiB buffers: this thread reads the socket into one and writes it while a second
                # thread hashes the previous ones, so socket reads, page-cache writes and sha256 overlap.
                w.pump(_body_reader(r))
                # http.client's readinto returns 0 on an early EOF instead of raising: a cut connection.
                expected = _content_length(r)
                if expected is not None and w.size < expected:
                    raise _Transient(f"connection closed after {w.size} of {expected} bytes")
                actual = f"sha256:{w.hexdigest()}"
                if actual != digest:
                    raise IntegrityError(
                        f"{address}: engine {digest} failed its integrity check (downloaded bytes hash to "
                        f"{actual}); {dest} was not written",
                        hint=f"the blob in {self.host}/{repo} is corrupt; delete this artifact and republish it")
        except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError, urllib3.exceptions.HTTPError,
                ConnectionError, TimeoutError) as e:
            raise _Transient(_connection_reason(e)) from e
        except Exception as e:
            import http.client

            if isinstance(e, http.client.HTTPException):
                raise _Transient(_connection_reason(e)) from e
            raise

    # ---- manifests -----------------------------------------------------------------------------------------
    def _get_manifest(self, repo: str, ref: str) -> tuple[str, dict] | None:
        r = self._send("GET", f"/v2/{repo}/manifests/{ref}", headers={"Accept": MANIFEST_MEDIA_TYPE},
                       ok=(200, 404))
        if r.status_code == 404:
            r.close()
            return None
        raw = r.content
        digest = r.headers.get("Docker-Content-Digest") or "sha256:" + hashlib.sha256(raw).hexdigest()
        return digest, json.loads(raw)

    def _put_manifest(self, repo: str, ref: str, raw: bytes) -> None:
        r = self._send("PUT", f"/v2/{repo}/manifests/{ref}", body=raw,
                       headers={"Content-Type": MANIFEST_MEDIA_TYPE}, ok=(201,))
        r.close()

    def _resolve(self, repo: str, tag: str) -> _Artifact | None:
        key = (repo, tag)
        if key not in self._resolved:
            got = self._retrying(f"reading {repo}:{tag}", lambda: self._get_manifest(repo, tag))
            if got is None:
                return None
            self._resolved[key] = _Artifact(repo, got[0], got[1])
        return self._resolved[key]

    def _metadata(self, art: _Artifact) -> dict:
        cfg = art.manifest["config"]
        r = self._retrying(f"reading metadata of {art.repo}",
                           lambda: self._send("GET", f"/v2/{art.repo}/blobs/{cfg['digest']}"))
        raw = r.content
        if "sha256:" + hashlib.sha256(raw).hexdigest() != cfg["digest"]:
            raise IntegrityError(f"{art.annotations.get(ANN + 'address', art.repo)}: metadata blob "
                                 f"{cfg['digest']} failed its integrity check")
        return json.loads(raw)

    def _stored(self, art: _Artifact, meta: dict | None = None) -> StoredArtifact:
        meta = meta if meta is not None else self._metadata(art)
        return StoredArtifact(digest=meta["engine"]["digest"], metadata=meta,
                              location=f"{self.host}/{art.repo}@{art.manifest_digest}")

    # ---- listing -------------------------------------------------------------------------------------------
    def _paginated(self, path: str, key: str) -> list[str]:
        out: list[str] = []
        url: str | None = f"{path}?n=1000"
        while url:
            r = self._retrying(f"listing {path}", lambda u=url: self._send("GET", u, ok=(200, 404)))
            if r.status_code == 404:
                return out
            out.extend(r.json().get(key) or [])
            link = r.headers.get("Link", "")
            m = re.search(r"<([^>]+)>", link)
            url = m.group(1) if m else None
        return out

    def _repositories(self) -> list[str]:
        prefix = self.prefix + "/" if self.prefix else ""
        return [r for r in self._paginated("/v2/_catalog", "repositories") if r.startswith(prefix)]

    def _repo(self, model: str) -> str:
        return f"{self.prefix}/{repo_component(model)}" if self.prefix else repo_component(model)

    def _list_artifacts(self, repos: list[str] | None = None) -> list[_Artifact]:
        repos = self._repositories() if repos is None else repos
        pairs = [(repo, t) for repo in repos for t in self._paginated(f"/v2/{repo}/tags/list", "tags")
                 if t.startswith(BK_TAG)]
        with ThreadPoolExecutor(max_workers=8) as pool:
            found = list(pool.map(lambda p: self._resolve(*p), pairs))
        return [a for a in found if a is not None]

    def index(self) -> OciIndex:
        return OciIndex(self._list_artifacts())

    # ---- Store API -----------------------------------------------------------------------------------------
    def put(self, files: ArtifactFiles) -> StoredArtifact:
        meta = json.loads(json.dumps(files.metadata))
        meta.pop("published_at", None)
        meta.pop("attachments", None)
        validate_metadata(meta)
        repo = self._repo(meta["model"]["name"])
        tag = BK_TAG + meta["build_key"]
        existing = self._resolve(repo, tag)
        if existing is not None:  # idempotent: this build key is already published
            return self._stored(existing)

        address = meta["address"]
        engine = meta["engine"]
        self._retrying(f"uploading the engine of {address}",
                       lambda: self._upload_blob(repo, Path(files.engine), engine["digest"], engine["size"],
                                                 what=address))
        layers = [{"mediaType": engine["media_type"], "digest": engine["digest"], "size": engine["size"],
                   "annotations": {"org.opencontainers.image.title": engine["filename"]}}]
        attachments = []
        for role, path in ([("log", files.log)] if files.log else []) + [("extra", p) for p in files.extra]:
            path = Path(path)
            hexdigest, size = hash_file(str(path))[0].split(":", 1)[1], path.stat().st_size
            digest = f"sha256:{hexdigest}"
            self._retrying(f"uploading {path.name} of {address}",
                           functools.partial(self._upload_blob, repo, path, digest, size, what=address))
            attachments.append({"name": path.name, "role": role, "digest": digest, "size": size})
            layers.append({"mediaType": LOG_MEDIA_TYPE if role == "log" else EXTRA_MEDIA_TYPE,
                           "digest": digest, "size": size,
                           "annotations": {"org.opencontainers.image.title": path.name}})
        meta["published_at"] = utc_now()
        if attachments:
            meta["attachments"] = attachments
        config = json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()
        config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
        self._retrying(f"uploading the metadata of {address}",
                       lambda: self._upload_blob(repo, None, config_digest, len(config), data=config, what=address))
        manifest = {
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "config": {"mediaType": METADATA_MEDIA_TYPE, "digest": config_digest, "size": len(config)},
            "layers": layers,
            "annotations": _annotations(meta),
        }
        raw = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
        # The bk- tag is the artifact's identity; the readable tag follows it (people only, moves).
        self._retrying(f"publishing {address}", lambda: self._put_manifest(repo, tag, raw))
        self._retrying(f"tagging {address}", lambda: self._put_manifest(repo, readable_tag(meta), raw))
        # Re-read: if another publisher of the same build key wrote the tag after us, theirs is the artifact.
        self._resolved.pop((repo, tag), None)
        art = self._resolve(repo, tag)
        ours = "sha256:" + hashlib.sha256(raw).hexdigest()
        if art is None:
            raise StoreError(f"{address}: tag {repo}:{tag} vanished right after it was written")
        return self._stored(art, meta if art.manifest_digest == ours else None)

    def _candidates(self, digest: str) -> list[_Artifact]:
        return [a for a in self._list_artifacts() if a.annotations.get(ANN + "content-digest") == digest]

    def get(self, digest: str, dest: Path) -> StoredArtifact:
        digest = _normalize_digest(digest)
        found = sorted(self._candidates(digest), key=lambda a: a.annotations.get(ANN + "published-at", ""))
        if not found:
            raise ArtifactNotFoundError(f"no artifact with engine digest {digest} in {self.host}/{self.prefix}",
                                        hint="`orchestrate plan` lists what is published")
        art = found[-1]
        address = art.annotations.get(ANN + "address", art.repo)
        self._retrying(f"downloading {address}",
                       lambda: self._download_blob(art.repo, digest, Path(dest), address))
        return self._stored(art)

    def records(self, model: str | None = None) -> list[StoredArtifact]:
        """Newest first. One repository per model, so asking for a model reads only that repository."""
        repos = None
        if model is not None:
            repos = [r for r in self._repositories() if r == self._repo(model)]
        arts = sorted(self._list_artifacts(repos), key=lambda a: a.annotations.get(ANN + "published-at", ""),
                      reverse=True)
        with ThreadPoolExecutor(max_workers=8) as pool:
            return list(pool.map(self._stored, arts))

    def delete(self, digests: Iterable[str]) -> int:
        """Delete the manifests of artifacts with these engine digests (their tags go with them); the
        registry's garbage collector reclaims blobs. Only via the retention command."""
        wanted = {_normalize_digest(d) for d in digests}
        doomed = [a for a in self._list_artifacts() if a.annotations.get(ANN + "content-digest") in wanted]
        for a in doomed:
            r = self._retrying(f"deleting {a.repo}@{a.manifest_digest}",
                               lambda a=a: self._send("DELETE", f"/v2/{a.repo}/manifests/{a.manifest_digest}",
                                                      ok=(202, 404)))
            r.close()
        self._resolved.clear()
        return len(doomed)


def _annotations(meta: dict) -> dict[str, str]:
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
        ANN + "content-digest": meta["engine"]["digest"],
        ANN + "address": meta["address"],
        ANN + "format": "onnx" if meta["engine"]["media_type"] == ONNX_ENGINE_MEDIA_TYPE else "tensorrt-plan",
        ANN + "key-inputs": json.dumps(meta["key_inputs"], sort_keys=True, separators=(",", ":")),
        ANN + "published-at": meta["published_at"],
        "org.opencontainers.image.created": meta["published_at"],
    }


def _normalize_digest(digest: str) -> str:
    text = digest.strip().lower()
    if re.fullmatch(r"[0-9a-f]{64}", text):
        text = "sha256:" + text
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", text):
        raise StoreError(f"not a sha256 digest: {digest!r}", hint="digests look like sha256:<64 hex digits>")
    return text


def _content_length(r) -> int | None:
    try:
        return int(r.headers["Content-Length"])
    except (KeyError, ValueError):
        return None


def _body_reader(r) -> Callable[[bytearray], int]:
    """``readinto`` for a streamed response body, as direct as the response allows.

    urllib3 2.x's ``HTTPResponse.readinto`` is ``read(len(b))`` plus a copy: a fresh 1 MiB ``bytes`` per call
    (malloc + page faults) and a second memcpy, which profiled as a third of the pull time here. When the body
    is not content-encoded, the ``http.client`` response underneath (``r.raw._fp``, urllib3 2.x) reads straight
    from the socket buffer into ours, dechunking if needed. Any other shape falls back to urllib3's readinto.
    """
    raw = r.raw
    fp = getattr(raw, "_fp", None)
    encoding = r.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding in ("", "identity") and fp is not None and hasattr(fp, "readinto"):
        return fp.readinto
    return raw.readinto
