"""Publish/pull throughput and peak-RSS growth of the stores for one large engine file.

    .venv/bin/python bench/bench_registry.py [--size-mb 200] [--repeats 3] [--out bench/out/registry.json]

Compares: local store put/get vs ``cp`` (+ ``sync`` of the copy, since put fsyncs); oci store put/get vs the raw
distribution API driven by curl on loopback (POST an upload session, then ``PUT ?digest=`` with the whole
body; GET the blob). Each store operation runs in a fresh child process that reads its VmHWM (peak RSS) after
imports and after the operation: the difference is the operation's peak RSS growth. Raw and store runs are
interleaved within each repeat (raw, put, get, raw, put, get, ...) so load from other users hits both alike.
Results: best (max) and median throughput of the repeats, every run's figure, the worst RSS growth, and the
1-minute load average before and after (``/proc/loadavg``). Needs ``docker-registry`` (Debian package) for oci.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "integration"))  # RegistryServer, make_artifact


def vm_hwm_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child(op: str, args: dict) -> dict:
    """One store operation in this (fresh) process: seconds and peak RSS growth."""
    import requests  # noqa: F401
    from registry_server import make_artifact  # noqa: F401  (imports done before the baseline)

    from orchestrator.contracts.store import ArtifactFiles
    from orchestrator.core.model import RegistryConfig
    from trt_orchestrator_plugins.stores.local import LocalStore
    from trt_orchestrator_plugins.stores.oci import OciStore

    if args["store"] == "local":
        store = LocalStore(RegistryConfig(store="local", path=args["target"]))
    else:
        store = OciStore(RegistryConfig(store="oci", url=args["target"], insecure=True))
    if op == "put":
        meta = json.loads(Path(args["meta"]).read_text())
        files = ArtifactFiles(engine=Path(args["engine"]), metadata=meta)
    base = vm_hwm_mb()
    t0 = time.perf_counter()
    if op == "put":
        store.put(files)
    else:
        store.get(args["digest"], Path(args["dest"]))
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "rss_growth_mb": vm_hwm_mb() - base, "rss_base_mb": base}


def run_child(op: str, args: dict) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", op, json.dumps(args)], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def load_avg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def make_engine(work: Path, size_mb: int, model: str):
    from registry_server import make_artifact

    files = make_artifact(work / model, model=model, size=size_mb * 1024 * 1024, log=False)
    meta_path = work / model / "meta.json"
    meta_path.write_text(json.dumps(files.metadata))
    return files, meta_path


def bench(size_mb: int, repeats: int) -> dict:
    from registry_server import RegistryServer

    results: dict = {"size_mb": size_mb, "repeats": repeats, "machine": {
        "cpus": os.cpu_count(), "python": platform.python_version(), "kernel": platform.release()},
        "load_before": load_avg()}
    with tempfile.TemporaryDirectory(dir=ROOT / "bench" / "out") as tmp:
        work = Path(tmp)
        files, meta_path = make_engine(work, size_mb, "bench")
        digest = files.metadata["engine"]["digest"]
        mb = files.metadata["engine"]["size"] / 1e6

        # ---- local ------------------------------------------------------------------------------------
        cp, put, get = [], [], []
        for r in range(repeats):
            dst = work / f"cp{r}.plan"
            cp.append(timed(["sh", "-c", f"cp {files.engine} {dst} && sync {dst}"]))
            dst.unlink()
            root = work / f"store{r}"
            put.append(run_child("put", {"store": "local", "target": str(root), "engine": str(files.engine),
                                         "meta": str(meta_path)}))
            get.append(run_child("get", {"store": "local", "target": str(root), "digest": digest,
                                         "dest": str(work / f"got{r}.plan")}))
            (work / f"got{r}.plan").unlink()
        results["local"] = summarize(mb, raw_put=cp, put=put, get=get, raw_get=cp)

        # ---- registry ---------------------------------------------------------------------------------
        server = RegistryServer(work / "registry").start()
        try:
            raw_up, raw_down, raw_down_nosync, put, get = [], [], [], [], []
            for r in range(repeats):
                repo = f"raw/r{r}"
                loc = subprocess.run(
                    ["curl", "-sS", "-X", "POST", "-o", "/dev/null", "-w", "%header{location}",
                     f"http://{server.host}/v2/{repo}/blobs/uploads/"], capture_output=True, text=True,
                    check=True).stdout.strip()
                url = loc if loc.startswith("http") else f"http://{server.host}{loc}"
                sep = "&" if "?" in url else "?"
                raw_up.append(timed(["curl", "-sS", "-f", "-X", "PUT", "-H", "Content-Type: application/octet-stream",
                                     "-T", str(files.engine), f"{url}{sep}digest={digest}"]))
                raw_down_nosync.append(timed(["curl", "-sS", "-f", "-o", str(work / "curl.plan"),
                                              f"http://{server.host}/v2/{repo}/blobs/{digest}"]))
                (work / "curl.plan").unlink()
                # get() fsyncs the engine before its atomic rename (a pulled engine survives a crash): compare
                # with curl + sync of the file too, as the local figures compare with cp + sync
                raw_down.append(timed(["sh", "-c", f"curl -sS -f -o {work / 'curl.plan'} "
                                                   f"http://{server.host}/v2/{repo}/blobs/{digest} && "
                                                   f"sync {work / 'curl.plan'}"]))
                (work / "curl.plan").unlink()
                target = f"{server.host}/oci{r}"
                put.append(run_child("put", {"store": "oci", "target": target, "engine": str(files.engine),
                                             "meta": str(meta_path)}))
                get.append(run_child("get", {"store": "oci", "target": target, "digest": digest,
                                             "dest": str(work / f"oget{r}.plan")}))
                (work / f"oget{r}.plan").unlink()
            results["oci"] = summarize(mb, raw_put=raw_up, put=put, get=get, raw_get=raw_down)
            nosync = sorted(mb / t for t in raw_down_nosync)
            results["oci"]["raw_get_nosync_MBps_median"] = round(nosync[len(nosync) // 2], 1)
            results["oci"]["get_vs_raw_nosync_median"] = round(
                results["oci"]["get_MBps_median"] / results["oci"]["raw_get_nosync_MBps_median"], 2)
        finally:
            server.stop()
    results["load_after"] = load_avg()
    return results


def summarize(mb: float, *, raw_put: list[float], put: list[dict], get: list[dict], raw_get: list[float]) -> dict:
    rate = lambda secs: [round(mb / x, 1) for x in secs]  # noqa: E731
    runs = {"raw_put": rate(raw_put), "put": rate([p["seconds"] for p in put]),
            "raw_get": rate(raw_get), "get": rate([g["seconds"] for g in get])}
    out: dict = {}
    for name, xs in runs.items():
        out[f"{name}_MBps_best"] = max(xs)
        out[f"{name}_MBps_median"] = round(statistics.median(xs), 1)
    for op in ("put", "get"):
        for stat in ("best", "median"):
            out[f"{op}_vs_raw_{stat}"] = round(out[f"{op}_MBps_{stat}"] / out[f"raw_{op}_MBps_{stat}"], 2)
    out["put_rss_growth_mb"] = round(max(p["rss_growth_mb"] for p in put), 1)
    out["get_rss_growth_mb"] = round(max(g["rss_growth_mb"] for g in get), 1)
    out["rss_base_mb"] = round(put[0]["rss_base_mb"], 1)
    out["runs_MBps"] = runs
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], json.loads(sys.argv[3]))))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "registry.json"))
    a = ap.parse_args()
    (ROOT / "bench" / "out").mkdir(parents=True, exist_ok=True)
    results = bench(a.size_mb, a.repeats)
    Path(a.out).write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
