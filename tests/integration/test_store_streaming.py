"""The stores' byte paths (issue 24, registry row): each byte read once, written once and hashed from the buffer it
was written from, verified before the rename; what a failed check leaves (nothing); the order in which a publish
makes things durable; the upload body (pieces from one buffer, Content-Length, sent again whole on a retry).
Real files, a real registry (CNCF distribution) and a loopback proxy that cuts or damages what it forwards."""

from __future__ import annotations

import hashlib
import os
import socket
import types
from pathlib import Path

import pytest

try:  # tests/ may or may not be a package
    from .registry_server import RegistryProxy, flip_byte, make_artifact, registry  # noqa: F401
except ImportError:
    from registry_server import RegistryProxy, flip_byte, make_artifact, registry  # noqa: F401

from orchestrator.core.model import RegistryConfig
from orchestrator.errors import IntegrityError, StoreUnavailableError
from trt_orchestrator_plugins.stores import _atomic
from trt_orchestrator_plugins.stores._atomic import BUFFER, POOL, WRITE_PIECE, write_files_atomic
from trt_orchestrator_plugins.stores._registry_http import BoundedFile, Transient
from trt_orchestrator_plugins.stores.local import LocalStore
from trt_orchestrator_plugins.stores.oci import OciStore

pytestmark = pytest.mark.integration

# one buffer, copied inline; exactly one buffer; one byte more (two buffers through the pool); more buffers than the
# pool holds, the last one short (every buffer reused while the hasher trails)
SIZES = [4096, BUFFER, BUFFER + 1, (POOL + 1) * BUFFER + BUFFER // 2 + 7]
SIZE_IDS = ["small", "one-buffer", "two-buffers", "pool-reused"]


def local(root: Path) -> LocalStore:
    return LocalStore(RegistryConfig(store="local", path=str(root)))


def oci(host: str, prefix: str) -> OciStore:
    store = OciStore(RegistryConfig(store="oci", url=f"{host}/{prefix}", insecure=True))
    store.backoff_s = 0.05
    return store


def flip_last_byte(path: Path) -> None:
    """The last byte: it sits in the last, short buffer of the copy."""
    with open(path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        b = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([b[0] ^ 0xFF]))


def files_in(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


# ---- local: one pass, verified before the rename ------------------------------------------------------------

@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
def test_local_round_trip_is_byte_exact_for_every_buffer_shape(size, tmp_path):
    files = make_artifact(tmp_path / "b", size=size, log=False)
    store = local(tmp_path / "artifacts")
    stored = store.put(files)
    data = files.engine.read_bytes()
    assert stored.digest == "sha256:" + hashlib.sha256(data).hexdigest() == files.metadata["engine"]["digest"]
    assert store.blob_path(stored.digest).read_bytes() == data
    out = tmp_path / "out" / "e.plan"
    store.get(stored.digest, out)
    assert out.read_bytes() == data
    assert files_in(out.parent) == ["e.plan"]
    assert files_in(store.blobs) == [stored.digest.split(":")[1]]


@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
def test_local_put_of_an_engine_that_is_not_its_metadata_is_refused_and_leaves_no_blob(size, tmp_path):
    files = make_artifact(tmp_path / "b", size=size, log=False)
    flip_last_byte(files.engine)  # changed after its metadata was built, size unchanged
    store = local(tmp_path / "artifacts")
    with pytest.raises(IntegrityError, match="its metadata says"):
        store.put(files)
    assert files_in(store.blobs) == []  # neither the blob nor its temp file
    assert not (store.root / "meta").exists() or files_in(store.root / "meta") == []


@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
def test_local_get_of_a_blob_damaged_in_its_last_buffer_is_refused_and_leaves_nothing(size, tmp_path):
    files = make_artifact(tmp_path / "b", size=size, log=False)
    store = local(tmp_path / "artifacts")
    stored = store.put(files)
    flip_last_byte(store.blob_path(stored.digest))
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(IntegrityError, match="failed its integrity check"):
        store.get(stored.digest, out / "e.plan")
    assert files_in(out) == []  # no engine, no temp file


class ByteTraffic:
    """What the byte calls a store makes move, per file (named through /proc/self/fd): bytes read, each write's
    length, and any in-kernel copy."""

    def __init__(self, monkeypatch) -> None:
        self.read: dict[str, int] = {}
        self.writes: dict[str, list[int]] = {}
        self.kernel_copies: list[str] = []
        for name in ("read", "readv", "pread", "preadv"):
            if hasattr(os, name):
                monkeypatch.setattr(os, name, self._reader(getattr(os, name)))
        monkeypatch.setattr(os, "write", self._writer(os.write))
        for name in ("copy_file_range", "sendfile", "splice"):
            if hasattr(os, name):
                monkeypatch.setattr(os, name, self._kernel(name, getattr(os, name)))

    @staticmethod
    def _name(fd: int) -> str:
        try:
            return os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return f"fd {fd}"

    def _reader(self, real):
        def read(fd, *args):
            got = real(fd, *args)
            n = got if isinstance(got, int) else len(got)
            self.read[self._name(fd)] = self.read.get(self._name(fd), 0) + n
            return got
        return read

    def _writer(self, real):
        def write(fd, data):
            n = real(fd, data)
            self.writes.setdefault(self._name(fd), []).append(n)
            return n
        return write

    def _kernel(self, name, real):
        def copy(*args, **kw):
            self.kernel_copies.append(name)
            return real(*args, **kw)
        return copy


@pytest.mark.parametrize("op", ["put", "get"])
def test_a_local_copy_reads_its_source_once_and_never_reads_the_copy_back(op, tmp_path, monkeypatch):
    """One streamed pass (issue 24, registry row): the source's bytes are read once, each written once in pieces of
    at most WRITE_PIECE, and hashed from the buffer they were written from; the staged copy is never read back."""
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd to name the file each call moved bytes of")
    files = make_artifact(tmp_path / "b", size=(POOL + 3) * BUFFER + 5, log=False)
    size = files.engine.stat().st_size
    store = local(tmp_path / "artifacts")
    stored = store.put(files) if op == "get" else None
    source = store.blob_path(stored.digest) if stored is not None else files.engine
    out = tmp_path / "out" / "e.plan"
    traffic = ByteTraffic(monkeypatch)
    if stored is None:
        stored = store.put(files)
        copy = store.blob_path(stored.digest)
    else:
        store.get(stored.digest, out)
        copy = out
    monkeypatch.undo()
    assert copy.read_bytes() == files.engine.read_bytes()
    assert traffic.kernel_copies == []
    assert traffic.read.get(str(source)) == size  # read once ...
    staged = [name for name in traffic.writes if Path(name).parent == copy.parent]
    assert len(staged) == 1 and Path(staged[0]).name.endswith(".tmp")  # ... written once, into one temp file ...
    assert sum(traffic.writes[staged[0]]) == size and max(traffic.writes[staged[0]]) <= WRITE_PIECE
    assert traffic.read.get(staged[0], 0) == 0  # ... that nothing read back


# ---- local: what a publish makes durable, in which order --------------------------------------------------------

def test_a_publish_makes_its_blob_names_durable_before_the_record_and_the_record_before_the_index(tmp_path,
                                                                                                  monkeypatch):
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd to name what each fsync is of")
    files = make_artifact(tmp_path / "b", size=3 * BUFFER + 5)  # an engine and a log: two blobs
    store = local(tmp_path / "artifacts")
    store.put(make_artifact(tmp_path / "a", precision="fp32", size=4096))  # the store exists already
    events: list[tuple[str, ...]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        real_fsync(fd)
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))

    def replace(src, dst) -> None:
        real_replace(src, dst)
        events.append(("rename", str(src), str(dst)))

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    stored = store.put(files)

    def at(kind: str, path: Path) -> int:
        hits = [i for i, e in enumerate(events) if e[0] == kind and e[-1] == str(path)]
        assert len(hits) == 1, (kind, path, events)
        return hits[0]

    def temp_synced_before(i: int) -> bool:
        return ("fsync", events[i][1]) in events[:i]

    meta = store.meta_dir / f"{stored.metadata['record_key']}.json"
    blobs = [store.blob_path(stored.digest)] + [store.blob_path(a["digest"]) for a in stored.metadata["attachments"]]
    renamed_meta, renamed_index = at("rename", meta), at("rename", store.index_path)
    blobs_synced = at("fsync", store.blobs)
    for blob in blobs:
        i = at("rename", blob)
        assert temp_synced_before(i)  # the blob's bytes are on disk before its name
        assert i < blobs_synced  # its name is on disk ...
    assert blobs_synced < renamed_meta  # ... before the record naming it is renamed into place
    assert temp_synced_before(renamed_meta) and temp_synced_before(renamed_index)
    assert renamed_meta < at("fsync", store.meta_dir) < renamed_index < at("fsync", store.root)


def test_files_written_together_leave_nothing_when_one_cannot_be_written(tmp_path):
    first = tmp_path / "meta" / "record.json"
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the second file's folder should be")
    with pytest.raises(OSError):
        write_files_atomic([(first, b"{}\n"), (blocker / "index.json", b"{}\n")])
    assert files_in(first.parent) == []  # the first was not renamed before the second was durable; no temp left


def test_files_written_together_land_whole_in_order(tmp_path):
    a, b = tmp_path / "meta" / "a.json", tmp_path / "index.json"
    b.write_bytes(b"old\n")
    write_files_atomic([(a, b"A" * 5000), (b, b"new\n")], sync_first=[tmp_path])
    assert a.read_bytes() == b"A" * 5000 and b.read_bytes() == b"new\n"
    assert files_in(tmp_path) == ["index.json", "meta"] and files_in(a.parent) == ["a.json"]


def test_a_copy_whose_hash_thread_fails_is_an_error_and_leaves_no_temp(tmp_path, monkeypatch):
    """An error in the hash thread reaches the caller (a digest of part of the bytes would name a wrong blob)."""
    files = make_artifact(tmp_path / "b", size=3 * BUFFER, log=False)
    store = local(tmp_path / "artifacts")

    class FailsOnItsSecondBuffer:
        def __init__(self) -> None:
            self.buffers = 0

        def update(self, data) -> None:
            self.buffers += 1
            if self.buffers == 2:
                raise RuntimeError("hash state lost")

        def hexdigest(self) -> str:
            return "0" * 64

    monkeypatch.setattr(_atomic, "hashlib", types.SimpleNamespace(sha256=FailsOnItsSecondBuffer))
    with pytest.raises(RuntimeError, match="hash state lost"):
        store.put(files)
    assert files_in(store.blobs) == []


# ---- oci: downloads verified as they are written --------------------------------------------------------------

def _published(registry, tmp_path, prefix: str, model: str, size: int = 3 * BUFFER + 5):
    files = make_artifact(tmp_path / model, model=model, size=size, log=False)
    return files, oci(registry.host, prefix).put(files)


def test_a_download_cut_mid_stream_every_time_is_refused_and_leaves_nothing(registry, tmp_path):
    files, stored = _published(registry, tmp_path, "cut", "cut")
    blob = f"/blobs/{stored.digest}"
    with RegistryProxy(registry.host, refuse=(),
                       body_damage=lambda req, body: body[: len(body) // 2] if blob in req else body) as proxy:
        out = tmp_path / "out"
        out.mkdir()
        with pytest.raises(StoreUnavailableError) as exc:
            oci(proxy.host, "cut").get(stored.digest, out / "e.plan")
        cut_gets = [s for s in proxy.seen if s.startswith("GET ") and blob in s]
    half = files.engine.stat().st_size // 2
    assert f"connection closed after {half} of {2 * half + 1} bytes" in str(exc.value)
    assert len(cut_gets) == 4  # every attempt of the operation
    assert files_in(out) == []


def test_a_download_cut_once_is_fetched_again_whole(registry, tmp_path):
    files, stored = _published(registry, tmp_path, "cut1", "cutonce")
    blob = f"/blobs/{stored.digest}"
    cuts = [1]

    def cut_once(req: str, body: bytes) -> bytes:
        if blob in req and cuts:
            cuts.pop()
            return body[: len(body) // 3]
        return body

    with RegistryProxy(registry.host, refuse=(), body_damage=cut_once) as proxy:
        out = tmp_path / "out" / "e.plan"
        oci(proxy.host, "cut1").get(stored.digest, out)
        gets = [s for s in proxy.seen if s.startswith("GET ") and blob in s]
    assert len(gets) == 2
    assert out.read_bytes() == files.engine.read_bytes()
    assert files_in(out.parent) == ["e.plan"]


def test_a_download_damaged_mid_stream_is_refused_and_leaves_what_was_there(registry, tmp_path):
    _, stored = _published(registry, tmp_path, "flip", "flip")
    blob = f"/blobs/{stored.digest}"

    def flip(req: str, body: bytes) -> bytes:
        if blob not in req:
            return body
        damaged = bytearray(body)
        damaged[len(body) // 2 + 1] ^= 0x01
        return bytes(damaged)

    with RegistryProxy(registry.host, refuse=(), body_damage=flip) as proxy:
        out = tmp_path / "out"
        out.mkdir()
        (out / "e.plan").write_bytes(b"the engine deployed before")
        with pytest.raises(IntegrityError, match="failed its integrity check"):
            oci(proxy.host, "flip").get(stored.digest, out / "e.plan")
    assert files_in(out) == ["e.plan"] and (out / "e.plan").read_bytes() == b"the engine deployed before"


# ---- oci: the upload body -----------------------------------------------------------------------------------

def test_an_upload_refused_after_its_body_is_sent_again_from_its_first_byte(registry, tmp_path):
    files = make_artifact(tmp_path / "b", model="rewind", size=3 * BUFFER + 17, log=False)
    size = files.engine.stat().st_size
    with RegistryProxy(registry.host, refuse=(), throttle=1, throttle_status=503,
                       throttle_match="PUT /v2/up/rewind/blobs/uploads/") as proxy:
        stored = oci(proxy.host, "up").put(files)  # the registry checks the digest of what it got
        puts = [u for u in proxy.uploads if u[0].startswith("PUT /v2/up/rewind/blobs/uploads/")
                and f"digest={stored.digest}" in u[0]]
    assert len(puts) == 2  # refused (503) once, after the whole body was read; then sent again
    assert all(cl == str(size) and te is None and got == size for _, cl, te, got in puts), puts
    out = tmp_path / "e.plan"
    oci(registry.host, "up").get(stored.digest, out)
    assert out.read_bytes() == files.engine.read_bytes()


def test_an_upload_sends_its_body_in_whole_pieces_not_small_reads(registry, tmp_path, monkeypatch):
    """urllib3 sent a file-like body in 16 KiB read()s, a fresh bytes and a sendall each (12,800 for 200 MB); the
    body is an iterable of BoundedFile.PIECE pieces, each sent with one sendall (issue 24, registry row)."""
    files = make_artifact(tmp_path / "b", model="pieces", size=3 * BoundedFile.PIECE + 17, log=False)
    size = files.engine.stat().st_size
    sent: list[int] = []
    real = socket.socket.sendall

    def sendall(self, data, *args):
        sent.append(memoryview(data).nbytes)
        return real(self, data, *args)

    monkeypatch.setattr(socket.socket, "sendall", sendall)
    stored = oci(registry.host, "pieces").put(files)
    monkeypatch.undo()
    assert sorted(n for n in sent if n > 64 * 1024) == [BoundedFile.PIECE] * 3  # the body: three whole pieces ...
    assert 17 in sent  # ... and its short last one
    out = tmp_path / "e.plan"
    oci(registry.host, "pieces").get(stored.digest, out)
    assert out.read_bytes() == files.engine.read_bytes() and out.stat().st_size == size


def test_the_upload_body_is_pieces_of_one_buffer_with_a_deadline_between_them(tmp_path):
    path = tmp_path / "engine.plan"
    data = os.urandom(2 * BoundedFile.PIECE + 3)
    path.write_bytes(data)
    checks = []
    body = BoundedFile(path, len(data), lambda: checks.append(1))
    try:
        pieces = [bytes(p) for p in body]
        assert b"".join(pieces) == data and len(body) == len(data)
        assert [len(p) for p in pieces] == [BoundedFile.PIECE, BoundedFile.PIECE, 3]
        assert len(checks) == 4  # before each piece and before the end
        body.seek(0)  # what urllib3 does to send it again
        assert b"".join(bytes(p) for p in body) == data
    finally:
        body.close()

    calls = 0

    def late() -> None:  # the deadline passes after the first piece
        nonlocal calls
        calls += 1
        if calls == 2:
            raise Transient("the transfer ran past its deadline")

    body = BoundedFile(path, len(data), late)
    try:
        with pytest.raises(Transient):
            list(body)
    finally:
        body.close()
