"""Can a published engine run on a runner, and why not (pure; the heart of ``pull``).

``check(metadata, fingerprint)`` decides for one artifact; ``rank_candidates`` picks the best of several and
says why each other one was rejected. Both run before any engine byte is deserialized.

The metadata shape read here (the artifact sidecar; publishers produce it, extra keys are ignored)::

    {
      "address": "ocr-det/fp16/default@sm89+trt10.13",
      "precision": "fp16",
      "builder": {"name": "tensorrt" | "trtexec" | "tensorrt-rtx" | "onnxruntime",
                  "version": "10.13.3.9"},          # the exact version really used to build
      "target": {
        "compute_capabilities": ["8.9"],            # one CC; several for RTX AOT; [] for ort/cpu or ampere+
        "hardware_compatibility": "none" | "ampere_plus" | "same_compute_capability",
        "device": "gpu" | "cpu" | "cuda",           # cpu/cuda only for onnxruntime engines
        "version_compatible": false                 # TensorRT VERSION_COMPATIBLE build
      }
    }

Rules (shared/reference/tensorrt-api.md §5, §8, §10):

- ``onnxruntime``: ``cpu`` engines run wherever onnxruntime is installed; ``cuda`` engines need a GPU and the
  CUDAExecutionProvider. The runner's onnxruntime major.minor must equal the builder's.
- ``tensorrt`` / ``trtexec``: need a GPU. Exact CC match ranks best; else an ``ampere_plus`` engine runs on
  CC >= 8.0 and a ``same_compute_capability`` one only on its own CC. The runtime must be the exact TensorRT
  version (down to the build number) unless the engine is version compatible; then a newer runtime of the same
  major, or one major hop 8.6 -> 10.x / 10.x -> 11.x, is allowed (never 8 -> 11, never older).
- ``tensorrt-rtx``: the engine's CC list must contain the runner's CC (RTX runtimes refuse CC 9.0 outright);
  the runner's RTX must be the same release (major.minor.patch) as the builder's.

Ranks: lower is better. ``rank = tier * 100 + placement * 10 + version_distance`` where tier orders builders
(TensorRT 0, TensorRT-RTX 1, onnxruntime CUDA 2, onnxruntime CPU 3), placement is 0 for an exact CC, 1 for
same-CC-compatible, 2 for Ampere+ compatible, and version distance is 0 for the exact runtime, 1 for a newer one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from orchestrator.core.fingerprint import RunnerFingerprint

TENSORRT_BUILDERS = ("tensorrt", "trtexec")
RTX_SUPPORTED_CCS = ("8.0", "8.6", "8.9", "12.0", "12.1")
RTX_HOPPER_REASON = (
    "TensorRT-RTX runtimes do not support compute capability 9.0 (Hopper); "
    "RTX engines run on 8.0, 8.6, 8.9, 12.x"
)
INSTALL_HINTS = {
    "tensorrt": "pip install 'trt-orchestrator[tensorrt]' (TensorRT wheels come only from NVIDIA's index)",
    "tensorrt-rtx": "pip install 'trt-orchestrator[rtx]'",
    "onnxruntime": "pip install 'trt-orchestrator[ort]'",
}
_UNRANKED = 10_000


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str  # why not (ok=False) or how it fits (ok=True), one sentence
    rank: int  # lower is better; meaningful only when ok

    @classmethod
    def no(cls, reason: str) -> "Verdict":
        return cls(False, reason, _UNRANKED)


@dataclass(frozen=True)
class Choice:
    id: str
    metadata: Mapping
    verdict: Verdict


def parse_version(text: str | None) -> tuple[int, ...]:
    """``"10.13.3.9"`` -> (10, 13, 3, 9); trailing non-numeric parts (``.post1``, ``+cu13``) are ignored."""
    if not text:
        return ()
    parts: list[int] = []
    for piece in re.split(r"[.+-]", str(text)):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


def parse_cc(text: str | None) -> tuple[int, int] | None:
    """``"8.6"`` / ``"sm86"`` / ``"86"`` -> (8, 6)."""
    if text is None:
        return None
    t = str(text).strip().lower()
    if t.startswith("sm"):
        t = t[2:]
    if "." in t:
        major, _, minor = t.partition(".")
    elif t.isdigit() and len(t) >= 2:
        major, minor = t[:-1], t[-1]
    else:
        return None
    if not (major.isdigit() and minor.isdigit()):
        return None
    return int(major), int(minor)


def _cc_text(cc: tuple[int, int]) -> str:
    return f"{cc[0]}.{cc[1]}"


def _vtext(v: tuple[int, ...]) -> str:
    return ".".join(str(p) for p in v)


def check(metadata: Mapping, fp: RunnerFingerprint) -> Verdict:
    """Can the artifact described by ``metadata`` run on the runner ``fp``? Never touches the engine bytes."""
    builder = metadata.get("builder") or {}
    name = builder.get("name")
    if name == "onnxruntime":
        return _check_onnxruntime(metadata, fp)
    if name in TENSORRT_BUILDERS:
        return _check_tensorrt(metadata, fp)
    if name == "tensorrt-rtx":
        return _check_rtx(metadata, fp)
    return Verdict.no(f"no compatibility rule for builder {name!r}; this orchestrator knows "
                      "onnxruntime, tensorrt, trtexec, tensorrt-rtx")


def _target(metadata: Mapping) -> Mapping:
    return metadata.get("target") or {}


def _check_onnxruntime(metadata: Mapping, fp: RunnerFingerprint) -> Verdict:
    target = _target(metadata)
    device = target.get("device", "cpu")
    if fp.onnxruntime is None:
        return Verdict.no(f"onnxruntime is not installed on this runner: {INSTALL_HINTS['onnxruntime']}")
    want = parse_version(metadata["builder"].get("version"))[:2]
    have = parse_version(fp.onnxruntime)[:2]
    if want != have:
        return Verdict.no(f"built for onnxruntime {_vtext(want)}, this runner has {fp.onnxruntime} "
                          "(major.minor must match)")
    if device == "cuda":
        if not fp.has_gpu:
            return Verdict.no("an onnxruntime CUDA engine needs an NVIDIA GPU; this runner has none")
        if "CUDAExecutionProvider" not in fp.onnxruntime_providers:
            return Verdict.no("an onnxruntime CUDA engine needs the CUDAExecutionProvider; this runner's "
                              f"onnxruntime offers {', '.join(fp.onnxruntime_providers) or 'no providers'} "
                              "(install onnxruntime-gpu)")
        return Verdict(True, "onnxruntime CUDA engine on a GPU with CUDAExecutionProvider", 200)
    if device != "cpu":
        return Verdict.no(f"unknown onnxruntime device {device!r} (expected cpu or cuda)")
    return Verdict(True, "onnxruntime CPU engine", 300)


def _local_cc(fp: RunnerFingerprint) -> tuple[int, int] | None:
    return parse_cc(fp.compute_capability)


def _check_tensorrt(metadata: Mapping, fp: RunnerFingerprint) -> Verdict:
    target = _target(metadata)
    if not fp.has_gpu:
        return Verdict.no("a TensorRT engine needs an NVIDIA GPU; this runner has none")
    local = _local_cc(fp)
    if local is None:
        return Verdict.no(f"this runner's compute capability {fp.compute_capability!r} is unreadable")
    ccs = [c for c in (parse_cc(x) for x in target.get("compute_capabilities") or ()) if c]
    level = target.get("hardware_compatibility", "none")
    if local in ccs:
        placement = 1 if level == "same_compute_capability" else 0
    elif level == "ampere_plus":
        if local < (8, 0):
            return Verdict.no(f"hardware-compatible (Ampere+) engines need compute capability >= 8.0; "
                              f"this GPU is {_cc_text(local)}")
        placement = 2
    elif level == "same_compute_capability":
        built = ", ".join(_cc_text(c) for c in ccs) or "unknown"
        return Verdict.no(f"built same-compute-capability for {built}; this GPU is {_cc_text(local)}")
    else:
        built = ", ".join(_cc_text(c) for c in ccs) or "no compute capability recorded"
        return Verdict.no(f"built for compute capability {built}; this GPU is {_cc_text(local)} "
                          "(plain TensorRT engines run only on the CC they were built for)")
    if fp.tensorrt is None:
        return Verdict.no(f"TensorRT is not installed on this runner: {INSTALL_HINTS['tensorrt']}")
    built_v = parse_version(metadata["builder"].get("version"))
    have_v = parse_version(fp.tensorrt)
    distance = _tensorrt_version_distance(built_v, have_v, bool(target.get("version_compatible")))
    if isinstance(distance, str):
        return Verdict.no(distance)
    how = "exact compute capability" if placement == 0 else (
        "same-compute-capability build" if placement == 1 else "Ampere+ hardware-compatible build")
    runtime = "exact TensorRT version" if distance == 0 else "newer TensorRT runtime (version compatible)"
    return Verdict(True, f"{how}, {runtime}", placement * 10 + distance)


def _tensorrt_version_distance(built: tuple[int, ...], have: tuple[int, ...], vc: bool) -> int | str:
    if not built:
        return "the engine's metadata records no TensorRT version"
    if built == have:
        return 0
    if not vc:
        return (f"built with TensorRT {_vtext(built)}, this runner has {_vtext(have)}; a TensorRT engine "
                "loads only on the exact version that built it (down to the build number) unless built "
                "version compatible")
    if have < built:
        return (f"version-compatible engine built with TensorRT {_vtext(built)} cannot run on the older "
                f"runtime {_vtext(have)}")
    if have[0] == built[0]:
        return 1
    # Support Matrix "Engine Portability": only 8.6 -> 10.x and 10.x -> 11.x hops, for VC engines.
    if (built[0], have[0]) == (10, 11) or (built[0] == 8 and built[:2] >= (8, 6) and have[0] == 10):
        return 1
    return (f"version-compatible engine built with TensorRT {_vtext(built)} cannot run on TensorRT "
            f"{_vtext(have)}: only same-major, 8.6 -> 10.x and 10.x -> 11.x are supported "
            "(a TensorRT 8 engine cannot run with a TensorRT 11 runtime)")


def _check_rtx(metadata: Mapping, fp: RunnerFingerprint) -> Verdict:
    target = _target(metadata)
    if not fp.has_gpu:
        return Verdict.no("a TensorRT-RTX engine needs an NVIDIA GPU (RTX/Ampere+); this runner has none")
    local = _local_cc(fp)
    if local is None:
        return Verdict.no(f"this runner's compute capability {fp.compute_capability!r} is unreadable")
    if local == (9, 0):
        return Verdict.no(RTX_HOPPER_REASON)
    ccs = [c for c in (parse_cc(x) for x in target.get("compute_capabilities") or ()) if c]
    if local not in ccs:
        built = ", ".join(_cc_text(c) for c in ccs) or "no compute capability recorded"
        return Verdict.no(f"TensorRT-RTX engine built for compute capabilities {built}; this GPU is "
                          f"{_cc_text(local)}")
    if fp.tensorrt_rtx is None:
        return Verdict.no(f"TensorRT-RTX is not installed on this runner: {INSTALL_HINTS['tensorrt-rtx']}")
    built_v = parse_version(metadata["builder"].get("version"))[:3]
    have_v = parse_version(fp.tensorrt_rtx)[:3]
    if built_v != have_v:
        return Verdict.no(f"built with TensorRT-RTX {_vtext(built_v)}, this runner has {fp.tensorrt_rtx}; "
                          "RTX engines run only on the same RTX release (major.minor.patch)")
    return Verdict(True, "TensorRT-RTX engine whose CC list holds this GPU, same RTX release", 100)


def _as_pairs(candidates: Iterable) -> list[tuple[str, Mapping]]:
    pairs = []
    for item in candidates:
        if isinstance(item, Mapping):
            pairs.append((str(item.get("address", "?")), item))
        else:
            ident, meta = item
            pairs.append((str(ident), meta))
    return pairs


def rank_candidates(candidates: Iterable[tuple[str, Mapping]] | Iterable[Mapping],
                    fp: RunnerFingerprint) -> tuple[Choice | None, list[tuple[str, str]]]:
    """Best runnable candidate (lowest rank; ties keep input order) and (id, reason) for every rejected one.

    ``candidates`` are ``(id, metadata)`` pairs, or metadata dicts whose ``address`` is their id. Runnable
    candidates that lose to a better one are not listed as rejections.
    """
    best: Choice | None = None
    rejections: list[tuple[str, str]] = []
    for ident, meta in _as_pairs(candidates):
        verdict = check(meta, fp)
        if not verdict.ok:
            rejections.append((ident, verdict.reason))
        elif best is None or verdict.rank < best.verdict.rank:
            best = Choice(ident, meta, verdict)
    return best, rejections


def explain_all(candidates: Sequence[tuple[str, Mapping]], fp: RunnerFingerprint) -> list[tuple[str, Verdict]]:
    """Every candidate with its verdict, for ``pull --explain`` style listings."""
    return [(ident, check(meta, fp)) for ident, meta in _as_pairs(candidates)]
