"""The build step of a ``~ refit`` cell (``core.weights.refit_change``): the published refittable engine takes the
new model version's weights instead of being rebuilt (docs/refit.md).

The published engine is fetched (its digest checked by the store), the new ONNX's weights blob is written beside it
(``run.weights_blob.write_blob``), and then:

- a plan stripped of its weights (TensorRT 10+ and TensorRT-RTX build ``refittable`` as REFIT + STRIP_PLAN) carries
  none to replace: it is the engine of the new version as it is, and the new blob is what its deployments refit it
  from; its gates judge it refitted from that blob (``run.weights_blob.refit_for_gate``), like any stripped engine;
- an engine that carries its weights (TensorRT 8.6's REFIT, a third-party runtime's) is refitted with the new
  weights by its runtime plugin (``RefitCapability.refit``, ``new_weights``, kept refittable).

The result is gated like a built engine (parity, task, drift) before it is published. When the runtime cannot refit
it (no GPU its library accepts, weights that do not fit the engine), the step says why and the cell is built instead:
a refit is a shortcut, never the only way to an engine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator import plugins
from orchestrator.contracts.runtime import RefitCapability, RefitRequest
from orchestrator.core.artifact import EngineDescriptor
from orchestrator.core.graph import Cell
from orchestrator.core.model import RegistryConfig
from orchestrator.core.weights import needs_refit
from orchestrator.digests import hash_file
from orchestrator.errors import OrchestratorError
from orchestrator.metadata import model_io
from orchestrator.run.weights_blob import BLOB_DIR, write_blob


def refit_published(cell: Cell, registry: RegistryConfig, digest: str, onnx_path: Path, out_dir: Path,
                    runner: dict[str, Any], log: Callable[[str], None]) -> dict[str, Any] | None:
    """The build result of refitting the published engine ``digest`` with the weights of ``onnx_path`` (the data a
    build step returns), or None when it cannot be refitted (``log`` says why; the caller builds instead)."""
    started = time.perf_counter()
    store = plugins.open_store(registry)
    record = next((r for r in store.records(cell.model) if r.digest == digest
                   and (r.metadata.get("weights") or {}).get("mode") == "refittable"), None)
    if record is None:
        log(f"refit: no refittable record of engine {digest[:19]} is published any more: building instead")
        return None
    meta = record.metadata
    name = str(meta["engine"].get("filename") or "engine")
    published = out_dir / f"published-{name}"
    store.get(digest, published)
    blob = write_blob(onnx_path, out_dir)
    engine_path = out_dir / name
    stripped = needs_refit(meta)
    if stripped:
        published.rename(engine_path)
        facts: dict[str, Any] = {"how": "the published plan carries no weights (STRIP_PLAN): it takes the new "
                                        "weights from its new blob wherever it is refitted"}
    else:
        descriptor = EngineDescriptor.from_json(meta)
        runtime = plugins.runtime_for(descriptor)
        if not isinstance(runtime, RefitCapability):
            log(f"refit: runtime {descriptor.runtime!r} cannot refit: building instead")
            return None
        try:
            request = RefitRequest(engine_path=published, engine=descriptor, weights=out_dir / BLOB_DIR,
                                   out_path=engine_path, new_weights=True, keep_refittable=True)
            facts = dict(runtime.refit(request).facts)
        except OrchestratorError as e:
            log(f"refit: {descriptor.runtime} could not refit {meta['address']} ({e.message}): building instead")
            engine_path.unlink(missing_ok=True)
            return None
        finally:
            published.unlink(missing_ok=True)
    seconds = time.perf_counter() - started
    log(f"refitted {meta['address']} ({digest[:19]}, model {meta['model']['version']}) with the weights of "
        f"{onnx_path.name} in {seconds:.2f}s: {facts.get('how')}")
    refit = {"refitted_from": {"digest": digest, "record_key": str(meta.get("record_key") or meta["build_key"]),
                               "model_version": str(meta["model"]["version"])}, **facts}
    return {
        "engine": engine_path.name, "engine_digest": hash_file(str(engine_path))[0],
        "engine_size": engine_path.stat().st_size, "builder": meta["builder"]["name"],
        "builder_version": meta["builder"]["version"], "build_seconds": round(seconds, 3), "log": None,
        "layer_info": None, "metadata": {"refit": refit}, "runner": runner, "calibration": None,
        "timing_cache": None, "io": model_io(onnx_path),
        "weights": {"mode": "refittable", "stripped": stripped, "builder": refit}, "blob": blob,
        "precision": cell.precision.name,
    }
