"""Benchmark: model hashing of a 1 GiB file, DigestCache.model_digest vs `openssl dgst -sha256`, and re-plan.

Method: one 1 GiB file in /tmp (a seeded 8 MiB random block repeated; sha256 speed does not depend on content),
read once to warm the page cache, then 3 rounds alternating DigestCache.model_digest (fresh cache each time,
so it really reads: one streaming pass with the external-data mark search) and `openssl dgst -sha256`; medians.
Ratio = openssl time / our time (1.0 = as fast as openssl). Then the re-plan of the unchanged file: a new
DigestCache opened from the saved cache file (as a new `orchestrate plan` process would) asks for the digest
again; its time and `rehashed` (0 = the file was not read) are printed. The file is deleted at the end.

    .venv/bin/python bench/bench_hash.py [--size-mib 1024] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orchestrator.digests import DigestCache  # noqa: E402

BLOCK = 8 * 1024 * 1024


def make_file(path: Path, size_mib: int) -> None:
    block = random.Random(0).randbytes(BLOCK)
    with open(path, "wb") as f:
        for _ in range(size_mib * 1024 * 1024 // BLOCK):
            f.write(block)


def warm(path: Path) -> None:
    with open(path, "rb", buffering=0) as f:
        while f.read(BLOCK):
            pass


def ours(path: Path) -> tuple[float, str]:
    cache = DigestCache.open(None)
    t0 = time.perf_counter()
    digest = cache.model_digest(str(path))
    dt = time.perf_counter() - t0
    assert cache.rehashed == 1
    return dt, digest


def openssl(path: Path) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = subprocess.run(["openssl", "dgst", "-sha256", "-r", str(path)], check=True, capture_output=True,
                         text=True).stdout
    return time.perf_counter() - t0, "sha256:" + out.split()[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-hash-", dir="/tmp") as tmp:
        path = Path(tmp) / "model.onnx"
        make_file(path, args.size_mib)
        warm(path)
        mine, theirs = [], []
        for _ in range(args.rounds):
            t, d1 = ours(path)
            mine.append(t)
            t, d2 = openssl(path)
            theirs.append(t)
            if d1 != d2:
                raise SystemExit(f"digest mismatch: {d1} != {d2}")
        m, o = statistics.median(mine), statistics.median(theirs)
        size = os.path.getsize(path) / 2**20
        print(f"file: {size:.0f} MiB, rounds: {args.rounds} (alternating, warm page cache)")
        print(f"DigestCache.model_digest  median {m:.3f} s  ({size / m:7.1f} MiB/s)  "
              f"runs {[round(x, 3) for x in mine]}")
        print(f"openssl dgst -sha256      median {o:.3f} s  ({size / o:7.1f} MiB/s)  "
              f"runs {[round(x, 3) for x in theirs]}")
        print(f"ratio (openssl time / ours): {o / m:.2f}x")

        cache_file = Path(tmp) / "digests.json"
        first = DigestCache.open(cache_file)
        digest = first.model_digest(str(path))
        first.save()
        replan = DigestCache.open(cache_file)
        times = []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            again = replan.model_digest(str(path))
            times.append(time.perf_counter() - t0)
        assert again == digest
        t0 = time.perf_counter()
        fresh = DigestCache.open(cache_file)
        same = fresh.model_digest(str(path))
        cold = time.perf_counter() - t0
        assert same == digest
        print(f"re-plan of the unchanged file: open cache + digest {cold * 1e3:.2f} ms, digest alone median "
              f"{statistics.median(times) * 1e6:.1f} us; rehashed = {replan.rehashed + fresh.rehashed} "
              "(0: not re-read)")
    print(f"deleted {path}: {not path.exists()}")


if __name__ == "__main__":
    main()
