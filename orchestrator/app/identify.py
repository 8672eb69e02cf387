"""``identify FILE…``: what a model or engine file is, from its bytes alone (no TensorRT, no runtime loaded).

Every installed identifier plugin (``orchestrator.contracts.identify``) is asked in its order; the first that
recognizes the bytes answers. A wrapper's payload (the plan behind an Ultralytics prefix, the engine inside an
EPContext node) is identified again, so one file may be several layers: outermost first. Bytes no identifier
recognizes are ``unknown``, with their first bytes shown and nothing guessed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator import plugins
from orchestrator.contracts.identify import HEAD_BYTES, Blob, Identity, Inner

MAX_DEPTH = 4  # wrappers inside wrappers beyond this are not followed


@dataclass(frozen=True)
class FileBlob:
    """A file, or the byte range ``[offset, offset + size)`` of one."""

    name: str
    path: Path
    offset: int
    size: int

    @property
    def directory(self) -> Path | None:
        return self.path.parent

    def read(self, offset: int, length: int) -> bytes:
        length = max(0, min(length, self.size - offset))
        with open(self.path, "rb") as f:
            f.seek(self.offset + offset)
            return f.read(length)


@dataclass(frozen=True)
class BytesBlob:
    name: str
    data: bytes
    directory: Path | None = None

    @property
    def size(self) -> int:
        return len(self.data)

    def read(self, offset: int, length: int) -> bytes:
        return self.data[offset:offset + max(0, length)]


@dataclass(frozen=True)
class Identified:
    """One file: its layers, outermost first (an Ultralytics export: the prefix, then the plan)."""

    path: str
    layers: tuple[Identity, ...]
    error: str | None = None  # the file could not be read at all

    @property
    def kind(self) -> str:
        return self.layers[0].kind if self.layers else "unreadable"

    @property
    def engine(self) -> Identity | None:
        """The innermost layer a runtime runs (what ``adopt`` gates), or None."""
        runnable = [layer for layer in self.layers if layer.runtime]
        return runnable[-1] if runnable else None

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "error": self.error,
                "layers": [layer.to_json() for layer in self.layers]}


def unknown_identity(head: bytes, blob: Blob) -> Identity:
    if blob.size == 0:
        return Identity("unknown", "empty file", {"size": 0}, {"format": "the file is empty"}, ("empty",))
    shown = head[:16].hex(" ")
    return Identity("unknown", "not a format any installed identifier recognizes",
                    {"size": blob.size, "first_bytes": shown},
                    {"format": f"no known magic or structure in the first bytes ({shown}): random data, a cut-off "
                               "file whose header is gone, or a format no identifier knows"})


def _layers(blob: Blob, depth: int = 0) -> list[tuple[Identity, Blob]]:
    """Each layer with the bytes it was identified from, outermost first."""
    head = blob.read(0, HEAD_BYTES)
    for identifier in plugins.identifiers():
        found = identifier.identify(head, blob)
        if found is None:
            continue
        found = Identity(found.kind, found.summary, found.facts, found.unknown, found.problems, found.runtime,
                         found.builder_version, found.inner, identifier=str(identifier.name))
        layers = [(found, blob)]
        if found.inner is not None and depth < MAX_DEPTH:
            layers += _layers(_inner_blob(blob, found.inner), depth + 1)
        return layers
    return [(unknown_identity(head, blob), blob)]


def identify_blob(blob: Blob) -> list[Identity]:
    return [identity for identity, _ in _layers(blob)]


def _inner_blob(outer: Blob, inner: Inner) -> Blob:
    name = f"{outer.name} → {inner.label}"
    if inner.data is not None:
        return BytesBlob(name, inner.data, outer.directory)
    if inner.path is not None:
        return FileBlob(name, inner.path, 0, inner.path.stat().st_size)
    if isinstance(outer, FileBlob):
        end = outer.size if inner.length is None else min(outer.size, inner.offset + inner.length)
        return FileBlob(name, outer.path, outer.offset + inner.offset, max(0, end - inner.offset))
    stop = None if inner.length is None else inner.offset + inner.length
    return BytesBlob(name, outer.read(0, outer.size)[inner.offset:stop], outer.directory)


def identify_file(path: str | os.PathLike[str]) -> Identified:
    p = Path(path)
    try:
        size = p.stat().st_size
        if not p.is_file():
            return Identified(str(path), (), f"{path} is not a file")
        return Identified(str(path), tuple(identify_blob(FileBlob(str(path), p, 0, size))))
    except OSError as e:
        return Identified(str(path), (), f"cannot read {path}: {e.strerror or e}")


def identify_engine(path: str | os.PathLike[str]) -> tuple[Identified, Blob | None]:
    """``identify_file``, and the bytes of the innermost layer a runtime runs (the plan behind a prefix, the engine
    inside an EPContext model), or None when no layer is runnable (``adopt`` registers those bytes alone)."""
    found = identify_file(path)
    if found.error or found.engine is None:
        return found, None
    p = Path(path)
    pairs = _layers(FileBlob(str(path), p, 0, p.stat().st_size))
    runnable = [blob for identity, blob in pairs if identity.runtime]
    return found, (runnable[-1] if runnable else None)


def identify(paths: list[str]) -> list[Identified]:
    """What each file is (``Identified.layers``, outermost first); a file that cannot be read has ``error``."""
    return [identify_file(p) for p in paths]
