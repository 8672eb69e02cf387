"""Runs graph nodes in dependency order with injected step functions: resume, parallelism, keep-going.

Every node writes into a private temporary directory; on success the executor adds ``result.json`` and renames
the directory into place (one atomic rename), so a node is either complete or absent — a SIGKILL mid-build
leaves only a temporary directory, which the next run removes. A node is *done* when its directory exists,
every file it listed is present with its recorded size, and the results of its dependencies are the ones it
was made from (Make-like): deleting one engine redoes that build and the gates downstream of it, nothing else.

CPU-bound nodes run in worker processes (``jobs``); nodes that need a GPU run one at a time per device.
Heavy libraries are imported only inside the workers' steps, never in this scheduling process.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import json
import multiprocessing
import os
import shutil
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from orchestrator.core.graph import Node
from orchestrator.errors import OrchestratorError

NodeStatus = Literal["done", "cached", "failed", "skipped", "pending", "interrupted"]
_DIR_OF_KIND = {"prepare": "prepare", "transform": "transform", "build": "build",
                "gate:parity": "gate-parity", "gate:benchmark": "gate-benchmark", "publish": "publish"}


@dataclass(frozen=True)
class Workspace:
    """The on-disk layout under the cache root (default ``.orchestrate/``)."""

    root: Path

    def node_dir(self, node: Node, salt: str = "") -> Path:
        key = node.key if not salt else hashlib.sha256(f"{node.key}\0{salt}".encode()).hexdigest()
        return self.root / "nodes" / _DIR_OF_KIND[node.kind] / key

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def caches(self) -> Path:
        return self.root / "caches"

    def log_path(self, node: Node) -> Path:
        safe = "".join(c if c.isalnum() or c in "._-+@" else "_" for c in node.id)
        return self.logs / f"{safe}.log"


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


def clean_stale_tmp(ws: Workspace) -> int:
    """Remove temporary node dirs left by a killed run (their owner pid is gone)."""
    removed = 0
    if not ws.tmp.exists():
        return 0
    for entry in ws.tmp.iterdir():
        pid = entry.name.split("-", 1)[0]
        alive = False
        if pid.isdigit():
            try:
                os.kill(int(pid), 0)
                alive = int(pid) != os.getpid() or False
            except OSError:
                alive = False
        if not alive:
            shutil.rmtree(entry, ignore_errors=True)
            removed += 1
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
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
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
    task.log_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        if capture:
            with _OutputToLog(task.log_path):
                return step(task), None
        return step(task), None
    except OrchestratorError as e:
        return StepOutcome(status="failed", reason=str(e)), None
    except Exception as e:  # a bug or a foreign error not yet mapped: keep the traceback in the node log
        tb = traceback.format_exc()
        with open(task.log_path, "a") as log:
            log.write(tb)
        return StepOutcome(status="failed", reason=f"{type(e).__name__}: {e}"), tb


StepFn = Callable[[StepTask], StepOutcome]
EventFn = Callable[[str, Node, "NodeReport | None"], None]


def _stop_workers(pool: cf.ProcessPoolExecutor) -> None:
    """Terminate the pool's workers now (Ctrl-C): a native build cannot be interrupted from Python."""
    terminate = getattr(pool, "terminate_workers", None)  # Python >= 3.14
    if terminate is not None:
        terminate()
        return
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for proc in processes:
        proc.terminate()
    for proc in processes:
        proc.join(timeout=5)


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

    def run(self, nodes: Mapping[str, Node], order: Iterable[str], selected: set[str]) -> RunSummary:
        start = time.monotonic()
        ws = self.workspace
        for d in (ws.tmp, ws.logs, ws.caches):
            d.mkdir(parents=True, exist_ok=True)
        clean_stale_tmp(ws)
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
        if not self.in_process:
            ctx = multiprocessing.get_context("spawn")
            pool = cf.ProcessPoolExecutor(max_workers=max(1, self.jobs), mp_context=ctx)
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
                    if existing is not None and existing.get("deps") == dep_prints and not self.always_run(node):
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
                    tmp = ws.tmp / f"{os.getpid()}-{_DIR_OF_KIND[node.kind]}-{node.key[:16]}-{time.monotonic_ns()}"
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
                        report = self._complete(node, tmp, fut, t0, dep_prints, results)
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
                _stop_workers(pool)  # before removing their temp dirs: a live worker would write into them
            for fut, (node, tmp, _t0, _deps) in running.items():
                fut.cancel()
                shutil.rmtree(tmp, ignore_errors=True)
                reports[node.id] = NodeReport(node.id, node.kind, "interrupted", reason="stopped by Ctrl-C")
        finally:
            if pool is not None:
                pool.shutdown(wait=not interrupted, cancel_futures=True)
        ordered = [reports[n] for n in order if n in reports]
        return RunSummary(ordered, time.monotonic() - start, interrupted)

    def _complete(self, node: Node, tmp: Path, fut: cf.Future, t0: float, dep_prints: dict,
                  results: dict) -> NodeReport:
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
        files = {rel: (tmp / rel).stat().st_size for rel in outcome.files}
        result = {"node": node.id, "key": node.key, "files": files, "data": outcome.data,
                  "deps": dep_prints, "log": log, "seconds": round(seconds, 3)}
        with open(tmp / "result.json", "w") as f:
            json.dump(result, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        final = ws.node_dir(node, self.dir_salt(node))
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.exists():  # an outdated or damaged result: replace it
            shutil.rmtree(final)
        os.rename(tmp, final)
        results[node.id] = result
        return NodeReport(node.id, node.kind, "done", seconds, dir=str(final), log=log, data=outcome.data)
