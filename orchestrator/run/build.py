"""Build nodes, run inside executor workers: the target's builder plugin turns the (possibly transformed) ONNX
into one engine, written only into ``task.out_dir``.

Caches: a native int8 build reads the calibration cache of its ``calibrate`` dependency (never calibrates
again); a pinned build (``timing_cache: {pin: true}``) starts from the published timing cache the app fetched
(``BuildPayload.timing_cache``). The result records the calibration cache and the timing cache's digests as read
and written; the timing cache the build left is copied beside the engine, so publishing attaches exactly it. A cell
whose engines are not ``embedded`` also writes the weights blob of the ONNX it built from (``run.weights_blob``)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from orchestrator import plugins
from orchestrator.contracts.builder import BuildRequest
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.graph import Cell
from orchestrator.core.model import Model, RegistryConfig
from orchestrator.digests import hash_file
from orchestrator.errors import BuildError
from orchestrator.metadata import model_io
from orchestrator.run.executor import StepOutcome, StepTask, open_step_log
from orchestrator.run.prepare import calibration_cache_of
from orchestrator.run.refit import refit_published
from orchestrator.run.weights_blob import build_weights, fetched_weights, write_blob
from orchestrator.weights_file import DATA_NAME, GRAPH_NAME

TIMING_CACHE = "timing.cache"


@dataclass(frozen=True)
class BuildPayload:
    cell: Cell
    model: Model
    fingerprint: RunnerFingerprint
    caches: Path
    # a pinned build: the published timing cache to start from (fetched by the app), and where it came from
    timing_cache: Path | None = None
    timing_cache_source: str | None = None
    # a re-gate: the engine published under this digest (same build key) is fetched, never rebuilt
    registry: RegistryConfig | None = None
    published_digest: str | None = None
    # a ``~ refit``: the refittable engine published under this digest takes the new weights (run.refit)
    refit_digest: str | None = None


def _fetch_published(task: StepTask, payload: BuildPayload) -> StepOutcome:
    """The published engine of this build key, fetched and verified: what a re-gate judges."""
    assert payload.registry is not None and payload.published_digest is not None
    cell = payload.cell
    with open_step_log(task) as log:
        log(f"re-gate {cell.address}: fetching the published engine {payload.published_digest} (build key "
            f"{cell.build_key}, unchanged: not rebuilt)")
        engine = task.out_dir / f"engine-{payload.published_digest.split(':')[-1][:16]}"
        store = plugins.open_store(payload.registry)
        stored = store.get(payload.published_digest, engine)
        meta = stored.metadata
        if meta.get("build_key") != cell.build_key:  # another record of the same bytes (identical engines)
            meta = next((r.metadata for r in store.records(cell.model) if r.digest == stored.digest
                         and r.metadata.get("build_key") == cell.build_key), meta)
        if meta.get("build_key") != cell.build_key:
            raise BuildError(f"the store delivered {meta.get('address')} with build key {meta.get('build_key')}, "
                             f"not {cell.build_key}", node=task.node.id, hint="re-run `orchestrate plan`")
        name = meta["engine"].get("filename") or engine.name
        if name != engine.name:
            engine = engine.rename(task.out_dir / name)
        log(f"fetched {engine.name} ({stored.digest}), built by {meta['builder']['name']} "
            f"{meta['builder']['version']} on {RunnerFingerprint.from_json(meta.get('runner') or {}).describe()}")
        weights = fetched_weights(store, meta, task.out_dir)  # a stripped engine: its blob too, for its gates
        if weights:
            log(f"fetched its weights blob {weights['blob']['data_digest']}")
    files = (engine.name,) + tuple(f"{weights['blob']['dir']}/{n}" for n in (GRAPH_NAME, DATA_NAME) if weights)
    return StepOutcome(files=files, data={
        "engine": engine.name, "engine_digest": hash_file(str(engine))[0], "engine_size": engine.stat().st_size,
        "builder": meta["builder"]["name"], "builder_version": meta["builder"]["version"],
        "build_seconds": float((meta.get("timings") or {}).get("build_seconds", 0.0)), "log": None,
        "layer_info": None, "metadata": {}, "runner": meta.get("runner") or {}, "calibration": None,
        "timing_cache": None, "io": meta.get("io"), "from_store": {"digest": stored.digest, "location": stored.location,
                                              "caches": meta.get("caches") or {},
                                              "weights": meta.get("weights")}, **weights})


def step_build(task: StepTask) -> StepOutcome:
    payload = task.payload
    assert isinstance(payload, BuildPayload)
    if payload.published_digest is not None:
        return _fetch_published(task, payload)
    cell = payload.cell
    builder = plugins.builder(cell.target.builder)
    if cell.transform_node:
        onnx_path = Path(task.dep_dirs[cell.transform_node]) / "model.onnx"
    else:
        onnx_path = Path(cell.model_path)
    calibration: dict | None = None
    calib_path = None
    with open_step_log(task) as log:
        if payload.refit_digest is not None and payload.registry is not None:
            refitted = refit_published(cell, payload.registry, payload.refit_digest, onnx_path, task.out_dir,
                                       payload.fingerprint.to_json(), log)
            if refitted is not None:
                blob = refitted["blob"]
                return StepOutcome(files=(refitted["engine"], f"{blob['dir']}/{blob['graph']}",
                                          f"{blob['dir']}/{blob['data']}"), data=refitted)
        log(f"build {cell.address} key {cell.build_key}")
        if cell.calibrate_node:
            found = calibration_cache_of(task.dep_dirs[cell.calibrate_node])
            if found is None:
                raise BuildError(f"{cell.calibrate_node} has no calibration cache on this runner", node=task.node.id)
            calib_path, data = found
            calibration = {"key": data.get("key"), "digest": data.get("digest"), "size": data.get("size"),
                           "calibrator": data.get("calibrator"), "node": cell.calibrate_node,
                           "path": str(calib_path), "publish": data.get("publish", True)}
            how = ("its Q/DQ scales come from" if cell.transform_node else "int8 scales read from")
            log(f"{how} calibration cache {data.get('digest')} ({cell.calibrate_node}, {data.get('source')}); "
                "shared by every int8 cell with this calibration key, not recomputed")
        if payload.timing_cache is not None:
            log(f"timing cache pinned: {payload.timing_cache_source or payload.timing_cache}")
        result = builder.build(BuildRequest(
            address=cell.address, build_key=cell.build_key, onnx_path=onnx_path, profiles=cell.profiles,
            precision=cell.precision, native_precision=cell.route == "native", target=cell.target,
            options=cell.target.options, out_dir=task.out_dir, cache_dir=payload.caches / cell.target.builder,
            calibration=payload.model.calibration, log=log,
            calibration_cache=calib_path if cell.route == "native" else None, timing_cache=payload.timing_cache))
        timing = None
        if result.timing_cache_written or result.timing_cache_read:
            timing = {"read": result.timing_cache_read, "written": result.timing_cache_written,
                      "pinned": payload.timing_cache is not None, "file": None}
            src = result.timing_cache_path
            if src and Path(src).is_file():
                shutil.copyfile(src, task.out_dir / TIMING_CACHE)
                timing["file"] = TIMING_CACHE
                # the copy is what gets published: its digest is the one recorded (another build may have merged
                # into the shared cache since the builder wrote it)
                timing["written"] = hash_file(str(task.out_dir / TIMING_CACHE))[0]
            log(f"timing cache read {result.timing_cache_read or 'none'}, written {result.timing_cache_written}")
    engine = Path(result.engine_path)
    if not engine.is_file() or engine.stat().st_size == 0:
        raise BuildError("the builder reported success but wrote no engine", node=task.node.id)

    def rel(p: Path) -> str:
        return str(Path(p).relative_to(task.out_dir))

    files = [rel(engine)]
    if timing and timing.get("file"):
        files.append(TIMING_CACHE)
    for extra in (result.log_path, result.layer_info_path):
        if extra and Path(extra).is_file() and Path(extra).resolve().is_relative_to(task.out_dir.resolve()):
            files.append(rel(extra))
    weights: dict = {}
    if cell.target.weights != "embedded":  # the blob of the ONNX it was built from, beside it (run.weights_blob)
        blob = write_blob(onnx_path, task.out_dir)
        weights = {"weights": build_weights(cell, result.metadata.get("weights")), "blob": blob,
                   "precision": cell.precision.name}
        files += [f"{blob['dir']}/{blob['graph']}", f"{blob['dir']}/{blob['data']}"]
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
        "calibration": calibration,
        "timing_cache": timing,
        "io": model_io(onnx_path),
        **weights,
    })

