"""Gate nodes, run inside executor workers: parity against the reference runtime (the original ONNX on
onnxruntime CPU fp32) and the benchmark. Whether this runner can run the engine at all is decided before
(``app.gating.gate``: ``pending``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator import plugins
from orchestrator.contracts.runtime import RuntimeOptions
from orchestrator.core.artifact import EngineDescriptor
from orchestrator.core.graph import Cell
from orchestrator.core.model import Model
from orchestrator.gates.inputs import benchmark_inputs, gate_cases
from orchestrator.gates.run import run_benchmark, run_parity
from orchestrator.run.executor import StepOutcome, StepTask


@dataclass(frozen=True)
class GatePayload:
    cell: Cell
    model: Model
    caches: Path
    runtime: str  # the runtime plugin that runs this cell's engines
    baseline: dict[str, Any] | None = None  # benchmark: the last published verdict at this address


def built_engine(task: StepTask, payload: GatePayload) -> tuple[Path, EngineDescriptor]:
    """The built engine and its descriptor, from the build node's result."""
    cell = payload.cell
    build_dir = Path(task.dep_dirs[f"build:{cell.address}"])
    data = json.loads((build_dir / "result.json").read_text())["data"]
    engine = EngineDescriptor.for_cell(cell, runtime=payload.runtime, builder_version=data["builder_version"],
                                       digest=data["engine_digest"], size=data["engine_size"])
    return build_dir / data["engine"], engine


def _profile_names(cell: Cell) -> list[str]:
    names = [p.name for p in cell.profiles]
    return names or [cell.profile_set]


def _device(engine: EngineDescriptor) -> str:
    return "cuda" if engine.target.device in ("cuda", "gpu") else "cpu"


def step_parity(task: StepTask) -> StepOutcome:
    payload = task.payload
    assert isinstance(payload, GatePayload)
    model: Model = payload.model
    engine_path, engine = built_engine(task, payload)
    runtime = plugins.runtime_for(engine)
    reference_engine = plugins.reference_engine(engine.address)
    reference = plugins.runtime_for(reference_engine).load(Path(model.source.path), reference_engine,
                                                          RuntimeOptions(device="cpu"))
    per_profile = []
    try:
        for index, profile in enumerate(_profile_names(payload.cell)):
            session = runtime.load(engine_path, engine, RuntimeOptions(
                profile_index=index, device="cuda" if _device(engine) == "cuda" else "cpu",
                cache_dir=payload.caches / "runtime"))
            try:
                verdict = run_parity(model, session, reference, gate_cases(model, profile), engine.precision)
            finally:
                session.close()
            per_profile.append((profile, verdict.to_json(), verdict.passed))
    finally:
        reference.close()
    report = {"kind": "parity", "address": engine.address, "engine_digest": engine.digest,
              "status": "passed" if all(p for _, _, p in per_profile) else "failed",
              "profiles": {name: verdict for name, verdict, _ in per_profile}}
    (task.out_dir / "parity.json").write_text(json.dumps(report, indent=1))
    return StepOutcome(files=("parity.json",), data={"status": report["status"], "verdict": "parity.json"},
                       status="done")


def step_benchmark(task: StepTask) -> StepOutcome:
    payload = task.payload
    assert isinstance(payload, GatePayload)
    model: Model = payload.model
    settings = model.gate.benchmark
    engine_path, engine = built_engine(task, payload)
    runtime = plugins.runtime_for(engine)
    profile = _profile_names(payload.cell)[0]
    session = runtime.load(engine_path, engine, RuntimeOptions(
        profile_index=0, device="cuda" if _device(engine) == "cuda" else "cpu", cache_dir=payload.caches / "runtime"))
    try:
        verdict = run_benchmark(session, benchmark_inputs(model, profile, settings.shapes), settings,
                                payload.baseline)
    finally:
        session.close()
    report = {"kind": "benchmark", "address": engine.address, "engine_digest": engine.digest,
              "status": "passed" if verdict.passed else "failed", "profile": profile, "verdict": verdict.to_json()}
    (task.out_dir / "benchmark.json").write_text(json.dumps(report, indent=1))
    return StepOutcome(files=("benchmark.json",), data={"status": report["status"], "verdict": "benchmark.json"})
