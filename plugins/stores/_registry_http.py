"""HTTP to one OCI registry host: credentials, auth challenges, retries, one deadline per operation.

What the OCI store sends is the distribution API; how it gets there is this module's.

Retries are urllib3's (``urllib3.util.Retry``, mounted under the ``requests`` session's adapter, as requests users
expect): connection errors, reads that fail before an answer, and the transient statuses 429/500/502/503/504 are
retried ``attempts - 1`` times, on every method (every request the store makes is idempotent: a manifest PUT by
tag, a blob PUT by digest, an upload session POST whose loser is never committed), waiting as a ``Retry-After``
header says, else exponentially (``backoff_s``, 2x per attempt, +-50% jitter). A streamed upload body is rewound
for its retry (``BoundedFile`` tells and seeks). What urllib3 cannot retry, because it happens after the answer
began (a download cut mid-body, distribution's transient ``MANIFEST_BLOB_UNKNOWN``), raises :class:`Transient`
and :meth:`RegistryHttp.retrying` runs the whole operation again.

Deadline. Every registry operation (``retrying``: its requests, their retries and back-off, auth included) has one
overall deadline: ``ORCHESTRATE_REGISTRY_TIMEOUT`` seconds (default 60), plus one second per MiB of a blob
transfer. Each attempt's connect and read timeouts are recomputed from what is left of it when the attempt starts
(:func:`_policies`' ``DeadlineTimeout``), the retry policy stops once it has passed and never sleeps past it (a
``Retry-After`` beyond it ends the operation at once), so no socket wait outlives it; past it the operation fails
with ``StoreUnavailableError`` naming the host and the deadline. A server that accepts connections and never
answers costs one deadline, not minutes.

Credentials: env ``ORCHESTRATE_REGISTRY_USERNAME``/``_PASSWORD``, else the docker config
(``$DOCKER_CONFIG/config.json``, else ``~/.docker/config.json``; its ``auths`` entry for the host, ``auth`` =
base64 of ``user:password`` or ``username``/``password``), used for Basic or Bearer-token challenges
(``WWW-Authenticate``) and read only when the registry asks. A config that is not JSON or an entry that is
malformed is a ``StoreError`` naming the file and the host. Credential helpers are not consulted.

``requests`` (with its ``urllib3``) is imported when a store is opened; without it opening the store is a one-line
``StoreError`` with the hint ``pip install 'trt-orchestrator[oci]'``.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import math
import os
import random
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.errors import StoreError, StoreUnavailableError

INSTALL_HINT = "pip install 'trt-orchestrator[oci]'"
TIMEOUT_ENV = "ORCHESTRATE_REGISTRY_TIMEOUT"
DEFAULT_TIMEOUT_S = 60.0
TRANSFER_FLOOR_BYTES_PER_S = 1024 * 1024  # blob transfers get one more second of deadline per MiB
TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
ANSWERED = tuple(s for s in range(200, 600) if s not in TRANSIENT_STATUS)  # final answers, whatever they say


def requests_module():
    """``requests`` (the one library the OCI store needs), or a one-line error with the install hint."""
    try:
        import requests
        import urllib3  # noqa: F401 - requests' own dependency; the retry policy and the download path use it
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


def docker_credentials(path: Path, host: str) -> tuple[str, str] | None:
    """``host``'s entry in a docker config file: None when there is none; StoreError when it is broken."""
    fix = (f"run `docker login {host}` to rewrite it, or set ORCHESTRATE_REGISTRY_USERNAME and "
           "ORCHESTRATE_REGISTRY_PASSWORD")
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise StoreError(f"cannot read the docker config {path} (credentials for {host}): {e.strerror or e}",
                         hint=fix) from None
    try:
        config = json.loads(raw)
    except ValueError as e:
        raise StoreError(f"the docker config {path} is not valid JSON ({str(e).splitlines()[0]}); it was read "
                         f"for the credentials of {host}", hint=f"fix or remove it, then {fix}") from None
    auths = config.get("auths") if isinstance(config, dict) else None
    if auths is None:
        return None
    if not isinstance(auths, dict):
        raise StoreError(f"the docker config {path}: `auths` is not an object (credentials for {host})", hint=fix)
    for key, entry in auths.items():
        if re.sub(r"^[a-z]+://", "", str(key)).split("/", 1)[0] != host:
            continue

        def malformed(why: str, key=key) -> StoreError:
            return StoreError(f"the docker config {path} has a malformed auth entry for {host} "
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


class Transient(Exception):
    """One attempt of an operation failed in a way worth running the operation again; ``reason`` is short."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class GaveUp(Exception):
    """urllib3 retried a request as far as its policy or the deadline allowed; ``reason`` is the last failure
    (``deadline``: it stopped because of the deadline, whatever the clock says)."""

    def __init__(self, reason: str, *, deadline: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.deadline = deadline


def connection_reason(e: BaseException) -> str:
    text = str(e).lower()
    for needle, reason in (("refused", "connection refused"), ("reset", "connection reset"),
                           ("aborted", "connection aborted"), ("broken pipe", "connection broken"),
                           ("timed out", "timed out"), ("name or service", "unknown host"),
                           ("remotedisconnected", "connection closed")):
        if needle in text:
            return reason
    return type(e).__name__


@functools.cache
def _policies() -> tuple[type, type]:
    """(``DeadlineRetry``, ``DeadlineTimeout``): urllib3's retry policy and timeout bound by the operation's
    deadline (built on first use: urllib3 is imported with the store, not with this module)."""
    from urllib3.exceptions import MaxRetryError, ResponseError
    from urllib3.util.retry import Retry
    from urllib3.util.timeout import Timeout

    class DeadlineRetry(Retry):
        """Retry as urllib3 does, but never past ``owner``'s deadline; back off by ``owner.backoff_s``."""

        owner: RegistryHttp | None = None

        def new(self, **kw: Any) -> DeadlineRetry:
            made = super().new(**kw)
            made.owner = self.owner
            return made

        def increment(self, method=None, url=None, response=None, error=None, _pool=None, _stacktrace=None):
            made = super().increment(method, url, response, error, _pool, _stacktrace)
            left = self.owner.remaining() if self.owner is not None else None
            if left is not None and left <= 0:
                raise MaxRetryError(_pool, url, error or ResponseError("the operation's deadline passed"))
            return made

        def sleep(self, response=None) -> None:
            owner = self.owner
            delay = self.get_retry_after(response) if (response is not None and self.respect_retry_after_header) \
                else None
            left = owner.remaining() if owner is not None else None
            if delay is not None and left is not None and delay > left:
                raise GaveUp(f"it asked to retry after {delay:g} s, past the deadline", deadline=True)
            if delay is None:
                backoff = owner.backoff_s if owner is not None else 0.25
                delay = backoff * (2 ** max(len(self.history) - 1, 0)) * random.uniform(0.5, 1.5)
            if left is not None:
                delay = min(delay, max(left, 0.0))
            if delay > 0:
                time.sleep(delay)

    class DeadlineTimeout(Timeout):
        """Connect and read timeouts of one attempt: the owner's caps, never past the operation's deadline (read
        when the attempt starts, so a retry gets what is left, not what the first attempt had)."""

        def __init__(self, owner: RegistryHttp) -> None:
            super().__init__(connect=owner.connect_timeout_s, read=owner.attempt_timeout_s)
            self.owner = owner

        def clone(self) -> DeadlineTimeout:
            return DeadlineTimeout(self.owner)

        def _bounded(self, cap: float) -> float:
            left = self.owner.remaining()
            return cap if left is None else max(min(cap, left), 0.001)

        @property
        def connect_timeout(self) -> float:  # type: ignore[override]
            return self._bounded(self.owner.connect_timeout_s)

        @property
        def read_timeout(self) -> float:  # type: ignore[override]
            return self._bounded(self.owner.attempt_timeout_s)

    return DeadlineRetry, DeadlineTimeout


class BoundedFile:
    """A blob's file as a streamed request body: an iterable of 1 MiB pieces read into one reused buffer (never
    the whole file), that stops the upload when the operation's deadline passes (``check`` raises), and that
    urllib3 can rewind for a retry (``tell``/``seek``).

    It has no ``read``: urllib3 reads a file-like body in 16 KiB ``read()`` calls, each a fresh ``bytes`` and one
    ``sendall`` (12,800 of each for 200 MB: ~0.1 CPU-s, which the registry needs on a loaded machine); an iterable
    is sent piece by piece, each piece with one ``sendall`` straight from our buffer (bench/NOTES-registry.md).
    The length is known (``__len__``), so the request carries ``Content-Length``, never chunked encoding."""

    PIECE = 1024 * 1024

    def __init__(self, path: Path, size: int, check: Callable[[], None]) -> None:
        self._file = open(path, "rb", buffering=0)
        self._size = size
        self._check = check

    def tell(self) -> int:
        return self._file.tell()

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return self._file.seek(offset, whence)

    def __len__(self) -> int:
        return self._size

    def __iter__(self):
        buf = bytearray(self.PIECE)
        view = memoryview(buf)
        while True:
            self._check()
            n = self._file.readinto(buf)
            if not n:
                return
            yield view[:n]  # sent (copied into the socket) before the next piece overwrites the buffer

    def close(self) -> None:
        self._file.close()


def content_length(r) -> int | None:
    try:
        return int(r.headers["Content-Length"])
    except (KeyError, ValueError):
        return None


def body_reader(r) -> Callable[[bytearray], int]:
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


def _json_object(body: bytes) -> bool:
    try:
        return isinstance(json.loads(body), dict)
    except ValueError:
        return False


class RegistryHttp:
    """Requests to one registry (``base`` = scheme://host): auth, retries and the operation deadline."""

    attempts = 4  # tries per request (urllib3's retries + 1) and per operation (``retrying``)
    backoff_s = 0.25  # first retry waits ~0.25 s, then 0.5, 1 (each +-50% jitter), unless Retry-After says
    connect_timeout_s = 5.0  # per attempt, never past the operation's deadline
    attempt_timeout_s = 120.0  # longest wait for one socket read in one attempt, never past the deadline

    def __init__(self, host: str, scheme: str) -> None:
        requests_module()
        self.timeout_s = timeout_from_env()  # the deadline of one registry operation (seconds)
        self.host = host
        self.scheme = scheme
        self.base = f"{scheme}://{host}"
        self._session = None
        self._session_lock = threading.Lock()
        self._auth_header: dict[str, str] = {}
        self._tls = threading.local()  # the deadline of the operation running in this thread
        self._api_checked = False
        self._api_lock = threading.Lock()

    @property
    def session(self):
        """One ``requests.Session`` whose adapters retry by urllib3's ``Retry`` (bound to this deadline)."""
        if self._session is None:
            with self._session_lock:
                if self._session is None:
                    requests = requests_module()
                    retry_class, _ = _policies()
                    retry = retry_class(total=self.attempts - 1, status_forcelist=TRANSIENT_STATUS,
                                        allowed_methods=None, raise_on_status=False, raise_on_redirect=False,
                                        respect_retry_after_header=True)
                    retry.owner = self
                    session = requests.Session()
                    adapter = requests.adapters.HTTPAdapter(max_retries=retry)
                    session.mount("http://", adapter)
                    session.mount("https://", adapter)
                    self._session = session
        return self._session

    def credentials(self) -> tuple[str, str] | None:
        user = os.environ.get("ORCHESTRATE_REGISTRY_USERNAME")
        password = os.environ.get("ORCHESTRATE_REGISTRY_PASSWORD")
        if user and password:
            return user, password
        return docker_credentials(docker_config_path(), self.host)

    # ---- deadlines -------------------------------------------------------------------------------------------
    def remaining(self) -> float | None:
        """Seconds left of the operation running in this thread (None: none is)."""
        deadline = getattr(self._tls, "deadline", None)
        return None if deadline is None else deadline - time.monotonic()

    def timeouts(self):
        """The timeout of one request: each attempt's caps, never past the operation's deadline."""
        left = self.remaining()
        if left is not None and left <= 0:
            raise Transient("deadline passed")
        return _policies()[1](self)

    def check_deadline(self) -> None:
        left = self.remaining()
        if left is not None and left <= 0:
            raise Transient("the transfer ran past its deadline")

    # ---- requests --------------------------------------------------------------------------------------------
    def _authenticate(self, challenge: str) -> bool:
        """Answer a 401's WWW-Authenticate (Basic or Bearer token); True if a new header was set."""
        creds = self.credentials()
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
            requests = requests_module()
            try:
                r = self.session.get(fields["realm"], params=query, auth=creds, timeout=self.timeouts())
            except (requests.ConnectionError, requests.Timeout) as e:
                raise GaveUp(f"token service: {connection_reason(e)}") from e
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

    def send(self, method: str, url: str, *, body: Callable[[], Any] | bytes | None = None,
             headers: dict | None = None, stream: bool = False, ok: tuple[int, ...] = (200,)):
        """One request, retried by urllib3 (plus one re-send after an auth challenge). Returns the response when
        its status is in ``ok``; ``GaveUp`` when the retries ran out or the deadline passed, ``StoreError`` for
        any other answer."""
        requests = requests_module()
        url = url if url.startswith("http") else self.base + url
        for _ in range(2):
            data = body() if callable(body) else body
            try:
                r = self.session.request(method, url, data=data, headers={**self._auth_header, **(headers or {})},
                                         stream=stream, timeout=self.timeouts())
            except (requests.ConnectionError, requests.Timeout, requests.exceptions.RetryError) as e:
                raise GaveUp(connection_reason(e)) from e
            finally:
                if hasattr(data, "close"):
                    data.close()
            if r.status_code == 401 and self._authenticate(r.headers.get("WWW-Authenticate", "")):
                r.close()
                continue
            break
        if r.status_code in ok:
            return r
        if r.status_code in TRANSIENT_STATUS:  # urllib3 retried it as far as it could
            r.close()
            raise GaveUp(f"HTTP {r.status_code}")
        detail = r.text[:300] if not stream else ""
        r.close()
        if r.status_code in (401, 403):
            raise StoreError(f"registry {self.host} refused {method} {url.split(self.host, 1)[-1]} "
                             f"(HTTP {r.status_code})",
                             hint=f"log in with `docker login {self.host}` (credentials are read from "
                                  f"{docker_config_path()}) or set ORCHESTRATE_REGISTRY_USERNAME/_PASSWORD")
        raise StoreError(f"registry {self.host}: {method} {url.split(self.host, 1)[-1]} failed with HTTP "
                         f"{r.status_code}: {detail}")

    def retrying(self, what: str, fn: Callable[[], Any], *, transfer_bytes: int = 0) -> Any:
        """Run a whole idempotent operation within one deadline (``timeout_s``, plus a second per MiB of
        ``transfer_bytes``), again after a ``Transient`` failure (exponential backoff with jitter)."""
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
                except Transient as e:
                    last = e.reason
                except GaveUp as e:
                    last = e.reason
                    if not e.deadline and deadline - time.monotonic() > 0:
                        raise self._unreachable(what, last) from None
                    break
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
                raise self._unreachable(what, last)
            raise StoreUnavailableError(
                f"registry {self.host} did not answer within the {limit:g} s deadline while {what} ({last})",
                hint=f"check that the registry at {self.base} is up and answering; for a slow registry or link "
                     f"raise the deadline with {TIMEOUT_ENV}=SECONDS (now {self.timeout_s:g}); publishing again "
                     "is safe (it is idempotent)")
        finally:
            self._tls.deadline = outer

    def _unreachable(self, what: str, last: str) -> StoreUnavailableError:
        return StoreUnavailableError(
            f"registry {self.host} is not reachable ({last}) after {self.attempts} attempts while {what}",
            hint=f"check that the registry at {self.base} is running and registry.url is right; "
                 "publishing again is safe (it is idempotent)")

    def json(self, r, what: str) -> Any:
        """A response body as JSON, or a StoreError saying the server answered something else."""
        try:
            return json.loads(r.content)
        except ValueError:
            raise StoreError(f"registry {self.host}: {what} answered HTTP {r.status_code} with a body that is not "
                             f"JSON ({r.headers.get('Content-Type', 'no content type')})",
                             hint="check that registry.url names an OCI registry (host[:port]/prefix)") from None

    def check_api(self) -> None:
        """``GET /v2/`` (the distribution spec's version check), once per instance: 200 or 401, or refuse."""
        if self._api_checked:
            return
        with self._api_lock:
            if self._api_checked:
                return
            r = self.retrying("checking that it serves the registry API (GET /v2/)",
                              lambda: self.send("GET", "/v2/", ok=ANSWERED))
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
