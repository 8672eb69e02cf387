"""The gates' edge: drive injected sessions, hand the arrays and timings to the pure metrics.

Sessions are the ``orchestrator.contracts.runtime.Session`` protocol; the caller loads them (engine: the target's
runtime plugin; reference: onnxruntime CPU fp32 on the original ONNX) and closes them.

* A reference session that fails to run is a :class:`~orchestrator.errors.GateError` (the gate cannot judge).
* An engine session that fails on an input inside its profile is a *failed case* — the engine is broken there.

The benchmark times each shape in several **blocks** spread out in time (round-robin over the shapes, a pause
between rounds, each block with its own warm-up), gates on the medians over the blocks
(``stats.block_latency_stats``) and reports the blocks' spread, with the GPU's SM clock and temperature around
each block where NVML can read them (``gates.conditions``). The verdict is ``noisy`` — neither passed nor failed,
because the noise decides it — when (``gates.noise``): a device-timed series (CUDA events or a CUDA-graph replay)
spreads past ``max_spread_pct`` (such a series repeats within ~1 % on a quiet GPU: a wider spread says the timing
failed, whatever the thresholds); or a series' spread is past it and more blocks disagree about a threshold than
``allowed_dissent`` tolerates (one in five: one disturbed block of five is outvoted by the medians; host-clock
series on shared CPU runners); or a regression threshold lies below the measured noise and the change is within
that noise of it. See docs/gates.md, "Benchmark noise".
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from orchestrator.contracts.runtime import DEVICE_CLOCKS, Session, Timing
from orchestrator.contracts.task import TaskMetric
from orchestrator.core.gatekeys import (  # noqa: F401 (re-exported: the gates' defaults)
    DEFAULT_BLOCK_GAP_S,
    DEFAULT_BLOCKS,
    DEFAULT_MAX_SPREAD_PCT,
    MIN_BLOCK_ITERATIONS,
    BlockSchedule,
)
from orchestrator.core.model import BenchmarkGate, Model
from orchestrator.errors import GateError
from orchestrator.gates.conditions import BlockConditions, Probe
from orchestrator.gates.inputs import InputCase
from orchestrator.gates.metrics import compare_output
from orchestrator.gates.noise import Baseline, allowed_dissent, baselines, regression_noise, spread_noisy
from orchestrator.gates.stats import LatencyStats, block_latency_stats, latency_stats
from orchestrator.gates.task import check_task_settings, evaluate_task
from orchestrator.gates.tolerances import resolve_tolerance
from orchestrator.gates.verdict import (
    BenchmarkVerdict,
    CaseVerdict,
    OutputVerdict,
    ParityVerdict,
    ShapeBenchmark,
    gated_series_of,
)

# (case label, its samples, the engine's outputs of each): how a caller keeps a case's outputs (drift records)
OutputSink = Callable[[str, Sequence[Mapping[str, np.ndarray]], Sequence[Mapping[str, np.ndarray]]], None]


def run_parity(model: Model, engine_session: Session, reference_session: Session, inputs: Sequence[InputCase],
               precision: str, task: TaskMetric | None = None, sink: OutputSink | None = None) -> ParityVerdict:
    """Run every case through both sessions and judge each reference output with its resolved tolerance, and the
    model's task metric (``task``: its plugin, given when the model declares one) with its thresholds. ``sink``
    receives each case's samples and engine outputs when the engine ran them all."""
    thresholds = model.gate.parity.task_thresholds(precision)
    check_task_settings(model, task, thresholds)
    cases = [_parity_case(model, engine_session, reference_session, case, precision, task, thresholds, sink)
             for case in inputs]
    return ParityVerdict(precision=precision, cases=tuple(cases))


def _parity_case(model: Model, engine: Session, reference: Session, case: InputCase, precision: str,
                 task: TaskMetric | None = None, thresholds: Mapping[str, float] | None = None,
                 sink: OutputSink | None = None) -> CaseVerdict:
    ref_outputs: list[dict[str, np.ndarray]] = []
    eng_outputs: list[dict[str, np.ndarray]] = []
    reasons: list[str] = []
    for n, sample in enumerate(case.samples):
        try:
            ref_outputs.append(dict(reference.run(sample)))
        except Exception as e:  # any runtime's failure: the reference cannot run these inputs
            raise GateError(f"{model.name}: reference run failed on case {case.label} sample {n}: {e}",
                            hint="the inputs do not fit the original ONNX model; check profiles/dataset") from e
        try:
            eng_outputs.append(dict(engine.run(sample)))
        except Exception as e:  # the engine is judged: failing inside its profile fails the gate
            reasons.append(f"engine run failed on sample {n}: {type(e).__name__}: {e}")
            return CaseVerdict(case.label, case.shapes, len(case.samples), (), tuple(reasons))
    if sink is not None:
        sink(case.label, case.samples, eng_outputs)
    outputs: list[OutputVerdict] = []
    for name in reference.output_names:
        missing = [i for i, out in enumerate(eng_outputs) if name not in out]
        if missing:
            reasons.append(f"engine did not return output {name!r}")
            continue
        tol = resolve_tolerance(model.gate.parity, precision, name, tf32=bool(getattr(engine, "tf32", False)))
        pairs = ((eng[name], ref[name]) for eng, ref in zip(eng_outputs, ref_outputs))
        outputs.append(compare_output(name, pairs, tol, classifier_k=model.classifier_outputs.get(name)))
    task_verdict = None
    if task is not None and model.task is not None and not reasons:
        task_verdict = evaluate_task(model, task, ref_outputs, eng_outputs, thresholds or {}, case.label,
                                     labels=case.labels)
    return CaseVerdict(case.label, case.shapes, len(case.samples), tuple(outputs), tuple(reasons), task_verdict,
                       tensor_gated=model.gate.parity.tensor)


def _batch_of(inputs: Mapping[str, np.ndarray]) -> int:
    first = next(iter(inputs.values()), None)
    return int(first.shape[0]) if first is not None and first.ndim else 1


def _time_blocks(session: Session, inputs_by_shape: Mapping[str, Mapping[str, np.ndarray]],
                 settings: BenchmarkGate, schedule: BlockSchedule, sleep: Callable[[float], None],
                 probe: Probe | None) -> tuple[dict[str, list[Timing]], dict[str, list[BlockConditions]],
                                               dict[str, str]]:
    """Round-robin over the shapes, one block each per round, a pause between rounds: a slow spell of the
    machine lands in one block of every shape instead of in the whole series of one. ``probe`` reads the GPU just
    before and just after each block (outside its timed loops)."""
    timings: dict[str, list[Timing]] = {label: [] for label in inputs_by_shape}
    conditions: dict[str, list[BlockConditions]] = {label: [] for label in inputs_by_shape}
    failures: dict[str, str] = {}
    iterations = schedule.iterations_per_block(settings.iterations)
    budget = schedule.budget_per_block(settings.time_budget_s)
    for block in range(max(1, schedule.blocks)):
        if block and schedule.gap_s > 0:
            sleep(schedule.gap_s)
        for label, feeds in inputs_by_shape.items():
            if label in failures:
                continue
            try:
                before = probe() if probe is not None else None
                timing = session.benchmark(feeds, warmup=settings.warmup, iterations=iterations,
                                           time_budget_s=budget)
                if probe is not None and before is not None:
                    conditions[label].append(BlockConditions(before, probe()))
            except Exception as e:
                failures[label] = f"{label}: engine failed while benchmarking: {type(e).__name__}: {e}"
                continue
            if not timing.compute_ms:
                raise GateError(f"{label}: the runtime returned no timed iterations",
                                hint="raise gate.benchmark.iterations or time_budget_s")
            timings[label].append(timing)
    return timings, conditions, failures


# A threshold check: the stats of one series (all blocks, or one block) -> why it fails, or None.
_Check = tuple[str, str, Callable[[LatencyStats], "str | None"]]  # (shape label, threshold name, check)


def _checks(settings: BenchmarkGate, gated_shape: ShapeBenchmark | None, shapes: Sequence[ShapeBenchmark],
            base: dict[str, Baseline]) -> list[_Check]:
    checks: list[_Check] = []
    if gated_shape is not None:
        label = gated_shape.label
        which = "end-to-end" if gated_shape.gated_name == "end_to_end" else (
            "device" if gated_shape.clock in DEVICE_CLOCKS else "compute")
        limit_p95 = settings.max_p95_ms
        if limit_p95 is not None:
            checks.append((label, "max_p95_ms", lambda st: (
                f"{label}: {which} p95 {st.p95_ms:.3f} ms > max_p95_ms {limit_p95:g} ms"
                if st.p95_ms > limit_p95 else None)))
        ratio = settings.max_p99_p50_ratio
        if ratio is not None:
            checks.append((label, "max_p99_p50_ratio", lambda st: (
                f"{label}: {which} p99/p50 {st.p99_ms / st.p50_ms:.2f} (p99 {st.p99_ms:.3f} ms, p50 "
                f"{st.p50_ms:.3f} ms) > max_p99_p50_ratio {ratio:g}"
                if st.p50_ms > 0 and st.p99_ms / st.p50_ms > ratio else None)))
        cv = settings.max_cv_pct
        if cv is not None:
            checks.append((label, "max_cv_pct", lambda st: (
                f"{label}: {which} latency varies {st.stdev_ms / st.mean_ms * 100:.1f}% (stdev {st.stdev_ms:.3f} ms "
                f"/ mean {st.mean_ms:.3f} ms) > max_cv_pct {cv:g}%"
                if st.mean_ms > 0 and st.stdev_ms / st.mean_ms * 100 > cv else None)))
        limit_tp = settings.min_throughput
        if limit_tp is not None:
            checks.append((label, "min_throughput", lambda st: (
                f"{label}: throughput {st.throughput_per_s:.1f}/s < min_throughput {limit_tp:g}/s "
                f"(batch {st.batch} / mean {st.mean_ms:.3f} ms)" if st.throughput_per_s < limit_tp else None)))
    allowed = settings.max_regression_pct
    if allowed is not None:
        for s in shapes:
            if s.regression_pct is None:
                continue
            base_p50 = base[s.label].p50_ms

            def regression(st: LatencyStats, label: str = s.label, base_p50: float = base_p50) -> str | None:
                pct = (st.p50_ms - base_p50) / base_p50 * 100.0
                return (f"{label}: p50 {st.p50_ms:.3f} ms is {pct:.1f}% slower than the baseline {base_p50:.3f} ms "
                        f"(allowed {allowed:g}%)" if pct > allowed else None)

            checks.append((s.label, "max_regression_pct", regression))
    return checks


def run_benchmark(session: Session, inputs_by_shape: Mapping[str, Mapping[str, np.ndarray]],
                  settings: BenchmarkGate, baseline: BenchmarkVerdict | Mapping | None = None, *,
                  schedule: BlockSchedule | None = None, sleep: Callable[[float], None] = time.sleep,
                  device_probe: Probe | None = None) -> BenchmarkVerdict:
    """Time each shape (``opt``, ``min``, ``max`` as given) in blocks and apply the thresholds to the medians.

    ``inputs_by_shape`` maps a label to one sample; its batch is the leading dim of the first input.
    Thresholds apply to the gated series (``verdict.gated_series_of``: the device series where the runtime timed the
    device work, else end-to-end where measured, else compute): ``max_p95_ms`` and ``min_throughput`` (samples/s)
    to the ``opt`` shape (the first shape if there is no ``opt``), ``max_regression_pct`` to the p50 of every shape
    the baseline also has at the same input shapes and series. ``device_probe`` (``gates.conditions.nvml_probe``)
    records the GPU's clock and temperature around each block. When the verdict is ``noisy``: module docstring.
    """
    if not inputs_by_shape:
        raise GateError("benchmark gate has no shapes to time", hint="set gate.benchmark.shapes")
    schedule = schedule or BlockSchedule.of(settings)
    base = baselines(baseline)
    timings, conditions, failures = _time_blocks(session, inputs_by_shape, settings, schedule, sleep, device_probe)
    shapes: list[ShapeBenchmark] = []
    per_block: dict[str, list[LatencyStats]] = {}  # label -> the gated series of each block
    reasons: list[str] = [failures[label] for label in inputs_by_shape if label in failures]
    notes: list[str] = []
    for label, feeds in inputs_by_shape.items():
        blocks = timings[label]
        if label in failures or not blocks:
            continue
        batch = _batch_of(feeds)
        compute = block_latency_stats([t.compute_ms for t in blocks], batch=batch)
        has_e2e = all(t.end_to_end_ms for t in blocks)
        e2e = block_latency_stats([t.end_to_end_ms for t in blocks], batch=batch) if has_e2e else None
        series = gated_series_of(blocks[0].clock, has_e2e)
        gated = compute if series == "compute" else e2e
        assert gated is not None  # gated_series_of names end_to_end only where it was measured
        per_block[label] = [latency_stats(t.compute_ms if series == "compute" else t.end_to_end_ms, batch=batch)
                            for t in blocks]
        input_shapes = {k: tuple(int(d) for d in np.shape(v)) for k, v in feeds.items()}
        regression = None
        if label in base:
            b = base[label]
            if {k: tuple(v) for k, v in b.input_shapes.items()} != input_shapes:
                notes.append(f"{label}: baseline was timed at other input shapes {b.input_shapes}; "
                             "regression not checked")
            elif b.series != series:
                notes.append(f"{label}: the baseline gated its {b.series.replace('_', '-')} series, this run its "
                             f"{series.replace('_', '-')} series; regression not checked")
            elif b.clock and b.clock != blocks[0].clock:
                # a CUDA-graph replay and eager launches are other measurements of one engine (~30 % apart on a
                # launch-bound engine, bench/NOTES-gpu.md): comparing them would report that as a change
                notes.append(f"{label}: the baseline was timed by {b.clock}, this run by {blocks[0].clock}; "
                             "regression not checked")
            elif b.p50_ms > 0:
                regression = (gated.p50_ms - b.p50_ms) / b.p50_ms * 100.0
        elif base:
            notes.append(f"{label}: baseline has no {label!r} shape; regression not checked")
        memory = [t.device_memory_bytes for t in blocks if t.device_memory_bytes is not None]
        graph = [str(t.extra["cuda_graph"]) for t in blocks if t.extra.get("cuda_graph") not in (None, "replayed")]
        if graph:
            notes.append(f"{label}: CUDA graph {graph[0]}")
        shapes.append(ShapeBenchmark(
            label=label, input_shapes=input_shapes, batch=batch, clock=blocks[0].clock, compute=compute,
            end_to_end=e2e, compute_samples_ms=tuple(x for t in blocks for x in t.compute_ms),
            end_to_end_samples_ms=tuple(x for t in blocks for x in t.end_to_end_ms) if has_e2e else (),
            device_memory_bytes=max(memory) if memory else None, regression_pct=regression,
            extra=dict(blocks[0].extra), gated_series=series, conditions=tuple(conditions[label])))

    gated_shape = next((s for s in shapes if s.label == "opt"), shapes[0] if shapes else None)
    if settings.max_regression_pct is not None and baseline is None:
        notes.append("no baseline engine published for this address on this GPU model; regression not checked")
    noisy: list[str] = []
    for s in shapes:
        why = spread_noisy(s, schedule.max_spread_pct)
        if why:
            noisy.append(why)
    unmeasured = {s.label for s in shapes if any(n.startswith(f"{s.label}: ") for n in noisy)}
    by_label = {s.label: s for s in shapes}
    dissenting: dict[str, int] = {}  # label -> most blocks that disagreed with the medians on one threshold
    for label, name, check in _checks(settings, gated_shape, shapes, base):
        if label in unmeasured:
            continue  # no verdict on a series that is not a measurement
        series_stats = by_label[label].gated
        failing = check(series_stats)
        block_fails = [check(b) is not None for b in per_block[label]]
        dissent = sum(f != (failing is not None) for f in block_fails)
        dissenting[label] = max(dissenting.get(label, 0), dissent)
        if name == "max_regression_pct" and settings.max_regression_pct is not None:
            verdict_of_noise = regression_noise(by_label[label], base[label], settings.max_regression_pct,
                                                "max_regression_pct")
            if verdict_of_noise is not None:
                kind, text = verdict_of_noise
                (noisy if kind == "noisy" else notes).append(text)
                if kind == "noisy":
                    continue
        if series_stats.spread_pct > schedule.max_spread_pct and dissent > allowed_dissent(len(block_fails)):
            noisy.append(f"{label}: {name}: {sum(block_fails)} of {len(block_fails)} blocks fail it, "
                         f"{len(block_fails) - sum(block_fails)} pass; the blocks' p50 spread "
                         f"{series_stats.spread_pct:.1f}% > max_spread_pct {schedule.max_spread_pct:g}% "
                         f"(p50 per block: {', '.join(f'{x:.3f}' for x in series_stats.block_p50_ms)} ms)")
        elif failing is not None:
            reasons.append(failing)
    for s in shapes:
        if s.gated.spread_pct > schedule.max_spread_pct and s.label not in {n.split(":", 1)[0] for n in noisy}:
            n = s.gated.blocks
            verdict_note = (f"{dissenting[s.label]} of {n} blocks disagree with the verdict, "
                            f"{allowed_dissent(n)} allowed: it stands" if s.label in dissenting
                            else "no threshold applies to it")
            notes.append(f"{s.label}: the blocks' p50 spread {s.gated.spread_pct:.1f}% exceeds max_spread_pct "
                         f"{schedule.max_spread_pct:g}% ({verdict_note})")
        if s.end_to_end is not None and s.gated_name == "compute" and \
                s.end_to_end.spread_pct > schedule.max_spread_pct:
            notes.append(f"{s.label}: end-to-end (with the copies; reported, not gated): its blocks' p50 spread "
                         f"{s.end_to_end.spread_pct:.1f}% exceeds max_spread_pct {schedule.max_spread_pct:g}%")
    thresholds = {"max_p95_ms": settings.max_p95_ms, "min_throughput": settings.min_throughput,
                  "max_p99_p50_ratio": settings.max_p99_p50_ratio, "max_cv_pct": settings.max_cv_pct,
                  "max_regression_pct": settings.max_regression_pct, "gated_shape":
                  gated_shape.label if gated_shape else None,
                  "gated_series": gated_shape.gated_name if gated_shape else "compute",
                  "percentile_method": "linear", "aggregation": "median_of_blocks", "blocks": schedule.blocks,
                  "iterations_per_block": schedule.iterations_per_block(settings.iterations),
                  "block_gap_s": schedule.gap_s, "max_spread_pct": schedule.max_spread_pct}
    baseline_json = {"p50_ms": {k: v.p50_ms for k, v in base.items()}} if base else None
    return BenchmarkVerdict(tuple(shapes), tuple(reasons), thresholds, baseline_json, tuple(notes), tuple(noisy))


# -- memory: the max profile shape, and a soak ----------------------------------------------------------------

_OOM_WORDS = ("out of memory", "outofmemory", "oom", "cudaerrormemoryallocation", "failed to allocate",
              "bad_alloc", "memoryerror")


def _is_oom(error: BaseException) -> bool:
    text = f"{type(error).__name__}: {error}".lower()
    return isinstance(error, MemoryError) or any(w in text for w in _OOM_WORDS)


def _mib(n: int | float | None) -> float | None:
    return None if n is None else float(n) / 2**20


def probe_memory(session: Session | None, label: str, feeds: Mapping[str, np.ndarray], settings: BenchmarkGate,
                 engine_bytes: int | None = None, measured: int | None = None) -> dict:
    """Device memory at the profile's ``max`` shape (one untimed run, unless the benchmark timed that shape already
    and measured it: ``measured``; then no session is needed) and the engine's size, judged against
    ``max_device_memory_mib``. An engine that runs out of memory there fails, naming the shape; one that fails
    otherwise too. CPU runtimes report no device memory: noted, not judged."""
    shapes = {k: [int(d) for d in np.shape(v)] for k, v in feeds.items()}
    out: dict = {"shape": label, "input_shapes": shapes, "device_memory_bytes": measured,
                 "engine_bytes": engine_bytes, "threshold_mib": settings.max_device_memory_mib, "reasons": [],
                 "notes": []}
    if measured is None:
        assert session is not None, "probe_memory runs the max shape: it needs a session"
        try:
            timing = session.benchmark(feeds, warmup=0, iterations=1, time_budget_s=None)
            out["device_memory_bytes"] = timing.device_memory_bytes
        except Exception as e:  # any runtime's failure at the max shape: the engine cannot serve it
            what = "ran out of memory" if _is_oom(e) else "failed"
            out["reasons"].append(f"{label}: the engine {what} at input shapes {shapes}: {type(e).__name__}: {e}")
    used = _mib(out["device_memory_bytes"])
    limit = settings.max_device_memory_mib
    if limit is not None:
        if used is None and not out["reasons"]:
            out["notes"].append("this runtime reports no device memory (a CPU engine): max_device_memory_mib not "
                                "checked")
        elif used is not None and used > limit:
            out["reasons"].append(f"{label}: device memory {used:.1f} MiB at input shapes {shapes} > "
                                  f"max_device_memory_mib {limit:g}")
    out["status"] = "failed" if out["reasons"] else "passed"
    return out


def resident_bytes() -> int | None:
    """This process's resident memory (Linux ``/proc/self/statm``; None elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def run_soak(session: Session, label: str, feeds: Mapping[str, np.ndarray], settings: BenchmarkGate, *,
             clock: Callable[[], float] = time.monotonic, rss: Callable[[], int | None] = resident_bytes) -> dict:
    """``soak_s`` seconds of back-to-back runs at one shape after a warm-up; fails when the process's resident
    memory grew by more than ``max_memory_growth_mib`` (default 32) from the first tenth of the soak to its end —
    a leak per run shows there, an allocator's one-time growth mostly before."""
    seconds = float(settings.soak_s or 0.0)
    limit = settings.max_memory_growth_mib if settings.max_memory_growth_mib is not None else 32.0
    out: dict = {"shape": label, "seconds": seconds, "runs": 0, "start_bytes": None, "end_bytes": None,
                 "growth_mib": None, "threshold_mib": limit, "reasons": [], "notes": []}
    for _ in range(max(1, settings.warmup)):
        session.run(feeds)
    start = clock()
    settle = start + seconds / 10
    try:
        while clock() - start < seconds:
            session.run(feeds)
            out["runs"] += 1
            if out["start_bytes"] is None and clock() >= settle:
                out["start_bytes"] = rss()
    except Exception as e:  # failing mid-soak is a failure of the engine at this shape
        what = "ran out of memory" if _is_oom(e) else "failed"
        out["reasons"].append(f"soak: the engine {what} after {out['runs']} runs: {type(e).__name__}: {e}")
    out["end_bytes"] = rss()
    if out["start_bytes"] is None or out["end_bytes"] is None:
        out["notes"].append("resident memory is not readable here: growth not checked")
    else:
        growth = (out["end_bytes"] - out["start_bytes"]) / 2**20
        out["growth_mib"] = growth
        if growth > limit:
            out["reasons"].append(f"soak: resident memory grew {growth:.1f} MiB over {out['runs']} runs in "
                                  f"{seconds:g} s > max_memory_growth_mib {limit:g}")
    out["status"] = "failed" if out["reasons"] else "passed"
    return out
