"""Process-tree helpers for the tests that kill things (Linux /proc): who descends from a pid, and whether a
process seen earlier is still the same live process (pids are reused; a zombie has already exited)."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Proc:
    pid: int
    start: int  # clock ticks since boot (field 22 of /proc/PID/stat): with the pid, one process for good
    cmdline: str


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(ppid, state, start time) of a live pid, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            raw = f.read()
    except OSError:
        return None
    rest = raw[raw.rindex(")") + 2:].split()  # the command name may hold spaces and parentheses
    return int(rest[1]), rest[0], int(rest[19])


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def descendants(root: int) -> list[Proc]:
    """Every live process below ``root`` (children, grandchildren, ...), read from /proc now."""
    parent: dict[int, int] = {}
    starts: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                parent[int(name)], starts[int(name)] = st[0], st[2]
    found: list[Proc] = []
    frontier = [root]
    while frontier:
        pid = frontier.pop()
        for child, ppid in parent.items():
            if ppid == pid:
                found.append(Proc(child, starts[child], _cmdline(child)))
                frontier.append(child)
    return found


def alive(proc: Proc) -> bool:
    """The same process (pid and start time) still exists and has not exited (zombies count as gone)."""
    st = _stat(proc.pid)
    return st is not None and st[2] == proc.start and st[1] != "Z"


def survivors(procs: list[Proc], within: float) -> list[Proc]:
    """Those of ``procs`` still alive after waiting up to ``within`` seconds for them to go."""
    deadline = time.monotonic() + within
    while True:
        left = [p for p in procs if alive(p)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def kill_all(procs: list[Proc]) -> None:
    """Clean up after a failed check: SIGKILL each one that is still the process it was."""
    for p in procs:
        if alive(p):
            try:
                os.kill(p.pid, signal.SIGKILL)
            except OSError:
                pass


def with_env(marker: str) -> list[Proc]:
    """Every live process whose environment holds ``marker`` (a ``NAME=value`` pair a test put into the
    environment of a process it started: every descendant inherits it, even one started after a snapshot)."""
    needle = marker.encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if needle in env:
            st = _stat(int(name))
            if st is not None and st[1] != "Z":
                found.append(Proc(int(name), st[2], _cmdline(int(name))))
    return found
