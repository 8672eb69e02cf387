"""Atomic file writes: temp file in the same directory, fsync, rename, fsync the directory. Readers see the
old file or the new one, never a partial one; a crash leaves at most a stray temp file."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable; not possible on every platform (Windows), harmless to skip there."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)


def write_json_atomic(path: str | os.PathLike, data, *, indent: int | None = 2, sort_keys: bool = False) -> bytes:
    """Returns the bytes written (stores hash them for their state tokens)."""
    separators = (",", ":") if indent is None else None
    raw = (json.dumps(data, indent=indent, sort_keys=sort_keys, separators=separators) + "\n").encode()
    write_bytes_atomic(path, raw)
    return raw
