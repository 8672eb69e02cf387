"""Registry bytes with ``targets[].weights: stripped`` against ``embedded`` (issue 25), through the real pipeline.

    .venv/bin/python bench/bench_weights.py [--model orientation] [--targets rtx|ort] [--ort-optimization all]
                                            [--profile-sets 1] [--out bench/out/weights.json]

Two copies of manifests/demo.yaml reduced to one model and the chosen targets (``rtx``: the demo's TensorRT-RTX
AOT targets; ``ort``: its onnxruntime CPU target), one with ``weights: embedded`` and one with ``weights: stripped``,
each built, gated (onnxruntime only: RTX engines cannot run here and the demo publishes them ungated) and published
by ``orchestrate`` into its own local store. Registry bytes = the bytes of every blob the store holds
(``blobs/sha256``: engines, weights blobs and the files published with them), and the engine + weights bytes alone.
The bound of issue 25 is checked per weights blob: stripped (blob + its N stripped engines) <= embedded / N +
N x the stripped engine size, N = the engines that blob serves.

TensorRT-RTX 1.7 needs a CUDA driver to build stripped plans (tests/integration/test_rtx_weights.py): without one
the stripped build fails and the script says so (exit 2); run it on a machine with an NVIDIA driver (building needs
no supported GPU, only the driver) for the RTX figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / ".cache" / "models"


def orchestrate(*args: str, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "ORCHESTRATE_CACHE": str(cache)}
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=3600)


def manifest(root: Path, model: str, targets: str, weights: str, ort_optimization: str, profile_sets: int = 1) -> Path:
    import yaml

    data = yaml.safe_load((ROOT / "manifests" / "demo.yaml").read_text())
    data.pop("$schema", None)
    data["models"] = [m for m in data["models"] if m["name"] == model]
    if not data["models"]:
        raise SystemExit(f"no model {model!r} in manifests/demo.yaml")
    for m in data["models"]:
        m["source"]["path"] = str(MODELS / Path(m["source"]["path"]).name)
        for spec in m["inputs"].values():  # more profile sets: more engines built from one weights blob
            (name, shapes), = spec["profiles"].items()
            spec["profiles"] = {name if k == 0 else f"{name}{k + 1}": shapes for k in range(profile_sets)}
    data["targets"] = [t for t in data["targets"] if (t["builder"] == "tensorrt-rtx") == (targets == "rtx")]
    for t in data["targets"]:
        t["weights"] = weights
        if targets == "ort":
            t["options"] = {"ort_optimization": ort_optimization}
    data["registry"] = {"store": "local", "path": str(root / weights / "store")}
    out = root / weights / "demo.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def store_bytes(store: Path) -> int:
    return sum(p.stat().st_size for p in (store / "blobs" / "sha256").iterdir() if p.is_file())


def run(root: Path, model: str, targets: str, weights: str, ort_optimization: str, profile_sets: int) -> dict:
    path = manifest(root, model, targets, weights, ort_optimization, profile_sets)
    cache = root / weights / "cache"
    for verb in ("build", "gate", "publish"):
        if verb == "gate" and targets == "rtx":
            continue
        proc = orchestrate(verb, str(path), cache=cache)
        if proc.returncode != 0:
            return {"error": f"orchestrate {verb} ({weights}) exited {proc.returncode}: "
                             + (proc.stderr.strip() or proc.stdout.strip())[-1500:]}
    listing = json.loads(orchestrate("ls", "--registry", str(root / weights / "store"), "--json",
                                     cache=cache).stdout)
    engines = listing["artifacts"]
    blobs = listing["weights"]
    return {"registry_bytes": store_bytes(root / weights / "store"), "engines": len(engines),
            "engine_bytes": sum(a["size"] for a in engines), "weights_bytes": sum(w["size"] for w in blobs),
            "per_engine": {a["address"]: a["size"] for a in engines},
            "blobs": [{"address": w["address"], "size": w["size"], "engines": w["engines"]} for w in blobs]}


def bound(embedded: dict, stripped: dict) -> list[dict]:
    """Per weights blob: stripped (blob + its stripped engines) against embedded / N + N x stripped engine size."""
    out = []
    for blob in stripped["blobs"]:
        users = blob["engines"]
        n = len(users)
        if not n:
            continue
        emb = sum(embedded["per_engine"][a] for a in users)
        engines = sum(stripped["per_engine"][a] for a in users)
        out.append({"blob": blob["address"], "engines": n, "embedded_bytes": emb,
                    "stripped_bytes": blob["size"] + engines, "stripped_engine_bytes": engines,
                    "limit_bytes": emb / n + engines, "met": blob["size"] + engines <= emb / n + engines,
                    "ratio": (blob["size"] + engines) / emb if emb else None})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="orientation")
    parser.add_argument("--targets", choices=("rtx", "ort"), default="rtx")
    parser.add_argument("--ort-optimization", choices=("basic", "extended", "all"), default="all")
    parser.add_argument("--profile-sets", type=int, default=1,
                        help="give the model this many profile sets (copies of its one): more engines per blob")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-weights-") as tmp:
        root = Path(tmp)
        result = {"model": args.model, "targets": args.targets, "ort_optimization": args.ort_optimization,
                  "profile_sets": args.profile_sets,
                  "embedded": run(root, args.model, args.targets, "embedded", args.ort_optimization,
                                  args.profile_sets),
                  "stripped": run(root, args.model, args.targets, "stripped", args.ort_optimization,
                                  args.profile_sets),
                  "loadavg": Path("/proc/loadavg").read_text().split()[:3]}
    if "error" not in result["embedded"] and "error" not in result["stripped"]:
        e, s = result["embedded"], result["stripped"]
        result["registry_ratio"] = s["registry_bytes"] / e["registry_bytes"]
        result["engines_and_weights_ratio"] = (s["engine_bytes"] + s["weights_bytes"]) / e["engine_bytes"]
        result["bound"] = bound(e, s)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    if "error" in result["stripped"] or "error" in result["embedded"]:
        sys.exit(2)


if __name__ == "__main__":
    main()
