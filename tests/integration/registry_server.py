"""A real OCI registry for tests: CNCF distribution (Debian package ``docker-registry``) on 127.0.0.1.

``registry`` (module-scoped) starts ``docker-registry serve CONFIG`` on a free port with a tmp storage dir,
polls ``GET /v2/`` until 200 within a bounded deadline, yields the running :class:`RegistryServer` and
terminates it. ``RegistryServer.kill()`` / ``.start()`` let a test kill it mid-transfer and bring it back on
the same port and storage. Also here: :func:`make_artifact`, real engine-like files + valid metadata for store
tests (random bytes behind an ``ftrt``/``vtrt``-like header; the builders are tested elsewhere).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
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


class RegistryServer:
    def __init__(self, workdir: Path, port: int | None = None) -> None:
        self.workdir = Path(workdir)
        self.storage = self.workdir / "storage"
        self.storage.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.config = self.workdir / "config.yml"
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
        )
        self.proc: subprocess.Popen | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> RegistryServer:
        log = open(self.workdir / "registry.log", "ab")
        self.proc = subprocess.Popen([BINARY, "serve", str(self.config)], stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + START_DEADLINE_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"docker-registry exited with {self.proc.returncode}: "
                                   f"{(self.workdir / 'registry.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://{self.host}/v2/", timeout=1) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"docker-registry did not answer GET /v2/ within {START_DEADLINE_S} s")

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
