"""Atomic file writes: temp file in the same directory, fsync, rename, fsync the directory. Readers see the
old file or the new one, never a partial one; a crash leaves at most a stray temp file. A full disk (ENOSPC,
EDQUOT) is a ``NoSpaceError`` naming the folder and the space left there (``no_space``, also used by the
builders and transforms for the files they write)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from pathlib import Path

from orchestrator.errors import NoSpaceError

_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def free_bytes(path: str | os.PathLike) -> int | None:
    """Bytes free to an unprivileged writer on the filesystem holding ``path`` (its nearest existing folder)."""
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return shutil.disk_usage(probe).free
    except OSError:
        return None


def no_space(error: BaseException | None, path: str | os.PathLike, *, what: str | None = None
             ) -> NoSpaceError | None:
    """``NoSpaceError`` naming ``path`` (a file's folder: where the space ran out) and what is free there, when
    ``error`` or an error it was raised from is ENOSPC/EDQUOT; else None. Libraries wrap the OSError of a full disk
    (onnx, onnxruntime's quantizer), so the chain is searched."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, NoSpaceError):
            return error
        if isinstance(error, OSError) and error.errno in _NO_SPACE:
            folder = Path(path) if Path(path).is_dir() else Path(path).parent
            return NoSpaceError(str(folder), free_bytes(folder), what=what, quota=error.errno == errno.EDQUOT)
        error = error.__cause__ or error.__context__
    return None


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
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as e:
        full = no_space(e, target)
        if full is not None:
            raise full from e
        raise
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        full = no_space(e, target)
        if full is not None:
            raise full from e
        raise
    fsync_dir(target.parent)


def write_json_atomic(path: str | os.PathLike, data, *, indent: int | None = 2, sort_keys: bool = False) -> bytes:
    """Returns the bytes written (stores hash them for their state tokens)."""
    separators = (",", ":") if indent is None else None
    raw = (json.dumps(data, indent=indent, sort_keys=sort_keys, separators=separators) + "\n").encode()
    write_bytes_atomic(path, raw)
    return raw
