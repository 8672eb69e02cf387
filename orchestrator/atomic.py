"""Atomic file writes: temp file in the same directory, fsync, rename, fsync the directory. Readers see the
old file or the new one, never a partial one; a crash leaves at most a stray temp file. A full disk (ENOSPC,
EDQUOT) is a ``NoSpaceError`` naming the folder and the space left there (``no_space``, also used by the
builders and transforms for the files they write).

Modes: a file we write gets what ``open()`` would give it, ``0o666 & ~umask`` (0644 under the usual umask 022), and
a folder ``0o777 & ~umask``. ``tempfile.mkstemp`` creates its file 0600 and a rename keeps that mode, so every
output (a Triton repository a server reads as another user, a ``pull --all`` folder, the local store, the report)
would be private to us (issue 22.3): :func:`create_temp` makes the temp file the way ``open()`` does instead.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Iterable
from pathlib import Path

from orchestrator.errors import NoSpaceError

_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)

FILE_MODE = 0o666  # before the umask, as open() and the shell's `>` create files
_TEMP_FLAGS = (os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
               | getattr(os, "O_BINARY", 0))


def create_temp(directory: str | os.PathLike, prefix: str, suffix: str = ".tmp") -> tuple[int, str]:
    """Like ``tempfile.mkstemp`` (a new file no one else can have opened: ``O_EXCL``, never through a symlink; an
    fd open for reading and writing), but created with ``0o666 & ~umask``, so the file renamed into place has the
    mode any other file written here would have. The kernel applies the umask (and a folder's default ACL), so
    nothing here reads the umask: reading it means setting it, which races other threads."""
    for _ in range(100):
        path = os.path.join(directory, f"{prefix}{secrets.token_hex(6)}{suffix}")
        try:
            return os.open(path, _TEMP_FLAGS, FILE_MODE), path
        except FileExistsError:
            continue
    raise FileExistsError(f"no unused temporary file name in {directory} after 100 tries")


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
    write_chunks_atomic(path, (data,))


def write_chunks_atomic(path: str | os.PathLike, chunks: Iterable[bytes]) -> str:
    """Write ``chunks`` (a large file, streamed) atomically; returns ``sha256:<hex>`` of what was written."""
    target = Path(path)
    digest = hashlib.sha256()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = create_temp(target.parent, prefix=f".{target.name}.")
    except OSError as e:
        full = no_space(e, target)
        if full is not None:
            raise full from e
        raise
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                digest.update(chunk)
                f.write(chunk)
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
    return "sha256:" + digest.hexdigest()


def json_bytes(data, *, indent: int | None = 2, sort_keys: bool = False) -> bytes:
    """The bytes :func:`write_json_atomic` writes for ``data`` (compact when ``indent`` is None)."""
    separators = (",", ":") if indent is None else None
    return (json.dumps(data, indent=indent, sort_keys=sort_keys, separators=separators) + "\n").encode()


def write_json_atomic(path: str | os.PathLike, data, *, indent: int | None = 2, sort_keys: bool = False) -> bytes:
    """Returns the bytes written (stores hash them for their state tokens)."""
    raw = json_bytes(data, indent=indent, sort_keys=sort_keys)
    write_bytes_atomic(path, raw)
    return raw
