"""Gate verdicts: plain frozen dataclasses with a JSON form that round-trips.

JSON has no NaN/Inf, and an engine that produced NaN is exactly what a verdict must be able to say, so
non-finite floats are written as the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` and read back.

Shapes::

    ParityVerdict  {kind: "parity", status, precision, reasons[], cases[]}
      case         {label: "min"|"opt"|"max"|"dataset"|…, input_shapes{name: [dims]}, samples, status,
                    reasons[], tensor_gated, outputs[], task{}|null}
        task       {kind, output, status, metrics{name: value}, thresholds{min_/max_<metric>: bound}, reasons[],
                    notes[]}
        output     {name, status, elements, max_abs_error, mean_abs_error, rel_l2, rel_l2_floor, cosine,
                    cosine_gated, violations, violation_fraction, nan_count, inf_count, top1_agreement,
                    topk, topk_agreement, gated_topk, gated_topk_agreement, worst[], tolerance{}, reasons[]}
          worst    {index: [sample, i, j, …], engine, reference, abs_error, tolerance_ratio}
    BenchmarkVerdict {kind: "benchmark", status: "passed"|"failed"|"noisy", reasons[], noisy[], notes[],
                      thresholds{}, baseline{}|null, shapes[]}
      shape      {label, input_shapes{}, batch, clock, gated_series, device_memory_bytes, compute{stats},
                  end_to_end{stats}|null, compute_samples_ms[], end_to_end_samples_ms[], regression_pct|null,
                  conditions[{before, after}: {sm_clock_mhz, temperature_c, clock_event_reasons}], extra{}}
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, overload

from orchestrator.contracts.runtime import DEVICE_CLOCKS
from orchestrator.gates.conditions import BlockConditions
from orchestrator.gates.stats import LatencyStats
from orchestrator.gates.tolerances import ResolvedTolerance

Status = Literal["passed", "failed"]
# "noisy": no verdict, the noise decides it: a device-timed series whose blocks spread past max_spread_pct, blocks
# that disagree about a threshold past it, or a regression threshold inside the measured noise (gates.run)
BenchmarkStatus = Literal["passed", "failed", "noisy"]


def encode_float(value: float | None) -> float | str | None:
    if value is None:
        return None
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


@overload
def decode_float(value: float | str) -> float: ...
@overload
def decode_float(value: None) -> None: ...
@overload
def decode_float(value: float | str | None) -> float | None: ...


def decode_float(value: float | str | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, str):
        return float({"NaN": "nan", "Infinity": "inf", "-Infinity": "-inf"}.get(value, value))
    return float(value)


@dataclass(frozen=True)
class WorstElement:
    index: tuple[int, ...]  # (sample, *index in the output)
    engine: float
    reference: float
    abs_error: float
    tolerance_ratio: float  # |a-b| / (atol + rtol*|b|): > 1 violates

    def to_json(self) -> dict:
        return {"index": list(self.index), "engine": encode_float(self.engine),
                "reference": encode_float(self.reference), "abs_error": encode_float(self.abs_error),
                "tolerance_ratio": encode_float(self.tolerance_ratio)}

    @classmethod
    def from_json(cls, d: dict) -> WorstElement:
        return cls(tuple(d["index"]), decode_float(d["engine"]), decode_float(d["reference"]),
                   decode_float(d["abs_error"]), decode_float(d["tolerance_ratio"]))


_OUTPUT_FLOATS = ("max_abs_error", "mean_abs_error", "rel_l2", "rel_l2_floor", "cosine", "violation_fraction",
                  "top1_agreement", "topk_agreement", "gated_topk_agreement")


@dataclass(frozen=True)
class OutputVerdict:
    name: str
    status: Status
    elements: int
    max_abs_error: float
    mean_abs_error: float
    rel_l2: float
    rel_l2_floor: float
    cosine: float
    cosine_gated: bool  # False: both norms under the floor, cosine is noise and not checked
    violations: int
    violation_fraction: float
    nan_count: int
    inf_count: int
    top1_agreement: float | None
    topk: int | None
    topk_agreement: float | None
    gated_topk: int | None
    gated_topk_agreement: float | None
    worst: tuple[WorstElement, ...]
    tolerance: ResolvedTolerance
    reasons: tuple[str, ...] = ()

    def to_json(self) -> dict:
        data = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if name in _OUTPUT_FLOATS:
                value = encode_float(value)
            elif name == "worst":
                value = [w.to_json() for w in value]
            elif name == "tolerance":
                value = {k: encode_float(v) if isinstance(v, float) else v for k, v in value.to_json().items()}
            elif name == "reasons":
                value = list(value)
            data[name] = value
        return data

    @classmethod
    def from_json(cls, d: dict) -> OutputVerdict:
        kwargs = dict(d)
        for name in _OUTPUT_FLOATS:
            kwargs[name] = decode_float(d.get(name))
        kwargs["worst"] = tuple(WorstElement.from_json(w) for w in d.get("worst", ()))
        tol = {k: decode_float(v) if isinstance(v, str) and k not in ("source",) else v
               for k, v in d["tolerance"].items()}
        kwargs["tolerance"] = ResolvedTolerance.from_json(tol)
        kwargs["reasons"] = tuple(d.get("reasons", ()))
        return cls(**{k: kwargs[k] for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class TaskVerdict:
    """The model's task metric on one case: the post-processed engine outputs against the reference's."""

    kind: str
    output: str | None
    metrics: dict[str, float]
    thresholds: dict[str, float]
    reasons: tuple[str, ...] = ()  # thresholds violated: metric, value, bound
    notes: tuple[str, ...] = ()  # thresholds not checked (a labels metric without labels)

    @property
    def status(self) -> Status:
        return "failed" if self.reasons else "passed"

    def to_json(self) -> dict:
        return {"kind": self.kind, "output": self.output, "status": self.status,
                "metrics": {k: encode_float(v) for k, v in self.metrics.items()}, "thresholds": dict(self.thresholds),
                "reasons": list(self.reasons), "notes": list(self.notes)}

    @classmethod
    def from_json(cls, d: dict) -> TaskVerdict:
        return cls(d["kind"], d.get("output"), {k: decode_float(v) for k, v in d["metrics"].items()},
                   dict(d.get("thresholds", {})), tuple(d.get("reasons", ())), tuple(d.get("notes", ())))


@dataclass(frozen=True)
class CaseVerdict:
    """One input case (min / opt / max shapes, or the dataset) and every output in it."""

    label: str
    input_shapes: dict[str, tuple[int, ...]]
    samples: int
    outputs: tuple[OutputVerdict, ...]
    reasons: tuple[str, ...] = ()  # case-level problems (the engine failed to run, an output is missing)
    task: TaskVerdict | None = None
    # False (``gate.parity.tensor: false``): the outputs' tolerance failures are reported, the task metric judges
    tensor_gated: bool = True

    @property
    def status(self) -> Status:
        tensors_failed = self.tensor_gated and any(o.status == "failed" for o in self.outputs)
        failed = self.reasons or tensors_failed or (self.task is not None and self.task.status == "failed")
        return "failed" if failed else "passed"

    def to_json(self) -> dict:
        return {"label": self.label, "input_shapes": {k: list(v) for k, v in self.input_shapes.items()},
                "samples": self.samples, "status": self.status, "reasons": list(self.reasons),
                "tensor_gated": self.tensor_gated, "outputs": [o.to_json() for o in self.outputs],
                "task": self.task.to_json() if self.task is not None else None}

    @classmethod
    def from_json(cls, d: dict) -> CaseVerdict:
        task = d.get("task")
        return cls(d["label"], {k: tuple(v) for k, v in d["input_shapes"].items()}, d["samples"],
                   tuple(OutputVerdict.from_json(o) for o in d["outputs"]), tuple(d.get("reasons", ())),
                   TaskVerdict.from_json(task) if task else None, bool(d.get("tensor_gated", True)))


@dataclass(frozen=True)
class ParityVerdict:
    precision: str
    cases: tuple[CaseVerdict, ...]

    @property
    def status(self) -> Status:
        return "failed" if (not self.cases or any(c.status == "failed" for c in self.cases)) else "passed"

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def reasons(self) -> tuple[str, ...]:
        """Every failure, prefixed with its case and output: ``opt/logits: cosine similarity …``."""
        out: list[str] = [] if self.cases else ["no input cases were run"]
        for case in self.cases:
            out.extend(f"{case.label}: {r}" for r in case.reasons)
            if case.tensor_gated:
                for o in case.outputs:
                    out.extend(f"{case.label}/{o.name}: {r}" for r in o.reasons)
            if case.task is not None:
                out.extend(f"{case.label}/task {case.task.kind}: {r}" for r in case.task.reasons)
        return tuple(out)

    def worst_output(self) -> OutputVerdict | None:
        """The output with the largest share of its tolerance used (for one-line summaries)."""
        outputs = [o for c in self.cases for o in c.outputs]
        if not outputs:
            return None
        return max(outputs, key=lambda o: (o.status == "failed",
                                           o.worst[0].tolerance_ratio if o.worst else 0.0))

    def to_json(self) -> dict:
        return {"kind": "parity", "status": self.status, "precision": self.precision,
                "reasons": list(self.reasons), "cases": [c.to_json() for c in self.cases]}

    @classmethod
    def from_json(cls, d: dict) -> ParityVerdict:
        return cls(d["precision"], tuple(CaseVerdict.from_json(c) for c in d["cases"]))


GatedSeries = Literal["compute", "end_to_end"]


def gated_series_of(clock: str, has_end_to_end: bool) -> GatedSeries:
    """The series the thresholds judge: the device series where the runtime timed the device work on its own (CUDA
    events, a CUDA-graph replay: what trtexec calls GPU compute time), else end-to-end where it was measured (the
    host clock around ``session.run`` on a CPU), else compute. End-to-end stays a figure of its own beside it."""
    if clock in DEVICE_CLOCKS:
        return "compute"
    return "end_to_end" if has_end_to_end else "compute"


def shape_gated_series(shape: dict) -> GatedSeries:
    """The gated series of a shape's JSON; records from before ``gated_series`` was written gated end-to-end where
    they had it."""
    recorded = shape.get("gated_series")
    if recorded in ("compute", "end_to_end"):
        return recorded  # type: ignore[return-value]
    return "end_to_end" if shape.get("end_to_end") else "compute"


@dataclass(frozen=True)
class ShapeBenchmark:
    """One benchmarked shape (``opt``, and ``min``/``max`` when configured)."""

    label: str
    input_shapes: dict[str, tuple[int, ...]]
    batch: int
    clock: str
    compute: LatencyStats
    end_to_end: LatencyStats | None
    compute_samples_ms: tuple[float, ...] = ()
    end_to_end_samples_ms: tuple[float, ...] = ()
    device_memory_bytes: int | None = None
    regression_pct: float | None = None  # p50 change vs the baseline's same shape, + is slower
    extra: dict = field(default_factory=dict)
    gated_series: GatedSeries | Literal[""] = ""  # "": decided as records before it was written (end-to-end first)
    conditions: tuple[BlockConditions, ...] = ()  # the GPU around each block (NVML); empty without NVML or a GPU

    @property
    def gated(self) -> LatencyStats:
        """The series thresholds apply to (``gated_series``)."""
        if self.gated_series == "compute" or (not self.gated_series and self.end_to_end is None):
            return self.compute
        return self.end_to_end or self.compute

    @property
    def gated_name(self) -> GatedSeries:
        return self.gated_series or ("end_to_end" if self.end_to_end is not None else "compute")

    def to_json(self) -> dict:
        return {
            "label": self.label,
            "input_shapes": {k: list(v) for k, v in self.input_shapes.items()},
            "batch": self.batch,
            "clock": self.clock,
            "gated_series": self.gated_name,
            "device_memory_bytes": self.device_memory_bytes,
            "compute": self.compute.to_json(),
            "end_to_end": self.end_to_end.to_json() if self.end_to_end else None,
            "compute_samples_ms": [round(x, 6) for x in self.compute_samples_ms],
            "end_to_end_samples_ms": [round(x, 6) for x in self.end_to_end_samples_ms],
            "regression_pct": self.regression_pct,
            "conditions": [c.to_json() for c in self.conditions],
            "extra": self.extra,
        }

    @classmethod
    def from_json(cls, d: dict) -> ShapeBenchmark:
        return cls(
            label=d["label"],
            input_shapes={k: tuple(v) for k, v in d["input_shapes"].items()},
            batch=d["batch"],
            clock=d["clock"],
            compute=LatencyStats.from_json(d["compute"]),
            end_to_end=LatencyStats.from_json(d["end_to_end"]) if d.get("end_to_end") else None,
            compute_samples_ms=tuple(d.get("compute_samples_ms", ())),
            end_to_end_samples_ms=tuple(d.get("end_to_end_samples_ms", ())),
            device_memory_bytes=d.get("device_memory_bytes"),
            regression_pct=d.get("regression_pct"),
            extra=d.get("extra", {}),
            gated_series=shape_gated_series(d),
            conditions=tuple(BlockConditions.from_json(c) for c in d.get("conditions") or ()),
        )


@dataclass(frozen=True)
class BenchmarkVerdict:
    shapes: tuple[ShapeBenchmark, ...]
    reasons: tuple[str, ...] = ()
    thresholds: dict = field(default_factory=dict)  # max_p95_ms, min_throughput, max_regression_pct
    baseline: dict | None = None  # {"p50_ms": {label: ms}, "source": …} of the baseline used, if any
    notes: tuple[str, ...] = ()  # not failures: e.g. "baseline has no 'max' shape; regression not checked"
    noisy: tuple[str, ...] = ()  # thresholds the blocks disagreed on past the spread limit

    @property
    def status(self) -> BenchmarkStatus:
        """failed (a threshold fails in every way of reading the blocks, or the engine failed) > noisy > passed."""
        if self.reasons or not self.shapes:
            return "failed"
        return "noisy" if self.noisy else "passed"

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def shape(self, label: str) -> ShapeBenchmark | None:
        return next((s for s in self.shapes if s.label == label), None)

    def to_json(self) -> dict:
        return {"kind": "benchmark", "status": self.status, "reasons": list(self.reasons),
                "noisy": list(self.noisy), "notes": list(self.notes), "thresholds": self.thresholds,
                "baseline": self.baseline,
                "shapes": [s.to_json() for s in self.shapes]}

    @classmethod
    def from_json(cls, d: dict) -> BenchmarkVerdict:
        return cls(tuple(ShapeBenchmark.from_json(s) for s in d["shapes"]), tuple(d.get("reasons", ())),
                   d.get("thresholds", {}), d.get("baseline"), tuple(d.get("notes", ())),
                   tuple(d.get("noisy", ())))
