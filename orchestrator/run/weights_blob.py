"""The weights blob inside the pipeline (``targets[].weights``, docs/refit.md; the record is ``core.weights``).

- the build step of a cell whose engines are not ``embedded`` writes the blob of the ONNX it built from beside the
  engine (``write_blob``: ``weights/model.onnx`` + ``weights/weights.bin``, ``orchestrator.weights_file``);
- its gate steps judge the engine as a deployment will run it: refitted from that blob by its runtime plugin
  (``refit_for_gate``);
- its publish step puts the weights record first (``publish_blob``; a no-op when that blob is published already,
  so every engine of one model version points at one record), then the engine record pointing at it.

``orchestrator.app.model_blob`` publishes and fetches the same records outside a build (``pull``, build-on-miss).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator import plugins
from orchestrator.contracts.runtime import RefitCapability, RefitRequest
from orchestrator.contracts.store import ArtifactFiles, AttachmentReader, Store, StoredArtifact
from orchestrator.core.artifact import EngineDescriptor
from orchestrator.core.graph import Cell
from orchestrator.core.keys import digest_of
from orchestrator.core.weights import (
    WEIGHTS_KIND,
    BlobSource,
    blob_of,
    blob_pointer,
    engine_weights,
    kind_of,
    needs_refit,
)
from orchestrator.digests import hash_file
from orchestrator.errors import ArtifactNotFoundError, GateError, IntegrityError, StoreError
from orchestrator.metadata import new_weights_metadata
from orchestrator.weights_file import DATA_NAME, GRAPH_NAME, split

BLOB_DIR = "weights"


def blob_source(cell: Cell) -> BlobSource:
    """The ONNX a cell's engine is built from: a precision transform's output, or the model as given."""
    transform = cell.key_inputs.get("transform")
    if cell.transform_node and isinstance(transform, Mapping):
        return BlobSource("transform", str(transform.get("kind")), digest_of(transform))
    return BlobSource()


def write_blob(onnx_path: Path, out_dir: Path) -> dict[str, Any]:
    """The blob of ``onnx_path`` in ``out_dir/weights`` (what ``publish_blob`` publishes), as build facts."""
    found = split(Path(onnx_path), Path(out_dir) / BLOB_DIR)
    return {"dir": BLOB_DIR, **found.to_json(), "onnx_digest": hash_file(str(onnx_path))[0]}


def build_weights(cell: Cell, builder_facts: Mapping[str, Any] | None) -> dict[str, Any]:
    """What the build step records of a non-embedded cell's weights: its mode and whether the engine lacks them
    (the builder says so; a builder that does not is taken to have stripped them, so a deployment refits)."""
    facts = dict(builder_facts or {})
    return {"mode": cell.target.weights, "stripped": bool(facts.get("stripped", True)), "builder": facts}


def publish_blob(store: Store, build_dir: Path, build: Mapping[str, Any], *, model: str, version: str,
                 source: BlobSource, manifest_path: str, git_commit: str | None) -> dict[str, Any]:
    """Put the weights record of the blob the build wrote (``store.put`` is idempotent per record key: a blob
    published before is not written again) and return the engine record's ``weights`` entry pointing at it."""
    weights = build["weights"]
    blob = build["blob"]
    wanted = (weights.get("builder") or {}).get("blob_data_digest")
    if wanted and wanted != blob["data_digest"]:
        raise IntegrityError(f"the engine points into weights {wanted[:19]} but the blob written beside it is "
                             f"{blob['data_digest'][:19]}", hint="rebuild the cell")
    folder = Path(build_dir) / str(blob["dir"])
    data, graph = folder / str(blob["data"]), folder / str(blob["graph"])
    meta = new_weights_metadata(
        model=model, version=version, source=source, onnx_digest=str(blob["onnx_digest"]),
        blob={k: v for k, v in blob.items() if k not in ("dir", "onnx_digest")}, data_size=data.stat().st_size,
        runner=build.get("runner") or {"os": "", "arch": ""}, manifest_path=manifest_path, git_commit=git_commit,
        precision="fp32" if source.kind == "model" else str(build.get("precision") or "fp32"))
    stored = store.put(ArtifactFiles(engine=data, metadata=meta, extra=(graph,)))
    return engine_weights(str(weights["mode"]), stripped=bool(weights["stripped"]),
                          blob=blob_pointer(stored.metadata), refit=weights.get("builder") or None)


def engine_weights_entry(store: Store, build_dir: Path, build: Mapping[str, Any], cell: Cell, model: Any,
                         manifest_path: str, git_commit: str | None) -> dict[str, Any] | None:
    """The engine record's ``weights`` (None: embedded): a re-gated engine keeps its record's (its blob is
    published); a built one publishes its blob (``publish_blob``)."""
    if not build.get("weights"):
        return None
    published = (build.get("from_store") or {}).get("weights")
    if published:
        return dict(published)
    weights = build["weights"]
    if not weights.get("stripped"):  # it carries every weight (an optimizer rewrote them all): no blob to point at
        return engine_weights(str(weights["mode"]), stripped=False, refit=weights.get("builder") or None)
    return publish_blob(store, build_dir, build, model=model.name, version=model.version, source=blob_source(cell),
                        manifest_path=manifest_path, git_commit=git_commit)


def refit_for_gate(build_dir: Path, build: Mapping[str, Any], engine_path: Path, engine: EngineDescriptor,
                   out_dir: Path) -> Path:
    """The engine a gate judges: a stripped engine refitted from the blob beside it by its runtime plugin (what a
    deployment runs), written into the gate's own folder; any other engine as built."""
    weights = build.get("weights") or {}
    if not weights.get("stripped"):
        return engine_path
    runtime = plugins.runtime_for(engine)
    if not isinstance(runtime, RefitCapability):
        raise GateError(f"{engine.address}: runtime {engine.runtime!r} cannot refit its stripped engine",
                        hint="build this target with weights: embedded")
    out = Path(out_dir) / f"refitted-{engine_path.name}"
    runtime.refit(RefitRequest(engine_path=engine_path, engine=engine,
                               weights=Path(build_dir) / str(build["blob"]["dir"]), out_path=out))
    return out


def weights_record_of(store: Store, model: str, pointer: Mapping[str, Any]) -> StoredArtifact:
    """The weights record an engine record points at (``core.weights.blob_of``), read from ``model``'s records."""
    key = str(pointer.get("record_key") or "")
    for record in store.records(model):
        meta = record.metadata
        if kind_of(meta) == WEIGHTS_KIND and str(meta.get("record_key") or "") == key:
            return record
    raise ArtifactNotFoundError(f"{model}: the weights record {key[:12]} (weights.bin "
                                f"{str(pointer.get('digest'))[:19]}) that its stripped engines need is not in the "
                                "registry",
                                hint="publish the engines again (publishing puts their weights record first), or "
                                     "pull with --keep-stripped and refit them yourself")


def fetch_blob(store: Store, record: StoredArtifact, pointer: Mapping[str, Any], dest: Path) -> Path:
    """The weights record ``record`` as a blob folder ``dest`` (``model.onnx`` beside ``weights.bin``): the store
    checks each file's sha256 against the record while writing it, and the record must be the blob ``pointer``
    names; an ``IntegrityError`` otherwise (a tampered blob is refused)."""
    meta = record.metadata
    blob = meta.get("blob") or {}
    if (meta["engine"]["digest"], blob.get("graph_digest")) != (pointer.get("digest"), pointer.get("graph_digest")):
        raise IntegrityError(f"{meta.get('address')}: the weights record holds weights.bin "
                             f"{str(meta['engine']['digest'])[:19]} and model.onnx "
                             f"{str(blob.get('graph_digest'))[:19]}, not the {str(pointer.get('digest'))[:19]} / "
                             f"{str(pointer.get('graph_digest'))[:19]} the engine was built with",
                             hint="republish the engine and its weights")
    if not isinstance(store, AttachmentReader):
        raise StoreError(f"the {store.name} store cannot hand back a record's files (no get_attachment): the weights "
                         "blob's model.onnx cannot be fetched", hint="pull with --keep-stripped")
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    try:
        delivered = store.get(str(pointer["digest"]), dest / DATA_NAME)
        store.get_attachment(record, str(blob.get("graph") or GRAPH_NAME), dest / GRAPH_NAME)
    except IntegrityError as e:  # a tampered blob: the store's digest check refused it
        raise IntegrityError(f"the weights blob {meta.get('address')} of {meta['model']['name']} "
                             f"{meta['model']['version']} is refused: {e.message}", hint=e.hint) from e
    if delivered.digest != pointer["digest"]:
        raise IntegrityError(f"the store delivered {delivered.digest[:19]} for weights {str(pointer['digest'])[:19]}")
    if hash_file(str(dest / GRAPH_NAME))[0] != pointer["graph_digest"]:
        raise IntegrityError(f"{meta.get('address')}: model.onnx does not hash to {str(pointer['graph_digest'])[:19]}")
    return dest


def fetched_weights(store: Store, meta: Mapping[str, Any], out_dir: Path) -> dict[str, Any]:
    """A published stripped engine's blob fetched into ``out_dir/weights`` (a re-gate judges it refitted), as the
    build step records a built one's; {} for an engine that carries its weights."""
    if not needs_refit(meta):
        return {}
    pointer = blob_of(meta)
    if pointer is None:
        raise IntegrityError(f"{meta.get('address')}: a stripped engine whose record names no weights blob",
                             hint="rebuild and republish it")
    record = weights_record_of(store, str(meta["model"]["name"]), pointer)
    fetch_blob(store, record, pointer, Path(out_dir) / BLOB_DIR)
    blob = record.metadata["blob"]
    weights = meta.get("weights") or {}
    return {"weights": {"mode": weights.get("mode"), "stripped": True, "builder": weights.get("refit") or {}},
            "blob": {"dir": BLOB_DIR, "graph": GRAPH_NAME, "data": DATA_NAME, "graph_digest": blob["graph_digest"],
                     "data_digest": blob["data_digest"], "data_bytes": blob.get("data_bytes", 0),
                     "tensors": blob.get("tensors", 0), "onnx_digest": blob.get("onnx_digest")}}


def republished_weights(store: Store, old: Mapping[str, Any], model: str, version: str, out: Path,
                        manifest_path: str, git_commit: str | None) -> dict[str, Any] | None:
    """A published engine published again as a new model version (same model file, same build key): its weights
    record published as that version too (the same bytes: the store keeps them once), so every model version has
    its own; the engine record's ``weights`` entry pointing at it. None for an engine that was embedded."""
    weights = old.get("weights")
    if not isinstance(weights, Mapping):
        return None
    pointer = blob_of(old)
    if pointer is None:
        return dict(weights)
    record = weights_record_of(store, str(old["model"]["name"]), pointer)
    folder = fetch_blob(store, record, pointer, Path(out) / BLOB_DIR)
    blob = record.metadata["blob"]
    build = {"weights": {"mode": weights.get("mode"), "stripped": bool(weights.get("stripped")),
                         "builder": weights.get("refit") or {}},
             "blob": {"dir": folder.name, "graph": GRAPH_NAME, "data": DATA_NAME,
                      **{k: blob[k] for k in ("format", "graph_digest", "data_digest", "data_bytes", "tensors")},
                      "kept": blob.get("kept", 0), "onnx_digest": blob.get("onnx_digest") or old["model"]["digest"]},
             "runner": record.metadata.get("runner"), "precision": record.metadata.get("precision")}
    return publish_blob(store, Path(out), build, model=model, version=version,
                        source=BlobSource.from_json(blob.get("source") or {}), manifest_path=manifest_path,
                        git_commit=git_commit)
