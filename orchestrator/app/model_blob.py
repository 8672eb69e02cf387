"""A model version's ONNX, published once and fetched where it is needed (``core.weights``: the weights record).

The pipeline publishes the blob of every stripped or refittable engine as it publishes the engine
(``run.weights_blob``). This module is the same record outside a build:

- ``publish_model_version(project, model)``: the model version's ONNX (the model as given, with its external data)
  published once, content-addressed; returns what an engine record points at (a no-op when it is there already);
- ``ensure_model_version(project, model)``: that, unless it is there (``publish`` with ``registry.publish_onnx``);
- ``fetch_model_version(store, model, version, dest)``: that ONNX back, every file checked against its digest, as a
  folder whose ``model.onnx`` loads with its ``weights.bin`` (what build-on-miss builds from);
- ``BlobCache``: the blobs one command needs, each fetched once however many engines point at it (``pull --all``,
  ``export triton``: every GPU's engine of one model version refits from one download).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from orchestrator import plugins
from orchestrator.app.project import Project
from orchestrator.contracts.store import Store, StoredArtifact
from orchestrator.core.query import versions_newest_first
from orchestrator.core.weights import WEIGHTS_KIND, BlobSource, blob_of, kind_of
from orchestrator.errors import ArtifactNotFoundError, IntegrityError, UsageError
from orchestrator.run.publish import git_commit
from orchestrator.run.weights_blob import BLOB_DIR, fetch_blob, publish_blob, weights_record_of, write_blob
from orchestrator.weights_file import GRAPH_NAME


def publish_model_version(project: Project, model: str) -> dict[str, Any]:
    """Publish ``model``'s ONNX at the version its manifest declares, as a weights record (source ``model``), to
    the project's registry; returns the pointer an engine record keeps (``record_key``, ``digest``, ...)."""
    found = project.models.get(model)
    if found is None:
        raise UsageError(f"no model {model!r} in the manifests", hint=f"models: {', '.join(sorted(project.models))}")
    cell = next((c for c in project.graph.cells if c.model == model), None)
    manifest = cell.manifest if cell is not None else ""
    store = plugins.open_store(project.registry)
    with tempfile.TemporaryDirectory(prefix="model-blob-") as tmp:
        blob = write_blob(Path(found.source.path), Path(tmp))
        if cell is not None:  # the digest its engines' build keys name (external data included): build-on-miss
            blob["onnx_digest"] = cell.key_inputs["model"]["digest"]  # checks the record against them by it
        build = {"weights": {"mode": "stripped", "stripped": True}, "blob": blob,
                 "runner": plugins.fingerprint().to_json()}
        entry = publish_blob(store, Path(tmp), build, model=found.name, version=found.version, source=BlobSource(),
                             manifest_path=manifest, git_commit=git_commit(manifest) if manifest else None)
    pointer: dict[str, Any] = dict(entry["blob"])
    return pointer


def ensure_model_version(project: Project, model: str) -> bool:
    """``publish_model_version`` unless the registry holds the ONNX of ``model`` at its declared version, as the
    model the manifest keys (``registry.publish_onnx``: publish puts it beside the engines); True when published."""
    found = project.models[model]
    digest = next((c.key_inputs["model"]["digest"] for c in project.graph.cells if c.model == model), None)
    try:
        record = model_version_record(plugins.open_store(project.registry), model, found.version)
    except ArtifactNotFoundError:
        record = None
    if record is not None and record.metadata["model"].get("digest") == digest:
        return False
    publish_model_version(project, model)
    return True


def model_version_record(store: Store, model: str, version: str | None = None) -> StoredArtifact:
    """The newest weights record of ``model`` at ``version`` (None: its latest) holding the model as given."""
    records = [r for r in store.records(model) if kind_of(r.metadata) == WEIGHTS_KIND
               and r.metadata["model"]["name"] == model
               and BlobSource.from_json(r.metadata["blob"]["source"]).kind == "model"]
    versions = versions_newest_first([r.metadata for r in records])
    wanted = version or (versions[0] if versions else None)
    for record in records:
        if str(record.metadata["model"]["version"]) == wanted:
            return record
    raise ArtifactNotFoundError(f"the ONNX of {model} {wanted or '(any version)'} is not published",
                                hint="publish an engine with weights: stripped or refittable, or call "
                                     "publish_model_version" + (f"; published versions: {', '.join(versions)}"
                                                                if versions else ""))


def fetch_model_version(store: Store, model: str, version: str | None, dest: Path) -> Path:
    """The model version's ONNX written under ``dest`` (a folder), verified; returns its ``model.onnx``."""
    record = model_version_record(store, model, version)
    meta = record.metadata
    pointer = {"record_key": meta["record_key"], "digest": meta["engine"]["digest"],
               "graph_digest": meta["blob"]["graph_digest"], "size": meta["engine"]["size"]}
    return fetch_blob(store, record, pointer, Path(dest)) / GRAPH_NAME


class BlobCache:
    """The weights blobs one command fetches, each once (by weights.bin and model.onnx digest), in a private
    temporary folder removed when the command ends."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.fetched: dict[tuple[str, str], Path] = {}
        self.downloads = 0  # how many blobs were really fetched (tests and reports read it)
        self._root: Path | None = None

    def folder(self, engine_meta: Mapping[str, Any]) -> Path:
        """The blob folder of the weights record ``engine_meta`` points at, fetched the first time."""
        pointer = blob_of(engine_meta)
        if pointer is None:
            raise IntegrityError(f"{engine_meta.get('address')}: a stripped engine whose record names no weights "
                                 "blob", hint="republish it")
        key = (str(pointer["digest"]), str(pointer["graph_digest"]))
        if key not in self.fetched:
            if self._root is None:
                self._root = Path(tempfile.mkdtemp(prefix="orchestrate-weights-"))
            record = weights_record_of(self.store, str(engine_meta["model"]["name"]), pointer)
            dest = self._root / f"{key[0].removeprefix('sha256:')[:16]}-{len(self.fetched)}" / BLOB_DIR
            self.fetched[key] = fetch_blob(self.store, record, pointer, dest)
            self.downloads += 1
        return self.fetched[key]

    def close(self) -> None:
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None
        self.fetched.clear()

    def __enter__(self) -> BlobCache:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()
