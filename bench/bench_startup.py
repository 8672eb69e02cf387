"""CLI start-up: `orchestrate plan manifests/demo.yaml` and a no-op `orchestrate build manifests/demo.yaml`
(everything built and published) against a bare `python -c pass`, interleaved in one run; each command as the
console script runs it (answered from its saved result when nothing moved: ``orchestrator.fastpath``) and on the
full path alone (``ORCHESTRATE_FASTPATH=0``).

Issue 24.2: <= 4x the wall of `python -c pass` for a plan or no-op build whose inputs did not move.

    bash scripts/demo.sh                      # once: builds, gates and publishes the demo (the no-op needs it)
    .venv/bin/python bench/bench_startup.py   # N=15 rounds of (pass, plan, build), medians and the ratio
    .venv/bin/python bench/bench_startup.py --importtime   # also: the slowest imports of `plan`, cumulative
    .venv/bin/python bench/bench_startup.py --compare /tmp/old  # also another checkout (its own .venv), same rounds

Method: each round runs the three commands once, in a rotating order, as child processes of this script with
stdout/stderr to /dev/null; wall time is measured here (perf_counter around the child). The commands are the
console script itself (.venv/bin/orchestrate), as a user runs them. Reported: min and median per command, and
median / median(python -c pass). The load average is printed with the figures: this machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV = REPO / ".venv" / "bin"
MANIFEST = "manifests/demo.yaml"


FULL = {"ORCHESTRATE_FASTPATH": "0"}


def commands(tree: Path, label: str = "") -> dict[str, tuple[Path, list[str], dict[str, str]]]:
    venv = tree / ".venv" / "bin"
    plan = [str(venv / "orchestrate"), "plan", MANIFEST]
    build = [str(venv / "orchestrate"), "build", MANIFEST, "-q"]
    out = {f"{label}orchestrate plan": (tree, plan, {}),
           f"{label}orchestrate build (no-op)": (tree, build, {})}
    if not label:
        out.update({"orchestrate plan, full path": (tree, plan, FULL),
                    "orchestrate build (no-op), full path": (tree, build, FULL)})
    return out


def wall(where: Path, cmd: list[str], env: dict[str, str] | None = None) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=where, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          env={**os.environ, **(env or {})})
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} (in {where}) exited {proc.returncode}: run `bash scripts/demo.sh` there first")
    return elapsed


def importtime() -> list[tuple[int, str]]:
    proc = subprocess.run([str(VENV / "python"), "-X", "importtime", "-m", "orchestrator", "plan", MANIFEST],
                          cwd=REPO, capture_output=True, text=True)
    rows = []
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = (p.strip() for p in line[len("import time:"):].split("|"))
            if cumulative.isdigit():
                rows.append((int(cumulative), name))
    return sorted(rows, reverse=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--rounds", type=int, default=15)
    ap.add_argument("--importtime", action="store_true")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--compare", type=Path, help="another checkout with its own .venv and demo built there")
    args = ap.parse_args()
    table = {"python -c pass": (REPO, [str(VENV / "python"), "-c", "pass"], {}), **commands(REPO)}
    if args.compare:
        table.update(commands(args.compare.resolve(), f"[{args.compare.name}] "))
    plan = subprocess.run([str(VENV / "orchestrate"), "plan", MANIFEST, "--json"], cwd=REPO, capture_output=True,
                          text=True)
    summary = json.loads(plan.stdout)["summary"] if plan.returncode == 0 else {}
    if summary.get("build") or summary.get("rebuild"):
        sys.exit(f"the demo is not fully built and published ({summary.get('text')}): run `bash scripts/demo.sh`")
    names = list(table)
    times: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(2):  # warm the page cache and the digest cache; the full path keeps the answers
        for n in names:
            wall(*table[n])
        time.sleep(1.2)  # inputs settle (fastpath.SETTLE_S) before the answers the next rounds use are kept
    for i in range(args.rounds):
        k = i % len(names)
        for n in names[k:] + names[:k]:
            times[n].append(wall(*table[n]))
    base = statistics.median(times[names[0]])
    load = os.getloadavg()
    print(f"{args.rounds} rounds, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} cores")
    print(f"{'command':42} {'min s':>7} {'median s':>9} {'x pass':>7}")
    result = {}
    for n in names:
        med = statistics.median(times[n])
        result[n] = {"min_s": min(times[n]), "median_s": med, "ratio": med / base}
        print(f"{n:42} {min(times[n]):7.3f} {med:9.3f} {med / base:7.1f}")
    if args.importtime:
        print("\nslowest imports of `orchestrate plan` (cumulative us, nested imports included):")
        for us, name in importtime()[:25]:
            print(f"  {us:>8}  {name}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
