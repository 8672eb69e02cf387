"""Whether an engine's parity was judged on a GPU, and what a CPU's parity verdict does not say (issue 23.16). Pure.

A reduced-precision engine's numerics belong to the device that computes them. The fp16 PP-OCRv6 detector gave
all-NaN outputs on CUDA at 960x960 and clean ones on the CPU at every size; the CUDA gate caught it, but TensorRT-RTX
fp16 engines built from the same ONNX had already been published ungated from a CPU runner, where only the
onnxruntime CPU engine's parity had run. A CPU parity verdict is therefore no evidence for GPU numerics:

* :func:`parity_caveat` says so on every reduced-precision engine whose parity was not judged on a GPU — a CPU engine
  (its parity ran on the CPU) and a GPU engine published without a parity verdict; the caveat travels in the
  published metadata (``gates.caveats``), ``show`` and ``report``;
* :func:`gpu_parity_hold` is the manifest's ``gate.require_gpu_parity: [fp16, bf16, int8, fp8]``: a GPU engine of a
  listed precision is published only with a parity verdict given on a GPU (a CPU engine is judged on the CPU it runs
  on, and carries the caveat instead). It holds even where ``gate.allow_ungated_publish`` lets other pending engines
  through; ``publish --force`` overrides it, recorded as for any forced publish.
"""

from __future__ import annotations

from typing import Literal

REDUCED_PRECISIONS: tuple[str, ...] = ("fp16", "bf16", "int8", "fp8")
ParityDevice = Literal["cpu", "gpu"]


def engine_runs_on_gpu(target_device: str) -> bool:
    """A target's device as the manifest and engine descriptors name it: ``cpu`` (onnxruntime CPU), ``cuda``
    (onnxruntime CUDA) or ``gpu`` (TensorRT, TensorRT-RTX)."""
    return target_device != "cpu"


def parity_device(target_device: str, parity_status: str | None) -> ParityDevice | None:
    """Where the engine's parity verdict was given: the parity gate runs an engine on the device it is built for,
    so a GPU engine's verdict is a GPU's; None when no parity verdict exists (not run, pending)."""
    if parity_status not in ("passed", "failed"):
        return None
    return "gpu" if engine_runs_on_gpu(target_device) else "cpu"


def parity_caveat(precision: str, target_device: str, parity_status: str | None) -> str | None:
    """What the record must say about a reduced-precision engine whose parity was not judged on a GPU (None: nothing
    to say: fp32, or a GPU verdict)."""
    if precision not in REDUCED_PRECISIONS:
        return None
    where = parity_device(target_device, parity_status)
    if where == "gpu":
        return None
    if where == "cpu":
        return (f"{precision} parity was judged on a CPU only (onnxruntime CPU): it is no evidence of {precision} "
                "numerics on a GPU; engines built from the same ONNX for GPUs need a parity verdict of their own "
                "on a GPU (gate.require_gpu_parity holds them back until then)")
    if not engine_runs_on_gpu(target_device):
        return f"{precision} engine published without a parity verdict"
    return (f"no parity verdict on a GPU: this {precision} engine was published without one (ungated); a CPU's "
            f"parity verdict on the same ONNX is no evidence of its {precision} numerics on a GPU")


def gpu_parity_hold(precision: str, target_device: str, parity_status: str | None,
                    required: tuple[str, ...]) -> str | None:
    """Why ``gate.require_gpu_parity`` holds this engine back (None: it does not): a GPU engine of a listed precision
    without a parity verdict given on a GPU."""
    if precision not in required or not engine_runs_on_gpu(target_device):
        return None
    if parity_device(target_device, parity_status) == "gpu":
        return None
    return (f"{precision} needs a parity verdict given on a GPU (gate.require_gpu_parity lists {precision}); this "
            "engine has none: gate it on a runner with a GPU that runs it")
