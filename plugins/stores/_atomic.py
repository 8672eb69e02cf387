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
"""

from __future__ import annotations

import hashlib
import os
import queue
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from orchestrator.atomic import fsync_dir, write_json_atomic

CHUNK = 4 * 1024 * 1024  # hashing reads and in-kernel copy steps (the hasher trails the copy by one step)
# Buffers handed to write() and the download pump's pool. 1 MiB beat 4 MiB for the pump (356 vs 266 MB/s median
# on loopback), and 8 MiB writes from fresh buffers ran at ~215 MB/s vs ~2800 for 1 MiB (bench/NOTES-registry.md).
WRITE_CHUNK = 1024 * 1024
_NO_KERNEL_COPY = {"EXDEV", "ENOSYS", "EINVAL", "EOPNOTSUPP", "ENOTSUP", "EBADF"}


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
    """A binary sink on a raw fd whose bytes are hashed (read back from the file) in a second thread."""

    def __init__(self, fd: int, hasher: StagedHasher) -> None:
        self._fd = fd
        self._hasher = hasher
        self.size = 0

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data).cast("B")
        total = len(view)
        done = 0
        while done < total:
            done += os.write(self._fd, view[done:])
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
            done = 0
            while done < n:
                done += os.write(self._fd, view[done:])
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
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    try:
        try:
            with StagedHasher(fd) as hasher:
                yield HashingWriter(fd, hasher)
            os.fsync(fd)
        finally:
            os.close(fd)
        if not overwrite and dest.exists():
            os.unlink(tmp)
            return
        os.replace(tmp, dest)
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
            import errno

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


def stage_copy(src: Path, directory: Path) -> tuple[Path, str, int]:
    """Copy ``src`` into a temp file in ``directory`` in-kernel (copy_file_range, as cp does) while a second
    thread hashes *the copy* range by range, then fsync it. Returns (temp path, hex, size); the caller checks
    the digest and then :func:`commit`s or unlinks. Hashing the staged bytes is at least as strong as hashing
    the source; overlapping it with the copy took local put from 0.5x to ~0.9x of cp+sync (NOTES-registry)."""
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".incoming.", suffix=".tmp", dir=directory)
    try:
        try:
            src_fd = os.open(src, os.O_RDONLY)
            try:
                if hasattr(os, "posix_fadvise"):
                    os.posix_fadvise(src_fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
                with StagedHasher(fd) as hasher:
                    _kernel_copy(src_fd, fd, hasher)
                    hexdigest = hasher.hexdigest()
                    size = hasher.size
            finally:
                os.close(src_fd)
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        os.unlink(tmp)
        raise
    return Path(tmp), hexdigest, size


def commit(tmp: Path, dest: Path, *, overwrite: bool = True) -> None:
    """Rename a staged temp file onto ``dest`` and fsync the directory (or drop it if ``dest`` exists and
    ``overwrite`` is False: content-addressed names)."""
    if not overwrite and dest.exists():
        os.unlink(tmp)
        return
    os.replace(tmp, dest)
    fsync_dir(dest.parent)
