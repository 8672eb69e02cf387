"""Cold build of the demo matrix's TensorRT-RTX cells: `orchestrate build -j 2` vs a sequential shell loop of
`polygraphy convert` over the same cells, interleaved in one run; then the no-op re-run on the warm cache.

Issue "Engine builders", Must show: goal <= 0.6x Polygraphy's wall time on 2 cores, no-op re-run under 1 s.

    .venv/bin/python bench/bench_build.py                     # N=3 cold pairs, 5 no-op re-runs, working tree
    .venv/bin/python bench/bench_build.py --snapshot HEAD     # benchmark a committed tree (others edit this one)
    .venv/bin/python bench/bench_build.py --full-demo 1       # also the whole demo (ORT cells too), reported apart

Fairness, stated once here and in bench/NOTES-build.md:
- Same cells: every (model, precision, target) of manifests/demo.yaml whose target's builder is tensorrt-rtx, with
  the manifest's profile (--trt-min/opt/max-shapes) and compute capabilities (--compute-capabilities), strongly
  typed (--strongly-typed; orchestrate always builds strongly typed networks for RTX).
- fp16: RTX has no precision flags, so the fp16 cells need an fp16 ONNX. The polygraphy loop pays the same
  conversion cost orchestrate pays: one `python -c` per model calling the very transform orchestrate runs
  (plugins/transforms/float16.py, same PrecisionSpec as the manifest). Its output is checked byte-identical to
  orchestrate's transform output.
- Both sides start cold (fresh cache dir / fresh output dir), write their logs to files, and run as child
  processes of this script; wall time is measured here around each child, CPU time is the child's rusage.
- The machine is shared: runs alternate A B A B ..., and each run records the load average and the CPU time
  that *other* processes used during it (from /proc/stat), so noise is visible next to each figure.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shlex
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
OUT_ROOT = REPO / "bench" / "out"
VENV_BIN = Path(sys.executable).parent
ORCHESTRATE = VENV_BIN / "orchestrate"
POLYGRAPHY = VENV_BIN / "polygraphy"
CLK_TCK = os.sysconf("SC_CLK_TCK")

# The fp16 transform exactly as orchestrate's step_transform calls it for the demo's
# `{name: fp16, via: transform, keep_io_types: true}` (default op block list, no calibration).
CONVERT_FP16 = (
    "import sys; from pathlib import Path; "
    "from orchestrator.contracts.builder import TransformRequest; "
    "from orchestrator.core.model import PrecisionSpec; "
    "from trt_orchestrator_plugins.transforms.float16 import fp16; "
    "fp16.run(TransformRequest(kind='fp16', key='bench', onnx_path=Path(sys.argv[1]), out_path=Path(sys.argv[2]), "
    "precision=PrecisionSpec(name='fp16', via='transform', keep_io_types=True), calibration=None, "
    "input_shapes={}, input_dtypes={}, log=lambda line: None))"
)


# ---------------------------------------------------------------------------------------------------- setup

def snapshot(rev: str, dest: Path) -> Path:
    """`git archive REV` of the two packages, importable ahead of the editable install via PYTHONPATH."""
    data = subprocess.run(["git", "-C", str(REPO), "archive", rev, "orchestrator", "plugins"],
                          check=True, capture_output=True).stdout
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(dest)
    (dest / "trt_orchestrator_plugins").symlink_to("plugins")  # the editable install maps this name to plugins/
    return dest


def private_manifest(src: Path, work: Path) -> Path:
    """The demo manifest with absolute model and schema paths and a private (empty) registry."""
    data = yaml.safe_load(src.read_text())
    base = src.parent
    if "$schema" in data:
        data["$schema"] = str((base / data["$schema"]).resolve())
    for model in data["models"]:
        model["source"]["path"] = str((base / model["source"]["path"]).resolve())
    data["registry"] = {"store": "local", "path": str(work / "registry")}
    out = work / "demo.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def rtx_cells(manifest: Path, env: dict) -> list[dict]:
    """The plan's cells whose target is built by tensorrt-rtx, with what polygraphy needs to build the same."""
    data = yaml.safe_load(manifest.read_text())
    targets = {t["name"]: t for t in data["targets"]}
    models = {m["name"]: m for m in data["models"]}
    plan = json.loads(subprocess.run([str(ORCHESTRATE), "plan", str(manifest), "--json", "--cache-dir",
                                      str(manifest.parent / "plan-cache")], env=env, check=True,
                                     capture_output=True, text=True).stdout)
    cells = []
    for c in plan["cells"]:
        target = targets[c["target"]]
        if target["builder"] != "tensorrt-rtx":
            continue
        ccs = target.get("compute_capabilities") or [target["compute_capability"]]
        profile = {name: spec["profiles"][c["profile_set"]] for name, spec in models[c["model"]]["inputs"].items()}
        cells.append({"address": c["address"], "model": c["model"], "precision": c["precision"],
                      "target": c["target"], "ccs": [str(x) for x in ccs], "profile": profile,
                      "onnx": models[c["model"]]["source"]["path"]})
    return cells


def _shapes(profile: dict, which: str) -> list[str]:
    return [f"{name}:[{','.join(str(d) for d in p[which])}]" for name, p in profile.items()]


def polygraphy_script(cells: list[dict], path: Path) -> None:
    """A plain sequential shell loop, as a folder of build scripts would run; per-command times to times.tsv."""
    lines = ["#!/usr/bin/env bash", "# usage: polygraphy_loop.sh OUT_DIR", "set -euo pipefail",
             "export POLYGRAPHY_USE_TENSORRT_RTX=1", 'OUT="$1"; mkdir -p "$OUT"',
             f"CONVERT_FP16={shlex.quote(CONVERT_FP16)}",
             ('step() { local name=$1; shift; local t0=$EPOCHREALTIME; "$@" >"$OUT/$name.log" 2>&1; '
              'echo "$name $t0 $EPOCHREALTIME" >>"$OUT/times.tsv"; }')]
    for model in dict.fromkeys(c["model"] for c in cells):
        mine = [c for c in cells if c["model"] == model]
        onnx = mine[0]["onnx"]
        if any(c["precision"] == "fp16" for c in mine):
            lines.append(f'step convert-{model}-fp16 {sys.executable} -c "$CONVERT_FP16" {shlex.quote(onnx)} '
                         f'"$OUT/{model}.fp16.onnx"')
        for c in mine:
            src = shlex.quote(onnx) if c["precision"] == "fp32" else f'"$OUT/{model}.fp16.onnx"'
            name = cell_slug(c)
            lines.append(
                f"step {name} {POLYGRAPHY} convert {src} --convert-to trt --strongly-typed "
                f"--trt-min-shapes {' '.join(_shapes(c['profile'], 'min'))} "
                f"--trt-opt-shapes {' '.join(_shapes(c['profile'], 'opt'))} "
                f"--trt-max-shapes {' '.join(_shapes(c['profile'], 'max'))} "
                f"--compute-capabilities {' '.join(c['ccs'])} -o \"$OUT/{name}.plan\"")
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o755)


def cell_slug(c: dict) -> str:
    return f"{c['model']}-{c['precision']}-{c['target']}"


# ---------------------------------------------------------------------------------------------------- measure

def _busy_jiffies() -> int:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields[:8]) - idle


def timed(cmd: list[str], env: dict, stdout_path: Path | None = None) -> dict:
    """Wall time of one child, its CPU time (rusage, children it waited for included), the load average, and
    the CPU seconds the rest of the machine burnt meanwhile."""
    load = os.getloadavg()
    busy0 = _busy_jiffies()
    t0 = time.perf_counter()
    with open(stdout_path or os.devnull, "w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.PIPE)
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        err = proc.stderr.read().decode(errors="replace")
    proc.returncode = os.waitstatus_to_exitcode(status)
    busy = (_busy_jiffies() - busy0) / CLK_TCK
    cpu = usage.ru_utime + usage.ru_stime
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {shlex.join(cmd)}\n{err[-3000:]}")
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 2), "others_cpu_s": round(max(0.0, busy - cpu), 2),
            "loadavg_before": [round(x, 2) for x in load], "loadavg_after": [round(x, 2) for x in os.getloadavg()]}


def orchestrate_cmd(manifest: Path, cache: Path, only: list[str], jobs: int) -> list[str]:
    return [str(ORCHESTRATE), "build", str(manifest), *[a for addr in only for a in ("--only", addr)],
            "-j", str(jobs), "--json", "--cache-dir", str(cache)]


def node_seconds(report: dict) -> dict:
    """Per-node figures from `orchestrate build --json`: executor seconds (submit -> result) and, for builds,
    the builder's own build_seconds."""
    return {n["node"]: {"status": n["status"], "seconds": n["seconds"],
                        "build_seconds": n["data"].get("build_seconds"),
                        "transform_seconds": (n["data"].get("facts") or {}).get("seconds"),
                        "engine_size": n["data"].get("engine_size")} for n in report["nodes"]}


def polygraphy_steps(out: Path) -> dict:
    steps = {}
    for line in (out / "times.tsv").read_text().splitlines():
        name, t0, t1 = line.split()
        steps[name] = {"seconds": round(float(t1) - float(t0), 3)}
        log = out / f"{name}.log"
        for text in log.read_text(errors="replace").splitlines():
            if "Finished engine building in" in text:
                steps[name]["build_seconds"] = float(text.split(" in ")[1].split()[0])
        plan = out / f"{name}.plan"
        if plan.exists():
            steps[name]["engine_size"] = plan.stat().st_size
    return steps


NOOP_PHASES = """
import json, sys, time
t0 = time.perf_counter()
from orchestrator.cli import main  # what the console script imports first
t1 = time.perf_counter()
from orchestrator import plugins
from orchestrator.app import pipeline as api
from orchestrator.app.project import load_project
manifest, cache, jobs, only = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
project = load_project([manifest], cache_dir=cache)
t2 = time.perf_counter()
plan = api.plan(project)
t3 = time.perf_counter()
fingerprint = plugins.fingerprint()
t4 = time.perf_counter()
summary = api.build(project, plan, only=only, jobs=jobs, fingerprint=fingerprint)
t5 = time.perf_counter()
print(json.dumps({"import_cli": t1 - t0, "load_project": t2 - t1, "plan": t3 - t2, "detect": t4 - t3,
                  "build_noop": t5 - t4, "executor": summary.seconds}))
"""


def noop_phases(manifest: Path, cache: Path, only: list[str], jobs: int, env: dict, repeat: int = 3) -> dict:
    """Median per phase of a no-op `orchestrate build` (the CLI's own sequence, timed in-process)."""
    samples = []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", NOOP_PHASES, str(manifest), str(cache), str(jobs), *only],
                             env=env, check=True, capture_output=True, text=True).stdout
        samples.append(json.loads(out.strip().splitlines()[-1]))
    return {k: round(statistics.median(s[k] for s in samples), 3) for k in samples[0]}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def summary(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "n": len(values)}


# ---------------------------------------------------------------------------------------------------- main

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=3, help="cold runs per side (interleaved)")
    ap.add_argument("--noop", type=int, default=5, help="no-op re-runs on the warm cache")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--manifest", type=Path, default=REPO / "manifests" / "demo.yaml")
    ap.add_argument("--snapshot", metavar="REV", help="benchmark `git archive REV` instead of the working tree")
    ap.add_argument("--full-demo", type=int, default=0, metavar="N",
                    help="also N cold builds + no-op of the whole demo (ORT cells too), reported separately")
    args = ap.parse_args()

    stamp = time.strftime("%Y%m%dT%H%M%S")
    work = OUT_ROOT / f"build-{stamp}"
    work.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k not in ("ORCHESTRATE_CACHE", "PYTHONPATH")}
    env["PYTHONUNBUFFERED"] = "1"
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", args.snapshot or "HEAD"], check=True,
                            capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                                check=True, capture_output=True, text=True).stdout.strip())
    if args.snapshot:
        env["PYTHONPATH"] = str(snapshot(args.snapshot, work / "src"))
    manifest = private_manifest(args.manifest.resolve(), work)
    # Children run from the work dir: `python -c` puts the cwd first on sys.path, and from the repo root that
    # would import the working tree's `orchestrator` ahead of a --snapshot.
    os.chdir(work)
    cells = rtx_cells(manifest, env)
    only = [c["address"] for c in cells]
    script = work / "polygraphy_loop.sh"
    polygraphy_script(cells, script)

    # Warm the page cache for both sides' libraries (and compile the snapshot's .pyc): untimed.
    warm = "import tensorrt_rtx, onnx, onnxconverter_common, onnxruntime, orchestrator.cli, polygraphy.tools"
    subprocess.run([sys.executable, "-c", warm], env=env, check=True)
    for c in cells:
        Path(c["onnx"]).read_bytes()

    runs: dict[str, list] = {"orchestrate": [], "polygraphy": [], "noop": [], "full_demo": [], "full_demo_noop": []}
    print(f"{len(cells)} RTX cells; {args.n} interleaved cold runs per side; load {os.getloadavg()}", flush=True)
    last_cache = None
    for i in range(args.n):
        cache = work / f"orch-{i}"
        env_o = {**env, "ORCHESTRATE_CACHE": str(cache)}
        r = timed(orchestrate_cmd(manifest, cache, only, args.jobs), env_o, work / f"orch-{i}.json")
        report = json.loads((work / f"orch-{i}.json").read_text())
        r.update(executor_s=report["seconds"], counts=report["counts"], nodes=node_seconds(report))
        runs["orchestrate"].append(r)
        last_cache = cache
        print(f"  A orchestrate #{i}: {r['wall_s']:.2f}s (cpu {r['cpu_s']}s, others {r['others_cpu_s']}s, "
              f"load {r['loadavg_before'][0]})", flush=True)
        out = work / f"poly-{i}"
        r = timed(["bash", str(script), str(out)], env)
        r.update(steps=polygraphy_steps(out))
        runs["polygraphy"].append(r)
        print(f"  B polygraphy  #{i}: {r['wall_s']:.2f}s (cpu {r['cpu_s']}s, others {r['others_cpu_s']}s, "
              f"load {r['loadavg_before'][0]})", flush=True)

    env_o = {**env, "ORCHESTRATE_CACHE": str(last_cache)}
    for i in range(args.noop):
        r = timed(orchestrate_cmd(manifest, last_cache, only, args.jobs), env_o, work / f"noop-{i}.json")
        report = json.loads((work / f"noop-{i}.json").read_text())
        r.update(executor_s=report["seconds"], counts=report["counts"])
        runs["noop"].append(r)
        print(f"  no-op #{i}: {r['wall_s']:.3f}s (load {r['loadavg_before'][0]}, {report['counts']})", flush=True)

    phases = None
    if args.noop:  # where a no-op's time goes: phases in-process, plus -X importtime and cProfile files
        phases = noop_phases(manifest, last_cache, only, args.jobs, env_o)
        with open(work / "noop-importtime.txt", "w") as err:
            subprocess.run([sys.executable, "-X", "importtime", str(ORCHESTRATE),
                            *orchestrate_cmd(manifest, last_cache, only, args.jobs)[1:]], env=env_o,
                           stdout=subprocess.DEVNULL, stderr=err, check=True)
        subprocess.run([sys.executable, "-m", "cProfile", "-o", str(work / "noop.prof"), str(ORCHESTRATE),
                        *orchestrate_cmd(manifest, last_cache, only, args.jobs)[1:]], env=env_o,
                       stdout=subprocess.DEVNULL, check=True)

    for i in range(args.full_demo):
        cache = work / f"full-{i}"
        env_f = {**env, "ORCHESTRATE_CACHE": str(cache)}
        cmd = [str(ORCHESTRATE), "build", str(manifest), "-j", str(args.jobs), "--json", "--cache-dir", str(cache)]
        r = timed(cmd, env_f, work / f"full-{i}.json")
        report = json.loads((work / f"full-{i}.json").read_text())
        r.update(executor_s=report["seconds"], counts=report["counts"], nodes=node_seconds(report))
        runs["full_demo"].append(r)
        n = timed(cmd, env_f, work / f"full-noop-{i}.json")
        runs["full_demo_noop"].append(n)
        print(f"  full demo #{i}: cold {r['wall_s']:.2f}s, no-op {n['wall_s']:.3f}s", flush=True)

    # Same cells on both sides: same engine count and, per cell, the same engine size; same fp16 ONNX bytes.
    last = runs["orchestrate"][-1]["nodes"]
    poly = runs["polygraphy"][-1]["steps"]
    checks = []
    for c in cells:
        o = last[f"build:{c['address']}"]["engine_size"]
        p = poly[cell_slug(c)].get("engine_size")
        checks.append({"address": c["address"], "orchestrate_bytes": o, "polygraphy_bytes": p})
    onnx_same = {}
    for model in dict.fromkeys(c["model"] for c in cells):
        theirs = work / f"poly-{args.n - 1}" / f"{model}.fp16.onnx"
        digests = {sha256(p) for p in (last_cache / "nodes" / "transform").glob("*/model.onnx")}
        onnx_same[model] = theirs.exists() and sha256(theirs) in digests

    o_wall = [r["wall_s"] for r in runs["orchestrate"]]
    p_wall = [r["wall_s"] for r in runs["polygraphy"]]
    result = {
        "when": stamp, "commit": commit, "snapshot": bool(args.snapshot), "worktree_dirty": dirty and not args.snapshot,
        "machine": {"nproc": os.cpu_count(), "model": _cpu_model(), "python": sys.version.split()[0]},
        "jobs": args.jobs, "cells": cells, "polygraphy_script": script.read_text(),
        "orchestrate_command": shlex.join(orchestrate_cmd(manifest, Path("<fresh dir>"), only, args.jobs)),
        "summary": {"orchestrate": summary(o_wall), "polygraphy": summary(p_wall),
                    "ratio_median": round(statistics.median(o_wall) / statistics.median(p_wall), 3),
                    "ratio_min": round(min(o_wall) / min(p_wall), 3),
                    "orchestrate_cpu": summary([r["cpu_s"] for r in runs["orchestrate"]]),
                    "polygraphy_cpu": summary([r["cpu_s"] for r in runs["polygraphy"]]),
                    "noop": summary([r["wall_s"] for r in runs["noop"]]) if runs["noop"] else None,
                    "noop_phases": phases},
        "same_cells": {"engine_sizes": checks, "fp16_onnx_identical": onnx_same},
        "runs": runs,
    }
    (OUT_ROOT / f"build-{stamp}.json").write_text(json.dumps(result, indent=1))
    s = result["summary"]
    print()
    print(f"{'':24}{'median s':>10}{'min s':>10}{'max s':>10}{'cpu s (med)':>13}")
    print(f"{'orchestrate -j ' + str(args.jobs):24}{s['orchestrate']['median']:>10.2f}{s['orchestrate']['min']:>10.2f}"
          f"{s['orchestrate']['max']:>10.2f}{s['orchestrate_cpu']['median']:>13.1f}")
    print(f"{'polygraphy loop':24}{s['polygraphy']['median']:>10.2f}{s['polygraphy']['min']:>10.2f}"
          f"{s['polygraphy']['max']:>10.2f}{s['polygraphy_cpu']['median']:>13.1f}")
    print(f"ratio orchestrate/polygraphy: {s['ratio_median']:.2f} (medians), {s['ratio_min']:.2f} (mins); goal <= 0.60")
    if s["noop"]:
        print(f"no-op re-run: median {s['noop']['median']:.3f}s, min {s['noop']['min']:.3f}s, "
              f"max {s['noop']['max']:.3f}s; goal < 1 s")
    if runs["full_demo"]:
        print("whole demo (18 cells, ORT too): cold " + ", ".join(f"{r['wall_s']:.2f}s" for r in runs["full_demo"])
              + "; no-op " + ", ".join(f"{r['wall_s']:.3f}s" for r in runs["full_demo_noop"]))
    worst = max(abs(c["orchestrate_bytes"] - c["polygraphy_bytes"]) for c in checks)
    print(f"engine sizes per cell equal within {worst} bytes (RTX plans are not byte-deterministic run to run); "
          f"fp16 ONNX identical: {onnx_same}")
    if s["noop_phases"]:
        print("no-op phases (s): " + ", ".join(f"{k} {v:.3f}" for k, v in s["noop_phases"].items()))
    print(f"raw: {OUT_ROOT / f'build-{stamp}.json'}")


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


if __name__ == "__main__":
    main()
