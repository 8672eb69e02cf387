"""Publish/pull throughput and peak-RSS growth of the stores for one large engine file.

    .venv/bin/python bench/bench_registry.py [--size-mb 200] [--repeats 3] [--out bench/out/registry.json]

Compares: local store put/get vs ``cp`` (+ ``sync`` of the copy, since put fsyncs); oci store put/get vs the raw
distribution API driven by curl on loopback (POST an upload session, then ``PUT ?digest=`` with the whole
body; GET the blob). Each store operation runs in a fresh child process that reads its VmHWM (peak RSS) after
imports and after the operation: the difference is the operation's peak RSS growth. Results: the best (max)
throughput of the repeats, and the worst RSS growth. Needs ``docker-registry`` (Debian package) for the oci part.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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
    from registry_server import make_artifact  # noqa: F401  (imports done before the baseline)

    from orchestrator.manifest.model import RegistryConfig
    from orchestrator.registry import ArtifactFiles
    from trt_orchestrator_plugins.stores.local import LocalStore
    from trt_orchestrator_plugins.stores.oci import OciStore

    import requests  # noqa: F401

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
        "cpus": os.cpu_count(), "python": platform.python_version(), "kernel": platform.release()}}
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
            raw_up, raw_down, put, get = [], [], [], []
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
                raw_down.append(timed(["curl", "-sS", "-f", "-o", str(work / "curl.plan"),
                                       f"http://{server.host}/v2/{repo}/blobs/{digest}"]))
                (work / "curl.plan").unlink()
                target = f"{server.host}/oci{r}"
                put.append(run_child("put", {"store": "oci", "target": target, "engine": str(files.engine),
                                             "meta": str(meta_path)}))
                get.append(run_child("get", {"store": "oci", "target": target, "digest": digest,
                                             "dest": str(work / f"oget{r}.plan")}))
                (work / f"oget{r}.plan").unlink()
            results["oci"] = summarize(mb, raw_put=raw_up, put=put, get=get, raw_get=raw_down)
        finally:
            server.stop()
    return results


def summarize(mb: float, *, raw_put: list[float], put: list[dict], get: list[dict], raw_get: list[float]) -> dict:
    best = lambda xs: mb / min(xs)  # noqa: E731
    out = {
        "raw_put_MBps": round(best(raw_put), 1),
        "put_MBps": round(best([p["seconds"] for p in put]), 1),
        "raw_get_MBps": round(best(raw_get), 1),
        "get_MBps": round(best([g["seconds"] for g in get]), 1),
        "put_rss_growth_mb": round(max(p["rss_growth_mb"] for p in put), 1),
        "get_rss_growth_mb": round(max(g["rss_growth_mb"] for g in get), 1),
        "rss_base_mb": round(put[0]["rss_base_mb"], 1),
    }
    out["put_vs_raw"] = round(out["put_MBps"] / out["raw_put_MBps"], 2)
    out["get_vs_raw"] = round(out["get_MBps"] / out["raw_get_MBps"], 2)
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
