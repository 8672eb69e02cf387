"""Model and data digests, with a stat-keyed cache so unchanged large files are not re-read by every plan.

A model digest covers the ONNX file and every external-data file it references. The cache entry is keyed by
(size, mtime_ns, inode) of each file; any change re-hashes. External data is discovered in the same single
pass that hashes the file: the ``location`` key of ONNX's external-data entries is searched for in the chunks
being hashed, and only a model that has it is parsed (without loading its weights) for the exact file list.

Only regular files are ever read: a FIFO would block the open, ``/dev/zero`` would never end. External-data
entries are checked as onnx and onnxruntime check them (a relative location inside the model's folder) and
against the file (present, a regular file, long enough for the bytes each tensor's offset and length declare),
on every digest, cached or not: a weights file truncated after the last plan is caught before a build. Every
problem is a ``BuildError`` naming the model, the tensor and the file, with a fix.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock

from orchestrator.atomic import write_json_atomic
from orchestrator.errors import BuildError
from orchestrator.weights_file import STRUCTURE_VERSION, structure

CHUNK = 8 * 1024 * 1024
_PARALLEL_MIN = 1024 * 1024  # below this a thread costs more than it saves
# protobuf encoding of StringStringEntryProto{key: "location"}: field 1, length 8, then the bytes
_EXTERNAL_MARK = b"\x0a\x08location"
# A checkout without `git lfs pull` holds a ~130-byte text pointer where the model should be: never key it.
LFS_POINTER_PREFIX = b"version https://git-lfs.github.com/spec/v1"
LFS_HINT = "run `git lfs pull` (CI: actions/checkout with lfs: true)"
_LFS_POINTER_MAX = 1024
_EXTERNAL_HINT = ("keep the external-data files next to the model as it was saved, or embed the weights: "
                  "onnx.save(onnx.load(PATH), OUT) (models under 2 GB)")


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a plain file"


def _not_regular(path: str, mode: int) -> OSError:
    return OSError(errno.EINVAL, f"not a regular file ({_kind(mode)})", path)


def is_lfs_pointer(path: str) -> bool:
    """Does ``path`` start like a Git LFS pointer file? (False when it cannot be read: others say why.)"""
    try:
        with open(path, "rb") as f:
            return f.read(len(LFS_POINTER_PREFIX)) == LFS_POINTER_PREFIX
    except OSError:
        return False


def _stat_key(path: str) -> list[int]:
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(path, st.st_mode)
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def hash_file(path: str, *, scan_external: bool = False, regular_only: bool = False) -> tuple[str, bool]:
    """sha256 of a file in one streaming pass; optionally also whether it may reference external data.

    ``regular_only``: read only a regular file, else ``OSError`` EINVAL "not a regular file (a FIFO)"; the open
    does not block on a FIFO and the type is checked on the open file, so swapping the path meanwhile cannot
    hang it (the digest cache always asks for this). Without it a pipe is read to its end (a manifest given as
    ``<(...)``)."""
    h = hashlib.sha256()
    found = False
    tail = b""
    fd = os.open(path, os.O_RDONLY | (getattr(os, "O_NONBLOCK", 0) if regular_only else 0))
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    mode = st.st_mode
    if regular_only and not stat.S_ISREG(mode):
        os.close(fd)
        raise _not_regular(path, mode)
    # A small file gets a buffer its size (+1: the read that finds the end), not 8 MiB: zeroing 8 MiB took 86 of
    # the 100 us that hashing a manifest took. A file that grows meanwhile is still read to its end.
    buf = bytearray(st.st_size + 1 if stat.S_ISREG(mode) and st.st_size < CHUNK else CHUNK)
    view = memoryview(buf)
    with open(fd, "rb", buffering=0) as f:
        while True:
            n = f.readinto(buf)
            if not n:
                break
            if scan_external and not found and n >= _PARALLEL_MIN:
                # The mark search costs about as much CPU as sha256 itself (bytes.find ~2 GB/s): run it while a
                # second thread hashes the same bytes (hashlib releases the GIL on large buffers), so a model
                # digest reads at openssl's speed instead of ~0.65x of it (bench/bench_hash.py).
                worker = threading.Thread(target=h.update, args=(view[:n],))
                worker.start()
            else:
                worker = None
                h.update(view[:n])
            if scan_external and not found:
                # the mark may straddle two chunks: search the seam too. Only the n bytes just read: past them the
                # buffer still holds the previous chunk's bytes, which glued onto the seam gave false marks.
                head = bytes(view[:min(n, len(_EXTERNAL_MARK))])
                if _EXTERNAL_MARK in tail + head or buf.find(_EXTERNAL_MARK, 0, n) >= 0:
                    found = True
                tail = (tail + head)[-len(_EXTERNAL_MARK):] if n < len(_EXTERNAL_MARK) else \
                    bytes(view[n - len(_EXTERNAL_MARK):n])
            if worker is not None:
                worker.join()  # before the next readinto overwrites the bytes it hashes
    return "sha256:" + h.hexdigest(), found


# bytes per element of the types external data can hold; sub-byte types are packed (bits, rounded up per tensor)
_ELEMENT_BYTES = {"FLOAT": 4, "UINT8": 1, "INT8": 1, "UINT16": 2, "INT16": 2, "INT32": 4, "INT64": 8, "BOOL": 1,
                  "FLOAT16": 2, "DOUBLE": 8, "UINT32": 4, "UINT64": 8, "COMPLEX64": 8, "COMPLEX128": 16,
                  "BFLOAT16": 2, "FLOAT8E4M3FN": 1, "FLOAT8E4M3FNUZ": 1, "FLOAT8E5M2": 1, "FLOAT8E5M2FNUZ": 1,
                  "FLOAT8E8M0": 1}
_ELEMENT_BITS = {"UINT4": 4, "INT4": 4, "FLOAT4E2M1": 4, "UINT2": 2, "INT2": 2}


def _tensor_nbytes(tensor) -> int | None:
    """The bytes a tensor's data takes, from its type and shape; None where the packing is not known."""
    import onnx

    type_name = onnx.TensorProto.DataType.Name(tensor.data_type) if tensor.data_type in \
        onnx.TensorProto.DataType.values() else ""
    count = 1
    for d in tensor.dims:
        if d < 0:
            return None  # a malformed shape: only the file's bounds are checked
        count *= int(d)
    if type_name in _ELEMENT_BYTES:
        return count * _ELEMENT_BYTES[type_name]
    if type_name in _ELEMENT_BITS:
        return (count * _ELEMENT_BITS[type_name] + 7) // 8
    return None


@dataclass(frozen=True)
class _Need:
    """What the model needs of one external-data file: bytes up to ``end`` (the farthest tensor, ``tensor``)."""

    path: str
    end: int
    tensor: str
    location: str


def _model_label(model_path: str, name: str | None) -> str:
    return f"model {name} ({model_path})" if name else f"model {model_path}"


def _external_needs(model_path: str, name: str | None = None) -> dict[str, _Need]:
    """Absolute external-data path -> what the model needs of it, from the model's external-data entries
    (weights are not loaded). Entries onnx and onnxruntime would refuse are refused here, with the tensor."""
    import onnx
    from onnx.external_data_helper import _get_all_tensors

    label = _model_label(model_path, name)
    try:
        model = onnx.load(model_path, load_external_data=False)
    except Exception as e:  # protobuf DecodeError and friends: the file is not an ONNX model
        raise BuildError(f"{label} is not a readable ONNX model: {type(e).__name__}: {e}",
                         hint="re-export or re-download the model; `python -m onnx.checker PATH` shows what is "
                              "wrong") from None
    base = os.path.dirname(os.path.abspath(model_path))
    needs: dict[str, _Need] = {}
    for tensor in _get_all_tensors(model):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        fields = {e.key: e.value for e in tensor.external_data}
        where = f"{label}: external data of tensor {tensor.name!r}"
        location = fields.get("location", "")
        if not location:
            raise BuildError(f"{where} has no location", hint=_EXTERNAL_HINT)
        if os.path.isabs(location):
            raise BuildError(f"{where} is at an absolute location {location!r}; onnx and onnxruntime only read "
                             "external data relative to the model's folder", hint=_EXTERNAL_HINT)
        norm = os.path.normpath(location)
        if norm == ".." or norm.startswith(".." + os.sep):
            raise BuildError(f"{where} is at {location!r}, outside the model's folder {base}; onnx and onnxruntime "
                             "refuse external data there", hint=_EXTERNAL_HINT)
        numbers = {}
        for key in ("offset", "length"):
            raw = fields.get(key)
            if raw is None:
                continue
            try:
                value = int(raw)
            except ValueError:
                value = -1
            if value < 0:
                raise BuildError(f"{where} declares {key} {raw!r}: not a byte count (a whole number >= 0)",
                                 hint=_EXTERNAL_HINT)
            numbers[key] = value
        expected = _tensor_nbytes(tensor)
        length = numbers.get("length")
        if length is not None and expected is not None and length != expected:
            raise BuildError(f"{where} declares {length} bytes in {location}, but its shape {list(tensor.dims)} "
                             f"of {onnx.TensorProto.DataType.Name(tensor.data_type)} takes {expected} bytes",
                             hint=_EXTERNAL_HINT)
        end = numbers.get("offset", 0) + (length if length is not None else expected or 0)
        path = os.path.join(base, norm)
        if path not in needs or end > needs[path].end:
            needs[path] = _Need(path, end, tensor.name, location)
    return needs


def _check_external_file(need: _Need, size: int, label: str) -> None:
    if size < need.end:
        raise BuildError(f"{label}: external-data file {need.path} holds {size} bytes, but tensor {need.tensor!r} "
                         f"needs bytes up to {need.end} (its offset plus length): the file is truncated or is not "
                         "the one this model was saved with", hint=_EXTERNAL_HINT)


def _external_file_error(need: _Need, err: OSError, label: str) -> BuildError:
    what = "not found" if isinstance(err, FileNotFoundError) else f"cannot be read ({err.strerror or err})"
    return BuildError(f"{label}: external-data file {need.location!r} of tensor {need.tensor!r} {what}: "
                      f"{need.path}", hint=_EXTERNAL_HINT)


def external_data_files(model_path: str, name: str | None = None) -> list[str]:
    """Absolute paths of the external-data files an ONNX model references (weights are not loaded), each
    checked: present, a regular file, as long as the model's entries declare (else ``BuildError``)."""
    label = _model_label(model_path, name)
    needs = _external_needs(model_path, name)
    for need in needs.values():
        try:
            size = _stat_key(need.path)[0]
        except OSError as e:
            raise _external_file_error(need, e, label) from None
        _check_external_file(need, size, label)
    return sorted(needs)


@dataclass
class DigestCache:
    """JSON file of path -> {stat, digest, maybe_external, external: [paths], external_needs: {path: [bytes
    needed, tensor, location]}}; safe for concurrent writers."""

    path: Path | None
    entries: dict
    dirty: bool = False
    rehashed: int = 0  # how many files were actually read (benchmarks and tests look at this)
    # every file whose digest was asked for and every data folder walked: what a digest depends on (the start-up
    # fast path witnesses them, ``orchestrator.fastpath``)
    touched: set[str] = field(default_factory=set)

    @classmethod
    def open(cls, path: Path | None) -> DigestCache:
        if path is None or not path.exists():
            return cls(path, {})
        try:
            entries = json.loads(path.read_text())
        except (OSError, ValueError):
            entries = None
        # a corrupt cache is only a slower plan, never an error
        return cls(path, entries if isinstance(entries, dict) else {})

    def _file_digest(self, path: str, scan_external: bool) -> tuple[str, bool]:
        self.touched.add(path)
        key = _stat_key(path)
        entry = self.entries.get(path)
        if isinstance(entry, dict) and entry.get("stat") == key and (not scan_external or "maybe_external" in entry):
            return entry["digest"], entry.get("maybe_external", False)
        digest, maybe_external = hash_file(path, scan_external=scan_external, regular_only=True)
        self.rehashed += 1
        entry = {"stat": key, "digest": digest}
        if scan_external:  # an unscanned hash says nothing about external data: model_digest must scan again
            entry["maybe_external"] = maybe_external
        self.entries[path] = entry
        self.dirty = True
        return digest, maybe_external

    def data_digest(self, path: str) -> str:
        """A file, or a folder (digest over sorted relative names and their file digests). Only regular files
        are read: anything else (a FIFO, a device) is a ``BuildError`` naming it."""
        try:
            self.touched.add(path)
            if os.path.isdir(path):
                parts = []
                for root, _, files in sorted(os.walk(path)):
                    self.touched.add(root)
                    for name in sorted(files):
                        full = os.path.join(root, name)
                        try:
                            parts.append([os.path.relpath(full, path), self._file_digest(full, False)[0]])
                        except OSError as e:
                            raise BuildError(f"data folder {path}: {full} cannot be read: {e.strerror or e}",
                                             hint="keep only regular files (.npy/.npz, images) in data folders"
                                             ) from None
                return "sha256:" + hashlib.sha256(json.dumps(parts).encode()).hexdigest()
            return self._file_digest(path, False)[0]
        except OSError as e:
            raise BuildError(f"data file {path} cannot be read: {e.strerror or e}",
                             hint="point the data path at a regular file or a folder of them") from None

    def model_digest(self, path: str, *, name: str | None = None) -> str:
        """The model file and its external data; ``name`` (the manifest's model name) goes into errors."""
        label = _model_label(path, name)
        try:
            digest, maybe_external = self._file_digest(path, True)
        except FileNotFoundError:
            raise BuildError(f"{label}: the model file is not found",
                             hint="fix the model's source.path or fetch the model first") from None
        except OSError as e:
            raise BuildError(f"{label}: the model file cannot be read: {e.strerror or e}",
                             hint="source.path must name a regular .onnx file") from None
        entry = self.entries[path]
        if int(entry["stat"][0]) <= _LFS_POINTER_MAX and is_lfs_pointer(path):
            raise BuildError(f"{label} is a Git LFS pointer, not the model", hint=LFS_HINT)
        if not maybe_external:
            return digest
        needs = entry.get("external_needs")
        if not isinstance(needs, dict) or not isinstance(entry.get("external"), list):  # not parsed yet / older
            found = _external_needs(path, name)
            needs = {p: [n.end, n.tensor, n.location] for p, n in found.items()}
            entry["external"] = sorted(found)
            entry["external_needs"] = needs
            self.dirty = True
        parts = [digest]
        for p in entry["external"]:
            known = needs.get(p)
            end, tensor, location = known if isinstance(known, list) and len(known) == 3 else [0, "?", p]
            need = _Need(p, int(end) if isinstance(end, int) else 0, str(tensor), str(location))
            try:
                file_digest = self._file_digest(p, False)[0]
            except OSError as e:
                raise _external_file_error(need, e, label) from None
            _check_external_file(need, int(self.entries[p]["stat"][0]), label)
            parts.append(f"{os.path.basename(p)}={file_digest}")
        return "sha256:" + hashlib.sha256("\n".join(parts).encode()).hexdigest()

    def model_structure(self, path: str, digest: str) -> tuple[str, dict[str, str]]:
        """The model's graph digest (weights data removed) and each weight's digest
        (``weights_file.structure``), computed once per model digest and kept in the cache: what plans ``~ refit``."""
        key = f"structure:{STRUCTURE_VERSION}:{digest}"
        entry = self.entries.get(key)
        if not (isinstance(entry, dict) and isinstance(entry.get("graph"), str)
                and isinstance(entry.get("initializers"), dict)):
            found = structure(Path(path))
            entry = {"graph": found.graph, "initializers": dict(found.initializers)}
            self.entries[key] = entry
            self.dirty = True
        return str(entry["graph"]), {str(k): str(v) for k, v in entry["initializers"].items()}

    def save(self) -> None:
        if not self.dirty or self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.path) + ".lock"):
            merged = {}
            if self.path.exists():
                try:
                    merged = json.loads(self.path.read_text())
                except ValueError:
                    merged = {}
            merged.update(self.entries)
            write_json_atomic(self.path, merged, indent=None)
        self.dirty = False
