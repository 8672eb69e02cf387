"""The identify port: say what a file is from its bytes alone, without loading any runtime.

An identifier plugin (entry-point group ``trt_orchestrator.identifiers``) recognizes one kind of file (a TensorRT
or TensorRT-RTX plan, an Ultralytics engine with its JSON prefix, an ONNX model and its onnxruntime variants) and
reports what the bytes hold. ``orchestrator.app.identify`` asks every installed identifier in ``order`` and
follows a wrapper's ``inner`` payload (the plan behind an Ultralytics prefix, the engine inside an EPContext
node), so a third-party identifier composes with the first-party ones.

Rules every identifier keeps: never import TensorRT or another runtime (``identify`` runs anywhere, in
milliseconds); a fact the bytes do not hold is ``None`` (printed "unknown") and named in ``unknown`` with why,
never guessed; damage (a cut-off file) is a ``problems`` line, not an exception.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

HEAD_BYTES = 4096  # what every identifier is handed up front; ``Blob.read`` gives it more


@runtime_checkable
class Blob(Protocol):
    """The bytes being identified: a file, a byte range of one, or bytes found inside another file."""

    @property
    def name(self) -> str:
        """How reports name it: a path, or "<file> → <where inside>"."""
        ...

    @property
    def size(self) -> int: ...

    @property
    def directory(self) -> Path | None:
        """Where files it names by relative path live (an EPContext with embed_mode 0)."""
        ...

    def read(self, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes from ``offset`` (fewer at the end)."""
        ...


@dataclass(frozen=True)
class Inner:
    """A payload inside what was identified, identified again by the app: a byte range of the same blob, bytes the
    identifier extracted, or a file it names."""

    label: str  # "the plan behind the Ultralytics prefix"
    offset: int = 0
    length: int | None = None  # None: to the end
    data: bytes | None = None  # the payload itself (e.g. an EPContext's embedded engine)
    path: Path | None = None  # a file the wrapper names (EPContext embed_mode 0)


@dataclass(frozen=True)
class Identity:
    """What an identifier found. ``facts`` are JSON values; a fact the bytes do not hold is ``None`` and listed in
    ``unknown`` with the reason."""

    kind: str  # "tensorrt-plan", "tensorrt-rtx-plan", "ultralytics-engine", "onnx", "onnx-epcontext", ...
    summary: str  # one line for people
    facts: Mapping[str, Any] = field(default_factory=dict)
    unknown: Mapping[str, str] = field(default_factory=dict)  # fact -> why the bytes do not say
    problems: tuple[str, ...] = ()  # damage: truncated, malformed
    # the runtime plugin that runs this kind of file (what ``adopt`` gates it with), and the exact version of its
    # library the bytes name; None where the bytes do not say
    runtime: str | None = None
    builder_version: str | None = None
    inner: Inner | None = None
    identifier: str = ""  # filled by the app: the plugin that answered

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "summary": self.summary, "identifier": self.identifier,
                "runtime": self.runtime, "builder_version": self.builder_version, "facts": dict(self.facts),
                "unknown": dict(self.unknown), "problems": list(self.problems)}


@runtime_checkable
class Identifier(Protocol):
    name: str
    order: int  # asked in ascending order: wrappers with a distinctive prefix first, permissive formats last

    def identify(self, head: bytes, blob: Blob) -> Identity | None:
        """What ``blob`` is (``head``: its first ``HEAD_BYTES``), or None when it is not this identifier's kind."""
        ...
