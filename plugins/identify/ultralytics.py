"""An Ultralytics TensorRT export: a JSON metadata prefix, then the plan.

Ultralytics' exporter writes, before the serialized engine, ``len(meta).to_bytes(4, byteorder="little",
signed=True)`` and ``meta.encode()`` with ``meta = json.dumps(self.metadata)`` (``Exporter.export_engine`` in
https://github.com/ultralytics/ultralytics/blob/main/ultralytics/engine/exporter.py; ``AutoBackend`` in
ultralytics/nn/autobackend.py reads it back the same way). ``json.dumps`` escapes non-ASCII, so the character
count is the byte count. The prefix is why a plain TensorRT loader refuses these files (ultralytics#20427); the
plan behind it is identified on its own.
"""

from __future__ import annotations

import json
import struct

from orchestrator.contracts.identify import Blob, Identity, Inner

MAX_METADATA = 16 * 2**20  # a JSON prefix beyond this is not Ultralytics metadata
_KEPT = ("description", "author", "date", "version", "license", "task", "batch", "imgsz", "stride", "half",
         "int8", "dynamic", "nms", "channels")


class UltralyticsIdentifier:
    name = "ultralytics"
    order = 10

    def identify(self, head: bytes, blob: Blob) -> Identity | None:
        if len(head) < 6 or head[4:6] != b'{"':
            return None
        (length,) = struct.unpack_from("<i", head, 0)
        if not 2 <= length <= MAX_METADATA:
            return None
        raw = blob.read(4, length)
        try:
            text = raw.decode("ascii")
        except UnicodeDecodeError:
            return None  # json.dumps writes ASCII only: not Ultralytics metadata
        facts: dict[str, object] = {"format": "Ultralytics TensorRT export (4-byte length + JSON metadata, then the "
                                              "engine)", "metadata_bytes": length}
        if len(raw) < length:
            return Identity("ultralytics-engine", "Ultralytics engine (truncated inside its metadata)", facts,
                            {"engine": "the file ends inside the metadata prefix"},
                            (f"truncated: the prefix announces {length} bytes of metadata, the file holds "
                             f"{len(raw)}",))
        try:
            meta = json.loads(text)
        except ValueError:
            return None
        if not isinstance(meta, dict):
            return None
        facts["metadata"] = {k: meta[k] for k in _KEPT if k in meta}
        names = meta.get("names")
        facts["classes"] = len(names) if isinstance(names, (dict, list)) else None
        rest = blob.size - 4 - length
        problems = () if rest > 0 else ("truncated: nothing follows the metadata prefix",)
        inner = Inner("the engine behind the Ultralytics metadata prefix", offset=4 + length) if rest > 0 else None
        who = meta.get("version")
        return Identity("ultralytics-engine",
                        f"Ultralytics {meta.get('task') or ''} export".replace("  ", " ")
                        + (f" (ultralytics {who})" if who else "") + f", {rest} bytes of engine behind the prefix",
                        facts, {}, problems, inner=inner)


identifier = UltralyticsIdentifier()
