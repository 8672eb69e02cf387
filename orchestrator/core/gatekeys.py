"""Gate keys (pure): what a gate verdict depends on, so a changed setting re-gates and nothing stale is served.

A gate node's key is sha256 over its build key, the gate's settings after resolution (tolerances as the default,
model and output layers resolve them; data, samples, seed and shapes; warm-up, iterations, blocks and
thresholds; the baseline rule) and the runtime the cell declares. What only the gate runner knows (the runtime
and reference versions installed, the GPU model a benchmark ran on, the baseline record) is checked when a
cached verdict would be reused (``orchestrator.app.gating``): a verdict from another runtime version or GPU model
is never reused. A cell's gate key covers its gates and its deployment policy (``gpu_match``; for a ``cpu_match: isa``
CPU target also the gating CPU's instruction-set features): the published record holds it, and ``plan`` shows
``~ re-gate`` when it moved while the build key did not.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from orchestrator.core.keys import MISSING, change_line, changed_values, digest_of
from orchestrator.core.model import BenchmarkGate, DataSource, DriftGate, Model, PrecisionSpec, Target
from orchestrator.core.tolerances import resolve_tolerance

GATE_KEY_SCHEMA_VERSION = 1

# Benchmark noise defaults, for a manifest's `gate.benchmark` without `blocks`, `block_gap_s` or `max_spread_pct`
# (docs/gates.md, "Benchmark noise").
DEFAULT_BLOCKS = 5
DEFAULT_BLOCK_GAP_S = 0.2
# Past this spread of the blocks' p50 (relative range, %) a verdict the blocks disagree on is "noisy". The
# harness's run-to-run spread on a quiet lent H200 was 0.2-0.94 % (bench/NOTES-gpu.md): 10 % is 10x that, and
# well under the 76 % swing seen between two runs.
DEFAULT_MAX_SPREAD_PCT = 10.0
MIN_BLOCK_ITERATIONS = 5  # a block's p50/p95 need a few samples


@dataclass(frozen=True)
class BlockSchedule:
    """How a benchmark series is split in time: ``blocks`` blocks, ``gap_s`` seconds between rounds."""

    blocks: int = DEFAULT_BLOCKS
    gap_s: float = DEFAULT_BLOCK_GAP_S
    max_spread_pct: float = DEFAULT_MAX_SPREAD_PCT

    @classmethod
    def of(cls, settings: BenchmarkGate) -> BlockSchedule:
        """The manifest's values where it has them (see the module constants), else the defaults."""
        blocks, gap, spread = settings.blocks, settings.block_gap_s, settings.max_spread_pct
        return cls(blocks=DEFAULT_BLOCKS if blocks is None else max(1, int(blocks)),
                   gap_s=DEFAULT_BLOCK_GAP_S if gap is None else max(0.0, float(gap)),
                   max_spread_pct=DEFAULT_MAX_SPREAD_PCT if spread is None else float(spread))

    def iterations_per_block(self, iterations: int) -> int:
        """``iterations`` is the series' total; split over the blocks, at least MIN_BLOCK_ITERATIONS each."""
        if self.blocks <= 1:
            return max(1, iterations)
        return max(MIN_BLOCK_ITERATIONS, math.ceil(max(1, iterations) / self.blocks))

    def budget_per_block(self, time_budget_s: float | None) -> float | None:
        return None if time_budget_s is None else time_budget_s / max(1, self.blocks)




def data_inputs(data: DataSource, digest: str | None, labels_digest: str | None = None) -> dict[str, Any]:
    """A data source as key inputs: a folder/file by its content digest (never its path), random data by seed;
    parity labels by their content digest too (None: no labels)."""
    out = {"digest": digest if data.path else None, "random": data.path is None, "samples": data.samples,
           "seed": data.seed if data.path is None else None,
           "preprocess": asdict(data.preprocess) if data.preprocess is not None and data.path else None}
    if data.labels is not None and data.path:
        out["labels"] = labels_digest  # only when given: the keys of manifests without labels do not move
    return out


def _model_inputs(model: Model) -> dict[str, Any]:
    """What of the model declaration shapes gate data: declared shapes/dtypes and dim constraints."""
    return {"inputs": {i.name: {"shape": list(i.shape), "dtype": i.dtype} for i in model.inputs},
            "constraints": {c.dim: {"multiple_of": c.multiple_of, "min": c.min, "max": c.max}
                            for c in model.constraints}}


def parity_inputs(model: Model, spec: PrecisionSpec, data_digest: str | None,
                  labels_digest: str | None = None) -> dict[str, Any]:
    parity = model.gate.parity
    outputs = sorted(set(parity.per_output) | set(model.classifier_outputs))
    tolerances = {"engine": resolve_tolerance(parity, spec.name, "").to_json(),
                  "engine_tf32": resolve_tolerance(parity, spec.name, "", tf32=True).to_json(),
                  "per_output": {o: resolve_tolerance(parity, spec.name, o).to_json() for o in outputs}}
    return {"data": data_inputs(parity.data, data_digest, labels_digest), "tolerances": tolerances,
            "classifier_outputs": dict(sorted(model.classifier_outputs.items())), "model": _model_inputs(model),
            "task": task_inputs(model, spec), "drift": drift_inputs(model.gate.drift, "parity")}


# the file a parity gate records its engine's outputs in (``gates.drift``), published with the engine
DRIFT_OUTPUTS_FILE = "outputs.npz"
DRIFT_BASELINE_RULE = ("the newest published engine of the same model version, precision, profile set, device and "
                       "compute capabilities and runtime, built by an earlier builder version")


def drift_inputs(drift: DriftGate, kind: str) -> dict[str, Any] | None:
    """What a gate node judges drift with (None: drift off). Parity: output and task thresholds; benchmark: the
    latency threshold. Which record is the baseline is a gate-runner fact checked when a verdict is reused."""
    if not drift.enabled:
        return None
    if kind == "parity":
        return {"min_cosine": drift.min_cosine, "max_rel_l2": drift.max_rel_l2, "max_abs_error": drift.max_abs_error,
                "task": dict(sorted(drift.task.items())), "baseline": DRIFT_BASELINE_RULE}
    return {"max_latency_regression_pct": drift.max_latency_regression_pct, "baseline": DRIFT_BASELINE_RULE}


def task_inputs(model: Model, spec: PrecisionSpec) -> dict[str, Any] | None:
    """The task metric a parity verdict judges with: its kind, output and decode options, the thresholds resolved
    for the precision, and whether tensor tolerances gate (None: no task and tensors gate, as before tasks)."""
    parity = model.gate.parity
    by_precision = dict(sorted(parity.task_by_precision.get(spec.name, {}).items()))
    if model.task is None and not parity.task and not by_precision and parity.tensor:
        return None
    task = model.task
    # both layers as written (not only the merged result): a model threshold the precision overrides still
    # re-gates, the simpler rule that key completeness can state for every cell
    return {"kind": task.kind if task else None, "output": task.output if task else None,
            "options": dict(sorted(task.options.items())) if task else {},
            "thresholds": dict(sorted(parity.task.items())), "thresholds_for_precision": by_precision,
            "tensor": parity.tensor}


def benchmark_inputs(model: Model, settings: BenchmarkGate) -> dict[str, Any]:
    schedule = BlockSchedule.of(settings)
    return {"warmup": settings.warmup, "iterations": settings.iterations, "time_budget_s": settings.time_budget_s,
            "shapes": list(settings.shapes), "blocks": schedule.blocks, "block_gap_s": schedule.gap_s,
            "max_spread_pct": schedule.max_spread_pct, "max_p95_ms": settings.max_p95_ms,
            "min_throughput": settings.min_throughput, "max_regression_pct": settings.max_regression_pct,
            "max_p99_p50_ratio": settings.max_p99_p50_ratio, "max_cv_pct": settings.max_cv_pct,
            "max_device_memory_mib": settings.max_device_memory_mib, "soak_s": settings.soak_s,
            "max_memory_growth_mib": settings.max_memory_growth_mib,
            "baseline": ("the last published verdict at this address on the same GPU model"
                         if settings.max_regression_pct is not None else None),
            "model": _model_inputs(model), "drift": drift_inputs(model.gate.drift, "benchmark")}


def runtime_part(target: Target) -> dict[str, Any]:
    return {"builder": target.builder, "version": target.builder_version}


def deploy_part(target: Target, cpu_isa: list[str] | None = None) -> dict[str, Any]:
    """The deployment policy a cell's records carry. A ``cpu_match: isa`` CPU target's also names the instruction-set
    features of the CPU that gates it (``cpu_isa``: the resolving runner's, None when unknown), so a verdict given
    on another ISA is another gate key: ``~ re-gate`` there, and its own record once published. The features are a
    map (feature -> true), so a plan names each one that differs (``deploy.cpu_isa.avx512_vnni: true -> (absent)``).
    Other targets' part is as before (their gate keys do not move)."""
    out: dict[str, Any] = {"gpu_match": target.gpu_match}
    if target.device == "cpu" and target.cpu_match == "isa":
        out.update(cpu_match="isa", cpu_isa=None if cpu_isa is None else {f: True for f in cpu_isa})
    return out


def gate_inputs(build_key: str, model: Model, spec: PrecisionSpec, target: Target,
                parity_data_digest: str | None, cpu_isa: list[str] | None = None) -> dict[str, Any]:
    """A cell's gate key inputs: the build key, each enabled gate's resolved settings (None: disabled), the runtime
    the cell declares, and the deployment policy its record carries."""
    gate = model.gate
    return {
        "schema": GATE_KEY_SCHEMA_VERSION,
        "build_key": build_key,
        "runtime": runtime_part(target),
        "parity": parity_inputs(model, spec, parity_data_digest) if gate.parity.enabled else None,
        "benchmark": benchmark_inputs(model, gate.benchmark) if gate.benchmark.enabled else None,
        "deploy": deploy_part(target, cpu_isa),
    }


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def settings_digest(inputs: dict[str, Any], part_digest: Callable[[Any], str] = digest_of) -> str:
    """Everything of a cell's gate inputs but its build key, as one digest over each part's digest (many cells share
    the parts; ``part_digest``: a caller's cached ``digest_of``)."""
    return digest_of({k: (v if k == "schema" else part_digest(v)) for k, v in inputs.items() if k != "build_key"})


def gate_key(inputs: dict[str, Any], settings: str | None = None) -> str:
    """A cell's gate key: its build key with the digest of everything else its verdicts depend on
    (``settings``: that digest when the caller has it already)."""
    return _sha(f"gate/{inputs['schema']}\0{inputs['build_key']}\0{settings or settings_digest(inputs)}")


def gate_node_key(inputs: dict[str, Any], kind: str, runtime: str | None = None, settings: str | None = None) -> str:
    """The key of one gate node (``parity`` / ``benchmark``) of a cell whose gate inputs are ``inputs``: its build
    key, kind, and the digests of the runtime and that gate's settings (``runtime``/``settings``: those digests
    when the caller has them already)."""
    return _sha(f"gate-node/{inputs['schema']}\0{inputs['build_key']}\0{kind}\0"
                f"{runtime or digest_of(inputs['runtime'])}\0{settings or digest_of(inputs[kind])}")


_TOLERANCES = "parity.tolerances."


def _engine_field(inputs: dict[str, Any], field: str) -> Any:
    """A field of the engine's resolved parity tolerance in gate inputs (MISSING: parity off, or no such field)."""
    tolerances = ((inputs.get("parity") or {}).get("tolerances") or {}).get("engine") or {}
    return tolerances.get(field, MISSING)


def gate_changes(old: dict[str, Any], new: dict[str, Any], precision: str) -> list[str]:
    """One line per changed gate setting, named as the manifest field (``gate.parity.tolerances.fp16.atol: 0.01 ->
    0.05``), between two cells' gate inputs of ``precision``. A tolerance is resolved three times (the engine's,
    fp32 on a TF32 runtime, each named output) and records where it came from (``source``): one manifest change
    moves them all, so the copies that moved with the engine's tolerance and the ``source`` trail are left out."""
    changes = changed_values(old, new)
    moved = {path: (before, after) for path, before, after in changes}
    lines: list[str] = []
    sources: list[str] = []
    for path, before, after in changes:
        if not path.startswith(_TOLERANCES):
            lines.append(change_line(f"gate.{path}", before, after))
            continue
        layer, _, rest = path[len(_TOLERANCES):].partition(".")
        if not rest:
            continue  # an empty map that came or went: its entries are named
        if rest.rpartition(".")[2] == "source":  # where a value came from: named only when no value moved
            sources.append(change_line(f"gate.{path}", before, after))
            continue
        if layer == "engine":
            lines.append(change_line(f"gate.parity.tolerances.{precision}.{rest}", before, after))
        elif layer == "engine_tf32":
            if _TOLERANCES + "engine." + rest not in moved:
                lines.append(change_line(f"gate.parity.tolerances.{precision}.{rest} (TF32 runtimes)", before, after))
        elif layer == "per_output":
            # an output without an override of its own is judged with the engine's tolerance: compare with that
            output, _, field = rest.rpartition(".")
            before = _engine_field(old, field) if before is MISSING else before
            after = _engine_field(new, field) if after is MISSING else after
            if before != after and moved.get(_TOLERANCES + "engine." + field) != (before, after):
                lines.append(change_line(f"gate.parity.per_output.{output}.{field}", before, after))
        else:
            lines.append(change_line(f"gate.{path}", before, after))
    return lines or sources
