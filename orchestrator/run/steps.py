"""What each node kind does, run inside executor workers: prepare, transform, build.

Gate and publish steps live in ``gate_steps.py`` and ``publish.py``. Each step receives a ``StepTask`` whose
payload is a ``CellPayload`` (picklable frozen data) and writes only into ``task.out_dir``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from orchestrator import plugins
from orchestrator.contracts.builder import BuildRequest, TransformRequest
from orchestrator.digests import hash_file
from orchestrator.errors import BuildError
from orchestrator.run.executor import StepOutcome, StepTask
from orchestrator.core.graph import Cell
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.model import Model, RegistryConfig


@dataclass(frozen=True)
class CellPayload:
    model: Model
    cell: Cell | None  # None for prepare/transform nodes (model-level)
    fingerprint: RunnerFingerprint
    caches: Path
    registry: RegistryConfig | None = None
    manifest_file: str = ""
    extra: tuple = ()


def _logger(task: StepTask):
    task.log_path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(task.log_path, "a", buffering=1)

    def log(line: str) -> None:
        handle.write(line.rstrip("\n") + "\n")

    return log, handle


def step_prepare(task: StepTask) -> StepOutcome:
    payload: CellPayload = task.payload
    path = payload.model.source.path
    if not Path(path).exists():
        raise BuildError(f"model file {path} is missing", node=task.node.id,
                         hint="fetch the models first (scripts/fetch_models.py for the demo)")
    from orchestrator.digests import DigestCache

    # the plan's stat-keyed digest cache: an unchanged model is not read again, a changed one is re-hashed
    digest = DigestCache.open(payload.caches.parent / "digests.json").model_digest(path)
    if digest != task.node.key:
        raise BuildError(f"model file {path} changed since the plan was made ({digest[:19]} != "
                         f"{task.node.key[:19]})", node=task.node.id, hint="re-run `orchestrate plan`")
    return StepOutcome(data={"digest": digest, "path": path})


def step_transform(task: StepTask) -> StepOutcome:
    payload: CellPayload = task.payload
    model = payload.model
    kind = task.node.transform_kind
    plugin = plugins.transform(kind)
    spec = next(s for s in model.precisions if s.name == {"fp16": "fp16", "bf16": "bf16",
                                                            "int8-qdq": "int8", "fp8-qdq": "fp8"}[kind])
    first_profile = model.profile_names()[0] if model.profile_names() else None
    shapes = {}
    for spec_in in model.inputs:
        if first_profile and first_profile in spec_in.profiles:
            shapes[spec_in.name] = spec_in.profiles[first_profile].opt
        else:
            shapes[spec_in.name] = tuple(d if isinstance(d, int) else 1 for d in spec_in.shape)
    log, handle = _logger(task)
    try:
        log(f"transform {kind} of {model.source.path}")
        facts = plugin.run(TransformRequest(
            kind=kind, key=task.node.key, onnx_path=Path(model.source.path), out_path=task.out_dir / "model.onnx",
            precision=spec, calibration=model.calibration, input_shapes=shapes,
            input_dtypes={i.name: i.dtype for i in model.inputs}, log=log))
    finally:
        handle.close()
    files = tuple(sorted(str(p.relative_to(task.out_dir)) for p in task.out_dir.rglob("*") if p.is_file()))
    return StepOutcome(files=files, data={"kind": kind, "facts": facts or {}})


def sha256_file(path: Path) -> str:
    return hash_file(str(path))[0]  # the engine's content digest, "sha256:<hex>"


def step_build(task: StepTask) -> StepOutcome:
    payload: CellPayload = task.payload
    cell = payload.cell
    builder = plugins.builder(cell.target.builder)
    if cell.transform_node:
        onnx_path = Path(task.dep_dirs[cell.transform_node]) / "model.onnx"
    else:
        onnx_path = Path(cell.model_path)
    log, handle = _logger(task)
    try:
        log(f"build {cell.address} key {cell.build_key}")
        result = builder.build(BuildRequest(
            address=cell.address, build_key=cell.build_key, onnx_path=onnx_path, profiles=cell.profiles,
            precision=cell.precision, native_precision=cell.route == "native", target=cell.target,
            options=cell.target.options, out_dir=task.out_dir, cache_dir=payload.caches / cell.target.builder,
            calibration=payload.model.calibration, log=log))
    finally:
        handle.close()
    engine = Path(result.engine_path)
    if not engine.is_file() or engine.stat().st_size == 0:
        raise BuildError("the builder reported success but wrote no engine", node=task.node.id)
    rel = lambda p: str(Path(p).relative_to(task.out_dir))  # noqa: E731 - local shorthand
    files = [rel(engine)]
    for extra in (result.log_path, result.layer_info_path):
        if extra and Path(extra).is_file() and Path(extra).resolve().is_relative_to(task.out_dir.resolve()):
            files.append(rel(extra))
    return StepOutcome(files=tuple(files), data={
        "engine": rel(engine),
        "engine_digest": sha256_file(engine),
        "engine_size": engine.stat().st_size,
        "builder": result.builder,
        "builder_version": result.builder_version,
        "build_seconds": round(result.build_seconds, 3),
        "log": rel(result.log_path) if result.log_path and Path(result.log_path).is_file() else None,
        "layer_info": rel(result.layer_info_path) if result.layer_info_path else None,
        "metadata": result.metadata,
        "runner": payload.fingerprint.to_json(),
    })
