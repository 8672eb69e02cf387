"""Gate nodes, run inside executor workers: parity against onnxruntime CPU fp32 on the original ONNX, and the
benchmark. Whether this runner can run the engine at all is decided before (``api.gate``: ``pending``)."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator import plugins
from orchestrator.run.executor import StepOutcome, StepTask
from orchestrator.core.model import Model
from orchestrator.contracts.runtime import RuntimeOptions
from orchestrator.run.steps import CellPayload

# The reference is always the original model on onnxruntime's CPU execution provider in fp32.
REFERENCE_METADATA = {"builder": {"name": "onnxruntime", "version": ""},
                      "target": {"device": "cpu", "compute_capabilities": [], "hardware_compatibility": "none",
                                 "version_compatible": False}}


def engine_metadata(task: StepTask) -> tuple[Path, dict]:
    """The built engine and the metadata shape runtimes read, from the build node's result."""
    payload: CellPayload = task.payload
    cell = payload.cell
    build_dir = Path(task.dep_dirs[f"build:{cell.address}"])
    result = json.loads((build_dir / "result.json").read_text())
    data = result["data"]
    t = cell.target
    meta = {"address": cell.address, "precision": cell.precision.name,
            "builder": {"name": t.builder, "version": data["builder_version"]},
            "target": {"name": t.name, "compute_capabilities": list(t.compute_capabilities),
                       "hardware_compatibility": t.hardware_compatibility, "device": t.device,
                       "version_compatible": t.options.version_compatible},
            "engine": {"digest": data["engine_digest"], "size": data["engine_size"]}}
    return build_dir / data["engine"], meta


def _runtime_for(builder: str):
    from orchestrator.app.pipeline import runtime_name

    return plugins.runtime(runtime_name(builder))


def _profile_names(payload: CellPayload) -> list[str]:
    names = [p.name for p in payload.cell.profiles]
    return names or [payload.cell.profile_set]


def _device(meta: dict) -> str:
    return "cuda" if meta["target"]["device"] in ("cuda", "gpu") else "cpu"


def step_parity(task: StepTask) -> StepOutcome:
    from orchestrator.gates.inputs import gate_cases
    from orchestrator.gates.run import run_parity

    payload: CellPayload = task.payload
    model: Model = payload.model
    engine_path, meta = engine_metadata(task)
    runtime = _runtime_for(meta["builder"]["name"])
    reference_rt = plugins.runtime("onnxruntime")
    reference = reference_rt.load(Path(model.source.path), REFERENCE_METADATA, RuntimeOptions(device="cpu"))
    per_profile = []
    try:
        for index, profile in enumerate(_profile_names(payload)):
            session = runtime.load(engine_path, meta, RuntimeOptions(profile_index=index, device=_device(meta),
                                                                     cache_dir=payload.caches / "runtime"))
            try:
                verdict = run_parity(model, session, reference, gate_cases(model, profile), meta["precision"])
            finally:
                session.close()
            per_profile.append((profile, verdict.to_json(), verdict.passed))
    finally:
        reference.close()
    report = {"kind": "parity", "address": meta["address"], "engine_digest": meta["engine"]["digest"],
              "status": "passed" if all(p for _, _, p in per_profile) else "failed",
              "profiles": {name: verdict for name, verdict, _ in per_profile}}
    (task.out_dir / "parity.json").write_text(json.dumps(report, indent=1))
    return StepOutcome(files=("parity.json",), data={"status": report["status"], "verdict": "parity.json"},
                       status="done")


def step_benchmark(task: StepTask) -> StepOutcome:
    from orchestrator.gates.inputs import benchmark_inputs
    from orchestrator.gates.run import run_benchmark

    payload: CellPayload = task.payload
    model: Model = payload.model
    settings = model.gate.benchmark
    engine_path, meta = engine_metadata(task)
    runtime = _runtime_for(meta["builder"]["name"])
    baseline = payload.extra[0] if payload.extra else None
    profile = _profile_names(payload)[0]
    session = runtime.load(engine_path, meta, RuntimeOptions(profile_index=0, device=_device(meta),
                                                             cache_dir=payload.caches / "runtime"))
    try:
        verdict = run_benchmark(session, benchmark_inputs(model, profile, settings.shapes), settings, baseline)
    finally:
        session.close()
    report = {"kind": "benchmark", "address": meta["address"], "engine_digest": meta["engine"]["digest"],
              "status": "passed" if verdict.passed else "failed", "profile": profile, "verdict": verdict.to_json()}
    (task.out_dir / "benchmark.json").write_text(json.dumps(report, indent=1))
    return StepOutcome(files=("benchmark.json",), data={"status": report["status"], "verdict": "benchmark.json"})


def read_gate_report(node_dir: str | Path, name: str) -> dict | None:
    try:
        return json.loads((Path(node_dir) / name).read_text())
    except (OSError, ValueError):
        return None
