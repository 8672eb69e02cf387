"""Model-level nodes, run inside executor workers: ``prepare`` (the model file is still the one the plan
hashed) and ``transform`` (an fp16/bf16 conversion or int8/fp8 Q/DQ calibration shared by every cell that needs
it). Each writes only into ``task.out_dir``."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from orchestrator import plugins
from orchestrator.contracts.builder import TransformRequest
from orchestrator.core.model import Model, PrecisionSpec
from orchestrator.digests import DigestCache
from orchestrator.errors import BuildError
from orchestrator.run.executor import StepOutcome, StepTask, open_step_log


@dataclass(frozen=True)
class ModelPayload:
    model: Model
    caches: Path  # the workspace's caches dir (the digest cache sits beside it)
    precision: PrecisionSpec | None = None  # transform nodes: the precision they produce
    tools: tuple[tuple[str, str], ...] = ()  # transform nodes: the tool versions their key names


def step_prepare(task: StepTask) -> StepOutcome:
    payload = task.payload
    assert isinstance(payload, ModelPayload)
    path = payload.model.source.path
    if not Path(path).exists():
        raise BuildError(f"model file {path} is missing", node=task.node.id,
                         hint="fetch the models first (scripts/fetch_models.py for the demo)")
    # the plan's stat-keyed digest cache: an unchanged model is not read again, a changed one is re-hashed
    digest = DigestCache.open(payload.caches.parent / "digests.json").model_digest(path)
    if digest != task.node.key:
        raise BuildError(f"model file {path} changed since the plan was made ({digest[:19]} != "
                         f"{task.node.key[:19]})", node=task.node.id, hint="re-run `orchestrate plan`")
    return StepOutcome(data={"digest": digest, "path": path})


def _check_tools(tools: tuple[tuple[str, str], ...], node: str) -> None:
    """The libraries installed here are the versions the transform's key names (``transforms.tools``): a
    declared ``1.16`` takes any 1.16.x, ``1.16.0`` only itself."""
    for dist, want in tools:
        try:
            have: str | None = metadata.version(dist)
        except metadata.PackageNotFoundError:
            have = None
        if have is None or not (have == want or have.startswith(want + ".")):
            raise BuildError(f"the manifest keys this transform on {dist} {want} (transforms.tools); this runner "
                             f"has {have or 'none installed'}", node=node,
                             hint=f"pip install '{dist}=={want}{'' if want.count('.') >= 2 else '.*'}' on this runner, "
                                  "or change transforms.tools (the transformed engines rebuild)")


def step_transform(task: StepTask) -> StepOutcome:
    payload = task.payload
    assert isinstance(payload, ModelPayload) and payload.precision is not None
    model = payload.model
    kind = str(task.node.transform_kind)
    _check_tools(payload.tools, task.node.id)
    plugin = plugins.transform(kind)
    first_profile = model.profile_names()[0] if model.profile_names() else None
    shapes = {}
    for spec_in in model.inputs:
        if first_profile and first_profile in spec_in.profiles:
            shapes[spec_in.name] = spec_in.profiles[first_profile].opt
        else:
            shapes[spec_in.name] = tuple(d if isinstance(d, int) else 1 for d in spec_in.shape)
    with open_step_log(task) as log:
        log(f"transform {kind} of {model.source.path}")
        facts = plugin.run(TransformRequest(
            kind=kind, key=task.node.key, onnx_path=Path(model.source.path), out_path=task.out_dir / "model.onnx",
            precision=payload.precision, calibration=model.calibration, input_shapes=shapes,
            input_dtypes={i.name: i.dtype for i in model.inputs}, log=log))
    files = tuple(sorted(str(p.relative_to(task.out_dir)) for p in task.out_dir.rglob("*") if p.is_file()))
    return StepOutcome(files=files, data={"kind": kind, "facts": facts or {}})
