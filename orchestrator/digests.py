"""Model and data digests, with a stat-keyed cache so unchanged large files are not re-read by every plan.

A model digest covers the ONNX file and every external-data file it references. The cache entry is keyed by
(size, mtime_ns, inode) of each file; any change re-hashes. External data is discovered in the same single
pass that hashes the file: the ``location`` key of ONNX's external-data entries is searched for in the chunks
being hashed, and only a model that has it is parsed (without loading its weights) for the exact file list.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from orchestrator.atomic import write_json_atomic

CHUNK = 8 * 1024 * 1024
_PARALLEL_MIN = 1024 * 1024  # below this a thread costs more than it saves
# protobuf encoding of StringStringEntryProto{key: "location"}: field 1, length 8, then the bytes
_EXTERNAL_MARK = b"\x0a\x08location"


def _stat_key(path: str) -> list[int]:
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def hash_file(path: str, *, scan_external: bool = False) -> tuple[str, bool]:
    """sha256 of a file in one streaming pass; optionally also whether it may reference external data."""
    h = hashlib.sha256()
    found = False
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    tail = b""
    with open(path, "rb", buffering=0) as f:
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


def external_data_files(model_path: str) -> list[str]:
    """Absolute paths of the external-data files an ONNX model references (weights are not loaded)."""
    import onnx
    from onnx.external_data_helper import _get_all_tensors

    model = onnx.load(model_path, load_external_data=False)
    base = os.path.dirname(os.path.abspath(model_path))
    files = set()
    for tensor in _get_all_tensors(model):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            for entry in tensor.external_data:
                if entry.key == "location":
                    files.add(os.path.join(base, entry.value))
    return sorted(files)


@dataclass
class DigestCache:
    """JSON file of path -> {stat, digest, external: {path: [stat, digest]}}; safe for concurrent writers."""

    path: Path | None
    entries: dict
    dirty: bool = False
    rehashed: int = 0  # how many files were actually read (benchmarks and tests look at this)

    @classmethod
    def open(cls, path: Path | None) -> DigestCache:
        if path is None or not path.exists():
            return cls(path, {})
        try:
            return cls(path, json.loads(path.read_text()))
        except (OSError, ValueError):
            return cls(path, {})  # a corrupt cache is only a slower plan, never an error

    def _file_digest(self, path: str, scan_external: bool) -> tuple[str, bool]:
        key = _stat_key(path)
        entry = self.entries.get(path)
        if entry and entry.get("stat") == key and (not scan_external or "maybe_external" in entry):
            return entry["digest"], entry.get("maybe_external", False)
        digest, maybe_external = hash_file(path, scan_external=scan_external)
        self.rehashed += 1
        entry = {"stat": key, "digest": digest}
        if scan_external:  # an unscanned hash says nothing about external data: model_digest must scan again
            entry["maybe_external"] = maybe_external
        self.entries[path] = entry
        self.dirty = True
        return digest, maybe_external

    def data_digest(self, path: str) -> str:
        """A file, or a folder (digest over sorted relative names and their file digests)."""
        if os.path.isdir(path):
            parts = []
            for root, _, files in sorted(os.walk(path)):
                for name in sorted(files):
                    full = os.path.join(root, name)
                    parts.append([os.path.relpath(full, path), self._file_digest(full, False)[0]])
            return "sha256:" + hashlib.sha256(json.dumps(parts).encode()).hexdigest()
        return self._file_digest(path, False)[0]

    def model_digest(self, path: str) -> str:
        digest, maybe_external = self._file_digest(path, True)
        if not maybe_external:
            return digest
        entry = self.entries[path]
        if "external" not in entry:
            entry["external"] = external_data_files(path)
            self.dirty = True
        parts = [digest] + [f"{os.path.basename(p)}={self._file_digest(p, False)[0]}" for p in entry["external"]]
        return "sha256:" + hashlib.sha256("\n".join(parts).encode()).hexdigest()

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
