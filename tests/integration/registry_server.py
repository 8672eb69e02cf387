"""A real OCI registry for tests: CNCF distribution (Debian package ``docker-registry``) on 127.0.0.1.

``registry`` (module-scoped) starts ``docker-registry serve CONFIG`` on a free port with a tmp storage dir,
polls ``GET /v2/`` until 200 within a bounded deadline, yields the running :class:`RegistryServer` and
terminates it. ``RegistryServer.kill()`` / ``.start()`` let a test kill it mid-transfer and bring it back on
the same port and storage; ``RegistryServer(..., users={"alice": "pw"})`` turns on distribution's htpasswd auth
(bcrypt hashes from the libc ``crypt``). Also here: :func:`make_artifact`, real engine-like files + valid metadata
for store tests (random bytes behind an ``ftrt``/``vtrt``-like header; the builders are tested elsewhere), and
the hostile servers the store must survive: :class:`Blackhole` (accepts connections, never answers),
:class:`StaticHttp` (a web server answering every request with one status), :class:`RegistryProxy` (a loopback
proxy in front of a real registry that can refuse paths, e.g. ``/v2/_catalog`` as GHCR and Docker Hub do, throttle
its first requests (429/503, ``Retry-After``), and counts what it was asked and when).
"""

from __future__ import annotations

import hashlib
import http.client
import http.server
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

BINARY = "docker-registry"
START_DEADLINE_S = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bcrypt_hash(password: str) -> str:
    """A bcrypt hash for distribution's htpasswd file (libc crypt; skips where this Python has none)."""
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import crypt
        hashed = crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH))
    except (ImportError, AttributeError, OSError):
        hashed = None
    if not hashed or not hashed.startswith("$2"):
        pytest.skip("no bcrypt in this Python's crypt module: cannot write an htpasswd file for the registry")
    return hashed


class _PortTaken(Exception):
    pass


class RegistryServer:
    def __init__(self, workdir: Path, port: int | None = None, users: dict[str, str] | None = None) -> None:
        self.workdir = Path(workdir)
        self.storage = self.workdir / "storage"
        self.storage.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self._pick_port = port is None  # a port this server chose itself: another may be chosen if it is taken
        self.config = self.workdir / "config.yml"
        self._auth = ""
        if users:
            htpasswd = self.workdir / "htpasswd"
            htpasswd.write_text("".join(f"{u}:{bcrypt_hash(p)}\n" for u, p in users.items()))
            self._auth = f"auth:\n  htpasswd: {{realm: trt-orchestrator-tests, path: {htpasswd}}}\n"
        self.users = users or {}
        self._write_config()
        self.proc: subprocess.Popen | None = None

    def _write_config(self) -> None:
        self.config.write_text(
            "version: 0.1\n"
            "log: {level: warn, accesslog: {disabled: true}}\n"
            "storage:\n"
            f"  filesystem: {{rootdirectory: {self.storage}}}\n"
            "  delete: {enabled: true}\n"
            "  maintenance: {uploadpurging: {enabled: false}}\n"
            "http:\n"
            f"  addr: 127.0.0.1:{self.port}\n"
            "  secret: trt-orchestrator-tests\n"
            + self._auth
        )

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> RegistryServer:
        """Start the server and wait until it answers. Under pytest-xdist (or beside another test run) a free port
        can be taken between choosing it and binding it: a server that exits saying so gets another port, and an
        answer counts only while our own process is still alive (not another run's server on that port)."""
        for _attempt in range(5):
            try:
                return self._start_once()
            except _PortTaken:
                self.port = free_port()
                self._write_config()
        raise RuntimeError(f"docker-registry found no free port in 5 tries: "
                           f"{(self.workdir / 'registry.log').read_text()[-2000:]}")

    def _start_once(self) -> RegistryServer:
        log = open(self.workdir / "registry.log", "ab")
        self.proc = subprocess.Popen([BINARY, "serve", str(self.config)], stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + START_DEADLINE_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                text = (self.workdir / "registry.log").read_text()[-2000:]
                if self._pick_port and "address already in use" in text:
                    raise _PortTaken()
                raise RuntimeError(f"docker-registry exited with {self.proc.returncode}: {text}")
            try:
                with urllib.request.urlopen(f"http://{self.host}/v2/", timeout=1) as r:
                    if r.status == 200 and self._still_ours():
                        return self
            except urllib.error.HTTPError as e:
                if e.code == 401 and self.users and self._still_ours():  # up, asking for credentials as configured
                    return self
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"docker-registry did not answer GET /v2/ within {START_DEADLINE_S} s")

    def _still_ours(self) -> bool:
        """Whether our process still runs a moment after the port answered: one that failed to bind exits at once
        (and the answer came from whatever else holds the port)."""
        time.sleep(0.2)
        assert self.proc is not None
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crash would (no graceful drain of in-flight uploads)."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def restart(self) -> RegistryServer:
        self.stop()
        return self.start()

    def blob_data(self, digest: str) -> Path:
        """Where distribution keeps a blob's bytes."""
        hexpart = digest.split(":", 1)[1]
        return self.storage / "docker/registry/v2/blobs/sha256" / hexpart[:2] / hexpart / "data"

    def upload_dirs(self) -> list[Path]:
        repos = self.storage / "docker/registry/v2/repositories"
        return list(repos.glob("**/_uploads/*")) if repos.exists() else []


def require_binary() -> None:
    if shutil.which(BINARY) is None:
        pytest.skip(f"`{BINARY}` is not installed (Debian package docker-registry: "
                    "apt-get install -y docker-registry); the OCI store tests need a real registry")


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    require_binary()
    server = RegistryServer(tmp_path_factory.mktemp("registry")).start()
    try:
        yield server
    finally:
        server.stop()


# ---- hostile servers ----------------------------------------------------------------------------------------

class Blackhole:
    """A loopback TCP server that accepts every connection and never sends a byte (a hung registry)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _run(self) -> None:
        self.sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.held.append(conn)  # read nothing, answer nothing, close nothing
            self.accepted += 1

    def __enter__(self) -> Blackhole:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        for c in self.held:
            c.close()
        self.sock.close()


class _Quiet(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass


class _ThreadingServer(http.server.ThreadingHTTPServer):
    daemon_threads = True


class _Served:
    def __init__(self, handler: type) -> None:
        self.server = _ThreadingServer(("127.0.0.1", 0), handler)
        self.server.owner = self  # type: ignore[attr-defined]
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)


class StaticHttp(_Served):
    """An HTTP server that answers every request with ``status`` and a small HTML body (not a registry)."""

    def __init__(self, status: int = 404) -> None:
        self.status = status
        self.requests: list[str] = []

        class Handler(_Quiet):
            def _answer(self) -> None:
                owner = self.server.owner
                owner.requests.append(f"{self.command} {self.path}")
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                body = f"<html><body>{owner.status}</body></html>".encode()
                self.send_response(owner.status)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = do_PATCH = _answer

        super().__init__(Handler)


class RegistryProxy(_Served):
    """Forwards every request to ``upstream`` (host:port) except paths in ``refuse`` (answered 404 with the
    distribution error body, as a registry that does not serve them) and requests whose "METHOD path" contains
    one of ``hang`` (never answered, until the proxy stops); ``seen`` lists "METHOD path" asked."""

    def __init__(self, upstream: str, refuse: tuple[str, ...] = ("/v2/_catalog",), hang: tuple[str, ...] = (),
                 throttle: int = 0, throttle_status: int = 429, retry_after: str | None = None) -> None:
        self.upstream = upstream
        self.refuse = refuse
        self.hang = hang
        self.throttle = throttle  # the first N requests are answered throttle_status (with Retry-After if given)
        self.throttle_status = throttle_status
        self.retry_after = retry_after
        self.times: list[float] = []  # time.monotonic() of each request, in order
        self.seen: list[str] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()

        class Handler(_Quiet):
            def _forward(self) -> None:
                owner = self.server.owner
                with owner._lock:
                    owner.seen.append(f"{self.command} {self.path}")
                    owner.times.append(time.monotonic())
                    throttled = owner.throttle > 0
                    owner.throttle -= 1 if throttled else 0
                if throttled:
                    length = int(self.headers.get("Content-Length") or 0)
                    if length:
                        self.rfile.read(length)
                    raw = b'{"errors":[{"code":"TOOMANYREQUESTS","message":"slow down"}]}'
                    self.send_response(owner.throttle_status)
                    if owner.retry_after is not None:
                        self.send_header("Retry-After", owner.retry_after)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                    return
                if any(h in f"{self.command} {self.path}" for h in owner.hang):
                    owner._stopping.wait(600)  # accepted, read nothing, answer nothing
                    self.close_connection = True
                    return
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if self.path.split("?", 1)[0] in owner.refuse:
                    raw = b'{"errors":[{"code":"NOT_FOUND","message":"not served here"}]}'
                    self.send_response(404)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                    return
                conn = http.client.HTTPConnection(owner.upstream, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection",)}
                conn.request(self.command, self.path, body=body, headers=headers)
                r = conn.getresponse()
                data = r.read()
                self.send_response(r.status)
                for k, v in r.getheaders():
                    if k.lower() not in ("connection", "transfer-encoding", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = do_PATCH = _forward

        super().__init__(Handler)

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        super().__exit__(*exc)

    def asked(self, path: str) -> list[str]:
        with self._lock:
            return [s for s in self.seen if s.split(" ", 1)[1].split("?", 1)[0] == path]


# ---- artifacts for store tests ---------------------------------------------------------------------------

def make_artifact(directory: Path, *, model: str = "ocr-det", version: str = "4.0.0", precision: str = "fp16",
                  profile_set: str = "default", cc: str = "8.9", builder: str = "tensorrt",
                  builder_version: str = "10.13.3.9", size: int = 2 * 1024 * 1024, seed: int = 0,
                  salt: str = "", log: bool = True):
    """An engine-like file (deterministic for the same arguments) and its valid metadata -> ArtifactFiles."""
    import random

    from orchestrator.contracts.store import ArtifactFiles
    from orchestrator.core.fingerprint import RunnerFingerprint
    from orchestrator.core.model import Target, target_slug
    from orchestrator.metadata import ENGINE_MEDIA_TYPE, ONNX_ENGINE_MEDIA_TYPE, GateSummary, engine_file, new_metadata

    target = Target(name=f"sm{cc.replace('.', '')}", builder=builder, builder_version=builder_version,
                    compute_capabilities=(cc,) if builder != "onnxruntime" else (),
                    device="gpu" if builder != "onnxruntime" else "cpu",
                    builder_slug={"tensorrt": "trt", "tensorrt-rtx": "rtx", "onnxruntime": "ort"}.get(builder, builder))
    address = f"{model}/{precision}/{profile_set}@{target_slug(target)}"
    key_inputs = {"model": model, "version": version, "precision": precision, "profile_set": profile_set,
                  "cc": cc, "builder": builder, "builder_version": builder_version, "salt": salt}
    build_key = hashlib.sha256(repr(sorted(key_inputs.items())).encode()).hexdigest()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    suffix = ".onnx" if builder == "onnxruntime" else ".plan"
    engine = directory / f"{build_key[:12]}{suffix}"
    rng = random.Random(f"{build_key}:{seed}")
    header = (b"ftrt" if builder == "tensorrt" else b"vtrt") + bytes(20) + bytes([10, 13, 3, 9])
    with open(engine, "wb") as f:
        f.write(header)
        left = size - len(header)
        while left > 0:
            n = min(left, 1 << 20)
            f.write(rng.randbytes(n))
            left -= n
    log_path = None
    if log:
        log_path = directory / f"{build_key[:12]}.log"
        log_path.write_text(f"[I] building {address}\n[I] done\n")
    meta = new_metadata(
        address=address, model_name=model, model_version=version, model_digest="sha256:" + "a" * 64,
        precision=precision, profile_set=profile_set, profiles=(profile_set,), target=target,
        builder_version=builder_version, build_key=build_key, key_inputs=key_inputs,
        engine=engine_file(engine,
                           media_type=ONNX_ENGINE_MEDIA_TYPE if builder == "onnxruntime" else ENGINE_MEDIA_TYPE),
        runtime=builder,
        runner=RunnerFingerprint(os="linux", arch="x86_64"),
        gates=GateSummary(status="pending", ungated_publish_allowed=True),
        timings={"build_seconds": 1.0}, manifest_path="manifests/demo.yaml", git_commit=None,
        started_on="2026-11-21T10:00:00Z", finished_on="2026-11-21T10:00:01Z",
        created_at="2026-11-21T10:00:01Z", invocation_id=f"urn:test:{build_key[:8]}",
    )
    return ArtifactFiles(engine=engine, metadata=meta, log=log_path)


def flip_byte(path: Path, offset: int = 1000) -> None:
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))
