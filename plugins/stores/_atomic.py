"""Atomic file writes and streamed sha256 for the stores.

Every file a store publishes is written to a temporary file in the *same directory* as its final name, flushed
and fsync'd, renamed over the final name (atomic on POSIX within one filesystem) and then the directory is
fsync'd so the rename itself survives a crash. A reader therefore sees either nothing or the whole file.

The digest a store checks is always the sha256 of *the staged temp file's bytes* (the bytes the rename will
put in place), computed before the rename. It is computed by a :class:`StagedHasher` thread that reads each
range back from the page cache right after it was written, so hashing overlaps the copy or the download:
``hashlib`` releases the GIL for updates over 2 KiB and uses OpenSSL's SHA-NI code (~1 GB/s here), so on two
cores the hash is nearly free instead of adding its full time to every transfer (bench/NOTES-registry.md).
Reads and hashing go in 4 MiB chunks: engines can be gigabytes and are never loaded whole.

Temp files are named ``.<name>.<pid>.<host tag>.<random>.tmp`` (``.incoming.<pid>...`` for staged copies), so a
writer killed mid-copy leaves a file whose owner can be checked: :func:`remove_stale_temps` deletes those whose
process is gone (same host) or, for files with no owner we can check (another host, another writer's naming),
that have not been modified for ``max_age_s``.

Failures writing the destination (ENOSPC, EDQUOT, EROFS, EACCES, ...) raise :class:`DestinationError`, which
:func:`write_error` turns into a ``StoreError`` naming the path with a fix; the temp file is always removed.
"""

from __future__ import annotations

import errno
import hashlib
import os
import queue
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from orchestrator.atomic import create_temp, fsync_dir, write_json_atomic
from orchestrator.errors import StoreError

CHUNK = 4 * 1024 * 1024  # hashing reads and in-kernel copy steps (the hasher trails the copy by one step)
# Buffers handed to write() and the download pump's pool. 1 MiB beat 4 MiB for the pump (356 vs 266 MB/s median
# on loopback), and 8 MiB writes from fresh buffers ran at ~215 MB/s vs ~2800 for 1 MiB (bench/NOTES-registry.md).
WRITE_CHUNK = 1024 * 1024
_NO_KERNEL_COPY = {"EXDEV", "ENOSYS", "EINVAL", "EOPNOTSUPP", "ENOTSUP", "EBADF"}


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
    """sha256 of a file being written sequentially, computed in a second thread.

    The writer calls :meth:`written` after each range reaches the file; the thread reads that range back
    (``preadv`` into one reused buffer, page cache), hashes it and starts its writeback to disk (the caller
    fsyncs before renaming). :meth:`hexdigest` waits for the thread.
    Use as a context manager so the thread is always joined before the fd is closed (a late ``preadv`` on a
    closed, reused fd would hash another file).
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._ranges: queue.SimpleQueue[tuple | None] = queue.SimpleQueue()
        self._hash = hashlib.sha256()
        self.size = 0
        self._error: BaseException | None = None
        self._done = False
        self._thread = threading.Thread(target=self._run, name="sha256-staged", daemon=True)
        self._thread.start()

    def written(self, offset: int, n: int) -> None:
        if n:
            self._ranges.put((offset, n, None, None))

    def written_from(self, offset: int, data: memoryview, release: Callable[[], None]) -> None:
        """Like :meth:`written`, but hash ``data`` (the very buffer just written) instead of reading the range
        back, then call ``release`` so the writer may reuse the buffer: one memcpy less per byte."""
        self._ranges.put((offset, len(data), data, release))

    def _run(self) -> None:
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        try:
            while (item := self._ranges.get()) is not None:
                offset, n, data, release = item
                if data is not None:
                    self._hash.update(data)
                    self.size += n
                    release()
                    n = 0
                while n:
                    got = os.preadv(self._fd, [view[:min(n, CHUNK)]], offset)
                    if got == 0:
                        raise OSError(f"staged file ended at {offset} bytes while {n} more were written")
                    self._hash.update(view[:got])
                    offset += got
                    n -= got
                    self.size += got
                start_writeback(self._fd, item[0], item[1])
        except BaseException as e:  # re-raised in the caller's thread by _finish
            self._error = e
            while (item := self._ranges.get()) is not None:  # drain (releasing buffers) until the sentinel
                if item[3] is not None:
                    item[3]()

    def _finish(self) -> None:
        if not self._done:
            self._done = True
            self._ranges.put(None)
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
    """A binary sink on a raw fd whose bytes are hashed (read back from the file) in a second thread. A failed
    write raises :class:`DestinationError` naming ``dest``."""

    def __init__(self, fd: int, hasher: StagedHasher, dest: Path | None = None) -> None:
        self._fd = fd
        self._hasher = hasher
        self.size = 0
        self.dest = dest

    def _write_all(self, view: memoryview) -> None:
        done = 0
        try:
            while done < len(view):
                done += os.write(self._fd, view[done:])
        except OSError as e:
            raise DestinationError(self.dest or Path(f"fd {self._fd}"), e) from e

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data).cast("B")
        total = len(view)
        self._write_all(view)
        self._hasher.written(self.size, total)
        self.size += total
        return total

    def pump(self, readinto: Callable[[memoryview], int], *, buffers: int = 8) -> int:
        """Write everything ``readinto`` yields (until it returns 0) through a pool of ``buffers`` 1 MiB
        buffers: the hasher thread hashes buffer k while this thread reads and writes buffer k+1, and hands it
        back when done. Memory stays at ``buffers`` MiB whatever the size. Returns the bytes written."""
        free: queue.SimpleQueue[memoryview] = queue.SimpleQueue()
        for _ in range(buffers):
            free.put(memoryview(bytearray(WRITE_CHUNK)))
        start = self.size
        while True:
            buf = free.get()
            n = readinto(buf)
            if not n:
                break
            view = buf[:n]
            try:
                self._write_all(view)
            except DestinationError:
                free.put(buf)
                raise
            self._hasher.written_from(self.size, view, lambda b=buf: free.put(b))
            self.size += n
        return self.size - start

    def hexdigest(self) -> str:
        return self._hasher.hexdigest()


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
            with StagedHasher(fd) as hasher:
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


_DEST_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}


def _kernel_copy(src_fd: int, dst_fd: int, hasher: StagedHasher) -> None:
    """Copy src to dst in 4 MiB in-kernel steps (copy_file_range, else sendfile, else read/write), telling
    ``hasher`` about each step so it hashes step k while the kernel copies step k+1."""
    offset = 0
    step = getattr(os, "copy_file_range", None)
    while True:
        try:
            if step is not None:
                n = step(src_fd, dst_fd, CHUNK)
            else:
                n = os.sendfile(dst_fd, src_fd, None, CHUNK)
        except OSError as e:
            # copy_file_range refuses some pairs (across filesystems on older kernels, special files);
            # sendfile covers those, and plain read/write whatever is left.
            if offset == 0 and errno.errorcode.get(e.errno) in _NO_KERNEL_COPY:
                if step is not None:
                    step = None
                    continue
                buf = bytearray(WRITE_CHUNK)
                while got := os.readv(src_fd, [buf]):
                    view = memoryview(buf)[:got]
                    done = 0
                    while done < got:
                        done += os.write(dst_fd, view[done:])
                    hasher.written(offset, got)
                    offset += got
                return
            raise
        if n == 0:
            return
        hasher.written(offset, n)
        offset += n


def stage_copy(src: Path, directory: Path, dest: Path | None = None) -> tuple[Path, str, int]:
    """Copy ``src`` into a temp file in ``directory`` in-kernel (copy_file_range, as cp does) while a second
    thread hashes *the copy* range by range, then fsync it. Returns (temp path, hex, size); the caller checks
    the digest and then :func:`commit`s or unlinks. Hashing the staged bytes is at least as strong as hashing
    the source; overlapping it with the copy took local put from 0.5x to ~0.9x of cp+sync (NOTES-registry).
    Failures on the destination's side raise :class:`DestinationError` naming ``dest`` (else ``directory``);
    the temp file never outlives a failure."""
    where = Path(dest) if dest is not None else Path(directory)
    src_fd = os.open(src, os.O_RDONLY)  # the source first: its errors are plain OSErrors naming it
    try:
        try:
            directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = create_temp(directory, prefix=temp_prefix("incoming"))  # 0o666 & ~umask, not 0600
        except OSError as e:
            raise DestinationError(where, e) from e
        try:
            try:
                if hasattr(os, "posix_fadvise"):
                    os.posix_fadvise(src_fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
                with StagedHasher(fd) as hasher:
                    try:
                        _kernel_copy(src_fd, fd, hasher)
                    except OSError as e:
                        if e.errno in _DEST_ERRNOS:
                            raise DestinationError(where, e) from e
                        raise
                    hexdigest = hasher.hexdigest()
                    size = hasher.size
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


def commit(tmp: Path, dest: Path, *, overwrite: bool = True) -> None:
    """Rename a staged temp file onto ``dest`` and fsync the directory (or drop it if ``dest`` exists and
    ``overwrite`` is False: content-addressed names)."""
    if not overwrite and dest.exists():
        os.unlink(tmp)
        return
    try:
        os.replace(tmp, dest)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise DestinationError(dest, e) from e
    fsync_dir(dest.parent)
