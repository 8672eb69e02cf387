"""Worker processes that never outlive the scheduler: a guard process leads a process group the workers join and
SIGKILLs it when the scheduler's end of a pipe closes (however the scheduler died), and each worker asks Linux for
a parent-death signal. A native build cannot be interrupted from Python, so stopping means killing. And none is left
behind as a zombie: every child the pool started (its workers, multiprocessing's resource tracker) is waited for
before the run returns (``reap``), so `orchestrate` never exits with a defunct child that init must collect."""

from __future__ import annotations

import concurrent.futures as cf
import os
import signal
import subprocess
import sys
from multiprocessing import resource_tracker

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

# The guard: leads a new process group that the workers join, waits for its stdin (a pipe only the scheduler
# holds) to close, then SIGKILLs the group: the workers and everything they started. Plain os/signal/sys, so it
# starts in a few milliseconds (-I -S: no site, no environment).
_GUARD_CODE = """\
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
os.setpgid(0, 0)
sys.stdout.write(str(os.getpgrp()) + chr(10))
sys.stdout.flush()
try:
    while sys.stdin.buffer.read(65536):
        pass
except BaseException:
    pass
os.killpg(0, signal.SIGKILL)
"""


class WorkerGuard:
    """The process group the workers join, and the guard process that kills it when the scheduler goes."""

    def __init__(self) -> None:
        self.pgid: int | None = None
        self._proc: subprocess.Popen | None = None
        if not hasattr(os, "killpg") or not hasattr(os, "setpgid"):
            return  # Windows: parent-death handling is the pool's own (workers notice a broken pipe)
        try:
            proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _GUARD_CODE], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True)
        except OSError:
            return
        assert proc.stdout is not None
        line = proc.stdout.readline()
        proc.stdout.close()
        if not line.strip().isdigit():
            self._end(proc)
            return
        self._proc = proc
        self.pgid = int(line)

    @staticmethod
    def _end(proc: subprocess.Popen) -> None:
        if proc.stdin is not None:
            try:
                proc.stdin.close()
            except OSError:
                pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def kill_group(self) -> None:
        """SIGKILL every worker and what it started, now (Ctrl-C)."""
        if self.pgid is not None:
            try:
                os.killpg(self.pgid, signal.SIGKILL)
            except OSError:
                pass

    def close(self) -> None:
        """After the pool shut down: the guard kills what is left of the group (nothing, normally) and exits."""
        if self._proc is not None:
            self._end(self._proc)
            self._proc = None


def _set_parent_death_signal() -> bool:
    """Ask Linux to SIGKILL this process when its parent dies. False where that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def worker_init(parent: int, pgid: int | None) -> None:
    """Pool initializer, in each worker: join the guard's process group, die with the parent."""
    if pgid is not None:
        try:
            os.setpgid(0, pgid)
        except OSError:
            pass  # the guard is gone already: the parent-death signal still applies
    _set_parent_death_signal()
    if os.getppid() != parent:  # the parent died before the signal was armed: nobody will collect our results
        os._exit(1)


def stop_workers(pool: cf.ProcessPoolExecutor, guard: WorkerGuard | None = None) -> None:
    """Kill the pool's workers now (Ctrl-C): a native build cannot be interrupted from Python."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    if guard is not None and guard.pgid is not None:
        guard.kill_group()  # the workers and their children (a builder's tool), one signal
    terminate = getattr(pool, "terminate_workers", None)  # Python >= 3.14
    if terminate is not None:
        terminate()
    else:
        for proc in processes:
            proc.terminate()
    # Wait until they are gone: the caller removes their temp dirs next, and a worker still finishing a write (a
    # loaded machine, a slow disk) would leave a dir behind. A killed process ends when its syscall returns.
    for proc in processes:
        proc.join(timeout=60)


def reap(pool: cf.ProcessPoolExecutor) -> None:
    """After the pool shut down: wait for what it started. Its workers are joined by the shutdown; multiprocessing's
    resource tracker (started for the pool's locks under the spawn context) ends only when its pipe closes, after
    this process, and would then linger as a zombie: close the pipe and wait for it now (it starts again on demand).
    Python offers no public call for that; ``ResourceTracker._stop`` exists since 3.8."""
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        proc.join(timeout=5)
    stop = getattr(resource_tracker._resource_tracker, "_stop", None)
    if stop is not None:
        try:
            stop()
        except (OSError, ChildProcessError):
            pass  # already gone, or reaped elsewhere
