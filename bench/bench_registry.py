"""Publish/pull throughput and peak-RSS growth of the stores for one large engine file, and file hashing.

    .venv/bin/python bench/bench_registry.py [--size-mb 200] [--repeats 5] [--baseline TREE] [--out FILE]

Compares, side by side in one run:

- local store ``put`` / ``get`` vs ``cp SRC DST && sync DST`` (put and get fsync what they write);
- oci store ``put`` / ``get`` vs the raw distribution API driven by curl on loopback against the same
  ``docker-registry`` (POST an upload session, then ``PUT ?digest=`` with the whole body; GET the blob, then
  ``sync`` the file, since ``get`` fsyncs what it wrote; plain curl without the sync is recorded too);
- ``orchestrator.digests.hash_file`` vs ``openssl dgst -sha256`` of the same (page-cached) engine file.

Each store operation and each hash runs in a fresh child process that reads its VmHWM (peak RSS) after imports and
after the operation: the difference is the operation's peak RSS growth; the time excludes the child's start and
imports (curl, cp and openssl are timed as whole commands, start included). Within each repeat every figure is
taken back to back (raw, store put, store get, ...), so load from other users hits them alike; ``--baseline TREE``
(another checkout, e.g. ``git worktree add /tmp/pre HEAD~3``) runs its store code in the same repeats, right next
to this tree's. Results per figure: median, min and max MB/s over the repeats; ``ratio`` = median(store) /
median(raw); ``paired`` = the median (min, max) of the per-repeat ratios store / raw of the same repeat; the
median CPU seconds of each figure (user + system, all threads; a command's children included); the 1-minute load
average before every repeat. On a machine whose cores are all busy the wall time follows the CPU seconds.
Needs ``docker-registry`` (Debian package) and curl for oci.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "integration"))  # RegistryServer, make_artifact


def cpu_s(who: int = resource.RUSAGE_SELF) -> float:
    """User + system CPU seconds so far (every thread of this process, or every child reaped)."""
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def vm_hwm_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child(op: str, args: dict) -> dict:
    """One store operation (or one hash) in this (fresh) process: seconds and peak RSS growth."""
    # Imports done before the baseline, the ones the stores make lazily included (requests, jsonschema for the
    # metadata check, filelock): an operation's time is its own work, not the import of a library.
    import filelock  # noqa: F401
    import jsonschema  # noqa: F401
    import requests  # noqa: F401
    from registry_server import make_artifact  # noqa: F401

    from orchestrator.contracts.store import ArtifactFiles
    from orchestrator.core.model import RegistryConfig
    from orchestrator.digests import hash_file
    from trt_orchestrator_plugins.stores.local import LocalStore
    from trt_orchestrator_plugins.stores.oci import OciStore

    if op == "hash":
        base, c0 = vm_hwm_mb(), cpu_s()
        t0 = time.perf_counter()
        digest = hash_file(args["engine"])[0]
        seconds = time.perf_counter() - t0
        return {"seconds": seconds, "cpu_s": cpu_s() - c0, "rss_growth_mb": vm_hwm_mb() - base, "rss_base_mb": base,
                "digest": digest}
    if args["store"] == "local":
        store = LocalStore(RegistryConfig(store="local", path=args["target"]))
    else:
        store = OciStore(RegistryConfig(store="oci", url=args["target"], insecure=True))
    if op == "put":
        meta = json.loads(Path(args["meta"]).read_text())
        files = ArtifactFiles(engine=Path(args["engine"]), metadata=meta)
    base, c0 = vm_hwm_mb(), cpu_s()
    t0 = time.perf_counter()
    if op == "put":
        store.put(files)
    else:
        store.get(args["digest"], Path(args["dest"]))
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "cpu_s": cpu_s() - c0, "rss_growth_mb": vm_hwm_mb() - base, "rss_base_mb": base}


def tree_env(tree: Path | None, shim: Path) -> dict[str, str] | None:
    """The environment of a child that runs ``tree``'s code: its folder first on the path, and its ``plugins/``
    under the plugins' import name (a symlink in ``shim``), ahead of this checkout's editable install."""
    if tree is None:
        return None
    link = shim / "trt_orchestrator_plugins"
    if not link.exists():
        shim.mkdir(parents=True, exist_ok=True)
        link.symlink_to(tree / "plugins")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(shim), str(tree)])}


def run_child(op: str, args: dict, env: dict[str, str] | None = None) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", op, json.dumps(args)], capture_output=True,
                         text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def load_avg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def timed(cmd: list[str]) -> dict:
    """Wall seconds of a command (start included) and the CPU seconds it and its children used."""
    c0 = cpu_s(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return {"seconds": time.perf_counter() - t0, "cpu_s": cpu_s(resource.RUSAGE_CHILDREN) - c0}


def make_engine(work: Path, size_mb: int, model: str):
    from registry_server import make_artifact

    files = make_artifact(work / model, model=model, size=size_mb * 1024 * 1024, log=False)
    meta_path = work / model / "meta.json"
    meta_path.write_text(json.dumps(files.metadata))
    return files, meta_path


def bench(size_mb: int, repeats: int, baseline: Path | None) -> dict:
    from registry_server import RegistryServer

    results: dict = {"size_mb": size_mb, "repeats": repeats, "machine": machine(), "load": []}
    trees = {"": None} if baseline is None else {"baseline_": baseline, "": None}
    results["trees"] = {label or "this": str(tree or ROOT) for label, tree in trees.items()}
    with tempfile.TemporaryDirectory(dir=ROOT / "bench" / "out") as tmp:
        work = Path(tmp)
        envs = {label: tree_env(tree, work / "shim") for label, tree in trees.items()}
        files, meta_path = make_engine(work, size_mb, "bench")
        digest = files.metadata["engine"]["digest"]
        mb = files.metadata["engine"]["size"] / 1e6
        series: dict[str, dict[str, list]] = {"local": {}, "oci": {}, "hash": {}}

        def add(group: str, name: str, value) -> None:
            series[group].setdefault(name, []).append(value)

        server = RegistryServer(work / "registry").start()
        try:
            for r in range(repeats):
                results["load"].append(load_avg())
                # the trees take turns going first, so whatever the previous operation left behind (dirty pages
                # being written back, a warm or cold cache) falls on each alike
                order = list(envs.items()) if r % 2 == 0 else list(reversed(envs.items()))
                # ---- local ----------------------------------------------------------------------------------
                dst = work / f"cp{r}.plan"
                add("local", "raw", timed(["sh", "-c", f"cp {files.engine} {dst} && sync {dst}"]))
                dst.unlink()
                for label, env in order:
                    root = work / f"{label}store{r}"
                    add("local", label + "put", run_child("put", {"store": "local", "target": str(root),
                                                                  "engine": str(files.engine),
                                                                  "meta": str(meta_path)}, env))
                    got = work / f"{label}got{r}.plan"
                    add("local", label + "get", run_child("get", {"store": "local", "target": str(root),
                                                                  "digest": digest, "dest": str(got)}, env))
                    got.unlink()
                # ---- hashing (the engine is in the page cache: it was just read) ----------------------------
                add("hash", "raw", timed(["openssl", "dgst", "-sha256", "-r", str(files.engine)]))
                for label, env in order:
                    hashed = run_child("hash", {"engine": str(files.engine)}, env)
                    if hashed["digest"] != digest:
                        raise SystemExit(f"hash_file gave {hashed['digest']}, the engine is {digest}")
                    add("hash", label + "put", hashed)
                # ---- registry -------------------------------------------------------------------------------
                repo = f"raw/r{r}"
                loc = subprocess.run(
                    ["curl", "-sS", "-X", "POST", "-o", "/dev/null", "-w", "%header{location}",
                     f"http://{server.host}/v2/{repo}/blobs/uploads/"], capture_output=True, text=True,
                    check=True).stdout.strip()
                url = loc if loc.startswith("http") else f"http://{server.host}{loc}"
                sep = "&" if "?" in url else "?"
                add("oci", "raw_put", timed(["curl", "-sS", "-f", "-X", "PUT", "-H",
                                             "Content-Type: application/octet-stream", "-T", str(files.engine),
                                             f"{url}{sep}digest={digest}"]))
                curl_out = work / "curl.plan"
                add("oci", "raw_get_nosync", timed(["curl", "-sS", "-f", "-o", str(curl_out),
                                                    f"http://{server.host}/v2/{repo}/blobs/{digest}"]))
                curl_out.unlink()
                # get() fsyncs the engine before its atomic rename (a pulled engine survives a crash): compare
                # with curl + sync of the file too, as the local figures compare with cp + sync
                add("oci", "raw_get", timed(["sh", "-c", f"curl -sS -f -o {curl_out} "
                                                         f"http://{server.host}/v2/{repo}/blobs/{digest} && "
                                                         f"sync {curl_out}"]))
                curl_out.unlink()
                for label, env in order:
                    target = f"{server.host}/{label}oci{r}"
                    add("oci", label + "put", run_child("put", {"store": "oci", "target": target,
                                                                "engine": str(files.engine),
                                                                "meta": str(meta_path)}, env))
                    got = work / f"{label}oget{r}.plan"
                    add("oci", label + "get", run_child("get", {"store": "oci", "target": target, "digest": digest,
                                                                "dest": str(got)}, env))
                    got.unlink()
        finally:
            server.stop()
    results["load"].append(load_avg())
    for group, named in series.items():
        results[group] = summarize(mb, named, list(trees))
    return results


def machine() -> dict:
    cpu = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    ssl = subprocess.run(["openssl", "version"], capture_output=True, text=True).stdout.strip()
    return {"cpus": os.cpu_count(), "cpu": cpu, "python": platform.python_version(), "kernel": platform.release(),
            "openssl": ssl}


def _stats(xs: list[float]) -> dict:
    return {"median": round(statistics.median(xs), 1), "min": round(min(xs), 1), "max": round(max(xs), 1),
            "runs": [round(x, 1) for x in xs]}


def summarize(mb: float, named: dict[str, list], labels: list[str]) -> dict:
    """MB/s per series (median, min, max, runs), and for each store series its ratio to the raw figure."""
    rates = {name: [mb / x["seconds"] for x in xs] for name, xs in named.items()}
    out: dict = {f"{name}_MBps": _stats(xs) for name, xs in rates.items()}
    out["cpu_s_median"] = {name: round(statistics.median(x["cpu_s"] for x in xs), 3) for name, xs in named.items()}
    out["cpu_s_runs"] = {name: [round(x["cpu_s"], 3) for x in xs] for name, xs in named.items()}
    for label in labels:
        for op in ("put", "get"):
            name = label + op
            if name not in rates:
                continue
            raw = rates.get(f"raw_{op}", rates.get("raw"))
            assert raw is not None
            paired = [s / r for s, r in zip(rates[name], raw, strict=True)]
            out[f"{name}_vs_raw"] = {"ratio": round(statistics.median(rates[name]) / statistics.median(raw), 2),
                                     "paired": round(statistics.median(paired), 2),
                                     "paired_min": round(min(paired), 2), "paired_max": round(max(paired), 2)}
            rss = [x["rss_growth_mb"] for x in named[name]]
            out[f"{name}_rss_growth_mb"] = round(max(rss), 1)
    if "raw_get_nosync" in rates and "get" in rates:
        out["get_vs_raw_nosync_ratio"] = round(statistics.median(rates["get"])
                                               / statistics.median(rates["raw_get_nosync"]), 2)
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], json.loads(sys.argv[3]))))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--baseline", type=Path, help="another checkout whose store code runs in the same repeats")
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "registry.json"))
    a = ap.parse_args()
    (ROOT / "bench" / "out").mkdir(parents=True, exist_ok=True)
    results = bench(a.size_mb, a.repeats, a.baseline.resolve() if a.baseline else None)
    Path(a.out).write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
