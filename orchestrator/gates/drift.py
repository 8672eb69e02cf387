"""The drift gate: an engine against the engine of the same cell built by the previous builder version.

A TensorRT upgrade (10.13 -> 11.x) or an onnxruntime upgrade (1.22 -> 1.31) changes the address, so the benchmark's
regression baseline (the same address) is gone exactly when users most want a comparison. The *drift baseline* of a
cell is the newest published engine of the same model version, precision, profile set, device, compute capabilities
and runtime, built by an earlier builder version (``app.gating.drift_baseline`` finds it).

Engines of two TensorRT releases cannot run in one process, so the baseline is not re-run: every parity gate records
the engine's outputs on its drift case (``opt``, or the dataset) with the digest of each sample's inputs
(``outputs.npz``, published with the engine), and the next builder version's gate compares its own outputs with the
baseline's on the samples whose inputs are identical (same seed and shapes, or the same dataset files). Latency is
compared in the benchmark gate: the gated shape's p50 against the baseline's recorded benchmark on the same GPU model.

Without thresholds the comparison is reported and never fails; ``gate.drift`` thresholds make it a gate.
"""

from __future__ import annotations

import hashlib
import io
import math
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.contracts.task import TaskMetric, threshold_metric
from orchestrator.core.gatekeys import DRIFT_OUTPUTS_FILE
from orchestrator.core.model import DriftGate, Model
from orchestrator.core.tolerances import ResolvedTolerance
from orchestrator.errors import GateError
from orchestrator.gates.metrics import compare_output
from orchestrator.gates.noise import threshold_noise
from orchestrator.gates.verdict import decode_float, encode_float, shape_gated_series

OUTPUTS_FILE = DRIFT_OUTPUTS_FILE
INPUTS_KEY = "@inputs"  # per sample: the sha256 of its inputs (names, dtypes, shapes, bytes)
_PROBE_BYTES = 256 << 10
DRIFT_CASES = ("opt", "dataset")  # the case whose outputs are recorded: opt of random cases, or the dataset


def inputs_digest(sample: Mapping[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(sample):
        arr = np.ascontiguousarray(sample[name])
        h.update(f"{name}\0{arr.dtype.str}\0{arr.shape}\0".encode())
        h.update(arr.tobytes())
    return h.hexdigest()


def drift_case(labels: Sequence[str]) -> str | None:
    """The case of a parity run whose outputs are recorded for later drift comparisons."""
    for wanted in DRIFT_CASES:
        if wanted in labels:
            return wanted
    return labels[0] if len(labels) == 1 else None


@dataclass
class OutputRecorder:
    """Collects a parity run's engine outputs on its drift case, per profile, and writes them as one npz."""

    arrays: dict[str, np.ndarray] = field(default_factory=dict)

    def keep(self, profile: str, case: str, samples: Sequence[Mapping[str, np.ndarray]],
             outputs: Sequence[Mapping[str, np.ndarray]]) -> None:
        for n, (sample, out) in enumerate(zip(samples, outputs, strict=True)):
            prefix = f"{profile}/{case}/{n}/"
            self.arrays[prefix + INPUTS_KEY] = np.array(inputs_digest(sample))
            for name, value in out.items():
                self.arrays[prefix + name] = np.asarray(value)

    def write(self, path: Path) -> Path | None:
        """An npz (``np.load`` reads it) whose members are deflated where that pays: a probability map of mostly
        zeros shrinks ~100×, a softmax over thousands of classes by less than 10 % for the price of a deflate pass
        over every byte, so a member is stored as is when its deflated first 256 KiB keep over 80 % of their size.
        Written beside ``path`` and renamed: a crash leaves no half file."""
        if not self.arrays:
            return None
        tmp = path.with_name(path.name + ".partial")
        try:
            with zipfile.ZipFile(tmp, "w") as npz:
                for key, value in self.arrays.items():
                    member = io.BytesIO()
                    np.lib.format.write_array(member, np.asarray(value), allow_pickle=False)
                    data = member.getbuffer()
                    head = bytes(data[:_PROBE_BYTES])
                    pays = len(zlib.compress(head, 1)) < 0.8 * len(head)
                    npz.writestr(zipfile.ZipInfo(key + ".npy", date_time=(1980, 1, 1, 0, 0, 0)), data,
                                 compress_type=zipfile.ZIP_DEFLATED if pays else zipfile.ZIP_STORED, compresslevel=1)
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)
        return path


def load_outputs(path: Path) -> dict[str, np.ndarray]:
    """A recorded outputs file; a damaged one is a GateError naming it (never a pickle: allow_pickle stays off)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise GateError(f"drift baseline outputs {path} cannot be read: {e}",
                        hint="republish the baseline engine, or set gate.drift.enabled: false") from e


def _samples(arrays: Mapping[str, np.ndarray]) -> dict[str, tuple[str, dict[str, np.ndarray]]]:
    """``profile/case/n`` -> (inputs digest, outputs)."""
    out: dict[str, tuple[str, dict[str, np.ndarray]]] = {}
    for key, value in arrays.items():
        sample, _, name = key.rpartition("/")
        digest, outputs = out.get(sample, ("", {}))
        if name == INPUTS_KEY:
            digest = str(value)
        else:
            outputs[name] = value
        out[sample] = (digest, outputs)
    return out


@dataclass(frozen=True)
class DriftVerdict:
    """This engine against its drift baseline (one record of another builder version)."""

    baseline: dict[str, Any]  # address, builder, builder_version, engine digest, record key
    compared: int  # samples with identical inputs on both sides
    outputs: dict[str, dict[str, float]]  # output -> max_abs_error, rel_l2, cosine (worst over the samples)
    task: dict[str, float]  # task metrics of this engine's outputs against the baseline's
    thresholds: dict[str, Any]
    reasons: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def status(self) -> str:
        return "failed" if self.reasons else "passed"

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "baseline": dict(self.baseline), "compared": self.compared,
                "outputs": {o: {k: encode_float(v) for k, v in m.items()} for o, m in self.outputs.items()},
                "task": {k: encode_float(v) for k, v in self.task.items()}, "thresholds": dict(self.thresholds),
                "reasons": list(self.reasons), "notes": list(self.notes)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> DriftVerdict:
        return cls(baseline=dict(d["baseline"]), compared=int(d["compared"]),
                   outputs={o: {k: decode_float(v) for k, v in m.items()} for o, m in d["outputs"].items()},
                   task={k: decode_float(v) for k, v in d["task"].items()}, thresholds=dict(d["thresholds"]),
                   reasons=tuple(d.get("reasons", ())), notes=tuple(d.get("notes", ())))


def _thresholds(settings: DriftGate) -> dict[str, Any]:
    return {"min_cosine": settings.min_cosine, "max_rel_l2": settings.max_rel_l2,
            "max_abs_error": settings.max_abs_error, "task": dict(sorted(settings.task.items()))}


# A drift comparison is judged by its own thresholds only; the tolerance the element-wise metrics are computed
# against is irrelevant to them (no atol/rtol gate here).
_NO_TOLERANCE = ResolvedTolerance(atol=1.0, rtol=0.0, max_violation_fraction=1.0, source="drift")


def judge_drift(model: Model, settings: DriftGate, baseline: Mapping[str, Any], base: Mapping[str, np.ndarray],
                new: Mapping[str, np.ndarray], task: TaskMetric | None = None) -> DriftVerdict:
    """This engine's recorded outputs (``new``) against the baseline's (``base``) on the samples both ran with
    identical inputs: per output the worst max abs error, rel-L2 and cosine; the task metric of this engine's
    post-processed outputs with the baseline's as the reference; each against ``settings``' thresholds."""
    thresholds = _thresholds(settings)
    ours, theirs = _samples(new), _samples(base)
    same = [k for k in sorted(ours) if k in theirs and ours[k][0] and ours[k][0] == theirs[k][0]]
    notes: list[str] = []
    reasons: list[str] = []
    if not same:
        notes.append("no sample with identical inputs on both sides (other data, seeds or shapes): outputs not "
                     "compared")
        return DriftVerdict(dict(baseline), 0, {}, {}, thresholds, (), tuple(notes))
    if len(same) < len(ours):
        notes.append(f"{len(ours) - len(same)} of {len(ours)} samples have other inputs than the baseline's: "
                     "not compared")
    names = sorted({n for k in same for n in ours[k][1]} & {n for k in same for n in theirs[k][1]})
    outputs: dict[str, dict[str, float]] = {}
    for name in names:
        pairs = [(ours[k][1][name], theirs[k][1][name]) for k in same
                 if name in ours[k][1] and name in theirs[k][1]]
        shapes_differ = [k for k in same if name in ours[k][1] and name in theirs[k][1]
                         and ours[k][1][name].shape != theirs[k][1][name].shape]
        if shapes_differ:
            reasons.append(f"{name}: output shape differs from the baseline's on {shapes_differ[0]}")
            continue
        v = compare_output(name, iter(pairs), _NO_TOLERANCE)
        ours_bad = sum(int(np.count_nonzero(~np.isfinite(a))) for a, _ in pairs if a.dtype.kind in "fc")
        theirs_bad = sum(int(np.count_nonzero(~np.isfinite(b))) for _, b in pairs if b.dtype.kind in "fc")
        if ours_bad > theirs_bad:
            reasons.append(f"{name}: {ours_bad} NaN/Inf values where the baseline has {theirs_bad}")
        outputs[name] = {"max_abs_error": float(v.max_abs_error if v.max_abs_error is not None else math.nan),
                         "rel_l2": float(v.rel_l2 if v.rel_l2 is not None else math.nan),
                         "cosine": float(v.cosine if v.cosine is not None else math.nan)}
        m = outputs[name]
        if settings.min_cosine is not None and not m["cosine"] >= settings.min_cosine:
            reasons.append(f"{name}: cosine {m['cosine']:.6g} vs the baseline < drift.min_cosine "
                           f"{settings.min_cosine:g}")
        if settings.max_rel_l2 is not None and not m["rel_l2"] <= settings.max_rel_l2:
            reasons.append(f"{name}: rel-L2 {m['rel_l2']:.4g} vs the baseline > drift.max_rel_l2 "
                           f"{settings.max_rel_l2:g}")
        if settings.max_abs_error is not None and not m["max_abs_error"] <= settings.max_abs_error:
            reasons.append(f"{name}: max abs error {m['max_abs_error']:.4g} vs the baseline > "
                           f"drift.max_abs_error {settings.max_abs_error:g}")
    metrics: dict[str, float] = {}
    if task is not None and model.task is not None:
        for name in settings.task:
            parsed = threshold_metric(name)
            if parsed is None or parsed[1] not in task.metrics:
                raise GateError(f"{model.name}: gate.drift.task.{name} names no metric of task {model.task.kind!r}",
                                hint=f"thresholds are min_<metric> / max_<metric> of: {', '.join(task.metrics)}")
        try:
            metrics = {k: float(v) for k, v in task.evaluate([theirs[k][1] for k in same], [ours[k][1] for k in same],
                                                             model.task).items()}
        except GateError as e:
            reasons.append(f"task {model.task.kind} vs the baseline: {e}")
        for name, bound in sorted(settings.task.items()):
            side, metric = threshold_metric(name) or ("min", name)
            if metric not in metrics:
                notes.append(f"drift.task.{name}: {metric} was not computed; not checked")
                continue
            value = metrics[metric]
            if not (value >= bound if side == "min" else value <= bound):
                reasons.append(f"task {metric} {value:.4g} vs the baseline {'<' if side == 'min' else '>'} "
                               f"drift.task.{name} {bound:g}")
    elif settings.task:
        notes.append("gate.drift.task is set but the model declares no task; not checked")
    return DriftVerdict(dict(baseline), len(same), outputs, metrics, thresholds, tuple(reasons), tuple(notes))


def latency_drift(p50_ms: float, input_shapes: Mapping[str, Sequence[int]], label: str,
                  baseline: Mapping[str, Any], baseline_verdict: Mapping[str, Any] | None,
                  settings: DriftGate, *, series: str = "end_to_end", noise_pct: float = 0.0,
                  clock: str | None = None) -> dict[str, Any]:
    """The gated shape's p50 (of its gated ``series``, whose blocks spread ``noise_pct``) against the drift
    baseline's benchmark of the same shape, input shapes, series and ``clock`` (None: any; the caller passes only a
    baseline benchmarked on the same GPU model): {baseline, p50_ms, baseline_p50_ms, change_pct, threshold, status,
    reasons, notes}.
    A threshold below the measured noise (the larger spread of the two) is judged as ``gates.noise`` says: status
    ``noisy`` when the change is within that noise of it."""
    out: dict[str, Any] = {"baseline": dict(baseline), "shape": label, "p50_ms": p50_ms, "baseline_p50_ms": None,
                           "change_pct": None, "threshold": settings.max_latency_regression_pct, "reasons": [],
                           "notes": []}
    shapes = (baseline_verdict or {}).get("shapes") or []
    match = next((s for s in shapes if s.get("label") == label), None)
    noisy = None
    if baseline_verdict is None:
        out["notes"].append("the baseline was not benchmarked on this GPU model: latency not compared")
    elif match is None:
        out["notes"].append(f"the baseline has no {label!r} shape: latency not compared")
    elif {k: list(v) for k, v in (match.get("input_shapes") or {}).items()} != \
            {k: list(v) for k, v in input_shapes.items()}:
        out["notes"].append(f"the baseline timed {label!r} at other input shapes: latency not compared")
    elif shape_gated_series(match) != series:
        out["notes"].append(f"the baseline gated its {shape_gated_series(match).replace('_', '-')} series, this run "
                            f"its {series.replace('_', '-')} series: latency not compared")
    elif clock is not None and match.get("clock") not in (None, clock):
        out["notes"].append(f"the baseline was timed by {match.get('clock')}, this run by {clock}: latency not "
                            "compared")
    else:
        stats = match.get(series) or {}
        base_p50 = float(stats.get("p50_ms") or 0.0)
        if base_p50 > 0:
            pct = (p50_ms - base_p50) / base_p50 * 100.0
            out.update(baseline_p50_ms=base_p50, change_pct=pct)
            limit = settings.max_latency_regression_pct
            base_spread = float(stats.get("spread_pct") or 0.0)
            judged = None if limit is None else threshold_noise(
                label, "drift.max_latency_regression_pct", pct, limit, max(noise_pct, base_spread),
                f"this run's blocks spread {noise_pct:.1f}%, the drift baseline's {base_spread:.1f}%")
            if judged is not None:
                (out["notes"] if judged[0] == "note" else out.setdefault("noisy", [])).append(judged[1])
                noisy = judged[0] == "noisy"
            if limit is not None and pct > limit and not noisy:
                out["reasons"].append(f"{label}: p50 {p50_ms:.4g} ms is {pct:.1f}% slower than the drift baseline "
                                      f"{baseline.get('address')} ({base_p50:.4g} ms) > drift."
                                      f"max_latency_regression_pct {limit:g}")
    out["status"] = "failed" if out["reasons"] else "noisy" if noisy else "passed"
    return out
