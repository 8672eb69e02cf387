"""What validate reads of a model file: that it is a regular file holding an ONNX model, its graph's inputs and
outputs, whether it is float16 already and whether its weights live in external data — without loading them.

A model path can name anything: a folder, a FIFO (opening it would wait for a writer), ``/dev/zero`` (reading
it never ends), an empty file, a PNG, a text file. Protobuf parses an empty file as an empty ``ModelProto`` and
often parses text without complaint, so "onnx.load did not raise" says little; and loading a model's weights to
look at its outputs costs its size in memory. So the file is opened without blocking, checked to be a regular
file on the open descriptor, memory-mapped, and walked in protobuf's wire format (the encoding is the public
spec at protobuf.dev/programming-guides/encoding): ``ModelProto`` -> ``graph`` -> the graph's inputs, outputs,
nodes and initializer headers; initializer payloads are skipped, never touched. Only the small ``ValueInfoProto``
messages are handed to onnx's own classes. Field numbers are onnx/onnx.proto's.

``read_model_file(path) -> ModelFile``, or ``ModelFileError`` (message, hint) saying what the file is instead.
"""

from __future__ import annotations

import mmap
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass

from orchestrator.digests import LFS_HINT, LFS_POINTER_PREFIX
from orchestrator.manifest.positions import printable

# onnx.proto field numbers: ModelProto, GraphProto, NodeProto, TensorProto, AttributeProto
_MODEL_IR_VERSION, _MODEL_GRAPH, _MODEL_OPSET = 1, 7, 8
_GRAPH_NODE, _GRAPH_INITIALIZER, _GRAPH_INPUT, _GRAPH_OUTPUT, _GRAPH_VALUE_INFO = 1, 5, 11, 12, 13
_NODE_NAME, _NODE_OP_TYPE, _NODE_ATTRIBUTE = 3, 4, 5
_TENSOR_DATA_TYPE, _TENSOR_NAME, _TENSOR_DATA_LOCATION = 2, 8, 14
_ATTR_NAME, _ATTR_I, _ATTR_T = 1, 3, 5
# the wire type each known ModelProto field must have (0 varint, 2 length-delimited)
_MODEL_WIRE = {1: 0, 2: 2, 3: 2, 4: 2, 5: 0, 6: 2, 7: 2, 8: 2, 14: 2, 20: 2, 25: 2}
_FLOAT, _FLOAT16 = 1, 10  # TensorProto.DataType
_EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL

_HINT = ("source.path must name the .onnx file itself (export the model to ONNX first; "
         "`python -m onnx.checker PATH` says what is wrong with a damaged one)")
# What people point a model path at by mistake, by the bytes it starts with.
_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"GIF8", "a GIF image"),
    (b"PK\x03\x04", "a zip archive (PyTorch .pt/.pth checkpoints, .keras and .npz files are zip archives)"),
    (b"\x89HDF\r\n\x1a\n", "an HDF5 file (a Keras .h5 model?)"), (b"%PDF", "a PDF document"),
    (b"\x1f\x8b", "gzip-compressed data (decompress it first)"), (b"\x93NUMPY", "a NumPy .npy array"),
    (b"\x7fELF", "an executable (ELF)"),
)


class ModelFileError(Exception):
    """The model path names no readable ONNX model: ``message`` says what it is instead, ``hint`` how to fix it."""

    def __init__(self, message: str, hint: str | None = _HINT) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


@dataclass(frozen=True)
class ModelFile:
    """What the checks need of a model file."""

    inputs: tuple[str, ...]  # the graph's inputs that are not initializers (what a feed names)
    outputs: tuple[str, ...]
    # why onnxconverter-common would call the model float16 already (its ``check_if_fp16_ready``: a float16
    # graph input/output/value info or initializer, a Cast to float16 — here also a float16 Constant, which its
    # shape inference turns into a float16 value info); None for a float32 model
    float16: str | None
    external_data: bool  # some initializer keeps its bytes in another file


class _NotProtobuf(Exception):
    def __init__(self, at: int, why: str) -> None:
        super().__init__(why)
        self.at = at
        self.why = why


def _varint(buf: mmap.mmap | bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise _NotProtobuf(pos, "a number runs past the end of its message")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise _NotProtobuf(pos, "a number longer than 10 bytes")


Field = tuple[int, int, int, int]  # field number, wire type, value (varint) or payload start, payload end


def _fields(buf: mmap.mmap | bytes, start: int, end: int) -> Iterator[Field]:
    """The fields of the message in ``buf[start:end]``; payloads are (start, end) offsets, never copied."""
    pos = start
    while pos < end:
        at = pos
        key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise _NotProtobuf(at, "field number 0")
        if wire == 0:
            value, pos = _varint(buf, pos, end)
            yield number, wire, value, 0
            continue
        if wire == 2:
            length, pos = _varint(buf, pos, end)
            size = length
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
        else:  # 3/4: groups (unused by onnx.proto), 6/7: not a wire type
            raise _NotProtobuf(at, f"wire type {wire}")
        if pos + size > end:
            raise _NotProtobuf(at, f"field {number} runs past the end of its message")
        yield number, wire, pos, pos + size
        pos += size


def _text(buf: mmap.mmap | bytes, start: int, end: int) -> str:
    return bytes(buf[start:end]).decode("utf-8", "replace")


def _sniff(head: bytes) -> str | None:
    """What a file that is no ONNX model looks like, from its first bytes; None when nothing is recognised."""
    for magic, what in _MAGIC:
        if head.startswith(magic):
            return what
    if head[4:8] == b"TFL3":
        return "a TensorFlow Lite model"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as e:  # cut in the middle of a character at the end of the head: still text
        if e.start < len(head) - 3:
            return None
        text = head[:e.start].decode("utf-8")
    if text and all(c.isprintable() or c in "\t\r\n" for c in text):
        first = text.strip().splitlines()[0] if text.strip() else ""
        shown = printable(first[:40]) + ("..." if len(first) > 40 else "")
        return f"text ('{shown}')" if first else "text (blank lines)"
    return None


def _open_regular(path: str) -> int:
    """A read descriptor of ``path`` if it is a regular file; never blocks (a FIFO without a writer would)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ModelFileError("not found", "fix the path (relative paths start at the manifest's folder), or fetch "
                                          "the model first (scripts/fetch_models.py for the demo models)") from None
    except IsADirectoryError:
        raise ModelFileError("is a folder, not a file") from None
    except OSError as e:
        raise ModelFileError(f"cannot be read: {e.strerror or e}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = next((name for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"),
                                             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                                             (stat.S_ISSOCK, "a socket")) if test(mode)), "not a plain file")
        if kind == "a folder":
            raise ModelFileError("is a folder, not a file")
        raise ModelFileError(f"is not a regular file ({kind})")
    return fd


def read_model_file(path: str) -> ModelFile:
    """The facts of the ONNX model at ``path``, or ``ModelFileError`` saying why it is none."""
    fd = _open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            raise ModelFileError("is empty (0 bytes)")
        try:
            buf = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as e:
            raise ModelFileError(f"cannot be read: {getattr(e, 'strerror', None) or e}") from None
    finally:
        os.close(fd)
    with buf:
        head = bytes(buf[:512])
        if head.startswith(LFS_POINTER_PREFIX):
            raise ModelFileError("is a Git LFS pointer, not the model", LFS_HINT)
        try:
            return _model(buf, size)
        except _NotProtobuf as e:
            seen = _sniff(head)
            what = f"it is {seen}" if seen else f"its bytes are not ONNX's protobuf encoding (byte {e.at}: {e.why})"
            raise ModelFileError(f"is not an ONNX model: {what}") from None
        except ModelFileError:
            seen = _sniff(head)
            if seen:
                raise ModelFileError(f"is not an ONNX model: it is {seen}") from None
            raise


def _model(buf: mmap.mmap, size: int) -> ModelFile:
    ir_version = 0
    graph: tuple[int, int] | None = None
    opsets = 0
    for number, wire, a, b in _fields(buf, 0, size):
        expected = _MODEL_WIRE.get(number)
        if expected is not None and wire != expected:
            raise _NotProtobuf(a, f"ModelProto field {number} has wire type {wire}")
        if number == _MODEL_IR_VERSION:
            ir_version = a
        elif number == _MODEL_GRAPH:
            graph = (a, b)
        elif number == _MODEL_OPSET:
            opsets += 1
    if graph is None:
        raise ModelFileError("is not an ONNX model: it has no graph")
    if ir_version <= 0:
        raise ModelFileError("is not an ONNX model: it has no ir_version")
    if ir_version >= 3 and opsets == 0:  # IR 3 (onnx 1.0) made opset_import required
        raise ModelFileError("is not an ONNX model: it imports no operator set (opset_import is empty)")
    return _graph(buf, *graph)


def _graph(buf: mmap.mmap, start: int, end: int) -> ModelFile:
    import onnx

    inputs: list[str] = []
    outputs: list[str] = []
    initializers: set[str] = set()
    fp16: list[str] = []
    float_weights = half_weights = 0
    external = False
    for number, wire, a, b in _fields(buf, start, end):
        if wire != 2:
            continue
        if number in (_GRAPH_INPUT, _GRAPH_OUTPUT, _GRAPH_VALUE_INFO):
            info = onnx.ValueInfoProto.FromString(bytes(buf[a:b]))
            if number == _GRAPH_INPUT:
                inputs.append(info.name)
            elif number == _GRAPH_OUTPUT:
                outputs.append(info.name)
            if info.type.tensor_type.elem_type == _FLOAT16 and not fp16:
                role = {_GRAPH_INPUT: "input", _GRAPH_OUTPUT: "output"}.get(number, "value")
                fp16.append(f"{role} '{printable(info.name)}' is float16")
        elif number == _GRAPH_INITIALIZER:
            name, dtype, location = _tensor_header(buf, a, b)
            initializers.add(name)
            float_weights += dtype == _FLOAT
            half_weights += dtype == _FLOAT16
            external = external or location == _EXTERNAL
        elif number == _GRAPH_NODE:
            why = _float16_node(buf, a, b)
            if why and not fp16:
                fp16.append(why)
    if not outputs:
        raise ModelFileError("is not an ONNX model: its graph has no outputs")
    if half_weights:
        fp16.insert(0, f"{half_weights} of its {half_weights + float_weights} float initializers are float16")
    return ModelFile(inputs=tuple(n for n in inputs if n not in initializers), outputs=tuple(outputs),
                     float16=fp16[0] if fp16 else None, external_data=external)


def _tensor_header(buf: mmap.mmap, start: int, end: int) -> tuple[str, int, int]:
    """(name, data_type, data_location) of a TensorProto; its data fields are skipped."""
    name, dtype, location = "", 0, 0
    for number, wire, a, b in _fields(buf, start, end):
        if number == _TENSOR_DATA_TYPE and wire == 0:
            dtype = a
        elif number == _TENSOR_NAME and wire == 2:
            name = _text(buf, a, b)
        elif number == _TENSOR_DATA_LOCATION and wire == 0:
            location = a
    return name, dtype, location


def _float16_node(buf: mmap.mmap, start: int, end: int) -> str | None:
    """Why a Cast or Constant node makes the graph float16 already, else None. Other nodes: op_type only."""
    op_type = name = ""
    attributes: list[tuple[int, int]] = []
    for number, wire, a, b in _fields(buf, start, end):
        if wire != 2:
            continue
        if number == _NODE_OP_TYPE:
            op_type = _text(buf, a, b)
        elif number == _NODE_NAME:
            name = _text(buf, a, b)
        elif number == _NODE_ATTRIBUTE:
            attributes.append((a, b))
    if op_type not in ("Cast", "Constant"):
        return None
    for a, b in attributes:
        attr_name, value, tensor_type = "", None, None
        for number, wire, x, y in _fields(buf, a, b):
            if number == _ATTR_NAME and wire == 2:
                attr_name = _text(buf, x, y)
            elif number == _ATTR_I and wire == 0:
                value = x
            elif number == _ATTR_T and wire == 2:
                tensor_type = _tensor_header(buf, x, y)[1]
        if op_type == "Cast" and attr_name == "to" and value == _FLOAT16:
            return f"it casts to float16 (Cast node '{printable(name)}')"
        if op_type == "Constant" and attr_name == "value" and tensor_type == _FLOAT16:
            return f"it holds a float16 Constant (node '{printable(name)}')"
    return None


__all__ = ["ModelFile", "ModelFileError", "read_model_file"]
