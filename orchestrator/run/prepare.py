"""Model-level nodes, run inside executor workers: ``prepare`` (the model file is still the one the plan
hashed), ``calibrate`` (one calibration cache per calibration key, computed once — or fetched from the store when
another runner published it — and read by every transform or build that needs it) and ``transform`` (an
fp16/bf16 conversion or int8/fp8 Q/DQ quantization shared by every cell that needs it). Each writes only into
``task.out_dir``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from orchestrator import plugins
from orchestrator.contracts.builder import CalibrateRequest, Calibrator, TransformRequest
from orchestrator.contracts.store import AttachmentReader, StoredArtifact
from orchestrator.core.model import Model, PrecisionSpec, RegistryConfig
from orchestrator.digests import DigestCache, hash_file
from orchestrator.errors import BuildError, OrchestratorError
from orchestrator.manifest.model_file import ModelFileError, read_model_file
from orchestrator.run.executor import StepOutcome, StepTask, open_step_log
from orchestrator.run.workspace import read_result

CALIBRATION_CACHE = "calibration.cache"


@dataclass(frozen=True)
class ModelPayload:
    model: Model
    caches: Path  # the workspace's caches dir (the digest cache sits beside it)
    precision: PrecisionSpec | None = None  # transform/calibrate nodes: the precision they produce
    tools: tuple[tuple[str, str], ...] = ()  # transform nodes: the tool versions their key names
    # the model digest this file stands for without hashing to it: a model version's ONNX fetched from the registry
    # (its files checked against their record there) for ``pull --build-on-miss``, keyed by the digest of the model
    # the version's records were built from (None: the file is the model the plan hashed)
    stands_for: str | None = None


@dataclass(frozen=True)
class CalibratePayload:
    model: Model
    precision: PrecisionSpec
    shapes: tuple[tuple[str, tuple[int, ...]], ...]  # input -> the shape calibration runs at (its key's)
    tools: tuple[tuple[str, str], ...] = ()  # Q/DQ calibration: the tool versions its key names
    registry: RegistryConfig | None = None
    # a record published with this very cache (same calibration key) and the attachment's name: fetched, not
    # computed again
    published: StoredArtifact | None = None
    attachment: str | None = None


def calibration_cache_of(dep_dir: str | Path) -> tuple[Path, dict] | None:
    """The cache a finished calibrate node holds, with its result data (None: no complete result there)."""
    result = read_result(Path(dep_dir))
    if result is None:
        return None
    data = result.get("data") or {}
    return Path(dep_dir) / str(data.get("cache", CALIBRATION_CACHE)), data


def step_prepare(task: StepTask) -> StepOutcome:
    payload = task.payload
    assert isinstance(payload, ModelPayload)
    path = payload.model.source.path
    try:  # what validate checks, again where the build runs: a url source is first read here, after its fetch
        read_model_file(path)
    except ModelFileError as e:
        raise BuildError(f"model file {e.message}: {path}", node=task.node.id, hint=e.hint) from None
    if payload.stands_for is not None and payload.stands_for == task.node.key:
        return StepOutcome(data={"digest": task.node.key, "path": path, "stand_in": True})
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


def _calibrator(by: str) -> Calibrator:
    """``transform:int8-qdq`` / ``builder:tensorrt`` -> the plugin that computes that cache."""
    kind, _, name = by.partition(":")
    plugin: object = plugins.transform(name) if kind == "transform" else plugins.builder(name)
    if not isinstance(plugin, Calibrator):
        raise BuildError(f"{kind} plugin {name!r} cannot compute calibration caches (it has no calibrate())",
                         hint="install a version of the plugin that does, or use a precision route without one")
    return plugin


def _fetch_published(payload: CalibratePayload, dest: Path, log: Callable[[str], None]) -> bool:
    if payload.published is None or payload.registry is None or payload.attachment is None:
        return False
    try:
        store = plugins.open_store(payload.registry)
        if not isinstance(store, AttachmentReader):
            return False
        store.get_attachment(payload.published, payload.attachment, dest)
    except OrchestratorError as e:
        log(f"the published calibration cache {payload.attachment} is not usable ({e.message}); computing it here")
        dest.unlink(missing_ok=True)
        return False
    log(f"calibration cache {payload.attachment} fetched from the store (published with "
        f"{payload.published.metadata.get('address')}): not computed again")
    return True


def step_calibrate(task: StepTask) -> StepOutcome:
    payload = task.payload
    assert isinstance(payload, CalibratePayload)
    model = payload.model
    by = str(task.node.calibrator)
    out = task.out_dir / CALIBRATION_CACHE
    facts: dict = {}
    with open_step_log(task) as log:
        log(f"calibrate {model.name}: key {task.node.key}, by {by}, method {payload.precision.calibration_method}")
        source = "store" if _fetch_published(payload, out, log) else "computed"
        if source == "computed":
            if by.startswith("transform:"):
                _check_tools(payload.tools, task.node.id)
            facts = _calibrator(by).calibrate(CalibrateRequest(
                key=task.node.key, onnx_path=Path(model.source.path), out_path=out, precision=payload.precision,
                calibration=model.calibration, input_shapes=dict(payload.shapes),
                input_dtypes={i.name: i.dtype for i in model.inputs}, log=log)) or {}
        if not out.is_file():
            raise BuildError(f"{by} reported a calibration but wrote no cache", node=task.node.id)
        digest, size = hash_file(str(out))[0], out.stat().st_size
        log(f"calibration cache {digest} ({size} bytes, {source}); every cell with this calibration key reuses it")
    return StepOutcome(files=(CALIBRATION_CACHE,), data={
        "cache": CALIBRATION_CACHE, "digest": digest, "size": size, "key": task.node.key, "calibrator": by,
        "source": source, "facts": facts,
        # a calibrator whose cache holds the calibration data itself says so: it is then never published
        "publish": bool(facts.get("publish", True))})


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
    cache = None
    with open_step_log(task) as log:
        log(f"transform {kind} of {model.source.path}")
        for dep, path in task.dep_dirs.items():
            if dep.startswith("calibrate:"):
                found = calibration_cache_of(path)
                if found is None:
                    raise BuildError(f"{dep} has no calibration cache on this runner", node=task.node.id)
                cache, data = found
                log(f"calibration cache {data.get('digest')} from {dep} ({data.get('source', 'computed')}): "
                    "read, not recomputed")
        facts = plugin.run(TransformRequest(
            kind=kind, key=task.node.key, onnx_path=Path(model.source.path), out_path=task.out_dir / "model.onnx",
            precision=payload.precision, calibration=model.calibration, input_shapes=shapes,
            input_dtypes={i.name: i.dtype for i in model.inputs}, log=log, calibration_cache=cache))
    files = tuple(sorted(str(p.relative_to(task.out_dir)) for p in task.out_dir.rglob("*") if p.is_file()))
    return StepOutcome(files=files, data={"kind": kind, "facts": facts or {}})
