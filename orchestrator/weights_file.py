"""The weights blob's file format: an ONNX model as its graph and one data file of its initializers, and back.

A model version's weights are published once (``orchestrator.app.model_blob``) as two files: ``weights.bin``, the
raw little-endian bytes of every numeric initializer of the main graph of at least 1 KiB, in graph order, each
starting at a multiple of 64 bytes (zero padding between), and ``model.onnx``, the model with each of those
initializers turned into ONNX external data (``location: weights.bin``, ``offset``, ``length``; https://onnx.ai/onnx/repo-docs/ExternalData.html).
The two side by side are a loadable ONNX model: onnxruntime and TensorRT's ONNX parser (and
``OnnxParserRefitter.refit_from_file``) read external data relative to the model file.

The layout is this module's own, not ``onnx.external_data_helper``'s, so the bytes (and so the blob's digest) of one
model do not move with the onnx release that writes them: the same model always gives the same ``weights.bin``. A
string initializer, one under 1 KiB (``MIN_EXTERNAL_BYTES``: runtimes read small shape constants during shape
inference and refuse them as external data) and initializers of subgraphs stay inside ``model.onnx``.

An engine can point into the blob the same way: an onnxruntime engine built ``weights: stripped`` keeps each
initializer that is byte for byte a tensor of the blob as external data at that tensor's place in ``weights.bin``
(``strip_identical``), and ``reassemble`` puts the bytes back, writing a self-contained model atomically.

``structure`` is what planning reads (``core.weights``): the digest of the model with every weight's data removed
(names, types and shapes kept; integer shape constants are structure), and each weight's own digest.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.atomic import write_chunks_atomic
from orchestrator.errors import IntegrityError, OrchestratorError

FORMAT = 1
STRUCTURE_VERSION = 2  # what ``structure`` counts as weights; cached structures of another version are recomputed
GRAPH_NAME = "model.onnx"
DATA_NAME = "weights.bin"
ALIGN = 64
# Smaller tensors stay inside model.onnx (onnx's own ``convert_model_to_external_data`` default threshold): runtimes
# read shape-like constants (Reshape shapes, Slice starts) during shape inference and refuse them as external data
# (measured: onnxruntime 1.31, "Cannot parse data from external tensors").
MIN_EXTERNAL_BYTES = 1024
_PROTOBUF_LIMIT = 2 * 1024**3 - 64 * 1024**2  # a self-contained ONNX file must stay under protobuf's 2 GiB


class WeightsFileError(OrchestratorError):
    """A weights blob or an engine that points into one cannot be read or put together (says which and why)."""


@dataclass(frozen=True)
class Slot:
    """One initializer's place in ``weights.bin``."""

    name: str
    elem_type: int
    dims: tuple[int, ...]
    offset: int
    length: int
    sha256: str  # hex of its bytes


@dataclass(frozen=True)
class Split:
    """A model written in the blob's format."""

    graph: Path
    data: Path
    graph_digest: str  # sha256:<hex> of model.onnx
    data_digest: str  # sha256:<hex> of weights.bin
    data_bytes: int
    tensors: int  # initializers moved into weights.bin
    kept: int  # initializers left inside model.onnx (strings, tensors under MIN_EXTERNAL_BYTES)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "graph": self.graph.name, "data": self.data.name, "graph_digest": self.graph_digest,
                "data_digest": self.data_digest, "data_bytes": self.data_bytes, "tensors": self.tensors,
                "kept": self.kept}


def _onnx() -> Any:
    import onnx  # an edge dependency: only the steps that write or read weights blobs load it

    return onnx


def _raw(tensor: Any) -> bytes | None:
    """A numeric tensor's bytes as ONNX ``raw_data`` holds them (little-endian), or None (strings, empty)."""
    onnx = _onnx()
    if tensor.data_type in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED):
        return None
    if tensor.HasField("raw_data") and tensor.raw_data:
        data = bytes(tensor.raw_data)
    else:
        data = onnx.numpy_helper.to_array(tensor).tobytes()
    return data or None


def _padded(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


def slots(model: Any) -> list[Slot]:
    """The blob's table of ``model`` (weights loaded): where each numeric initializer goes in ``weights.bin``."""
    out: list[Slot] = []
    offset = 0
    for t in model.graph.initializer:
        data = _raw(t)
        if data is None or len(data) < MIN_EXTERNAL_BYTES:
            continue
        offset = _padded(offset)
        out.append(Slot(t.name, int(t.data_type), tuple(int(d) for d in t.dims), offset, len(data),
                        hashlib.sha256(data).hexdigest()))
        offset += len(data)
    return out


def _set_external(tensor: Any, slot: Slot) -> None:
    onnx = _onnx()
    tensor.ClearField("raw_data")
    for name in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data"):
        tensor.ClearField(name)
    del tensor.external_data[:]
    for key, value in (("location", DATA_NAME), ("offset", str(slot.offset)), ("length", str(slot.length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    tensor.data_location = onnx.TensorProto.EXTERNAL


def load_full(path: Path) -> Any:
    """An ONNX model with its external data, or ``WeightsFileError`` naming the file."""
    try:
        return _onnx().load(str(path))
    except Exception as e:  # protobuf DecodeError, a missing external data file: one family for us
        raise WeightsFileError(f"cannot read the ONNX model {path}: {type(e).__name__}: {e}",
                               hint="the weights blob is built from the ONNX model the engine was built from") from e


def split(src: Path, out_dir: Path) -> Split:
    """Write ``src`` (an ONNX model, with its external data) as ``out_dir/model.onnx`` + ``out_dir/weights.bin``."""
    model = load_full(Path(src))
    table = slots(model)
    by_name = {s.name: s for s in table}
    data_path, graph_path = Path(out_dir) / DATA_NAME, Path(out_dir) / GRAPH_NAME
    tensors = {t.name: t for t in model.graph.initializer}

    def chunks() -> Iterator[bytes]:
        offset = 0
        for s in table:
            if s.offset > offset:
                yield bytes(s.offset - offset)
            data = _raw(tensors[s.name])
            assert data is not None and len(data) == s.length
            yield data
            offset = s.offset + s.length

    data_digest = write_chunks_atomic(data_path, chunks())
    for t in model.graph.initializer:
        if t.name in by_name:
            _set_external(t, by_name[t.name])
    graph = model.SerializeToString(deterministic=True)
    graph_digest = write_chunks_atomic(graph_path, iter((graph,)))
    size = table[-1].offset + table[-1].length if table else 0
    return Split(graph_path, data_path, graph_digest, data_digest, size, len(table),
                 len(model.graph.initializer) - len(table))


def data_digest_of(src: Path) -> tuple[str, list[Slot]]:
    """The digest ``split(src)`` gives ``weights.bin``, and its table, without writing anything."""
    model = load_full(Path(src))
    table = slots(model)
    tensors = {t.name: t for t in model.graph.initializer}
    h = hashlib.sha256()
    offset = 0
    for s in table:
        h.update(bytes(s.offset - offset))
        h.update(_raw(tensors[s.name]) or b"")
        offset = s.offset + s.length
    return "sha256:" + h.hexdigest(), table


def strip_identical(engine: Path, table: list[Slot], out: Path) -> dict[str, int]:
    """Rewrite the ONNX ``engine`` (weights loaded) so each initializer that is byte for byte a tensor of the blob
    whose table is ``table`` becomes external data at that tensor's place in ``weights.bin``; the others stay
    inside. Written to ``out`` atomically; returns what was stripped and kept (tensors and bytes)."""
    model = load_full(Path(engine))
    by_content = {(s.elem_type, s.dims, s.sha256): s for s in table}
    stats = {"stripped_tensors": 0, "stripped_bytes": 0, "kept_tensors": 0, "kept_bytes": 0}
    for t in model.graph.initializer:
        data = _raw(t)
        if data is None or len(data) < MIN_EXTERNAL_BYTES:
            continue
        slot = by_content.get((int(t.data_type), tuple(int(d) for d in t.dims), hashlib.sha256(data).hexdigest()))
        if slot is None:
            stats["kept_tensors"] += 1
            stats["kept_bytes"] += len(data)
            continue
        _set_external(t, slot)
        stats["stripped_tensors"] += 1
        stats["stripped_bytes"] += len(data)
    write_chunks_atomic(Path(out), iter((model.SerializeToString(deterministic=True),)))
    return stats


def external_refs(path: Path) -> list[tuple[str, int, int]]:
    """(tensor name, offset, length) of every initializer of ``path`` that points into ``weights.bin``."""
    model = _onnx().load(str(path), load_external_data=False)
    out = []
    for t in model.graph.initializer:
        if t.data_location == _onnx().TensorProto.EXTERNAL:
            info = {e.key: e.value for e in t.external_data}
            if info.get("location") == DATA_NAME:
                out.append((t.name, int(info.get("offset", 0)), int(info.get("length", 0))))
    return out


def reassemble(engine: Path, data: Path, out: Path) -> int:
    """Put the bytes of every tensor ``engine`` (an ONNX model) points at in ``data`` (a ``weights.bin``) back into
    it and write the self-contained model to ``out`` atomically; returns how many tensors were filled. A reference
    outside ``data``, or another external file, is a ``WeightsFileError``; nothing is written then."""
    onnx = _onnx()
    try:
        model = onnx.load(str(engine), load_external_data=False)
    except Exception as e:
        raise WeightsFileError(f"cannot read the ONNX engine {engine}: {type(e).__name__}: {e}") from e
    size = Path(data).stat().st_size
    filled = 0
    total = 0
    with open(data, "rb") as f:
        for t in model.graph.initializer:
            if t.data_location != onnx.TensorProto.EXTERNAL:
                continue
            info = {e.key: e.value for e in t.external_data}
            if info.get("location") != DATA_NAME:
                raise WeightsFileError(f"{engine.name}: initializer {t.name!r} points at {info.get('location')!r}, "
                                       f"not at the weights blob {DATA_NAME}")
            offset, length = int(info.get("offset", 0)), int(info.get("length", -1))
            if length < 0 or offset + length > size:
                raise IntegrityError(f"{engine.name}: initializer {t.name!r} needs bytes {offset}..{offset + length} "
                                     f"of the weights blob, which has {size}",
                                     hint="the engine and the weights blob are of different model versions")
            f.seek(offset)
            t.raw_data = f.read(length)
            del t.external_data[:]
            t.data_location = onnx.TensorProto.DEFAULT
            filled += 1
            total += length
    if total > _PROTOBUF_LIMIT:
        raise WeightsFileError(f"{engine.name} with its weights is {total / 1024**3:.1f} GiB, over the 2 GiB an ONNX "
                               "file can hold", hint="deploy it stripped (--keep-stripped) beside weights.bin")
    write_chunks_atomic(Path(out), iter((model.SerializeToString(deterministic=True),)))
    return filled


@dataclass(frozen=True)
class Structure:
    """What planning reads of a model (``core.weights``): the digest of the model with every weight's data removed
    (names, element types and dims kept; other initializers, such as shape constants, kept whole), and each weight's
    own digest (sha256 hex of its bytes)."""

    graph: str
    initializers: Mapping[str, str]


def _weight_types() -> frozenset[int]:
    """Element types of weights a refit can replace: floating point and the 8/4-bit integers of quantized weights.
    Any other initializer (int64/int32 shape constants, axes, indices, booleans) is structure: a builder evaluates
    such values while it builds (a Reshape target fixes the shapes the engine was optimized for), and a refit only
    replaces weights with new values of the same count ("Refitting an Engine"), so a new value there is a rebuild."""
    names = ("FLOAT", "FLOAT16", "BFLOAT16", "DOUBLE", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2",
             "FLOAT8E5M2FNUZ", "FLOAT4E2M1", "INT8", "UINT8", "INT4", "UINT4")
    proto = _onnx().TensorProto
    return frozenset(getattr(proto, n) for n in names if hasattr(proto, n))


def structure(path: Path) -> Structure:
    model = load_full(Path(path))
    digests: dict[str, str] = {}
    weights = _weight_types()
    for t in model.graph.initializer:
        if t.data_type not in weights:
            continue  # its value stays in the graph digest
        data = _raw(t)
        digests[t.name] = hashlib.sha256(data if data is not None else t.SerializeToString()).hexdigest()
        if data is not None:
            for name in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
                t.ClearField(name)
            del t.external_data[:]
            t.data_location = _onnx().TensorProto.DEFAULT
    graph = "sha256:" + hashlib.sha256(model.SerializeToString(deterministic=True)).hexdigest()
    return Structure(graph, digests)
