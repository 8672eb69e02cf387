"""Benchmark: `identify` per file on the identify corpus (issue 27.1: under 50 ms per file, no TensorRT loaded).

Method: the corpus of tests/integration/identify_corpus.py is built once in a temp dir (or taken from --corpus DIR
when it was built before). In one process, after one untimed pass (imports warm, page cache warm), each file is
identified `--rounds` times with ``orchestrator.app.identify.identify_file``; the median per file is printed with
its size and kind. Then `orchestrate identify FILE...` for the whole corpus as one child process (what a user
runs: interpreter start and imports included), `--rounds` times, median, and per file = that / the file count.

    .venv/bin/python bench/bench_identify.py [--rounds 7] [--corpus DIR]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from orchestrator.app.identify import identify_file  # noqa: E402
from tests.integration.identify_corpus import build_corpus  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--corpus", type=Path, default=None)
    args = ap.parse_args()
    root = args.corpus or Path(tempfile.mkdtemp(prefix="identify-corpus-"))
    cases = build_corpus(root)
    for c in cases:  # warm-up: imports, page cache
        identify_file(c.path)
    worst = 0.0
    print(f"{'file':45} {'bytes':>10} {'median ms':>10}  kind")
    for c in cases:
        times = []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            found = identify_file(c.path)
            times.append((time.perf_counter() - t0) * 1000)
        med = statistics.median(times)
        worst = max(worst, med)
        print(f"{c.name:45} {c.path.stat().st_size:>10} {med:>10.2f}  {' > '.join(x.kind for x in found.layers)}")
    print(f"slowest file (in-process median): {worst:.2f} ms")
    cli = []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "orchestrator", "identify", *[str(c.path) for c in cases]],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        cli.append(time.perf_counter() - t0)
    med = statistics.median(cli)
    print(f"`orchestrate identify` on all {len(cases)} files, one process: {med * 1000:.0f} ms median "
          f"({med * 1000 / len(cases):.1f} ms per file, start-up included)")


if __name__ == "__main__":
    main()
