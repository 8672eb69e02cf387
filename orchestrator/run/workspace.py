"""The cache directory's layout (``.orchestrate/``), node results on disk, and which run owns a temporary dir.

Names become path parts only through :func:`safe_path_part`: past a length limit a readable prefix and a digest,
so any valid model or target name works (file names are limited to 255 bytes). Temporary dirs belong to a run that
holds a lock on its owner file for its whole life (:class:`RunOwnership`), so a cleaner removes only those of dead
runs, even across pid namespaces.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.core.graph import Node

DIR_OF_KIND = {"prepare": "prepare", "calibrate": "calibrate", "transform": "transform", "build": "build",
               "gate:parity": "gate-parity", "gate:benchmark": "gate-benchmark", "publish": "publish"}
PATH_PART_MAX = 120  # bytes; file names may have 255, and a suffix or a temp prefix is added to some


def safe_path_part(text: str, limit: int = PATH_PART_MAX) -> str:
    """``text`` as one file-name part: characters other than letters, digits and ``._-+@`` become ``_``; longer
    than ``limit`` bytes, it becomes a readable prefix + ``-`` + 16 hex digits of its sha256 (stable, distinct
    for distinct texts). Short names are unchanged, so existing caches keep their file names."""
    safe = "".join(c if c.isalnum() or c in "._-+@" else "_" for c in text) or "_"
    if safe.strip(".") == "":
        safe = safe + "_"  # never "." or ".."
    raw = safe.encode()
    if len(raw) <= limit:
        return safe
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    prefix = raw[:limit - len(digest) - 1].decode(errors="ignore")
    return f"{prefix}-{digest}"


def _key_part(key: str) -> str:
    """A node key as its dir name: as it is where it can be one (content keys, "sha256:<hex>": existing caches
    keep their dirs), else through :func:`safe_path_part`."""
    if 0 < len(key.encode()) <= PATH_PART_MAX and "/" not in key and "\0" not in key and key.strip(".") != "":
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]  # always: "a/b" and "a_b" must not share a dir
    return f"{safe_path_part(key, PATH_PART_MAX - len(digest) - 1)}-{digest}"


@dataclass(frozen=True)
class Workspace:
    """The on-disk layout under the cache root (default ``.orchestrate/``)."""

    root: Path

    def node_dir(self, node: Node, salt: str = "") -> Path:
        return self.kind_dir(node.kind) / self.node_name(node, salt)

    def kind_dir(self, kind: str) -> Path:
        """The folder of every node of one kind."""
        return self.root / "nodes" / DIR_OF_KIND[kind]

    def node_name(self, node: Node, salt: str = "") -> str:
        """The last part of ``node_dir``: its name in the folder of its kind's nodes."""
        key = node.key if not salt else hashlib.sha256(f"{node.key}\0{salt}".encode()).hexdigest()
        return _key_part(key)

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def caches(self) -> Path:
        return self.root / "caches"

    @property
    def locks(self) -> Path:
        return self.root / "locks"

    def log_path(self, node: Node) -> Path:
        return self.logs / f"{safe_path_part(node.id)}.log"


def fingerprint_result(result: dict) -> str:
    return hashlib.sha256(json.dumps(result, sort_keys=True).encode()).hexdigest()


def read_result(node_dir: Path) -> dict | None:
    """The node's result if it is complete and intact, else None."""
    try:
        result = json.loads((node_dir / "result.json").read_text())
    except (OSError, ValueError):
        return None
    for rel, size in result.get("files", {}).items():
        try:
            if (node_dir / rel).stat().st_size != size:
                return None
        except OSError:
            return None
    return result


def read_gate_report(node_dir: str | Path, name: str) -> dict[str, Any] | None:
    try:
        report: dict[str, Any] = json.loads((Path(node_dir) / name).read_text())
    except (OSError, ValueError):
        return None
    return report


try:
    import fcntl
except ImportError:  # Windows: runs are told apart by pid only
    fcntl = None  # type: ignore[assignment]


class RunOwnership:
    """This run's claim on its temporary dirs: ``tmp/<run id>.owner``, locked (flock) for the run's life.

    Temporary dirs are named ``<run id>-...`` with ``<run id>`` = ``<pid>.<random>``. A cleaner that can lock a
    run's owner file knows that run is dead (the kernel drops the lock with the process, SIGKILL included); one
    that cannot leaves the run's dirs alone. That holds across pid namespaces (two containers on one cache
    volume), where a pid says nothing. The file appears under its name already locked (locked, then renamed),
    so no cleaner ever sees it unlocked while its run lives."""

    def __init__(self, tmp: Path) -> None:
        self.run_id = f"{os.getpid()}.{os.urandom(6).hex()}"
        self.path = tmp / f"{self.run_id}.owner"
        self._fd: int | None = None
        if fcntl is None:
            return
        staging = tmp / f".{self.run_id}.owner.new"
        fd = os.open(staging, os.O_RDWR | os.O_CREAT, 0o666)  # umask applies, as to every file we write
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(staging, self.path)
        except OSError:
            os.close(fd)
            staging.unlink(missing_ok=True)
            return  # no locking here (some network filesystems): the pid rule applies
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            self.path.unlink(missing_ok=True)
            os.close(self._fd)
            self._fd = None


def _run_alive(tmp: Path, run_id: str) -> bool:
    """Whether the run that named a temporary dir ``<run_id>-...`` may still be writing into it."""
    owner = tmp / f"{run_id}.owner"
    if fcntl is not None:
        try:
            fd = os.open(owner, os.O_RDWR)
        except FileNotFoundError:
            pass  # an older layout (pid only), or a run that could not lock: fall back to its pid
        except OSError:
            return True  # cannot tell: keep its files
        else:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return True  # locked: its run is alive
            else:
                owner.unlink(missing_ok=True)  # dead: its lock went with it; the file goes now
                return False
            finally:
                os.close(fd)
    pid = run_id.split(".", 1)[0]
    if not pid.isdigit() or int(pid) == os.getpid():
        return False  # ours from an earlier run in this process, or not a run's name at all
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def remove_run_tmp(ws: Workspace, run_id: str) -> None:
    """Remove every temporary entry of run ``run_id`` (``<run id>-...``; its owner file stays until released)."""
    for entry in ws.tmp.glob(f"{run_id}-*"):
        for attempt in range(3):  # a killed worker's last write may land while the dir is being removed
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            if not os.path.lexists(entry):
                break
            time.sleep(0.1 * (attempt + 1))


def clean_stale_tmp(ws: Workspace, keep: str | None = None) -> int:
    """Remove temporary node dirs left by killed runs (see :class:`RunOwnership`); ``keep``: this run's id."""
    removed = 0
    if not ws.tmp.exists():
        return 0
    verdicts: dict[str, bool] = {}
    for entry in sorted(ws.tmp.iterdir()):
        if entry.name.endswith(".owner") or entry.name.endswith(".owner.new"):
            continue
        run_id = entry.name.split("-", 1)[0]
        if run_id == keep:
            continue
        if run_id not in verdicts:
            verdicts[run_id] = _run_alive(ws.tmp, run_id)
        if not verdicts[run_id]:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            removed += 1
    for owner in ws.tmp.glob("*.owner"):  # owner files of dead runs that left no dir behind
        run_id = owner.name[:-len(".owner")]
        if run_id != keep and run_id not in verdicts:
            _run_alive(ws.tmp, run_id)
    if fcntl is not None:
        for staging in ws.tmp.glob(".*.owner.new"):  # a run killed while claiming its owner file
            try:
                fd = os.open(staging, os.O_RDWR)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                staging.unlink(missing_ok=True)
            except OSError:
                pass
            finally:
                os.close(fd)
    return removed
