"""The start-up fast path: a `plan` or a no-op `build` whose inputs did not move is answered from the saved result
of the last identical invocation, before click, rich, jsonschema or yaml are imported (issue 24.2).

Pure stdlib on purpose: the console script calls ``replay`` first, and the answer costs the interpreter start-up,
reading one small JSON file and a few hundred ``stat`` calls.

What an answer is kept for (its key, exact): the arguments, the working directory, the machine and its boot (host
name and boot id: a plan may depend on the hardware, e.g. the CPU's instruction set), the environment (every
variable but the few shells change between two commands: ``_``, ``OLDPWD``, ``SHLVL``, ``PWD``), whether stdout and
stderr are terminals and the terminal's size, the output encoding, the interpreter and ``sys.path``.

What it is checked against (its witness, every path the answer depends on, recorded by the full path):

- ``sha256``: the bytes of each manifest;
- ``stat``: (device, inode, size, mtime, ctime, mode) or absence of every other file or folder read: model files
  and their external data, calibration and parity data (folders and their files; data paths that are absent),
  the registry's files as the store names them (``contracts.store.StateWitness``: a local store's index, its
  records' folder, each address's newest record and engine), the cache folder's run summaries and node results
  (`plan` shows each cell's last outcome here), the source file of every module the command imported (this
  tool, its plugins, their libraries) and each ``sys.path`` folder (a package installed or removed changes it).

What a stat can and cannot see. Any write changes ctime, and ctime cannot be set back (``touch -d`` sets mtime and
moves ctime to now), so a file rewritten with the same size and its mtime restored is seen. A folder's stat sees
entries added, removed or renamed, not a file in it rewritten in place: the files themselves are witnessed. Not
seen: a filesystem that does not keep ctime, or a clock set back between two runs; the model digest cache
(``orchestrator.digests``) keys models by (size, mtime, inode) only, so the full path is no better there.

A remote registry (OCI) names no witness: its state can move without any local file moving, and telling needs a
network round trip, which this path never makes. Its plans always take the full path.

``ORCHESTRATE_FASTPATH=0`` turns it off (nothing is answered, nothing kept).

Races. An answer is saved only when every witnessed path is older than the run that made it by ``SETTLE_S``:
a file changed while the command read it (or just before, within the timestamp granularity of the filesystem)
would otherwise be witnessed in its new state beside an answer made from the old. Run summaries (written whole,
never changed) are checked by listing them before and after instead. A new run summary that reports on no node (a
no-op build's) keeps a plan's answer; one that reports on nodes, or an old one leaving the newest few `plan`
reads, does not. Any problem reading an answer
(missing, another format, unreadable) is a miss: the full path runs, exactly as without this module.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import stat
import sys
import time
from typing import Any, TextIO

FORMAT = 1
SETTLE_S = 1.0  # ORCHESTRATE_FASTPATH_SETTLE_S overrides it (tests that make a change and plan at once)
MAX_WITNESS = 200_000  # more paths than this: no answer is kept (checking them would cost what planning costs)
MAX_ANSWERS = 64  # answers kept per cache folder (the oldest go first)
_ENV_IGNORED = frozenset({"_", "OLDPWD", "SHLVL", "PWD"})
COMMANDS = ("plan", "build")


def cache_dir(args: list[str], env: os._Environ[str] | dict[str, str]) -> str:
    """The cache folder the full path would use: ``--cache-dir``, else ORCHESTRATE_CACHE, else ``.orchestrate``.
    A wrong guess only misses: answers are looked up by the whole invocation, saved where the full path put them."""
    for i, arg in enumerate(args):
        if arg == "--cache-dir" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--cache-dir="):
            return arg.split("=", 1)[1]
    return env.get("ORCHESTRATE_CACHE") or ".orchestrate"


def _terminal(fd: int) -> list[int] | None:
    try:
        if not os.isatty(fd):
            return None
        size = os.get_terminal_size(fd)
        return [size.columns, size.lines]
    except OSError:
        return None


def _host() -> list[str]:
    """This machine since its last boot: a plan can depend on the hardware it runs on (a ``cpu_match: isa`` target's
    gate key names this CPU's instruction set), and a cache folder can be carried to another machine (a CI cache,
    a shared home). Hardware does not change without a reboot, and a reboot gives a new boot id."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return [os.uname().nodename, boot]


def invocation(args: list[str]) -> dict[str, Any]:
    """The key an answer is saved under: everything about this process that can change what the command prints."""
    return {"format": FORMAT, "args": list(args), "cwd": os.getcwd(), "host": _host(),
            "env": sorted([k, v] for k, v in os.environ.items() if k not in _ENV_IGNORED),
            "terminals": [_terminal(1), _terminal(2)],
            "encoding": [getattr(sys.stdout, "encoding", None), getattr(sys.stderr, "encoding", None)],
            "python": [sys.executable, sys.version, list(sys.path)]}


def answer_path(key: dict[str, Any], args: list[str]) -> str:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
    return os.path.join(os.path.abspath(cache_dir(args, os.environ)), "fastpath", digest[:40] + ".json")


def stat_of(path: str) -> list[int] | None:
    """What a stat witnesses of a path (None: it does not exist)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode]


def sha256_of(path: str) -> str | None:
    """The bytes of a regular file (None: absent, or not a regular file: never read a FIFO here)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        return hashlib.sha256(f.read()).hexdigest()


def _holds(witness: list[list[Any]]) -> bool:
    for path, kind, value in witness:
        if kind == "runs":
            if not _runs_hold(path, value):
                return False
            continue
        now = sha256_of(path) if kind == "sha256" else stat_of(path)
        if now != value:
            return False
    return True


# -- run summaries: `plan` shows each cell's last outcome from the newest ones ------------------------------------

RUNS_READ = 20  # the newest run summaries `plan` reads (``app.outcomes.recent_runs``) ...
RUNS_BYTES = 64 << 20  # ... within this many bytes


def run_window(folder: str) -> list[tuple[str, int, int, int]]:
    """The run summaries ``app.outcomes.recent_runs`` reads, newest first: (path, size, mtime_ns, ctime_ns) of the
    newest ``RUNS_READ`` ``*.json`` files by mtime, up to ``RUNS_BYTES`` in all."""
    try:
        entries = [(e, e.stat()) for e in os.scandir(folder)
                   if e.name.endswith(".json") and e.is_file(follow_symlinks=False)]
    except OSError:
        return []
    out = []
    budget = RUNS_BYTES
    for entry, st in sorted(entries, key=lambda pair: pair[1].st_mtime, reverse=True)[:RUNS_READ]:
        if st.st_size > budget:
            break
        budget -= st.st_size
        out.append((entry.path, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return out


def _names_nodes(path: str) -> bool:
    """Whether a run summary reports on any node (a no-op build's names none); unreadable: as if it did."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return not isinstance(data, dict) or bool(data.get("nodes"))
    except (OSError, ValueError):
        return True


def _runs_window(folder: str) -> list[list[Any]]:
    return [[*entry, _names_nodes(entry[0])] for entry in run_window(folder)]


def _runs_hold(folder: str, seen: list[list[Any]]) -> bool:
    """The run summaries `plan` would read say what they said: the same files where they report on nodes; a
    summary that came since reports on none (a no-op build), one that left the window reported on none."""
    before = {entry[0]: entry for entry in seen}
    now = run_window(folder)
    for path, *stat_now in now:
        old = before.pop(path, None)
        if old is None:
            if _names_nodes(path):
                return False
        elif old[1:4] != stat_now:
            return False
    return not any(entry[4] for entry in before.values())


def replay(args: list[str]) -> int | None:
    """Answer this invocation from its saved result when nothing it depends on moved: writes what the full path
    wrote and returns its exit code. None: no such answer, or something moved (the caller runs the full path)."""
    if not args or args[0] not in COMMANDS or os.environ.get("ORCHESTRATE_FASTPATH") == "0":
        return None
    try:
        key = invocation(args)
        with open(answer_path(key, args), encoding="utf-8") as f:
            answer = json.load(f)
        if answer.get("key") != key or not _holds(answer["witness"]):
            return None
        stdout = answer["stdout"]
        record = answer.get("record")
        if record is not None:  # a no-op build writes its run summary, as the full path does
            stdout = _write_record(record, args, stdout)
        sys.stderr.write(answer["stderr"])
        sys.stderr.flush()
        sys.stdout.write(stdout)
        sys.stdout.flush()
        return int(answer["exit"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_record(record: dict[str, Any], args: list[str], stdout: str) -> str:
    """Write a no-op build's run summary under ``runs/`` (named and written as ``cli.build_cmds.record_run``
    writes it); a JSON answer names it, as the full path's does."""
    runs = os.path.join(os.path.abspath(cache_dir(args, os.environ)), "runs")
    path = os.path.join(runs, f"{record['verb']}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.json")
    os.makedirs(runs, exist_ok=True)
    _write_whole(path, json.dumps(record["data"], indent=2) + "\n")
    if record.get("json"):
        return json.dumps({**record["data"], "summary_file": path}, indent=2, default=str) + "\n"
    return stdout


# -- the full path's side: what it wrote, and what it read ----------------------------------------------------

class _Tee(io.TextIOBase):
    """A text stream that writes through to ``stream`` and keeps a copy (what an answer replays)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.copy = io.StringIO()

    def write(self, text: str) -> int:
        self.copy.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.stream.encoding

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return self.stream.errors

    def writable(self) -> bool:
        return True

    # no ``buffer``: a writer that finds one writes bytes past the copy (click.echo does)


class Recorder:
    """Made by the full path of a command the fast path answers: keeps a copy of stdout and stderr and, once the
    command has said what it read (``witness``), saves the answer."""

    def __init__(self, args: list[str]) -> None:
        self.args = list(args)
        self.started_ns = time.time_ns()
        self.key = invocation(args)
        # run summaries are written whole (a rename) and never changed: the window read before and after the
        # command is the race check for them (not the settling time: a build just before a plan is common)
        self.runs_before = [list(r) for r in run_window(os.path.join(os.path.abspath(cache_dir(args, os.environ)),
                                                                     "runs"))]
        self.witness: list[list[Any]] | None = None
        self.record: dict[str, Any] | None = None
        self.out = _Tee(sys.stdout)
        self.err = _Tee(sys.stderr)
        sys.stdout, sys.stderr = self.out, self.err

    def note(self, sha256_paths: list[str], stat_paths: list[str], record: dict[str, Any] | None = None,
             runs: str | None = None) -> None:
        """What the command read (called once it has its answer); ``record``: a no-op build's run summary;
        ``runs``: the folder of run summaries it read the newest of (``run_window``)."""
        self.witness = ([[p, "sha256", None] for p in dict.fromkeys(sha256_paths)]
                        + [[p, "stat", None] for p in dict.fromkeys(stat_paths)]
                        + ([[runs, "runs", None]] if runs else []))
        self.record = record

    def finish(self, exit_code: int) -> None:
        """Restore the streams and keep the answer when the command said what it read and nothing it read moved
        while (or just before) it ran."""
        sys.stdout, sys.stderr = self.out.stream, self.err.stream
        if self.witness is None or len(self.witness) > MAX_WITNESS or os.environ.get("ORCHESTRATE_FASTPATH") == "0":
            return
        try:
            settle = float(os.environ.get("ORCHESTRATE_FASTPATH_SETTLE_S", SETTLE_S))
        except ValueError:
            settle = SETTLE_S
        settled = self.started_ns - int(settle * 1e9)
        for entry in self.witness:
            path, kind = entry[0], entry[1]
            if kind == "runs":
                entry[2] = window = _runs_window(path)
                if [run[:4] for run in window] != self.runs_before:
                    return  # a summary came or went while the command read them
                continue
            st = stat_of(path)
            if st is not None and (st[3] >= settled or st[4] >= settled):
                return  # changed while the command ran, or too recently to tell
            entry[2] = sha256_of(path) if kind == "sha256" else st
            if kind == "sha256" and entry[2] is None:
                return  # a manifest that is not a regular file (a pipe) is read once: never answered again
        answer = {"key": self.key, "exit": exit_code, "stdout": self.out.copy.getvalue(),
                  "stderr": self.err.copy.getvalue(), "witness": self.witness, "record": self.record}
        try:
            _save(answer_path(self.key, self.args), answer)
        except OSError:
            pass  # a read-only cache folder only costs the next run its speed


def _write_whole(path: str, text: str) -> None:
    """Written whole, flushed to disk, then renamed into place: a reader sees the old file or the new one, never a
    part. A crash leaves at most a temp file (``_save`` sweeps old ones) or, on a filesystem that loses the
    rename's data, a file that does not parse or whose key differs, which ``replay`` takes as a miss. (Stdlib
    here, not ``orchestrator.atomic``: this module loads before anything else of ours.)"""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _save(path: str, answer: dict[str, Any]) -> None:
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    _write_whole(path, json.dumps(answer, separators=(",", ":")))
    kept = sorted((e for e in os.scandir(folder) if e.name.endswith(".json")), key=lambda e: e.stat().st_mtime_ns)
    for old in kept[:-MAX_ANSWERS]:
        with contextlib.suppress(OSError):
            os.unlink(old.path)
    stale = time.time() - 3600  # temp files a crashed writer left (a live one finishes within the hour)
    for entry in os.scandir(folder):
        with contextlib.suppress(OSError):
            if entry.name.endswith(".tmp") and entry.stat().st_mtime < stale:
                os.unlink(entry.path)


def module_files() -> list[str]:
    """The code an answer was made by: the source of every module this process imported (this tool, its plugins,
    their libraries), each ``sys.path`` folder (packages installed or removed), and in them every distribution's
    metadata (versions: a plugin's recipe, what a transform needs installed) and entry points (the plugins), and
    each ``.pth`` file."""
    files = sorted({f for m in list(sys.modules.values()) if isinstance(f := getattr(m, "__file__", None), str)})
    # this tool's package data read as it runs (the manifest's JSON Schema): in an editable install an edit to
    # it moves no version and no module
    own = {os.path.dirname(f) for name, m in list(sys.modules.items())
           if (name == "orchestrator" or name.startswith("orchestrator."))
           and isinstance(f := getattr(m, "__file__", None), str)}
    for folder in sorted(own):
        with contextlib.suppress(OSError):
            files += sorted(e.path for e in os.scandir(folder) if e.name.endswith(".json") and e.is_file())
    for folder in dict.fromkeys(p for p in sys.path if p and os.path.isdir(p)):
        files.append(folder)
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if entry.name.endswith((".dist-info", ".egg-info")):
                files += [entry.path] + [os.path.join(entry.path, name) for name in _METADATA]
            elif entry.name.endswith(".pth"):
                files.append(entry.path)
    return files


_METADATA = ("METADATA", "PKG-INFO", "entry_points.txt")
