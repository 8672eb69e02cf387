"""Atomic file writes and streamed sha256 for the stores.

Every file a store publishes is written to a temporary file in the *same directory* as its final name, flushed
and fsync'd, renamed over the final name (atomic on POSIX within one filesystem) and then the directory is
fsync'd so the rename itself survives a crash. A reader therefore sees either nothing or the whole file.

Hashing streams in 8 MiB chunks: engines can be gigabytes and must never be loaded whole.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator

CHUNK = 8 * 1024 * 1024  # hashing reads
# Writes go through 1 MiB buffers: on this 2-core VM, 8 MiB write() calls into the page cache ran at
# ~215 MB/s against ~2800 MB/s for 1 MiB ones (bench/NOTES-registry.md).
WRITE_CHUNK = 1024 * 1024


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sha256_file(path: Path) -> tuple[str, int]:
    """``(hex digest, size)`` of a file, read in 8 MiB chunks."""
    h = hashlib.sha256()
    size = 0
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
            size += n
    return h.hexdigest(), size


class HashingWriter:
    """A binary sink that hashes and counts what passes through it."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self.hash = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.hash.update(data)
        self.size += len(data)
        return self._f.write(data)

    def hexdigest(self) -> str:
        return self.hash.hexdigest()


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
        with os.fdopen(fd, "wb") as f:
            writer = HashingWriter(f)
            yield writer
            f.flush()
            os.fsync(f.fileno())
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


def copy_stream(src: BinaryIO, writer: HashingWriter) -> None:
    """Copy through one reused 8 MiB buffer: a fresh 8 MiB ``bytes`` per read costs an mmap + page faults
    each time, which halved throughput in bench/bench_registry.py."""
    buf = bytearray(WRITE_CHUNK)
    view = memoryview(buf)
    while n := src.readinto(buf):
        writer.write(view[:n])


def atomic_write_bytes(dest: Path, data: bytes) -> None:
    with atomic_writer(dest) as w:
        w.write(data)


def atomic_write_json(dest: Path, obj: object, *, indent: int | None = None) -> bytes:
    """Write ``obj`` as JSON atomically; returns the bytes written (callers hash them for state tokens)."""
    data = json.dumps(obj, indent=indent, sort_keys=True, separators=(",", ":") if indent is None else None)
    raw = data.encode() + b"\n"
    atomic_write_bytes(dest, raw)
    return raw


def stage_copy(src: Path, directory: Path) -> tuple[Path, str, int]:
    """Copy ``src`` into a temp file in ``directory`` in-kernel (sendfile/copy_file_range, as cp does), then
    hash *the copy* and fsync it. Returns (temp path, hex, size); the caller checks the digest and then
    :func:`commit`s or unlinks. Hashing the stored bytes is at least as strong as hashing while copying, and
    on this 2-core VM a userspace copy ran at ~110 MB/s against cp's ~500 MB/s (bench/NOTES-registry.md)."""
    import shutil

    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".incoming.", suffix=".tmp", dir=directory)
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        hexdigest, size = sha256_file(Path(tmp))
        fd = os.open(tmp, os.O_RDONLY)
        try:
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
