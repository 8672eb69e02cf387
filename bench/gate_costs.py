"""The gate's own costs that are not onnxruntime's work (issue 24, gate overhead), priced piece by piece on the demo's
largest arrays, for this tree and optionally another (``--other DIR``: a checkout whose ``orchestrator`` is put first
on the path in a child process), alternating, so both are measured side by side under the same load.

Pieces (each the median of ``--repeats`` runs, in one process per tree):

* **inputs**: the random parity inputs of ocr-det's ``max`` case, 2 samples of 4x3x960x960 float32
  (``gates.inputs.random_tensor``);
* **metrics**: ``gates.metrics.compare_output`` of 2 samples of ocr-det's ``max`` output (4x1x960x960) at the fp16
  default, and of ocr-rec's ``max`` output (2 samples of 8x120x6625 softmax rows);
* **drift write**: ``gates.drift.OutputRecorder.write`` of ocr-rec's recorded ``opt`` case (2 samples of 4x40x6625)
  and of ocr-det's (2 samples of 1x1x640x640, a mostly-zero map).

The arrays are synthetic but shaped and distributed like the real ones (uniform inputs; a sparse sigmoid map; a
peaked softmax), seeded. Prints a table; ``--json`` writes the figures.

    .venv/bin/python bench/gate_costs.py --other /tmp/old-tree --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def measure(repeats: int) -> dict:
    import numpy as np

    from orchestrator.core.tolerances import default_tolerance
    from orchestrator.gates.drift import OutputRecorder
    from orchestrator.gates.inputs import random_tensor
    from orchestrator.gates.metrics import compare_output

    def timed(fn) -> float:
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    rng = np.random.default_rng(0)
    det_ref = [np.where(rng.random((4, 1, 960, 960)) < 0.05, rng.random((4, 1, 960, 960)), 1e-6).astype(np.float32)
               for _ in range(2)]
    det_eng = [(r + rng.normal(0, 1e-3, r.shape)).astype(np.float32) for r in det_ref]
    logits = rng.normal(0, 3, (2, 8, 120, 6625)).astype(np.float32)
    rec_ref = [np.exp(x) / np.exp(x).sum(-1, keepdims=True) for x in logits]
    rec_eng = [(r * (1 + rng.normal(0, 1e-3, r.shape))).astype(np.float32) for r in rec_ref]
    tol = default_tolerance("fp16")
    out = {
        "inputs ocr-det max (2 x 4x3x960x960)": timed(lambda: [random_tensor((4, 3, 960, 960), "float32",
                                                                             np.random.default_rng(s))
                                                                for s in range(2)]),
        "metrics ocr-det max (2 x 4x1x960x960)": timed(lambda: compare_output("y", zip(det_eng, det_ref), tol)),
        "metrics ocr-rec max (2 x 8x120x6625)": timed(lambda: compare_output("y", zip(rec_eng, rec_ref), tol,
                                                                             classifier_k=None)),
    }
    with tempfile.TemporaryDirectory() as tmp:
        for name, arrays in (("rec", [r[:4, :40] for r in rec_eng]), ("det", [d[:1, :, :640, :640] for d in det_eng])):
            rec = OutputRecorder()
            rec.keep("default", "opt", [{"x": a} for a in arrays], [{"y": a} for a in arrays])
            target = Path(tmp) / f"{name}.npz"
            out[f"drift write ocr-{name} opt"] = timed(lambda rec=rec, target=target: rec.write(target))
            out[f"drift file ocr-{name} opt, MB"] = target.stat().st_size / 1e6
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--other", type=Path, help="another checkout to price side by side (its orchestrator/)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.repeats)))
        return 0
    trees = {"this tree": REPO, **({"other": args.other.resolve()} if args.other else {})}
    runs: dict[str, list[dict]] = {k: [] for k in trees}
    load = [os.getloadavg()]
    for r in range(args.rounds):
        for name, root in (list(trees.items()) if r % 2 == 0 else list(reversed(trees.items()))):
            env = {**os.environ, "PYTHONPATH": str(root)}
            proc = subprocess.run([sys.executable, __file__, "--child", "--repeats", str(args.repeats)], env=env,
                                  capture_output=True, text=True, check=True, cwd=root)
            runs[name].append(json.loads(proc.stdout.strip().splitlines()[-1]))
        load.append(os.getloadavg())
    table = {name: {k: statistics.median(run[k] for run in rs) for k in rs[0]} for name, rs in runs.items()}
    print(f"load average per round: {[round(x[0], 2) for x in load]}")
    keys = list(next(iter(table.values())))
    print(f"{'piece':42} " + " ".join(f"{n:>12}" for n in table))
    for k in keys:
        print(f"{k:42} " + " ".join(f"{table[n][k]:12.4f}" for n in table))
    if args.json:
        args.json.write_text(json.dumps({"load": load, "runs": runs, "medians": table}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
