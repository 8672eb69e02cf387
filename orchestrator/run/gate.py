"""Gate nodes, run inside executor workers: parity against the reference runtime (the original ONNX on
onnxruntime CPU fp32) and the benchmark. Whether this runner can run the engine at all is decided before
(``app.gating.gate``: ``pending``).

Each node writes its verdict file and a log saying what was run (engine, digest, runtime, device, reference,
input shapes, settings), every output's or shape's numbers, and the verdict with its reasons; its outcome data
carries the status and the first reasons, so the CLI can say why without opening the file.

A benchmark whose verdict is ``noisy`` (gates.noise: the noise, not the engine, would decide it; its drift latency
check too) ends ``pending``,
not done: it records no verdict, is not cached (the next `orchestrate gate` times it again) and blocks
publishing exactly like a gate that has not run (docs/gates.md, "Benchmark noise")."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from orchestrator import plugins
from orchestrator.contracts.runtime import RuntimeOptions, Session
from orchestrator.core.artifact import EngineDescriptor
from orchestrator.core.graph import Cell
from orchestrator.core.model import Model
from orchestrator.errors import GateError
from orchestrator.gates.conditions import nvml_probe
from orchestrator.gates.drift import OUTPUTS_FILE, OutputRecorder, drift_case, judge_drift, latency_drift, load_outputs
from orchestrator.gates.inputs import benchmark_inputs, gate_cases
from orchestrator.gates.refit_cost import refit_cost
from orchestrator.gates.run import BlockSchedule, probe_memory, run_benchmark, run_parity, run_soak
from orchestrator.gates.verdict import BenchmarkVerdict, ParityVerdict
from orchestrator.run.executor import StepOutcome, StepTask, open_step_log
from orchestrator.run.weights_blob import refit_for_gate


@dataclass(frozen=True)
class GatePayload:
    cell: Cell
    model: Model
    caches: Path
    runtime: str  # the runtime plugin that runs this cell's engines
    baseline: dict[str, Any] | None = None  # benchmark: the last published verdict at this address
    runner: dict[str, Any] | None = None  # the gate runner's facts the verdict depends on (app.gating.runner_facts)
    # the drift baseline (app.gating.drift_baseline): {"record": {address, builder_version, ...}, "outputs": path of
    # its recorded outputs or None, "benchmark": its benchmark verdict on this GPU model or None}; None: none
    drift: dict[str, Any] | None = None
    # a re-gate whose other gate's settings moved: the verdict this gate gave the same engine under these very
    # settings, as published (``app.gating.kept_verdicts``); written as this node's verdict, nothing is run again
    kept: dict[str, Any] | None = None
    # a refittable cell's benchmark: the published embedded engine of this cell timed on this GPU model
    # ({"record", "verdict"}, ``app.gating.embedded_baseline``; gates.refit_cost), None: none
    embedded: dict[str, Any] | None = None


def built_engine(task: StepTask, payload: GatePayload) -> tuple[Path, EngineDescriptor]:
    """The built engine and its descriptor, from the build node's result; a stripped engine refitted from the weights
    blob beside it (what a deployment runs, ``run.weights_blob``), its descriptor still naming the engine as built
    (the digest the verdicts are given to and publish checks)."""
    cell = payload.cell
    build_dir = Path(task.dep_dirs[f"build:{cell.address}"])
    data = json.loads((build_dir / "result.json").read_text())["data"]
    engine = EngineDescriptor.for_cell(cell, runtime=payload.runtime, builder_version=data["builder_version"],
                                       digest=data["engine_digest"], size=data["engine_size"])
    return refit_for_gate(build_dir, data, build_dir / data["engine"], engine, task.out_dir), engine


def _profile_names(cell: Cell) -> list[str]:
    names = [p.name for p in cell.profiles]
    return names or [cell.profile_set]


def _device(engine: EngineDescriptor) -> str:
    return "cuda" if engine.target.device in ("cuda", "gpu") else "cpu"


MAX_REASONS_IN_DATA = 8  # the outcome's reasons (run records, CLI lines); the verdict file has them all


def _engine_lines(kind: str, engine_path: Path, engine: EngineDescriptor, device: str) -> list[str]:
    return [f"{kind} gate: {engine.address}",
            f"engine: {engine_path} ({engine.digest}, {engine.size} bytes), built by {engine.builder} "
            f"{engine.builder_version}, run by {engine.runtime} on {device}"]


def _fmt(value: float | str | None) -> str:
    return "-" if value is None else value if isinstance(value, str) else f"{value:.4g}"


def _parity_log(profile: str, verdict: ParityVerdict) -> list[str]:
    lines = []
    for case in verdict.cases:
        shapes = ", ".join(f"{k} {list(v)}" for k, v in case.input_shapes.items())
        lines.append(f"profile {profile}, case {case.label} ({shapes}; {case.samples} sample(s)): {case.status}")
        lines.extend(f"  {r}" for r in case.reasons)
        for o in case.outputs:
            t = o.tolerance
            lines.append(
                f"  output {o.name}: {o.status}; max abs {_fmt(o.max_abs_error)}, mean abs {_fmt(o.mean_abs_error)}, "
                f"rel-L2 {_fmt(o.rel_l2)}, cosine {_fmt(o.cosine)}{'' if o.cosine_gated else ' (not gated)'}, "
                f"{o.violations} of {o.elements} elements beyond atol {t.atol:g} + rtol {t.rtol:g}*|ref| "
                f"(allowed fraction {t.max_violation_fraction:g}; tolerance {t.source})")
            lines.extend(f"    {r}" for r in o.reasons)
        if not case.tensor_gated and case.outputs:
            lines.append("  (gate.parity.tensor: false: tensor tolerances are reported, not gated)")
        if case.task is not None:
            task = case.task
            metrics = ", ".join(f"{k} {_fmt(v)}" for k, v in task.metrics.items())
            bounds = ", ".join(f"{k} {v:g}" for k, v in task.thresholds.items()) or "none"
            lines.append(f"  task {task.kind}" + (f" on {task.output}" if task.output else "")
                         + f": {task.status}; {metrics} (thresholds: {bounds})")
            lines.extend(f"    {r}" for r in (*task.reasons, *task.notes))
    return lines


def _keep(task: StepTask, payload: GatePayload, kind: str) -> StepOutcome:
    """The published verdict of this engine under these settings, kept as this node's: its settings did not move,
    only another gate's did (a parity-only change re-runs no benchmark)."""
    report = dict(payload.kept or {})
    _, engine = built_engine(task, payload)
    if report.get("engine_digest") != engine.digest:
        raise GateError(f"{engine.address}: the published {kind} verdict was given to engine "
                        f"{str(report.get('engine_digest'))[:19]}, not to {str(engine.digest)[:19]}",
                        hint="re-run `orchestrate plan`, then `orchestrate gate`")
    name = f"{kind}.json"
    with open_step_log(task) as log:
        log(f"{kind} gate: {engine.address}: its settings did not move since the published verdict (gate node key "
            f"{task.node.key[:16]}), so that verdict is kept, not run again: {report.get('status')}")
    (task.out_dir / name).write_text(json.dumps(report, indent=1))
    reasons = [str(r) for r in (report.get("verdict") or report).get("reasons") or ()] if kind == "benchmark" else []
    return StepOutcome(files=(name,), data={"status": report.get("status"), "verdict": name,
                                            "reasons": reasons[:MAX_REASONS_IN_DATA], "runner": report.get("runner"),
                                            "key": task.node.key, "kept": True})


def step_parity(task: StepTask) -> StepOutcome:
    payload = task.payload
    assert isinstance(payload, GatePayload)
    if payload.kept is not None:
        return _keep(task, payload, "parity")
    model: Model = payload.model
    engine_path, engine = built_engine(task, payload)
    runtime = plugins.runtime_for(engine)
    reference_engine = plugins.reference_engine(engine.address)
    device = _device(engine)
    with open_step_log(task) as log:
        for line in _engine_lines("parity", engine_path, engine, device):
            log(line)
        log(f"reference: the original ONNX {model.source.path} on {reference_engine.runtime} "
            f"({reference_engine.target.device}, fp32); precision judged: {engine.precision}")
        task_metric = plugins.task(model.task.kind) if model.task is not None else None
        reference = plugins.runtime_for(reference_engine).load(Path(model.source.path), reference_engine,
                                                              RuntimeOptions(device="cpu"))
        per_profile: list[tuple[str, ParityVerdict]] = []
        recorder = OutputRecorder()
        try:
            for index, profile in enumerate(_profile_names(payload.cell)):
                session = runtime.load(engine_path, engine, RuntimeOptions(
                    profile_index=index, device="cuda" if device == "cuda" else "cpu",
                    cache_dir=payload.caches / "runtime"))
                cases = gate_cases(model, profile, read_labels=getattr(task_metric, "read_labels", None))
                kept = drift_case([c.label for c in cases]) if model.gate.drift.enabled else None

                def sink(label: str, samples: Any, outputs: Any, profile: str = profile,
                         kept: str | None = kept) -> None:
                    if label == kept:
                        recorder.keep(profile, label, samples, outputs)

                try:
                    verdict = run_parity(model, session, reference, cases, engine.precision, task_metric, sink)
                finally:
                    session.close()
                per_profile.append((profile, verdict))
                for line in _parity_log(profile, verdict):
                    log(line)
        finally:
            reference.close()
        status = "passed" if all(v.passed for _, v in per_profile) else "failed"
        several = len(per_profile) > 1
        reasons = [f"{name}: {r}" if several else r for name, v in per_profile for r in v.reasons]
        files = ["parity.json"]
        if model.gate.drift.enabled and recorder.write(task.out_dir / OUTPUTS_FILE):
            files.append(OUTPUTS_FILE)  # the next builder version's drift baseline
        drift = _parity_drift(payload, model, recorder, task_metric)
        if drift is not None:
            for line in _drift_log(drift):
                log(line)
            if drift.get("status") == "failed":
                status = "failed"
                reasons += [f"drift: {r}" for r in drift["reasons"]]
        log(f"verdict: {status}" + "".join(f"\n  {r}" for r in reasons))
    report = {"kind": "parity", "address": engine.address, "engine_digest": engine.digest, "status": status,
              "gate_key": task.node.key, "runner": payload.runner,
              "profiles": {name: verdict.to_json() for name, verdict in per_profile}, "drift": drift}
    (task.out_dir / "parity.json").write_text(json.dumps(report, indent=1))
    return StepOutcome(files=tuple(files), data={"status": status, "verdict": "parity.json",
                                                     "reasons": reasons[:MAX_REASONS_IN_DATA],
                                                     "runner": payload.runner, "key": task.node.key},
                       status="done")


def _parity_drift(payload: GatePayload, model: Model, recorder: OutputRecorder, task_metric: Any
                  ) -> dict[str, Any] | None:
    """The parity side of the drift gate: this engine's recorded outputs against its drift baseline's (None: drift
    off)."""
    if not model.gate.drift.enabled:
        return None
    base = payload.drift
    if base is None:
        return {"status": "none", "baseline": None, "reasons": [],
                "notes": ["no engine of an earlier builder version is published for this cell: nothing to compare"]}
    if not base.get("outputs"):
        return {"status": "none", "baseline": base["record"], "reasons": [],
                "notes": ["the drift baseline recorded no outputs (published before outputs were recorded, or "
                          "with drift off): outputs not compared"]}
    verdict = judge_drift(model, model.gate.drift, base["record"], load_outputs(Path(base["outputs"])),
                          recorder.arrays, task_metric)
    return verdict.to_json()


def _drift_log(drift: dict[str, Any]) -> list[str]:
    base = drift.get("baseline") or {}
    lines = [f"drift: {drift.get('status')}"
             + (f" against {base.get('address')} (built by {base.get('builder')} {base.get('builder_version')}, "
                f"{str(base.get('engine_digest', ''))[:19]})" if base else "")]
    if drift.get("compared") is not None:
        lines.append(f"  {drift['compared']} sample(s) with identical inputs compared")
    for name, m in (drift.get("outputs") or {}).items():
        lines.append(f"  output {name}: max abs {_fmt(m.get('max_abs_error'))}, rel-L2 {_fmt(m.get('rel_l2'))}, "
                     f"cosine {_fmt(m.get('cosine'))}")
    if drift.get("task"):
        lines.append("  task vs the baseline: " + ", ".join(f"{k} {_fmt(v)}" for k, v in drift["task"].items()))
    if drift.get("change_pct") is not None:
        lines.append(f"  {drift['shape']}: p50 {drift['p50_ms']:.4g} ms vs {drift['baseline_p50_ms']:.4g} ms "
                     f"({drift['change_pct']:+.1f}%)")
    lines.extend(f"  {r}" for r in (*drift.get("reasons", ()), *drift.get("noisy", ()), *drift.get("notes", ())))
    return lines


def _memory_checks(session_for: Callable[[], Session], engine: EngineDescriptor, model: Model, profile: str,
                   verdict: BenchmarkVerdict, device: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Device memory at the max profile shape (GPU engines: measured, an OOM fails naming the shape; CPU engines:
    the engine size only) and the optional soak. A fresh session each (none when the timed max run measured the
    memory already), so the timed one's state does not carry."""
    settings = model.gate.benchmark
    memory: dict[str, Any] | None = None
    timed_max = verdict.shape("max")
    if device == "cuda" and not verdict.noisy:
        measured = timed_max.device_memory_bytes if timed_max is not None else None
        session = session_for() if measured is None else None  # the timed max run measured it already
        try:
            memory = probe_memory(session, "max", benchmark_inputs(model, profile, ("max",))["max"], settings,
                                  engine_bytes=engine.size, measured=measured)
        finally:
            if session is not None:
                session.close()
    else:
        memory = {"shape": None, "input_shapes": None, "device_memory_bytes": None, "engine_bytes": engine.size,
                  "threshold_mib": settings.max_device_memory_mib, "status": "passed", "reasons": [],
                  "notes": (["a CPU engine: device memory not measured"]
                            if settings.max_device_memory_mib is not None else [])}
    soak = None
    if settings.soak_s:
        label = verdict.thresholds.get("gated_shape") or settings.shapes[0]
        session = session_for()
        try:
            soak = run_soak(session, label, benchmark_inputs(model, profile, (label,))[label], settings)
        finally:
            session.close()
    return memory, soak


def _memory_log(section: dict[str, Any]) -> list[str]:
    if "seconds" in section:  # the soak
        growth = section.get("growth_mib")
        head = (f"soak at {section['shape']}: {section['runs']} runs in {section['seconds']:g} s, resident memory "
                + (f"{growth:+.1f} MiB" if growth is not None else "not measured")
                + f" (max_memory_growth_mib {section['threshold_mib']:g})")
    else:
        used = section.get("device_memory_bytes")
        head = ("memory: engine " + (f"{section['engine_bytes'] / 2**20:.1f} MiB" if section.get("engine_bytes")
                                     else "size unknown")
                + (f", device memory {used / 2**20:.1f} MiB at {section['shape']} {section['input_shapes']}"
                   if used is not None else ""))
    return [head, *(f"  {r}" for r in (*section.get("reasons", ()), *section.get("notes", ())))]


def _benchmark_drift(payload: GatePayload, model: Model, verdict: BenchmarkVerdict) -> dict[str, Any] | None:
    """The latency side of the drift gate: the gated shape's p50 against the drift baseline's (None: drift off)."""
    settings = model.gate.drift
    if not settings.enabled:
        return None
    gated = next((s for s in verdict.shapes if s.label == verdict.thresholds.get("gated_shape")), None)
    if payload.drift is None or gated is None:
        return {"status": "none", "baseline": payload.drift["record"] if payload.drift else None, "reasons": [],
                "notes": ["no engine of an earlier builder version is published for this cell: nothing to compare"
                          if payload.drift is None else "nothing was timed"]}
    return latency_drift(gated.gated.p50_ms, gated.input_shapes, gated.label, payload.drift["record"],
                         payload.drift.get("benchmark"), settings, series=gated.gated_name,
                         noise_pct=gated.gated.spread_pct, clock=gated.clock)


def _refit_cost(payload: GatePayload, model: Model, verdict: BenchmarkVerdict) -> dict[str, Any] | None:
    """A non-embedded cell's latency against its embedded engine's (``gates.refit_cost``); None: embedded."""
    mode = payload.cell.target.weights
    gated = next((s for s in verdict.shapes if s.label == verdict.thresholds.get("gated_shape")), None)
    if mode == "embedded" or gated is None:
        return None
    return refit_cost(gated.gated.p50_ms, gated.input_shapes, gated.label, mode, payload.embedded,
                      model.gate.benchmark.max_refit_cost_pct, series=gated.gated_name)


def _benchmark_log(verdict: BenchmarkVerdict) -> list[str]:
    lines = []
    for s in verdict.shapes:
        shapes = ", ".join(f"{k} {list(v)}" for k, v in s.input_shapes.items())
        graph = f"; CUDA graph {s.extra['cuda_graph']}" if s.extra.get("cuda_graph") else ""
        lines.append(f"shape {s.label} ({shapes}, batch {s.batch}; clock {s.clock}{graph}; "
                     f"outputs {s.extra.get('outputs', '-')}; gated series {s.gated_name.replace('_', '-')})")
        for name, st in (("compute", s.compute), ("end-to-end", s.end_to_end)):
            if st is None:
                continue
            lines.append(f"  {name}: p50 {st.p50_ms:.4f} ms, p95 {st.p95_ms:.4f} ms, mean {st.mean_ms:.4f} ms, "
                         f"{st.throughput_per_s:.1f}/s over {st.count} iterations in {st.blocks} block(s); "
                         f"p50 per block {', '.join(f'{x:.4f}' for x in st.block_p50_ms) or '-'} ms, "
                         f"spread {st.spread_pct:.1f}%")
        if s.conditions:
            lines.append("  GPU per block (SM clock, temperature before->after): "
                         + "; ".join(c.text() for c in s.conditions))
        if s.regression_pct is not None:
            lines.append(f"  p50 vs baseline: {s.regression_pct:+.1f}%")
    lines.extend(f"note: {n}" for n in verdict.notes)
    return lines


def step_benchmark(task: StepTask) -> StepOutcome:
    payload = task.payload
    assert isinstance(payload, GatePayload)
    if payload.kept is not None:
        return _keep(task, payload, "benchmark")
    model: Model = payload.model
    settings = model.gate.benchmark
    schedule = BlockSchedule.of(settings)
    engine_path, engine = built_engine(task, payload)
    runtime = plugins.runtime_for(engine)
    profile = _profile_names(payload.cell)[0]
    device = _device(engine)
    gpu = (payload.runner or {}).get("gpu") or "no GPU"
    with open_step_log(task) as log:
        for line in _engine_lines("benchmark", engine_path, engine, device):
            log(line)
        log(f"profile {profile}, shapes {', '.join(settings.shapes)}; warm-up {settings.warmup} per block, "
            f"{schedule.iterations_per_block(settings.iterations)} iterations per block"
            + (f" (time budget {settings.time_budget_s:g} s)" if settings.time_budget_s else "")
            + f", {schedule.blocks} blocks {schedule.gap_s:g} s apart; thresholds: max_p95_ms "
            f"{settings.max_p95_ms}, min_throughput {settings.min_throughput}, max_regression_pct "
            f"{settings.max_regression_pct}, max_spread_pct {schedule.max_spread_pct:g}; baseline: "
            + (f"the last published verdict at this address on {gpu}" if payload.baseline else f"none on {gpu}"))
        def session_for() -> Session:
            return runtime.load(engine_path, engine, RuntimeOptions(
                profile_index=0, device="cuda" if device == "cuda" else "cpu", cache_dir=payload.caches / "runtime"))

        probe = nvml_probe() if device == "cuda" else None
        session = session_for()
        try:
            verdict = run_benchmark(session, benchmark_inputs(model, profile, settings.shapes), settings,
                                    payload.baseline, schedule=schedule, device_probe=probe)
        finally:
            session.close()
        if device == "cuda" and probe is None:
            verdict = replace(verdict, notes=(*verdict.notes, "the GPU's clock and temperature per block were not "
                                              "recorded: NVML is not available (pip install 'trt-orchestrator[gpu]')"))
        for line in _benchmark_log(verdict):
            log(line)
        drift = _benchmark_drift(payload, model, verdict)
        status = verdict.status
        reasons = list(verdict.reasons)
        cost = _refit_cost(payload, model, verdict)
        if cost is not None:
            log(f"weights {cost['mode']}: " + (f"p50 {cost['cost_pct']:+.1f}% against the embedded engine "
                                               f"({cost['embedded_p50_ms']:.4g} ms)" if cost["cost_pct"] is not None
                                               else "; ".join(cost["notes"])))
            if cost["status"] == "failed" and status != "noisy":
                status = "failed"
                reasons += cost["reasons"]
        memory, soak = _memory_checks(session_for, engine, model, profile, verdict, device)
        for section in (memory, soak):
            if section is None:
                continue
            for line in _memory_log(section):
                log(line)
            if section["status"] == "failed" and status != "noisy":
                status = "failed"
            reasons += section["reasons"] if status != "noisy" else []
        noisy = list(verdict.noisy)
        if drift is not None:
            for line in _drift_log(drift):
                log(line)
            if drift["status"] == "failed" and status != "noisy":
                status = "failed"
                reasons += [f"drift: {r}" for r in drift["reasons"]]
            elif drift["status"] == "noisy" and status != "failed":
                status = "noisy"  # the latency drift threshold lies within the measured noise: no verdict
                noisy += [f"drift: {r}" for r in drift.get("noisy", ())]
        why = reasons or noisy
        log(f"verdict: {status}" + "".join(f"\n  {r}" for r in why))
    report = {"kind": "benchmark", "address": engine.address, "engine_digest": engine.digest,
              "status": status, "profile": profile, "verdict": verdict.to_json(), "gate_key": task.node.key,
              "runner": payload.runner, "drift": drift, "memory": memory, "soak": soak, "refit_cost": cost}
    if status == "noisy":
        # no verdict: nothing is written to the node, nothing cached; publishing treats it as pending
        return StepOutcome(status="pending", reason="benchmark noisy: " + "; ".join(noisy),
                           data={"status": "noisy", "reasons": noisy[:MAX_REASONS_IN_DATA], "verdict": report})
    (task.out_dir / "benchmark.json").write_text(json.dumps(report, indent=1))
    return StepOutcome(files=("benchmark.json",), data={"status": status, "verdict": "benchmark.json",
                                                        "reasons": reasons[:MAX_REASONS_IN_DATA],
                                                        "runner": payload.runner, "key": task.node.key})
