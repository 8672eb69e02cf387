"""Runs graph nodes in dependency order with injected step functions: resume, parallelism, keep-going.

Every node writes into a private temporary directory; on success the executor adds ``result.json`` and renames
the directory into place (one atomic rename), so a node is either complete or absent — a SIGKILL mid-build
leaves only a temporary directory, which the next run removes. A node is *done* when its directory exists,
every file it listed is present with its recorded size, and the results of its dependencies are the ones it
was made from (Make-like): deleting one engine redoes that build and the gates downstream of it, nothing else.

Several processes may share one cache dir (two ``build`` runs, CI jobs on one volume): completing a node takes
a lock per node; a node another process completed meanwhile from the same inputs is taken as it is (our copy is
dropped), an outdated one is swapped out in one step. Temporary dirs belong to a run that holds a lock on its
owner file for its whole life, so a cleaner removes only those of dead runs, even across pid namespaces.

CPU-bound nodes run in worker processes (``jobs``); nodes that need a GPU run one at a time per device.
Heavy libraries are imported only inside the workers' steps, never in this scheduling process. Workers die
with the scheduling process, however it ends (a SIGKILL included): each asks the kernel for SIGKILL when its
parent dies (Linux ``PR_SET_PDEATHSIG``), and all of them, with whatever they start (a builder's ``trtexec``),
sit in one process group watched by a small guard process that kills the group when its pipe from the scheduler
closes. Where either is unavailable the other still applies; Ctrl-C kills the group the same way.

Names become path parts only through :func:`safe_path_part`: past a length limit a readable prefix and a digest,
so any valid model or target name works (file names are limited to 255 bytes).
"""

from __future__ import annotations

import concurrent.futures as cf
import errno
import hashlib
import json
import multiprocessing
import os
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from filelock import FileLock, Timeout

from orchestrator.atomic import fsync_dir
from orchestrator.core.graph import Node
from orchestrator.errors import OrchestratorError
from orchestrator.run.workers import WorkerGuard, reap, stop_workers, worker_init

NodeStatus = Literal["done", "cached", "failed", "skipped", "pending", "interrupted"]
_DIR_OF_KIND = {"prepare": "prepare", "calibrate": "calibrate", "transform": "transform", "build": "build",
                "gate:parity": "gate-parity", "gate:benchmark": "gate-benchmark", "publish": "publish"}
PATH_PART_MAX = 120  # bytes; file names may have 255, and a suffix or a temp prefix is added to some
COMPLETE_LOCK_TIMEOUT_S = 600.0  # another process completing the same node holds it for a rename and an fsync


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
        key = node.key if not salt else hashlib.sha256(f"{node.key}\0{salt}".encode()).hexdigest()
        return self.root / "nodes" / _DIR_OF_KIND[node.kind] / _key_part(key)

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


@dataclass(frozen=True)
class StepTask:
    """What a worker needs to run one node. ``payload`` is step-specific, picklable data."""

    node: Node
    out_dir: Path  # temporary; becomes the node dir on success
    dep_dirs: dict[str, str]  # dep node id -> its completed dir
    log_path: Path
    payload: object = None


@dataclass(frozen=True)
class StepOutcome:
    files: tuple[str, ...] = ()  # relative to the node dir
    data: dict = field(default_factory=dict)
    status: Literal["done", "skipped", "pending", "failed"] = "done"
    reason: str = ""


@dataclass
class NodeReport:
    node: str
    kind: str
    status: NodeStatus
    seconds: float = 0.0
    reason: str = ""
    dir: str | None = None
    log: str | None = None
    data: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"node": self.node, "kind": self.kind, "status": self.status, "seconds": round(self.seconds, 3),
                "reason": self.reason, "dir": self.dir, "log": self.log, "data": self.data}


@dataclass
class RunSummary:
    reports: list[NodeReport]
    seconds: float
    interrupted: bool = False

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.reports:
            out[r.status] = out.get(r.status, 0) + 1
        return out

    @property
    def ok(self) -> bool:
        return not self.interrupted and not any(r.status == "failed" for r in self.reports)

    def to_json(self) -> dict:
        return {"format_version": 1, "ok": self.ok, "interrupted": self.interrupted,
                "seconds": round(self.seconds, 3), "counts": self.counts(),
                "nodes": [r.to_json() for r in self.reports]}


def _fingerprint(result: dict) -> str:
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


class _OutputToLog:
    """Native libraries (TensorRT, onnxruntime) print straight to fds 1/2; in a worker that goes to the node's
    log, so the terminal shows progress, not library chatter."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> None:
        import sys

        sys.stdout.flush()
        sys.stderr.flush()
        self.saved = (os.dup(1), os.dup(2))
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)  # less the umask
        os.dup2(self.fd, 1)
        os.dup2(self.fd, 2)

    def __exit__(self, *exc) -> None:
        import sys

        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)
        for fd in (*self.saved, self.fd):
            os.close(fd)


class open_step_log:
    """The node's log file as a ``log(line)`` function, closed on exit (steps hand it to plugins)."""

    def __init__(self, task: StepTask) -> None:
        task.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._handle = open(task.log_path, "a", buffering=1)

    def __enter__(self) -> Callable[[str], None]:
        def log(line: str) -> None:
            self._handle.write(line.rstrip("\n") + "\n")

        return log

    def __exit__(self, *exc: object) -> None:
        self._handle.close()


def _run_in_worker(step: Callable[[StepTask], StepOutcome], task: StepTask,
                   capture: bool = True) -> tuple[StepOutcome, str | None]:
    """Worker side: run the step, translating errors into an outcome (tracebacks only for bugs, into the log)."""
    try:
        task.log_path.parent.mkdir(parents=True, exist_ok=True)
        if capture:
            with _OutputToLog(task.log_path):
                return step(task), None
        return step(task), None
    except OrchestratorError as e:
        return StepOutcome(status="failed", reason=str(e)), None
    except Exception as e:  # a bug or a foreign error not yet mapped: keep the traceback in the node log
        tb = traceback.format_exc()
        try:
            with open(task.log_path, "a") as log:
                log.write(tb)
        except OSError:
            pass  # the log itself cannot be written (full disk): the reason still reaches the summary
        return StepOutcome(status="failed", reason=f"{type(e).__name__}: {e}"), tb


StepFn = Callable[[StepTask], StepOutcome]
EventFn = Callable[[str, Node, "NodeReport | None"], None]


@dataclass
class Executor:
    """``steps`` maps a node kind to a top-level (picklable) step function; ``prepare_task`` gives the payload
    and may return a skip/pending reason instead (e.g. this runner cannot build that target)."""

    workspace: Workspace
    steps: Mapping[str, StepFn]
    prepare_task: Callable[[Node], tuple[object, StepOutcome | None]]
    jobs: int = max(1, os.cpu_count() or 1)
    keep_going: bool = False
    needs_gpu: Callable[[Node], bool] = lambda node: False
    dir_salt: Callable[[Node], str] = lambda node: ""
    on_event: Callable[[str, Node, NodeReport | None], None] = lambda event, node, report: None
    in_process: bool = False  # run steps in this process (tests, -j 1 debugging)
    always_run: Callable[[Node], bool] = lambda node: False  # e.g. publish: the store itself is idempotent
    # whether a complete cached result may stand for this run (e.g. a gate verdict given with another runtime
    # version or on another GPU model may not): False runs the node again and replaces the result
    reuse: Callable[[Node, dict], bool] = lambda node, result: True

    def run(self, nodes: Mapping[str, Node], order: Iterable[str], selected: set[str]) -> RunSummary:
        start = time.monotonic()
        ws = self.workspace
        for d in (ws.tmp, ws.logs, ws.caches):
            d.mkdir(parents=True, exist_ok=True)
        owner = RunOwnership(ws.tmp)
        clean_stale_tmp(ws, keep=owner.run_id)
        order = [n for n in order if n in selected]
        reports: dict[str, NodeReport] = {}
        results: dict[str, dict] = {}  # node id -> result (for dep fingerprints)
        remaining = list(order)
        running: dict[cf.Future, tuple[Node, Path, float, dict]] = {}
        gpu_busy = False
        stop = False
        interrupted = False

        def dep_result(dep: str) -> dict | None:
            if dep in results:
                return results[dep]
            if dep in nodes and dep not in selected:
                r = read_result(ws.node_dir(nodes[dep], self.dir_salt(nodes[dep])))
                if r is not None:
                    results[dep] = r
                return r
            return None

        def finish(node: Node, report: NodeReport) -> None:
            reports[node.id] = report
            self.on_event("finish", node, report)

        pool = None
        guard = None
        if not self.in_process:
            ctx = multiprocessing.get_context("spawn")
            guard = WorkerGuard()
            pool = cf.ProcessPoolExecutor(max_workers=max(1, self.jobs), mp_context=ctx, initializer=worker_init,
                                          initargs=(os.getpid(), guard.pgid))
        try:
            while remaining or running:
                progressed = False
                for node_id in list(remaining):
                    if stop or len(running) >= self.jobs:
                        break  # a free worker first: queueing in the pool would lose order and timings
                    node = nodes[node_id]
                    deps_state = [reports.get(d) for d in node.deps if d in selected]
                    if any(r is None for r in deps_state):
                        continue  # a dependency has not finished
                    remaining.remove(node_id)
                    progressed = True
                    bad = [r for r in deps_state
                           if r is not None and r.status in ("failed", "skipped", "pending", "interrupted")]
                    if bad:
                        verb = {"failed": "failed", "skipped": "was skipped", "pending": "is pending",
                                "interrupted": "was interrupted"}[bad[0].status]
                        status: NodeStatus = "pending" if bad[0].status == "pending" else "skipped"
                        finish(node, NodeReport(node.id, node.kind, status, reason=f"{bad[0].node} {verb}"))
                        continue
                    dep_results = {d: dep_result(d) for d in node.deps}
                    missing = [d for d, r in dep_results.items() if r is None]
                    if missing:
                        finish(node, NodeReport(node.id, node.kind, "skipped",
                                                reason=f"{missing[0]} has no result on this runner"))
                        continue
                    dep_prints = {d: _fingerprint(r) for d, r in dep_results.items() if r is not None}  # none missing
                    final = ws.node_dir(node, self.dir_salt(node))
                    existing = read_result(final)
                    if (existing is not None and existing.get("deps") == dep_prints and not self.always_run(node)
                            and self.reuse(node, existing)):
                        results[node_id] = existing
                        finish(node, NodeReport(node.id, node.kind, "cached", dir=str(final),
                                                log=existing.get("log"), data=existing.get("data", {})))
                        continue
                    if self.needs_gpu(node) and gpu_busy:
                        # GPU work runs one at a time per device; prepared only once it can start (preparing
                        # may read the registry, e.g. a benchmark's baseline)
                        remaining.insert(0, node_id)
                        progressed = False
                        continue
                    payload, early = self.prepare_task(node)
                    if early is not None:
                        finish(node, NodeReport(node.id, node.kind, early.status if early.status != "done"
                                                else "skipped", reason=early.reason))
                        continue
                    tmp = ws.tmp / (f"{owner.run_id}-{_DIR_OF_KIND[node.kind]}-{safe_path_part(node.key[:16])}-"
                                    f"{time.monotonic_ns()}")
                    tmp.mkdir(parents=True)
                    dep_dirs = {d: str(ws.node_dir(nodes[d], self.dir_salt(nodes[d]))) for d in node.deps
                                if d in nodes}
                    task = StepTask(node=node, out_dir=tmp, dep_dirs=dep_dirs, log_path=ws.log_path(node),
                                    payload=payload)
                    self.on_event("start", node, None)
                    if self.needs_gpu(node):
                        gpu_busy = True
                    if pool is None:
                        fut: cf.Future = cf.Future()
                        fut.set_result(_run_in_worker(self.steps[node.kind], task, False))
                    else:
                        fut = pool.submit(_run_in_worker, self.steps[node.kind], task)
                    running[fut] = (node, tmp, time.monotonic(), dep_prints)
                if running:
                    done, _ = cf.wait(list(running), timeout=0.2, return_when=cf.FIRST_COMPLETED)
                    for fut in done:
                        node, tmp, t0, dep_prints = running.pop(fut)
                        if self.needs_gpu(node):
                            gpu_busy = False
                        report = self._complete(node, tmp, fut, t0, dep_prints, results, owner.run_id)
                        finish(node, report)
                        if report.status == "failed" and not self.keep_going:
                            stop = True
                elif not progressed and remaining:
                    why = ("not started: an earlier node failed (use --keep-going)" if stop
                           else "not started: its dependencies never completed")
                    for node_id in remaining:
                        node = nodes[node_id]
                        finish(node, NodeReport(node.id, node.kind, "skipped", reason=why))
                    remaining.clear()
        except KeyboardInterrupt:
            interrupted = True
            if pool is not None:
                stop_workers(pool, guard)  # before removing their temp dirs: a live worker would write into them
            for fut, (node, _tmp, _t0, _deps) in running.items():
                fut.cancel()
                reports[node.id] = NodeReport(node.id, node.kind, "interrupted", reason="stopped by Ctrl-C")
            # Every temp dir of this run, not only those of the running nodes: Ctrl-C can land after a dir is made
            # and before its work is tracked (or inside an in-process step), or while a finished node's dir is
            # being moved into place; all carry this run's id (issue 22.5: one was left under load).
            remove_run_tmp(ws, owner.run_id)
        finally:
            if pool is not None:
                # interrupted: the workers were killed (stop_workers), so the shutdown has nothing to wait for
                pool.shutdown(wait=True, cancel_futures=True)
                reap(pool)
            if guard is not None:
                guard.close()
            owner.release()
        ordered = [reports[n] for n in order if n in reports]
        return RunSummary(ordered, time.monotonic() - start, interrupted)

    def _complete(self, node: Node, tmp: Path, fut: cf.Future, t0: float, dep_prints: dict,
                  results: dict, run_id: str = "") -> NodeReport:
        ws = self.workspace
        seconds = time.monotonic() - t0
        log = str(ws.log_path(node))
        try:
            outcome, _tb = fut.result()
        except Exception as e:  # the worker process died (OOM killer, segfault in a native library)
            shutil.rmtree(tmp, ignore_errors=True)
            return NodeReport(node.id, node.kind, "failed", seconds, f"worker died: {type(e).__name__}: {e}",
                              log=log)
        if outcome.status != "done":
            shutil.rmtree(tmp, ignore_errors=True)
            return NodeReport(node.id, node.kind, outcome.status, seconds, outcome.reason, log=log,
                              data=outcome.data)
        final = ws.node_dir(node, self.dir_salt(node))
        try:
            files = {}
            for rel in outcome.files:
                try:
                    files[rel] = (tmp / rel).stat().st_size
                except FileNotFoundError:
                    raise _CompletionError(f"the step reported {rel!r} but did not write it") from None
            result = {"node": node.id, "key": node.key, "files": files, "data": outcome.data,
                      "deps": dep_prints, "log": log, "seconds": round(seconds, 3)}
            with open(tmp / "result.json", "w") as f:
                json.dump(result, f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            result = self._install(node, tmp, final, result, run_id)
        except (OSError, _CompletionError, Timeout) as e:
            shutil.rmtree(tmp, ignore_errors=True)
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            where = f" ({e.filename})" if isinstance(e, OSError) and e.filename else ""
            return NodeReport(node.id, node.kind, "failed", seconds,
                              f"could not store the result in {final.parent}: {why}{where} (free disk space or "
                              "fix the cache dir's permissions, then run again: finished nodes are kept)", log=log)
        results[node.id] = result
        return NodeReport(node.id, node.kind, "done", seconds, dir=str(final), log=str(result.get("log", log)),
                          data=result.get("data", outcome.data))

    def _install(self, node: Node, tmp: Path, final: Path, result: dict, run_id: str) -> dict:
        """Move a finished node dir into place, safe against other processes completing the same node.

        Under the node's lock: a complete result another run made from the same inputs stays (ours is dropped;
        dependents are fingerprinted from the one on disk); anything else there (outdated, damaged, or a node
        that always runs) is swapped out for ours, in one step where the kernel can (``RENAME_EXCHANGE``)."""
        ws = self.workspace
        final.parent.mkdir(parents=True, exist_ok=True)
        ws.locks.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(ws.locks / f"{_DIR_OF_KIND[node.kind]}-{final.name}.lock"),
                        timeout=COMPLETE_LOCK_TIMEOUT_S)
        with lock:
            existing = read_result(final)
            if (existing is not None and not self.always_run(node) and existing.get("key") == node.key
                    and existing.get("deps") == result["deps"] and self.reuse(node, existing)):
                shutil.rmtree(tmp, ignore_errors=True)
                return existing
            if not os.path.lexists(final):
                os.rename(tmp, final)
            elif _exchange(tmp, final):
                shutil.rmtree(tmp, ignore_errors=True)  # now holds the replaced dir
            else:
                aside = ws.tmp / f"{run_id or os.getpid()}-replaced-{time.monotonic_ns()}"
                os.rename(final, aside)
                os.rename(tmp, final)
                shutil.rmtree(aside, ignore_errors=True)
            fsync_dir(final.parent)
        return result


class _CompletionError(Exception):
    pass


_RENAME_EXCHANGE = 2  # <linux/fs.h>
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2 RENAME_EXCHANGE); False where that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
        return False  # this kernel or filesystem cannot: the caller moves the old dir aside instead
    raise OSError(err, os.strerror(err), str(b))
