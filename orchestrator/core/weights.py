"""Weights apart from engines, as data (pure): the weights record, what an engine record says of its weights, and
whether a model change is a refit. docs/refit.md tells the story.

``targets[].weights`` is ``embedded`` (today's engines), ``stripped`` (built without weights: a deployment refits it
from the model version's weights blob, the weights it was built with) or ``refittable`` (accepts new weights: a
model version whose graph is unchanged and only its weights differ plans ``~ refit``).

**The weights record.** A model version's weights are published once, content-addressed, as a store record of its
own kind (``"kind": "weights"``): its ``engine`` file is the blob's ``weights.bin`` and its ``model.onnx`` (the graph,
the initializers as external data into ``weights.bin``; ``orchestrator.weights_file``) an extra file. Its shape is an
engine record's, so every store keeps it as it keeps engines (the store port is unchanged), and its build key is a
digest over what it is (model, version, where the ONNX comes from, the blob's two digests): publishing it again is a
no-op. Engines built from the model as given point at its ``model`` blob; engines built from a precision
transform's output (an fp16 conversion, a Q/DQ model) at that ONNX's blob (``transform``), since a refit needs the
very initializers (names, types) the engine was built with. Index, plan and pull read engine records only
(``is_engine``); ``ls``/``show`` list both and ``retention`` keeps a blob while an engine it keeps points at it.

**~ refit.** For a ``refittable`` cell the key inputs carry the graph digest of its model (the model with every
weight's data removed; integer shape constants stay in it: ``weights_file.structure``) and each weight's digest
(``refit_inputs``).
``refit_change`` compares a published engine's key inputs with a cell's: when the graph digest is the same and every
other difference is one that new weights explain, the cell is refitted (``weights changed: N of M initializers``);
anything else (structure, shapes, dtypes or names of the graph, builder, options, profiles...) is a rebuild, and so is
a calibrated (int8/fp8) cell: new weights give new quantization scales.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from orchestrator.core.artifact import SCHEMA_VERSION, provenance_statement
from orchestrator.core.keys import digest_of

ENGINE_KIND = "engine"
WEIGHTS_KIND = "weights"
WEIGHTS_MEDIA_TYPE = "application/vnd.trt-orchestrator.weights.v1"
WEIGHTS_FORMAT = 1
WEIGHTS_BUILD_TYPE = "https://trt-orchestrator.dev/buildtypes/weights/v1"
SourceKind = Literal["model", "transform"]


def kind_of(meta: Mapping[str, Any]) -> str:
    """A record's kind: ``weights`` for a weights record, ``engine`` for every other (records from before kinds)."""
    return str(meta.get("kind") or ENGINE_KIND)


def is_engine(meta: Mapping[str, Any]) -> bool:
    return kind_of(meta) == ENGINE_KIND


def weights_mode(meta: Mapping[str, Any]) -> str:
    """An engine record's weights mode (``embedded`` for records from before weights modes)."""
    return str((meta.get("weights") or {}).get("mode") or "embedded")


def needs_refit(meta: Mapping[str, Any]) -> bool:
    """The engine file does not carry (all) its weights: a deployment refits it from its blob."""
    return bool((meta.get("weights") or {}).get("stripped"))


def blob_of(meta: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """What an engine record points at: ``{record_key, digest, graph_digest, size}`` of its weights record."""
    blob = (meta.get("weights") or {}).get("blob")
    return blob if isinstance(blob, Mapping) else None


@dataclass(frozen=True)
class BlobSource:
    """Where a blob's ONNX comes from: the model as given, or a precision transform's output (its kind and key)."""

    kind: SourceKind = "model"
    transform: str | None = None
    key: str | None = None

    @property
    def tag(self) -> str:
        """``model`` or ``fp16-<key12>``: the blob's part of its record address."""
        return "model" if self.kind == "model" else f"{self.transform}-{(self.key or '')[:12]}"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        if self.kind == "transform":
            out.update(transform=self.transform, key=self.key)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BlobSource:
        if data.get("kind") == "transform":
            return cls("transform", str(data.get("transform") or ""), str(data.get("key") or ""))
        return cls()


def weights_key_inputs(model: str, version: str, source: BlobSource, onnx_digest: str, graph_digest: str,
                       data_digest: str) -> dict[str, Any]:
    return {"kind": WEIGHTS_KIND, "format": WEIGHTS_FORMAT, "model": model, "version": version,
            "source": source.to_json(), "onnx": onnx_digest, "graph": graph_digest, "data": data_digest}


def weights_address(model: str, source: BlobSource, data_digest: str) -> str:
    """``ocr-det/weights/model@<12 hex of weights.bin>``: never an engine cell's address (no precision is called
    ``weights``), one per blob content."""
    return f"{model}/weights/{source.tag}@{data_digest.removeprefix('sha256:')[:12]}"


def weights_record(*, model: str, version: str, source: BlobSource, onnx_digest: str, blob: Mapping[str, Any],
                   data_size: int, runner: Mapping[str, Any], manifest_path: str, git_commit: str | None,
                   created_at: str, invocation_id: str, precision: str = "fp32") -> dict[str, Any]:
    """The metadata of a weights record. ``blob``: ``weights_file.Split.to_json()`` of the split ONNX;
    ``precision``: of the ONNX's weights (fp32 for the model as given, the transform's precision otherwise)."""
    inputs = weights_key_inputs(model, version, source, onnx_digest, str(blob["graph_digest"]),
                                str(blob["data_digest"]))
    key = digest_of(inputs)
    address = weights_address(model, source, str(blob["data_digest"]))
    target = {"name": "weights", "compute_capabilities": [], "hardware_compatibility": "none", "device": "cpu",
              "version_compatible": False, "platform_specific": False, "gpu_match": "cc", "lean_runtime": None}
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": WEIGHTS_KIND,
        "record_key": key,
        "address": address,
        "model": {"name": model, "version": version, "digest": onnx_digest},
        "precision": precision,
        "profile_set": source.tag,
        "profiles": [source.tag],
        "target": target,
        "builder": {"name": "weights", "version": str(WEIGHTS_FORMAT)},
        "build_key": key,
        "key_inputs": inputs,
        "engine": {"digest": str(blob["data_digest"]), "size": int(data_size), "filename": str(blob["data"]),
                   "media_type": WEIGHTS_MEDIA_TYPE},
        "blob": {**dict(blob), "source": source.to_json(), "onnx_digest": onnx_digest},
        "runner": dict(runner),
        "gates": {"parity": None, "benchmark": None, "status": "skipped", "ungated_publish_allowed": False},
        "timings": {"build_seconds": 0.0},
        "manifest": {"path": manifest_path, "git_commit": git_commit},
        "created_at": created_at,
        "provenance": provenance_statement(
            subject_name=str(blob["data"]), subject_digest=str(blob["data_digest"]),
            external_parameters={"model": model, "version": version, "source": source.to_json()},
            model_name=model, model_digest=onnx_digest, builder_id="https://trt-orchestrator.dev/weights-blob",
            invocation_id=invocation_id, started_on=created_at, finished_on=created_at),
    }


def engine_weights(mode: str, *, stripped: bool, blob: Mapping[str, Any] | None = None,
                   refit: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """An engine record's ``weights`` entry: its mode, whether its file lacks weights, its blob, what was done."""
    return {"mode": mode, "stripped": stripped, "blob": dict(blob) if blob is not None else None,
            "refit": dict(refit) if refit is not None else None}


def blob_pointer(weights_meta: Mapping[str, Any]) -> dict[str, Any]:
    """What an engine record keeps of its weights record (``blob_of``)."""
    return {"record_key": str(weights_meta["record_key"]), "digest": str(weights_meta["engine"]["digest"]),
            "graph_digest": str(weights_meta["blob"]["graph_digest"]), "size": int(weights_meta["engine"]["size"])}


# -- ~ refit ---------------------------------------------------------------------------------------------------


def refit_inputs(graph_digest: str, initializers: Mapping[str, str]) -> dict[str, Any]:
    """A refittable cell's ``key_inputs.weights``: the graph digest of its model and each initializer's digest
    (shortened: they name what changed, the model digest keys the bytes)."""
    return {"mode": "refittable", "graph": graph_digest,
            "initializers": {name: digest[:16] for name, digest in sorted(initializers.items())}}


@dataclass(frozen=True)
class RefitChange:
    """A weights-only change: how many of the model's initializers changed."""

    changed: int
    total: int

    @property
    def reason(self) -> str:
        return f"weights changed: {self.changed} of {self.total} initializers"


# key input paths a change of weights alone moves: the model's digest, and the transform part made from it (a
# conversion of new weights is a new transform key). A calibrated cell is never refitted (``refit_change``).
_WEIGHT_DERIVED = ("model", "transform", "calibration")


def _without(inputs: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in inputs.items() if k not in _WEIGHT_DERIVED and k != "weights"}
    w = inputs.get("weights")
    if isinstance(w, Mapping):
        out["weights"] = {k: v for k, v in w.items() if k != "initializers"}
    else:
        out["weights"] = w
    for part in ("transform", "calibration"):  # settings stay compared; only what derives from the model may move
        value = inputs.get(part)
        if isinstance(value, Mapping):
            out[part] = {k: v for k, v in value.items() if k not in ("model", "calibration")}
        else:
            out[part] = value
    return out


def refit_change(published: Mapping[str, Any], cell: Mapping[str, Any]) -> RefitChange | None:
    """``~ refit`` or not: both key inputs are of refittable engines with the same graph digest, and nothing but the
    weights (and what is derived from them) differs. None: a rebuild."""
    old_w, new_w = published.get("weights"), cell.get("weights")
    if not (isinstance(old_w, Mapping) and isinstance(new_w, Mapping)):
        return None
    if old_w.get("mode") != "refittable" or new_w.get("mode") != "refittable":
        return None
    if not old_w.get("graph") or old_w.get("graph") != new_w.get("graph"):
        return None
    if published.get("calibration") is not None or cell.get("calibration") is not None:
        return None  # new weights calibrate to new int8/fp8 scales, which TensorRT folds into its kernels: rebuild
    if _without(published) != _without(cell):
        return None
    old_i, new_i = old_w.get("initializers") or {}, new_w.get("initializers") or {}
    if set(old_i) != set(new_i):
        return None  # a renamed or added initializer changes the graph digest too; never refit around it
    changed = sum(1 for name in new_i if old_i[name] != new_i[name])
    if not changed and (published.get("model") == cell.get("model")):
        return None
    return RefitChange(changed, len(new_i))
