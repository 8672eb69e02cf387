"""The ``oci`` store: any OCI registry (distribution, Harbor, GHCR, ...) over the distribution HTTP API.

Layout. ``RegistryConfig.url`` is ``host[:port]/prefix``; each model gets a repository ``<prefix>/<model>``.
One record (one engine = build key, with one set of gate verdicts = gate key) = one OCI image manifest:

- config blob: the metadata JSON (``application/vnd.trt-orchestrator.metadata.v1+json``)
- layer 0: the engine (``application/vnd.trt-orchestrator.engine.v1``, or ``...engine.v1.onnx`` for
  onnxruntime engines), then the build log and extra files as further layers, then the attachments (calibration
  and timing caches) with their own media types (``application/vnd.trt-orchestrator.calibration-cache.v1``,
  ``...timing-cache.v1``); every layer but the engine carries its name (``org.opencontainers.image.title``) and
  role (``io.trt-orchestrator.role``), as the metadata's ``attachments`` list does
- manifest annotations ``io.trt-orchestrator.*`` (model, version, precision, profile, compute-capabilities,
  builder, builder-version, build-key, record-key, gate-key, gate-key-inputs, content-digest, address, format,
  key-inputs, published-at); the key inputs are JSON
- tags: ``bk-<record key>`` (one per record, written once: what machines and the index use) and a readable
  ``<version>-<precision>-<profile set>-<target slug>`` (for people; moves to the newest record of that
  address + version). Digests are what ``get`` takes.

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
so 8 concurrent publishers can neither lose nor duplicate anything. Two publishers of the *same* record key
race only on that tag: it ends on one manifest, the other becomes untagged and invisible; both calls then
return what the tag points to. Cost: one manifest GET per record per index read (8 parallel requests,
cached per store instance since ``bk-`` tags are immutable); a snapshot cache can be layered on later.

Which repositories. ``/v2/_catalog`` is not in the OCI distribution spec and GHCR / Docker Hub do not serve it,
so the store keeps its own listing: the repository ``<prefix>/trt-orchestrator-index`` holds one tag per model
repository (``m-<repository component>``, or ``h-<sha256>`` when that would pass the 128-character tag limit,
whose manifest names the repository in an annotation). Each entry is a tiny, deterministic manifest written
before the first tag of an artifact in that repository, by every publisher for its own repository only:
concurrent publishers write identical bytes under distinct or identical tags, so no entry can be lost.
``records(model)`` reads the model's repository directly. ``/v2/_catalog`` is only a fallback, used while the
listing does not exist yet (a registry written by an older client), and the publish that creates the listing
carries the catalog's repositories into it. A model whose repository would be the listing's is refused.

Publish order. Blobs, then the listing entry, then the readable tag, then the ``bk-`` tag: the ``bk-`` tag is the
commit point and the only tag reads use, so a publisher killed anywhere before it leaves nothing visible and a
rerun completes everything; a rerun that finds the ``bk-`` tag still re-creates a missing readable tag (never
moving one that exists) and a missing listing entry.

Deadline. Every registry operation (one request with its retries and back-off, including auth) has one overall
deadline: ``ORCHESTRATE_REGISTRY_TIMEOUT`` seconds (default 60; the store's ``timeout_s`` attribute), plus one
second per MiB for blob transfers (a large engine on a slow link is not cut, a stalled one is). No socket wait
outlives it; past it the operation fails with ``StoreUnavailableError`` naming the host and the deadline. A server
that accepts connections and never answers costs one deadline, not minutes.

Is it a registry? Before the first request of a store instance, ``GET /v2/`` must answer 200 (with the
``Docker-Distribution-API-Version`` header or a JSON body) or 401, as the distribution spec says; anything else
(a web server's 404 page, an HTML catch-all) is a ``StoreError`` saying the URL is not an OCI registry, never an
empty registry.

Transfers stream: oras-py's push reads the whole file into memory (229 MB RSS for a 200 MB engine), so blobs
go up as POST + one streamed ``PUT ?digest=`` and come down through one reused 1 MiB buffer into a temp file
next to the destination, hashed in a second thread as it is written and verified before the rename; a failure
writing the destination (full disk, read-only, permissions) is a ``StoreError`` naming it, leaving no file.
Credentials: env ``ORCHESTRATE_REGISTRY_USERNAME``/``_PASSWORD``, else the docker config
(``$DOCKER_CONFIG/config.json``, else ``~/.docker/config.json``; its ``auths`` entry for the host, ``auth`` =
base64 of ``user:password`` or ``username``/``password``), used for Basic or Bearer-token challenges and read
only when the registry asks. A config that is not JSON or an entry that is malformed is a ``StoreError`` naming
the file and the host. Credential helpers (``credsStore``/``credHelpers``) are not consulted.
Transient failures (connection errors, 429, 5xx) are retried with exponential backoff and jitter, then
reported as ``StoreUnavailableError``.

Dependencies: ``requests`` (with its ``urllib3``), imported when a store is opened; without it opening the store is
a one-line ``StoreError`` with the hint ``pip install 'trt-orchestrator[oci]'``. Nothing of oras-py is used.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
import math
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.contracts.store import CACHE_ROLES, ArtifactFiles, IndexEntry, StoredArtifact
from orchestrator.core.model import RegistryConfig
from orchestrator.digests import hash_file
from orchestrator.errors import ArtifactNotFoundError, IntegrityError, StoreError, StoreUnavailableError
from orchestrator.metadata import (
    METADATA_MEDIA_TYPE,
    ONNX_ENGINE_MEDIA_TYPE,
    utc_now,
    validate_metadata,
)
from trt_orchestrator_plugins.stores._atomic import DestinationError, atomic_writer, write_error
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
)

MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
LOG_MEDIA_TYPE = "application/vnd.trt-orchestrator.log.v1+text"
EXTRA_MEDIA_TYPE = "application/vnd.trt-orchestrator.file.v1"
CALIBRATION_CACHE_MEDIA_TYPE = "application/vnd.trt-orchestrator.calibration-cache.v1"
TIMING_CACHE_MEDIA_TYPE = "application/vnd.trt-orchestrator.timing-cache.v1"
ROLE_MEDIA_TYPES = {"log": LOG_MEDIA_TYPE, "extra": EXTRA_MEDIA_TYPE,
                    "calibration-cache": CALIBRATION_CACHE_MEDIA_TYPE, "timing-cache": TIMING_CACHE_MEDIA_TYPE}
TITLE = "org.opencontainers.image.title"
ANN = "io.trt-orchestrator."
BK_TAG = "bk-"
_TRANSIENT_STATUS = {429, 500, 502, 503, 504}
_ANSWERED = tuple(s for s in range(200, 600) if s not in _TRANSIENT_STATUS)  # final answers, whatever they say
_REPO_COMPONENT = re.compile(r"[^a-z0-9._-]+")
INSTALL_HINT = "pip install 'trt-orchestrator[oci]'"
TIMEOUT_ENV = "ORCHESTRATE_REGISTRY_TIMEOUT"
DEFAULT_TIMEOUT_S = 60.0
TRANSFER_FLOOR_BYTES_PER_S = 1024 * 1024  # blob transfers get one more second of deadline per MiB
LISTING_REPO = "trt-orchestrator-index"
EMPTY_BLOB = b"{}"
EMPTY_DESCRIPTOR = {"mediaType": "application/vnd.oci.empty.v1+json",
                    "digest": "sha256:" + hashlib.sha256(EMPTY_BLOB).hexdigest(), "size": len(EMPTY_BLOB)}
_REQUIRED_ANNOTATIONS = ("address", "build-key", "model", "version", "content-digest")


def _requests():
    """``requests`` (the one library this store needs), or a one-line error with the install hint."""
    try:
        import requests
        import urllib3  # noqa: F401 - requests' own dependency; the download path uses it directly
    except ImportError as e:
        raise StoreError(f"the oci store needs the Python package `{e.name or 'requests'}`, which is not installed",
                         hint=INSTALL_HINT) from None
    return requests


def timeout_from_env() -> float:
    """The per-operation deadline in seconds: ``ORCHESTRATE_REGISTRY_TIMEOUT``, else 60."""
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise StoreError(f"{TIMEOUT_ENV}={text!r} is not a number of seconds above 0",
                         hint=f"e.g. {TIMEOUT_ENV}=120, or unset it for the default {DEFAULT_TIMEOUT_S:g} s")
    return value


def docker_config_path() -> Path:
    """``$DOCKER_CONFIG/config.json`` when DOCKER_CONFIG is set, else ``~/.docker/config.json`` (as docker)."""
    directory = os.environ.get("DOCKER_CONFIG", "").strip()
    if directory:
        return Path(directory) / "config.json"
    try:
        return Path.home() / ".docker" / "config.json"
    except RuntimeError:  # no home directory to be found: no docker config either (a path that cannot exist)
        return Path("/nonexistent/.docker/config.json")


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
    raw: bytes = b""

    @property
    def annotations(self) -> dict:
        return self.manifest.get("annotations", {})

    @property
    def record_key(self) -> str:
        """The record's identity: the record-key annotation, or the build key of a record from before them."""
        a = self.annotations
        return str(a.get(ANN + "record-key") or a[ANN + "build-key"])

    def entry(self) -> IndexEntry:
        a = self.annotations
        return IndexEntry(address=a[ANN + "address"], build_key=a[ANN + "build-key"],
                          key_inputs=json.loads(a.get(ANN + "key-inputs", "{}")), model=a[ANN + "model"],
                          version=a[ANN + "version"], digest=a[ANN + "content-digest"],
                          published_at=a.get(ANN + "published-at", ""), gate_key=a.get(ANN + "gate-key", ""),
                          gate_inputs=json.loads(a.get(ANN + "gate-key-inputs", "{}")),
                          record_key=self.record_key)

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


class OciIndex:
    """IndexReader over one listing of the registry."""

    def __init__(self, artifacts: list[_Artifact]) -> None:
        self.artifacts = artifacts
        self._entries = [a.entry() for a in artifacts]

    def entries(self) -> list[IndexEntry]:
        return list(self._entries)

    def record_digests(self) -> dict[str, str]:
        """Every record key -> its engine digest (``contracts.store.RecordKeyIndex``)."""
        return {e.record_key: e.digest for e in self._entries}

    def latest_by_address(self) -> dict[str, IndexEntry]:
        """The newest publish per address (several records may share a build key: the newest one wins)."""
        latest: dict[str, IndexEntry] = {}
        for e in sorted(self._entries, key=lambda e: (e.published_at, e.record_key)):
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
        lines = sorted(f"{a.repo}:{a.record_key}@{a.manifest_digest}" for a in self.artifacts)
        return "sha256:" + hashlib.sha256("\n".join(lines).encode()).hexdigest()


class OciStore:
    name = "oci"

    attempts = 4
    backoff_s = 0.25  # first retry waits ~0.25 s, then 0.5, 1 (each +-50% jitter)
    connect_timeout_s = 5.0  # per attempt, never past the operation's deadline
    attempt_timeout_s = 120.0  # longest wait for one socket read in one attempt, never past the deadline

    def __init__(self, config: RegistryConfig) -> None:
        if not config.url:
            raise StoreError("the oci store needs registry.url (host[:port]/repository-prefix)",
                             hint="e.g. registry: {store: oci, url: 127.0.0.1:5000/engines, insecure: true}")
        _requests()
        self.timeout_s = timeout_from_env()  # the deadline of one registry operation (seconds)
        url = re.sub(r"^[a-z]+://", "", config.url).rstrip("/")
        self.host, _, prefix = url.partition("/")
        self.prefix = "/".join(repo_component(p) for p in prefix.split("/") if p)
        self.scheme = "http" if config.insecure else "https"
        self.base = f"{self.scheme}://{self.host}"
        self._session = None
        self._auth_header: dict[str, str] = {}
        self._resolved: dict[tuple[str, str], _Artifact] = {}  # (repo, bk tag) -> artifact; bk tags are immutable
        self._tls = threading.local()  # the deadline of the operation running in this thread
        self._api_checked = False
        self._api_lock = threading.Lock()
        self._listed: set[str] = set()  # repositories whose listing entry this instance has seen or written

    # ---- HTTP: one attempt, auth, retries ------------------------------------------------------------------
    @property
    def session(self):
        if self._session is None:
            self._session = _requests().Session()
        return self._session

    def _credentials(self) -> tuple[str, str] | None:
        user = os.environ.get("ORCHESTRATE_REGISTRY_USERNAME")
        password = os.environ.get("ORCHESTRATE_REGISTRY_PASSWORD")
        if user and password:
            return user, password
        return self._docker_credentials(docker_config_path())

    def _docker_credentials(self, path: Path) -> tuple[str, str] | None:
        """This host's entry in a docker config file: None when there is none; StoreError when it is broken."""
        fix = (f"run `docker login {self.host}` to rewrite it, or set ORCHESTRATE_REGISTRY_USERNAME and "
               "ORCHESTRATE_REGISTRY_PASSWORD")
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise StoreError(f"cannot read the docker config {path} (credentials for {self.host}): "
                             f"{e.strerror or e}", hint=fix) from None
        try:
            config = json.loads(raw)
        except ValueError as e:
            raise StoreError(f"the docker config {path} is not valid JSON ({str(e).splitlines()[0]}); it was read "
                             f"for the credentials of {self.host}", hint=f"fix or remove it, then {fix}") from None
        auths = config.get("auths") if isinstance(config, dict) else None
        if auths is None:
            return None
        if not isinstance(auths, dict):
            raise StoreError(f"the docker config {path}: `auths` is not an object (credentials for {self.host})",
                             hint=fix)
        for key, entry in auths.items():
            if re.sub(r"^[a-z]+://", "", str(key)).split("/", 1)[0] != self.host:
                continue

            def malformed(why: str, key=key) -> StoreError:
                return StoreError(f"the docker config {path} has a malformed auth entry for {self.host} "
                                  f"(auths[{json.dumps(key)}]: {why})", hint=fix)

            if not isinstance(entry, dict):
                raise malformed("not an object")
            auth = entry.get("auth")
            if auth:
                if not isinstance(auth, str):
                    raise malformed("`auth` is not a string")
                try:
                    text = base64.b64decode(auth, validate=True).decode()
                except (binascii.Error, ValueError):
                    raise malformed("`auth` is not base64 of user:password") from None
                user, colon, password = text.partition(":")
                if not colon or not user:
                    raise malformed("`auth` decodes to no user:password pair") from None
                return user, password
            user, password = entry.get("username"), entry.get("password")
            if isinstance(user, str) and isinstance(password, str) and user:
                return user, password
            return None  # an entry without credentials (identity token, credential helper): anonymous
        return None

    # ---- deadlines -------------------------------------------------------------------------------------------
    def _remaining(self) -> float | None:
        deadline = getattr(self._tls, "deadline", None)
        return None if deadline is None else deadline - time.monotonic()

    def _timeouts(self) -> tuple[float, float]:
        """(connect, read) for one request: the per-attempt caps, never past the operation's deadline."""
        left = self._remaining()
        if left is None:
            return self.connect_timeout_s, self.attempt_timeout_s
        if left <= 0:
            raise _Transient("deadline passed")
        return min(self.connect_timeout_s, left), min(self.attempt_timeout_s, left)

    def _check_deadline(self) -> None:
        left = self._remaining()
        if left is not None and left <= 0:
            raise _Transient("the transfer ran past its deadline")

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
            requests = _requests()
            try:
                r = self.session.get(fields["realm"], params=query, auth=creds, timeout=self._timeouts())
            except (requests.ConnectionError, requests.Timeout) as e:
                raise _Transient(f"token service: {_connection_reason(e)}") from e
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
        requests = _requests()
        url = url if url.startswith("http") else self.base + url
        for _ in range(2):
            timeouts = self._timeouts()
            data = body() if callable(body) else body
            try:
                r = self.session.request(method, url, data=data, headers={**self._auth_header, **(headers or {})},
                                         stream=stream, timeout=timeouts)
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
                             hint=f"log in with `docker login {self.host}` (credentials are read from "
                                  f"{docker_config_path()}) or set ORCHESTRATE_REGISTRY_USERNAME/_PASSWORD")
        raise StoreError(f"registry {self.host}: {method} {url.split(self.host, 1)[-1]} failed with HTTP "
                         f"{r.status_code}: {detail}")

    def _retrying(self, what: str, fn: Callable[[], Any], *, transfer_bytes: int = 0) -> Any:
        """Run a whole idempotent operation with bounded retries, exponential backoff and jitter, all within
        one deadline (``timeout_s``, plus a second per MiB of ``transfer_bytes``)."""
        limit = self.timeout_s + transfer_bytes / TRANSFER_FLOOR_BYTES_PER_S
        outer = getattr(self._tls, "deadline", None)
        deadline = time.monotonic() + limit
        if outer is not None and outer < deadline:  # nested: the enclosing operation's deadline still holds
            deadline = outer
        self._tls.deadline = deadline
        try:
            last = ""
            for attempt in range(1, self.attempts + 1):
                try:
                    return fn()
                except _Transient as e:
                    last = e.reason
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                if attempt < self.attempts:
                    delay = self.backoff_s * (2 ** (attempt - 1)) * random.uniform(0.5, 1.5)
                    if delay >= left:
                        time.sleep(left)
                        break
                    time.sleep(delay)
            else:
                raise StoreUnavailableError(
                    f"registry {self.host} is not reachable ({last}) after {self.attempts} attempts while {what}",
                    hint=f"check that the registry at {self.base} is running and registry.url is right; "
                         "publishing again is safe (it is idempotent)")
            raise StoreUnavailableError(
                f"registry {self.host} did not answer within the {limit:g} s deadline while {what} ({last})",
                hint=f"check that the registry at {self.base} is up and answering; for a slow registry or link "
                     f"raise the deadline with {TIMEOUT_ENV}=SECONDS (now {self.timeout_s:g}); publishing again "
                     "is safe (it is idempotent)")
        finally:
            self._tls.deadline = outer

    def _json(self, r, what: str) -> Any:
        """A response body as JSON, or a StoreError saying the server answered something else."""
        try:
            return json.loads(r.content)
        except ValueError:
            raise StoreError(f"registry {self.host}: {what} answered HTTP {r.status_code} with a body that is not "
                             f"JSON ({r.headers.get('Content-Type', 'no content type')})",
                             hint="check that registry.url names an OCI registry (host[:port]/prefix)") from None

    def _check_api(self) -> None:
        """``GET /v2/`` (the distribution spec's version check), once per instance: 200 or 401, or refuse."""
        if self._api_checked:
            return
        with self._api_lock:
            if self._api_checked:
                return
            r = self._retrying("checking that it serves the registry API (GET /v2/)",
                               lambda: self._send("GET", "/v2/", ok=_ANSWERED))
            status = r.status_code
            api = r.headers.get("Docker-Distribution-API-Version", "")
            body = r.content[:65536] if status == 200 else b""
            r.close()
            if status == 401 or (status == 200 and (api.startswith("registry/2") or _json_object(body))):
                self._api_checked = True
                return
            if status == 403:
                raise StoreError(f"registry {self.host} refused GET /v2/ (HTTP 403)",
                                 hint="log in with `docker login` or set ORCHESTRATE_REGISTRY_USERNAME/_PASSWORD")
            what = f"HTTP {status}" + (" with a body that is not the registry API's" if status == 200 else "")
            raise StoreError(f"{self.host} is not an OCI registry: GET /v2/ answered {what} (a registry answers 200 "
                             "or 401)",
                             hint="check registry.url (host[:port]/prefix): it must name the registry itself, not "
                                  "a web page, a proxy path or another service on that port")

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
        body = (lambda: _BoundedFile(path, size, self._check_deadline)) if data is None else data
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

    def _download_blob(self, repo: str, digest: str, dest: Path, address: str, what: str = "engine") -> None:
        r = self._send("GET", f"/v2/{repo}/blobs/{digest}", stream=True, ok=(200, 404))
        if r.status_code == 404:
            r.close()
            raise ArtifactNotFoundError(f"{address}: the {what} blob {digest} is missing from {self.host}/{repo}",
                                        hint="the registry lost it (garbage-collected or damaged storage); "
                                             "delete this record with the retention command and republish")
        requests = _requests()
        import urllib3

        read = _body_reader(r)

        def bounded(buf):  # the operation's deadline, checked between 1 MiB reads
            self._check_deadline()
            return read(buf)

        try:
            with r, atomic_writer(dest) as w:
                # Eight reused 1 MiB buffers: this thread reads the socket into one and writes it while a second
                # thread hashes the previous ones, so socket reads, page-cache writes and sha256 overlap.
                w.pump(bounded)
                # http.client's readinto returns 0 on an early EOF instead of raising: a cut connection.
                expected = _content_length(r)
                if expected is not None and w.size < expected:
                    raise _Transient(f"connection closed after {w.size} of {expected} bytes")
                actual = f"sha256:{w.hexdigest()}"
                if actual != digest:
                    raise IntegrityError(
                        f"{address}: {what} {digest} failed its integrity check (downloaded bytes hash to "
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
        got = self._get_manifest_raw(repo, ref)
        return None if got is None else (got[0], got[1])

    def _get_manifest_raw(self, repo: str, ref: str) -> tuple[str, dict, bytes] | None:
        r = self._send("GET", f"/v2/{repo}/manifests/{ref}", headers={"Accept": MANIFEST_MEDIA_TYPE},
                       ok=(200, 404))
        if r.status_code == 404:
            r.close()
            return None
        raw = r.content
        digest = r.headers.get("Docker-Content-Digest") or "sha256:" + hashlib.sha256(raw).hexdigest()
        manifest = self._json(r, f"GET /v2/{repo}/manifests/{ref}")
        if not isinstance(manifest, dict):
            raise StoreError(f"registry {self.host}: the manifest {repo}:{ref} is not a JSON object")
        return digest, manifest, raw

    def _put_manifest(self, repo: str, ref: str, raw: bytes) -> None:
        self._send_manifest(repo, ref, raw)

    def _send_manifest(self, repo: str, ref: str, raw: bytes) -> None:
        """PUT a manifest. A MANIFEST_BLOB_UNKNOWN answer for blobs just uploaded is retried (_Transient): with
        the filesystem driver, distribution rewrites a repository's blob link in place when several clients
        commit the same blob at once, and a manifest PUT reading it meanwhile finds it empty."""
        r = self._send("PUT", f"/v2/{repo}/manifests/{ref}", body=raw,
                       headers={"Content-Type": MANIFEST_MEDIA_TYPE}, ok=(201, 400))
        if r.status_code == 400:
            text = r.text[:300]
            r.close()
            if "MANIFEST_BLOB_UNKNOWN" in text:
                raise _Transient("the registry did not find a blob of the manifest (MANIFEST_BLOB_UNKNOWN)")
            raise StoreError(f"registry {self.host}: PUT /v2/{repo}/manifests/{ref} failed with HTTP 400: {text}")
        r.close()

    def _resolve(self, repo: str, tag: str) -> _Artifact | None:
        key = (repo, tag)
        if key not in self._resolved:
            got = self._retrying(f"reading {repo}:{tag}", lambda: self._get_manifest_raw(repo, tag))
            if got is None:
                return None
            self._resolved[key] = _Artifact(repo, got[0], got[1], got[2])
        return self._resolved[key]

    def _metadata(self, art: _Artifact) -> dict:
        cfg = art.manifest["config"]
        r = self._retrying(f"reading metadata of {art.repo}",
                           lambda: self._send("GET", f"/v2/{art.repo}/blobs/{cfg['digest']}"))
        raw = r.content
        if "sha256:" + hashlib.sha256(raw).hexdigest() != cfg["digest"]:
            raise IntegrityError(f"{art.annotations.get(ANN + 'address', art.repo)}: metadata blob "
                                 f"{cfg['digest']} failed its integrity check")
        meta = self._json(r, f"the metadata of {art.repo}@{art.manifest_digest}")
        if not isinstance(meta, dict) or not isinstance(meta.get("engine"), dict):
            raise IntegrityError(f"{art.annotations.get(ANN + 'address', art.repo)}: metadata blob {cfg['digest']} "
                                 "is not an artifact record", hint="delete this artifact and republish it")
        named = str(meta.get("record_key") or meta.get("build_key"))
        if named != art.record_key:
            raise IntegrityError(f"{art.annotations.get(ANN + 'address', art.repo)}: the metadata of "
                                 f"{art.repo}@{art.manifest_digest} names record key {named[:64]!r}, its manifest "
                                 f"{art.record_key}", hint="delete this artifact and republish it")
        return meta

    def _stored(self, art: _Artifact, meta: dict | None = None) -> StoredArtifact:
        meta = meta if meta is not None else self._metadata(art)
        return StoredArtifact(digest=meta["engine"]["digest"], metadata=meta,
                              location=f"{self.host}/{art.repo}@{art.manifest_digest}")

    # ---- listing -------------------------------------------------------------------------------------------
    def _paginated_or_none(self, path: str, key: str) -> list[str] | None:
        """Every page of a tags/catalog list; None when the registry answers 404 (no such repository)."""
        out: list[str] = []
        url: str | None = f"{path}?n=1000"
        while url:
            r = self._retrying(f"listing {path}", lambda u=url: self._send("GET", u, ok=(200, 404)))
            if r.status_code == 404:
                r.close()
                return None if not out else out
            body = self._json(r, f"GET {path}")
            items = body.get(key) if isinstance(body, dict) else None
            out.extend(str(i) for i in (items or []))
            link = r.headers.get("Link", "")
            m = re.search(r"<([^>]+)>", link)
            url = m.group(1) if m else None
        return out

    def _paginated(self, path: str, key: str) -> list[str]:
        return self._paginated_or_none(path, key) or []

    def _repo(self, model: str) -> str:
        return f"{self.prefix}/{repo_component(model)}" if self.prefix else repo_component(model)

    def _listing_repo(self) -> str:
        return f"{self.prefix}/{LISTING_REPO}" if self.prefix else LISTING_REPO

    def _catalog_repositories(self) -> list[str]:
        """The fallback: ``/v2/_catalog`` where the registry serves it (else nothing), under our prefix."""
        out: list[str] = []
        url: str | None = "/v2/_catalog?n=1000"
        while url:
            r = self._retrying("listing /v2/_catalog", lambda u=url: self._send("GET", u, ok=_ANSWERED))
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
        tags = self._paginated_or_none(f"/v2/{listing}/tags/list", "tags")
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
        raw = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()  # same bytes for every writer
        tag = self._listing_tag(repo)

        def write() -> None:  # the shared empty blob first: concurrent publishers all commit it (see _send_manifest)
            self._upload_blob(listing, None, EMPTY_DESCRIPTOR["digest"], len(EMPTY_BLOB), data=EMPTY_BLOB,
                              what="the listing")
            self._send_manifest(listing, tag, raw)

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
            if self._paginated_or_none(f"/v2/{listing}/tags/list", "tags") is None:
                for older in self._catalog_repositories():
                    if older != repo:
                        self._write_listing_entry(older)
                        self._listed.add(older)
            self._write_listing_entry(repo)
        self._listed.add(repo)

    def _list_artifacts(self, repos: list[str] | None = None) -> list[_Artifact]:
        repos = self._repositories() if repos is None else repos
        pairs = [(repo, t) for repo in repos
                 for t in (self._paginated_or_none(f"/v2/{repo}/tags/list", "tags") or []) if t.startswith(BK_TAG)]
        with ThreadPoolExecutor(max_workers=8) as pool:
            found = list(pool.map(lambda p: self._resolve(*p), pairs))
        out = []
        for (repo, tag), art in zip(pairs, found):
            if art is None or not _is_artifact(art):
                continue
            if tag != BK_TAG + art.record_key:  # a bk- tag names its record's key (else: moved or forged)
                raise IntegrityError(
                    f"registry {self.host}: the tag {repo}:{tag} holds the record of record key "
                    f"{art.record_key[:64]!r}, not its own {tag[len(BK_TAG):]}",
                    hint=f"bk- tags are written once and never moved: remove the tag {repo}:{tag} (or, where the "
                         f"registry cannot delete a tag alone, the manifest {repo}@{art.manifest_digest} with its "
                         "tags) and publish the affected artifacts again")
            out.append(art)
        return out

    def index(self) -> OciIndex:
        self._check_api()
        return OciIndex(self._list_artifacts())

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
        if existing is not None:  # idempotent: this record key is already published; complete what a crash left
            self._ensure_listed(repo)
            self._ensure_readable_tag(existing, readable_tag(meta))
            return self._stored(existing)

        address = meta["address"]
        engine = meta["engine"]
        self._retrying(f"uploading the engine of {address}",
                       lambda: self._upload_blob(repo, Path(files.engine), engine["digest"], engine["size"],
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
                           functools.partial(self._upload_blob, repo, path, digest, size, what=address),
                           transfer_bytes=size)
            attachments.append({"name": name, "role": role, "digest": digest, "size": size})
        attachments += self._inherited(repo, meta, attachments)
        for a in attachments:
            layers.append({"mediaType": ROLE_MEDIA_TYPES[a["role"]], "digest": a["digest"], "size": a["size"],
                           "annotations": {TITLE: a["name"], ANN + "role": a["role"]}})
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
        # Listed first, then the readable tag (people only, moves), then the bk- tag: the record's identity and
        # the commit point. Reads use bk- tags only, so a crash before it leaves nothing half-visible, and the
        # rerun (no bk- tag yet) writes everything again.
        self._ensure_listed(repo)
        self._retrying(f"tagging {address}", lambda: self._put_manifest(repo, readable_tag(meta), raw))
        self._retrying(f"publishing {address}", lambda: self._put_manifest(repo, tag, raw))
        # Re-read: if another publisher of the same record key wrote the tag after us, theirs is the record.
        self._resolved.pop((repo, tag), None)
        art = self._resolve(repo, tag)
        ours = "sha256:" + hashlib.sha256(raw).hexdigest()
        if art is None:
            raise StoreError(f"{address}: tag {repo}:{tag} vanished right after it was written")
        return self._stored(art, meta if art.manifest_digest == ours else None)

    def _inherited(self, repo: str, meta: dict, have: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Cache layers ``meta["caches"]`` names that this publish does not carry, from the newest other record
        of the same build key in ``repo`` (a re-gated engine: its caches are in the registry already)."""
        names = {a["name"] for a in have}
        if all(n in names for n in cache_names(meta)):
            return []
        siblings = sorted((a for a in self._list_artifacts([repo])
                           if a.annotations.get(ANN + "build-key") == meta["build_key"]
                           and a.record_key != record_id(meta)),
                          key=lambda a: a.annotations.get(ANN + "published-at", ""), reverse=True)
        return inherited(meta, have, (a.cache_layers() for a in siblings))

    def _ensure_readable_tag(self, art: _Artifact, tag: str) -> None:
        """Re-create a readable tag a crash left unwritten (an existing one, maybe a newer build's, stays)."""
        if not art.raw:
            return
        if self._retrying(f"reading {art.repo}:{tag}", lambda: self._get_manifest(art.repo, tag)) is None:
            self._retrying(f"tagging {art.repo}:{tag}", lambda: self._put_manifest(art.repo, tag, art.raw))

    def _candidates(self, digest: str) -> list[_Artifact]:
        return [a for a in self._list_artifacts() if a.annotations.get(ANN + "content-digest") == digest]

    def get(self, digest: str, dest: Path) -> StoredArtifact:
        digest = _normalize_digest(digest)
        self._check_api()
        found = sorted(self._candidates(digest), key=lambda a: a.annotations.get(ANN + "published-at", ""))
        if not found:
            raise ArtifactNotFoundError(f"no artifact with engine digest {digest} in {self.host}/{self.prefix}",
                                        hint="`orchestrate plan` lists what is published")
        art = found[-1]
        address = art.annotations.get(ANN + "address", art.repo)
        size = next((layer.get("size", 0) for layer in art.manifest.get("layers", [])
                     if layer.get("digest") == digest), 0)
        try:
            self._retrying(f"downloading {address}",
                           lambda: self._download_blob(art.repo, digest, Path(dest), address),
                           transfer_bytes=size if isinstance(size, int) else 0)
        except DestinationError as e:
            raise write_error(f"the engine of {address}", e) from None
        return self._stored(art)

    def get_attachment(self, record: StoredArtifact, name: str, dest: Path) -> Path:
        """Download the attachment ``name`` of ``record`` (a calibration or timing cache, a log) to ``dest``
        atomically, its sha256 checked against the record, within the operation's deadline."""
        meta = record.metadata
        self._check_api()
        repo = self._repo(str(meta["model"]["name"]))
        entry = find_attachment(meta, name, f"{self.host}/{repo}")
        digest = _normalize_digest(str(entry.get("digest")))
        size = entry.get("size") if isinstance(entry.get("size"), int) else 0
        address = str(meta.get("address", repo))
        what = f"{entry.get('role', 'attachment')} {name}"
        dest = Path(dest)
        try:
            self._retrying(f"downloading {what} of {address}",
                           lambda: self._download_blob(repo, digest, dest, address, what), transfer_bytes=size)
        except DestinationError as e:
            raise write_error(f"the {what} of {address}", e) from None
        return dest

    def records(self, model: str | None = None) -> list[StoredArtifact]:
        """Newest first. One repository per model, so asking for a model reads only that repository."""
        self._check_api()
        repos = [self._repo(model)] if model is not None else None
        arts = sorted(self._list_artifacts(repos), key=lambda a: a.annotations.get(ANN + "published-at", ""),
                      reverse=True)
        with ThreadPoolExecutor(max_workers=8) as pool:
            return list(pool.map(self._stored, arts))

    def delete(self, digests: Iterable[str]) -> int:
        """Delete the manifests of every record with one of these engine digests (a re-gated engine has several;
        their tags go with them); the registry's garbage collector reclaims the blobs no manifest references any
        more (engines, logs, caches), as the distribution spec leaves blob lifetime to it. Only via the
        retention command."""
        wanted = {_normalize_digest(d) for d in digests}
        self._check_api()
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


def _is_artifact(art: _Artifact) -> bool:
    """A manifest this store wrote: every annotation the index reads is there (others' bk- tags are skipped)."""
    a = art.annotations
    if not isinstance(a, dict) or not all(isinstance(a.get(ANN + k), str) for k in _REQUIRED_ANNOTATIONS):
        return False
    if not all(isinstance(a.get(ANN + k, ""), str) for k in ("record-key", "gate-key", "published-at")):
        return False
    try:
        return (isinstance(json.loads(a.get(ANN + "key-inputs", "{}")), dict)
                and isinstance(json.loads(a.get(ANN + "gate-key-inputs", "{}")), dict))
    except (TypeError, ValueError):
        return False


def _json_object(body: bytes) -> bool:
    try:
        return isinstance(json.loads(body), dict)
    except ValueError:
        return False


class _BoundedFile:
    """A blob's file as a streamed request body (read in urllib3's blocks, never whole) that stops the upload
    when the operation's deadline passes (``check`` raises)."""

    def __init__(self, path: Path, size: int, check: Callable[[], None]) -> None:
        self._file = open(path, "rb")
        self._size = size
        self._check = check

    def read(self, n: int = -1) -> bytes:
        self._check()
        return self._file.read(n)

    def __len__(self) -> int:
        return self._size

    def __iter__(self):
        while chunk := self.read(1024 * 1024):
            yield chunk

    def close(self) -> None:
        self._file.close()


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
