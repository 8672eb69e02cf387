"""Atomic file writes and streamed sha256 for the stores.

Every file a store publishes is written to a temporary file in the *same directory* as its final name, flushed
and fsync'd, renamed over the final name (atomic on POSIX within one filesystem) and then the directory is
fsync'd so the rename itself survives a crash. A reader therefore sees either nothing or the whole file.

The digest a store checks is always the sha256 of *the bytes written into the staged temp file* (the bytes the
rename will put in place), computed before the rename, in the same pass that writes them: each buffer is read once
(from the source file or the socket), written once, and hashed from that very buffer by a :class:`StagedHasher`
thread while the next buffer is read and written. ``hashlib`` releases the GIL for updates over 2 KiB, so with a
second core the hash overlaps the copy or the download instead of adding its full time to it
(bench/NOTES-registry.md). A file that fits one buffer is copied and hashed in the calling thread (nothing to
overlap; a thread start would cost more). Buffers are 1 MiB: engines can be gigabytes and are never loaded whole.

Temp files are named ``.<name>.<pid>.<host tag>.<random>.tmp`` (``.incoming.<pid>...`` for staged copies), so a
writer killed mid-copy leaves a file whose owner can be checked: :func:`remove_stale_temps` deletes those whose
process is gone (same host) or, for files with no owner we can check (another host, another writer's naming),
that have not been modified for ``max_age_s``.

Failures writing the destination (ENOSPC, EDQUOT, EROFS, EACCES, ...) raise :class:`DestinationError`, which
:func:`write_error` turns into a ``StoreError`` naming the path with a fix; the temp file is always removed.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import os
import queue
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from orchestrator.atomic import create_temp, fsync_dir, json_bytes, write_json_atomic
from orchestrator.errors import StoreError

# One read/write/hash step, and the size of the pool's buffers. 1 MiB beat 4 MiB for downloads (356 vs 266 MB/s
# median on loopback), and 8 MiB writes from fresh buffers ran at ~215 MB/s vs ~2800 for 1 MiB (NOTES-registry).
BUFFER = 1024 * 1024
POOL = 8  # buffers in flight between the writer and the hasher thread
# Each write() hands the kernel at most 256 KiB: on this box's kernel (6.18, ext4) a copy written in 1 MiB write()s
# spent 0.18-0.36 s of system time in about half the runs instead of 0.06 s (200 MB; 512 KiB and 256 KiB writes
# never did, bench/NOTES-registry.md). Reads stay 1 MiB.
WRITE_PIECE = 256 * 1024
WRITEBACK_STEP = 8 * 1024 * 1024  # the writer starts the writeback of every 8 MiB it wrote (see start_writeback)


STALE_TEMP_S = 3600.0  # a temp file nobody has touched for an hour is no writer's any more
HOST_TAG = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
_OWNED_TEMP = re.compile(r"^\..*\.(\d+)\.([0-9a-f]{8})\.[A-Za-z0-9_]+\.tmp$")


class DestinationError(Exception):
    """Writing ``path`` failed with ``error`` (an OSError): the destination's problem, not the source's."""

    def __init__(self, path: Path, error: OSError) -> None:
        super().__init__(f"{path}: {error}")
        self.path = Path(path)
        self.error = error


_WRITE_HINTS = {
    errno.ENOSPC: "free space on that filesystem or write somewhere else",
    errno.EDQUOT: "free space within your disk quota or write somewhere else",
    errno.EFBIG: "the file is larger than that filesystem allows: write somewhere else",
    errno.EROFS: "that filesystem is mounted read-only: write somewhere else",
    errno.EACCES: "you may not write there: fix the directory's permissions or write somewhere else",
    errno.EPERM: "you may not write there: fix the directory's permissions or write somewhere else",
    errno.ENOTDIR: "a part of that path is a file, not a directory: choose another path",
    errno.EISDIR: "that path is a directory: give a file name",
    errno.ENAMETOOLONG: "the path is too long for that filesystem: choose a shorter one",
}


def write_error(what: str, e: DestinationError) -> StoreError:
    """A one-line ``StoreError`` for a failed write: what, where, the system's reason and how to fix it."""
    reason = e.error.strerror or type(e.error).__name__
    return StoreError(f"cannot write {what} to {e.path}: {reason}",
                      hint=_WRITE_HINTS.get(e.error.errno or 0, "check that path and the filesystem holding it"))


def temp_prefix(name: str) -> str:
    """The prefix of a temp file for ``name`` written by this process (see :func:`remove_stale_temps`)."""
    return f".{name}.{os.getpid()}.{HOST_TAG}."


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    except OSError:
        return True
    try:  # a killed child its parent has not reaped yet is a zombie: dead for our purpose
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def remove_stale_temps(directory: Path, *, max_age_s: float = STALE_TEMP_S) -> int:
    """Delete the temp files (``.*.tmp``) in ``directory`` that no live writer owns: those of a dead process on
    this host, and any other not modified for ``max_age_s``. Best effort (a read-only store keeps them);
    returns how many went."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return 0
    now = time.time()
    removed = 0
    for entry in entries:
        name = entry.name
        if not (name.startswith(".") and name.endswith(".tmp")):
            continue
        try:
            if not entry.is_file(follow_symlinks=False):
                continue
            owner = _OWNED_TEMP.match(name)
            if owner and owner.group(2) == HOST_TAG:
                stale = not _pid_alive(int(owner.group(1)))
            else:
                stale = now - entry.stat(follow_symlinks=False).st_mtime > max_age_s
            if stale:
                os.unlink(entry.path)
                removed += 1
        except OSError:
            continue  # gone meanwhile, or not ours to remove
    return removed


def _load_sync_file_range():
    """libc ``sync_file_range`` (Linux; not in ``os``), or None. Used with SYNC_FILE_RANGE_WRITE only: it starts
    writeback of a range without waiting and without dropping it from the page cache (``posix_fadvise
    DONTNEED`` also starts writeback but evicts the pages a puller is about to load)."""
    try:
        import ctypes

        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_SYNC_FILE_RANGE = _load_sync_file_range()
_SYNC_FILE_RANGE_WRITE = 2


def start_writeback(fd: int, offset: int, n: int) -> None:
    """Ask the kernel to start writing this range to disk now, so the final fsync finds it (mostly) done:
    on this VM that moved ~0.1 s of a 200 MB fsync under the hashing (bench/NOTES-registry.md). Best effort."""
    if _SYNC_FILE_RANGE is not None:
        _SYNC_FILE_RANGE(fd, offset, n, _SYNC_FILE_RANGE_WRITE)


class StagedHasher:
    """sha256 of the bytes a writer puts into a staged file, computed in a second thread.

    The writer hands over each buffer right after ``write()`` accepted it (:meth:`hashed`); the thread hashes
    that very buffer (no read-back: the bytes hashed are the bytes written) and calls ``release`` so the writer
    may reuse it. :meth:`hexdigest` waits for the thread. Use as a context manager so the thread is always joined
    (and every buffer released) before the writer's buffers or file go away.
    """

    def __init__(self) -> None:
        self._items: queue.SimpleQueue[tuple[memoryview, Callable[[], None]] | None] = queue.SimpleQueue()
        self._hash = hashlib.sha256()
        self.size = 0
        self._error: BaseException | None = None
        self._done = False
        self._thread = threading.Thread(target=self._run, name="sha256-staged", daemon=True)
        self._thread.start()

    def hashed(self, data: memoryview, release: Callable[[], None]) -> None:
        """Hash ``data`` (bytes just written) in the thread, then call ``release``."""
        self._items.put((data, release))

    def _run(self) -> None:
        try:
            while (item := self._items.get()) is not None:
                data, release = item
                self._hash.update(data)
                self.size += len(data)
                release()
        except BaseException as e:  # re-raised in the caller's thread by hexdigest
            self._error = e
            while (item := self._items.get()) is not None:  # drain (releasing buffers) until the sentinel
                item[1]()

    def _finish(self) -> None:
        if not self._done:
            self._done = True
            self._items.put(None)
            self._thread.join()

    def hexdigest(self) -> str:
        self._finish()
        if self._error is not None:
            raise self._error
        return self._hash.hexdigest()

    def __enter__(self) -> StagedHasher:
        return self

    def __exit__(self, *exc: object) -> None:
        self._finish()


class HashingWriter:
    """A binary sink on a raw fd whose bytes are hashed as they are written (by a :class:`StagedHasher` thread).
    A failed write raises :class:`DestinationError` naming ``dest``."""

    def __init__(self, fd: int, hasher: StagedHasher, dest: Path | None = None) -> None:
        self._fd = fd
        self._hasher = hasher
        self.size = 0
        self.dest = dest
        self._kicked = 0  # bytes whose writeback has been started

    def _write_all(self, view: memoryview) -> None:
        done = 0
        try:
            while done < len(view):
                done += os.write(self._fd, view[done:done + WRITE_PIECE])
        except OSError as e:
            raise DestinationError(self.dest or Path(f"fd {self._fd}"), e) from e
        self.size += len(view)
        if self.size - self._kicked >= WRITEBACK_STEP:
            start_writeback(self._fd, self._kicked, self.size - self._kicked)
            self._kicked = self.size

    def write(self, data: bytes | bytearray | memoryview) -> int:
        """Write ``data`` and hash a copy of it (the caller may reuse its buffer at once)."""
        view = memoryview(data).cast("B")
        self._write_all(view)
        self._hasher.hashed(memoryview(bytes(view)), _nothing)
        return len(view)

    def pump(self, readinto: Callable[[memoryview], int], *, buffers: int = POOL) -> int:
        """Write everything ``readinto`` yields (until it returns 0) through a pool of ``buffers`` buffers of
        ``BUFFER`` bytes: the hasher thread hashes buffer k while this thread reads and writes buffer k+1, and hands
        it back when done. Each byte is read once (into the buffer), written once (from it) and hashed from that
        same buffer. Memory stays at ``buffers`` MiB whatever the size. Returns the bytes written."""
        free: queue.SimpleQueue[memoryview] = queue.SimpleQueue()
        for _ in range(buffers):
            free.put(memoryview(bytearray(BUFFER)))
        start = self.size
        while True:
            buf = free.get()
            n = readinto(buf)
            if not n:
                free.put(buf)
                break
            view = buf[:n]
            try:
                self._write_all(view)
            except DestinationError:
                free.put(buf)
                raise
            self._hasher.hashed(view, lambda b=buf: free.put(b))
        return self.size - start

    def hexdigest(self) -> str:
        return self._hasher.hexdigest()


def _nothing() -> None:
    pass


@contextmanager
def atomic_writer(dest: Path, *, overwrite: bool = True) -> Iterator[HashingWriter]:
    """Yield a hashing writer on a temp file next to ``dest``; on clean exit fsync + rename + fsync dir.

    On any exception (including an integrity check the caller makes before leaving the block) the temp file is
    removed and ``dest`` is left untouched. With ``overwrite=False`` an existing ``dest`` is kept (the caller
    writes content-addressed files, where an existing file already has the same name = same content).
    A failure writing the destination (directory, temp file, data, fsync, rename) is a :class:`DestinationError`.
    """
    dest = Path(dest)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = create_temp(dest.parent, prefix=temp_prefix(dest.name))  # 0o666 & ~umask, not 0600
    except OSError as e:
        raise DestinationError(dest, e) from e
    try:
        try:
            with StagedHasher() as hasher:
                yield HashingWriter(fd, hasher, dest)
            try:
                os.fsync(fd)
            except OSError as e:
                raise DestinationError(dest, e) from e
        finally:
            os.close(fd)
        if not overwrite and dest.exists():
            os.unlink(tmp)
            return
        try:
            os.replace(tmp, dest)
        except OSError as e:
            raise DestinationError(dest, e) from e
        fsync_dir(dest.parent)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_json(dest: Path, obj: object, *, indent: int | None = None) -> bytes:
    """Small metadata/index files: the core's writer (no hashing pipeline needed); returns the bytes written."""
    return write_json_atomic(dest, obj, indent=indent, sort_keys=True)


def store_json(obj: object, *, indent: int | None = None) -> bytes:
    """The bytes :func:`atomic_write_json` writes for ``obj``."""
    return json_bytes(obj, indent=indent, sort_keys=True)


def _concurrently(calls: Sequence[Callable[[], None]]) -> None:
    """Run ``calls`` at once (threads), wait for all, re-raise the first failure. Concurrent fsyncs on one
    filesystem share a journal commit: two took one's time here (bench/NOTES-registry.md)."""
    errors: list[BaseException] = []

    def run(call: Callable[[], None]) -> None:
        try:
            call()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(c,), name="fsync") for c in calls[1:]]
    for t in threads:
        t.start()
    if calls:
        run(calls[0])
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def write_files_atomic(files: Sequence[tuple[Path, bytes]], *, sync_first: Sequence[Path] = ()) -> None:
    """Write small files atomically, made visible and durable in the order given.

    Every temp file is written, then all are fsync'd at once together with the directories ``sync_first`` (the
    caller's earlier renames, e.g. the blobs a record names: durable before the record's rename); only then is
    each file renamed and its directory fsync'd before the next one is renamed. So what ``atomic_write_json``
    file by file guarantees still holds (a crash leaves each file old or new, and a later file never new while an
    earlier one is old), with two journal commits fewer. Failures are plain ``OSError``s; no temp file stays."""
    staged: list[tuple[int | None, str, Path]] = []
    try:
        for dest, data in files:
            dest.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = create_temp(dest.parent, prefix=temp_prefix(dest.name))
            staged.append((fd, tmp, dest))
            view = memoryview(data)
            done = 0
            while done < len(view):
                done += os.write(fd, view[done:])
        _concurrently([functools.partial(os.fsync, fd) for fd, _, _ in staged if fd is not None]
                      + [functools.partial(fsync_dir, d) for d in sync_first])
        for i, (fd, tmp, dest) in enumerate(staged):
            if fd is not None:
                os.close(fd)
                staged[i] = (None, tmp, dest)
        while staged:
            _, tmp, dest = staged[0]
            os.replace(tmp, dest)
            staged.pop(0)
            fsync_dir(dest.parent)
    finally:
        for fd, tmp, _ in staged:
            if fd is not None:
                os.close(fd)
            Path(tmp).unlink(missing_ok=True)


def _copy_inline(src_fd: int, dst_fd: int, where: Path) -> tuple[str, int]:
    """Copy a small file through one buffer, hashing each piece in this thread after it was written."""
    h = hashlib.sha256()
    buf = bytearray(BUFFER)
    view = memoryview(buf)
    size = 0
    while n := os.readv(src_fd, [buf]):
        piece = view[:n]
        done = 0
        try:
            while done < n:
                done += os.write(dst_fd, piece[done:done + WRITE_PIECE])
        except OSError as e:
            raise DestinationError(where, e) from e
        h.update(piece)
        size += n
    return h.hexdigest(), size


def _copy(src_fd: int, dst_fd: int, where: Path, size_hint: int) -> tuple[str, int]:
    """Copy src to dst in one pass, hashing the bytes written: (hex, size). Source errors are plain OSErrors,
    destination errors :class:`DestinationError` naming ``where``."""
    if size_hint <= BUFFER:
        return _copy_inline(src_fd, dst_fd, where)
    with StagedHasher() as hasher:
        writer = HashingWriter(dst_fd, hasher, where)
        writer.pump(lambda buf: os.readv(src_fd, [buf]))
        return hasher.hexdigest(), writer.size


def stage_copy(src: Path, directory: Path, dest: Path | None = None) -> tuple[Path, str, int]:
    """Copy ``src`` into a temp file in ``directory`` in one pass (each byte read once, written once, and hashed
    from the buffer it was written from, in a second thread for files over one buffer), then fsync it. Returns
    (temp path, hex, size); the caller checks the digest and then :func:`commit`s or unlinks. The digest is of the
    bytes written to the copy, which is at least as strong as hashing the source (bench/NOTES-registry.md).
    Failures on the destination's side raise :class:`DestinationError` naming ``dest`` (else ``directory``);
    the temp file never outlives a failure."""
    where = Path(dest) if dest is not None else Path(directory)
    src_fd = os.open(src, os.O_RDONLY)  # the source first: its errors are plain OSErrors naming it
    try:
        size_hint = os.fstat(src_fd).st_size
        try:
            directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = create_temp(directory, prefix=temp_prefix("incoming"))  # 0o666 & ~umask, not 0600
        except OSError as e:
            raise DestinationError(where, e) from e
        try:
            try:
                if hasattr(os, "posix_fadvise"):
                    os.posix_fadvise(src_fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
                hexdigest, size = _copy(src_fd, fd, where, size_hint)
                try:
                    os.fsync(fd)
                except OSError as e:
                    raise DestinationError(where, e) from e
            finally:
                os.close(fd)
        except BaseException:
            os.unlink(tmp)
            raise
    finally:
        os.close(src_fd)
    return Path(tmp), hexdigest, size


def commit(tmp: Path, dest: Path, *, overwrite: bool = True, sync_dir: bool = True) -> None:
    """Rename a staged temp file onto ``dest`` and fsync the directory (or drop it if ``dest`` exists and
    ``overwrite`` is False: content-addressed names). ``sync_dir=False`` leaves the directory's fsync to the
    caller, who must make it before anything naming ``dest`` is written (``write_files_atomic``' ``sync_first``):
    one fsync for all the blobs of a record instead of one each."""
    if not overwrite and dest.exists():
        os.unlink(tmp)
        return
    try:
        os.replace(tmp, dest)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise DestinationError(dest, e) from e
    if sync_dir:
        fsync_dir(dest.parent)
