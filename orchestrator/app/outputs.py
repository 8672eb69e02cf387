"""Where the deployment verbs write (``pull -o FILE``, ``pull --all -o DIR``, ``export triton --repo DIR``): a path
that cannot be written is a ``UsageError`` naming it and the flag that gave it, never a traceback and never found
out halfway.

Two steps: ``check_file``/``check_directory`` look at what exists before the registry is read (a file where a
directory must go, a directory where the file goes, a file among the parents); ``make_directories`` and
``probe_file`` create and try the destination only once the engines are chosen, so a refused pull (exit 4) leaves
nothing behind, and a path the checks cannot foresee (``/proc/x``, a read-only mount) is still a usage error.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from orchestrator.errors import UsageError


def _first_existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists."""
    for candidate in (path, *path.parents):
        if candidate.exists() or candidate.is_symlink():
            return candidate
    return Path(path.anchor or ".")


def _blocked(path: Path, flag: str, given: str) -> UsageError | None:
    """A file among ``path``'s ancestors (where a directory must be), as an error; None when there is none."""
    existing = _first_existing(path.parent if path.parent != path else path)
    if existing.exists() and not existing.is_dir():
        return UsageError(f"{flag} {given}: {existing} is a file, not a directory",
                          hint=f"pass a path whose parent folders are directories to {flag}")
    return None


def check_file(path: str | os.PathLike[str], flag: str = "-o") -> Path:
    """The file an engine is written to: not a directory, its parents directories (or absent: created later)."""
    out = Path(path)
    if out.is_dir():
        raise UsageError(f"{flag} {path} is a directory", hint=f"give {flag} a file name, e.g. {out / 'model.engine'}")
    problem = _blocked(out, flag, str(path))
    if problem is not None:
        raise problem
    return out


def check_directory(path: str | os.PathLike[str], flag: str) -> Path:
    """A directory to fill: a directory, or absent with directories (or nothing) above it."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{flag} {path}: {out} is a file, not a directory",
                         hint=f"give {flag} a directory (it is created when absent)")
    problem = _blocked(out, flag, str(path))
    if problem is not None:
        raise problem
    return out


def make_directories(paths: Sequence[Path], flag: str, given: str | os.PathLike[str]) -> None:
    """Create every directory in ``paths`` (and their parents) before anything is written into them; when one
    cannot be created, the ones made here are removed again and a ``UsageError`` names it."""
    made: list[Path] = []
    try:
        for directory in paths:
            missing = [p for p in (directory, *directory.parents) if not p.exists()]
            for p in reversed(missing):
                p.mkdir()
                made.append(p)
    except OSError as e:
        for p in reversed(made):
            try:
                p.rmdir()
            except OSError:
                pass
        raise UsageError(f"{flag} {given}: cannot create {e.filename or directory}: {e.strerror or e}",
                         hint=f"give {flag} a path this user can create and write") from None


def probe_file(path: Path, flag: str, given: str | os.PathLike[str]) -> list[Path]:
    """Create the missing parents of ``path`` and try a file beside it (removed at once): a destination this user
    cannot write is a ``UsageError`` now, not a store error halfway through the copy. Returns the directories it
    created (for the caller to remove if the pull fails after all)."""
    missing = [p for p in path.parents if not p.exists()]
    make_directories([path.parent], flag, given)
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=path.parent)
    except OSError as e:
        remove_empty(missing)
        raise UsageError(f"{flag} {given}: cannot write in {path.parent}: {e.strerror or e}",
                         hint=f"give {flag} a path this user can write") from None
    os.close(fd)
    os.unlink(probe)
    return missing


def remove_empty(directories: Sequence[Path]) -> None:
    """Remove the directories a pull created (``probe_file``'s, deepest first) when they are still empty."""
    for p in sorted(directories, key=lambda d: len(d.parts), reverse=True):
        try:
            p.rmdir()
        except OSError:
            pass
