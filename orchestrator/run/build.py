"""Build nodes, run inside executor workers: the target's builder plugin turns the (possibly transformed) ONNX
into one engine, written only into ``task.out_dir``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from orchestrator import plugins
from orchestrator.contracts.builder import BuildRequest
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.graph import Cell
from orchestrator.core.model import Model
from orchestrator.digests import hash_file
from orchestrator.errors import BuildError
from orchestrator.run.executor import StepOutcome, StepTask, open_step_log


@dataclass(frozen=True)
class BuildPayload:
    cell: Cell
    model: Model
    fingerprint: RunnerFingerprint
    caches: Path


def step_build(task: StepTask) -> StepOutcome:
    payload = task.payload
    assert isinstance(payload, BuildPayload)
    cell = payload.cell
    builder = plugins.builder(cell.target.builder)
    if cell.transform_node:
        onnx_path = Path(task.dep_dirs[cell.transform_node]) / "model.onnx"
    else:
        onnx_path = Path(cell.model_path)
    with open_step_log(task) as log:
        log(f"build {cell.address} key {cell.build_key}")
        result = builder.build(BuildRequest(
            address=cell.address, build_key=cell.build_key, onnx_path=onnx_path, profiles=cell.profiles,
            precision=cell.precision, native_precision=cell.route == "native", target=cell.target,
            options=cell.target.options, out_dir=task.out_dir, cache_dir=payload.caches / cell.target.builder,
            calibration=payload.model.calibration, log=log))
    engine = Path(result.engine_path)
    if not engine.is_file() or engine.stat().st_size == 0:
        raise BuildError("the builder reported success but wrote no engine", node=task.node.id)

    def rel(p: Path) -> str:
        return str(Path(p).relative_to(task.out_dir))

    files = [rel(engine)]
    for extra in (result.log_path, result.layer_info_path):
        if extra and Path(extra).is_file() and Path(extra).resolve().is_relative_to(task.out_dir.resolve()):
            files.append(rel(extra))
    return StepOutcome(files=tuple(files), data={
        "engine": rel(engine),
        "engine_digest": hash_file(str(engine))[0],  # the engine's content digest, "sha256:<hex>"
        "engine_size": engine.stat().st_size,
        "builder": result.builder,
        "builder_version": result.builder_version,
        "build_seconds": round(result.build_seconds, 3),
        "log": rel(result.log_path) if result.log_path and Path(result.log_path).is_file() else None,
        "layer_info": rel(result.layer_info_path) if result.layer_info_path else None,
        "metadata": result.metadata,
        "runner": payload.fingerprint.to_json(),
    })
