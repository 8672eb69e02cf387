"""Per-pass timings of a local put and get of a 200 MB engine, in-process (bench/NOTES-registry.md, issue 24).

    .venv/bin/python bench/registry_passes.py WORK_DIR [ROUNDS]

Times the reads and writes (``os.readv`` / ``os.write``), the hash thread's ``update`` calls (wall and thread CPU),
the wait for the hash after the last write, the fsyncs and the whole copy pass of each put/get, beside cp + sync,
``openssl dgst`` and a bare in-process read + hash of the same page-cached file taken right before. WORK_DIR must be
absolute (the local store refuses a relative path); it is left behind for the caller to remove.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "integration"))

import filelock  # noqa: E402,F401 - imported before any clock starts, as the store would lazily
import jsonschema  # noqa: E402,F401
from registry_server import make_artifact  # noqa: E402

from orchestrator.core.model import RegistryConfig  # noqa: E402
from trt_orchestrator_plugins.stores import _atomic  # noqa: E402
from trt_orchestrator_plugins.stores.local import LocalStore  # noqa: E402

T: dict[str, float] = {}


def add(key: str, seconds: float) -> None:
    T[key] = T.get(key, 0.0) + seconds


def timed(key: str, real: Callable) -> Callable:
    def call(*args):
        t = time.perf_counter()
        try:
            return real(*args)
        finally:
            add(key, time.perf_counter() - t)
    return call


class TimedSha:
    def __init__(self) -> None:
        self.h = hashlib.sha256()

    def update(self, data) -> None:
        t, c = time.perf_counter(), time.thread_time()
        self.h.update(data)
        add("hash (thread wall)", time.perf_counter() - t)
        add("hash (thread CPU)", time.thread_time() - c)

    def hexdigest(self) -> str:
        return self.h.hexdigest()


def wall(fn: Callable, *args) -> tuple[float, float, object]:
    c, t = time.process_time(), time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t, time.process_time() - c, out


def main() -> None:
    work = Path(sys.argv[1])
    work.mkdir(parents=True, exist_ok=True)
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    files = make_artifact(work / "e", size=200 * 1024 * 1024, log=False)
    os.readv, os.write, os.fsync = timed("read", os.readv), timed("write", os.write), timed("fsync", os.fsync)
    _atomic._copy = timed("copy+hash pass", _atomic._copy)
    _atomic.StagedHasher.hexdigest = timed("wait for hash after last write", _atomic.StagedHasher.hexdigest)
    _atomic.hashlib = types.SimpleNamespace(sha256=TimedSha)  # type: ignore[assignment]
    for r in range(rounds):
        dst = work / f"cp{r}"
        cp = wall(subprocess.run, ["sh", "-c", f"cp {files.engine} {dst} && sync {dst}"])[0]
        dst.unlink()
        ossl = wall(subprocess.run, ["sh", "-c", f"openssl dgst -sha256 {files.engine} > /dev/null"])[0]

        def bare() -> None:
            h, buf = hashlib.sha256(), bytearray(1 << 20)
            with open(files.engine, "rb", buffering=0) as f:
                while n := f.readinto(buf):
                    h.update(memoryview(buf)[:n])

        hs = wall(bare)[0]
        store = LocalStore(RegistryConfig(store="local", path=str(work / f"s{r}")))
        T.clear()
        put, put_cpu, stored = wall(store.put, files)
        put_passes = dict(T)
        out = work / f"g{r}.plan"
        T.clear()
        get, get_cpu, _ = wall(store.get, stored.digest, out)  # type: ignore[attr-defined]
        get_passes = dict(T)
        out.unlink()

        def fmt(d: dict[str, float]) -> str:
            return ", ".join(f"{k} {v:.3f}" for k, v in d.items())

        print(f"r{r} load {os.getloadavg()[0]:.2f} | cp+sync {cp:.3f} | openssl dgst {ossl:.3f} | bare hash {hs:.3f}")
        print(f"   put {put:.3f} s (CPU {put_cpu:.3f}): {fmt(put_passes)}")
        print(f"   get {get:.3f} s (CPU {get_cpu:.3f}): {fmt(get_passes)}")


if __name__ == "__main__":
    main()
