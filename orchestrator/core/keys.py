"""Canonical JSON, build keys and naming what changed between two sets of key inputs. Pure.

A build key is sha256 over the canonical JSON of everything that changes an engine (DESIGN "Build key"). TensorRT
builds are not bit-reproducible, so caches and the registry are keyed by this, never by engine bytes.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

KEY_SCHEMA_VERSION = 1


# One encoder for every call: json.dumps with non-default options builds a new one each time (a measurable part
# of resolving 100k cells). Encoders keep no state between encode() calls.
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, no NaN: the same data always gives the same bytes."""
    return _ENCODER.encode(value)


def digest_of(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def build_key(inputs: dict[str, Any]) -> str:
    return digest_of(inputs)


def record_key(build_key: str, gate_key: str) -> str:
    """A published record's identity: one engine (build key) with one set of verdicts (gate key, see
    ``core.gatekeys``). A re-gated engine is a new record of the same build key; a record without a gate key
    (published before gate keys existed) is identified by its build key alone."""
    if not gate_key:
        return build_key
    return digest_of({"build_key": build_key, "gate_key": gate_key})


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        if not value and prefix:
            out[prefix] = {}
        for k, v in value.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(value, list) and any(isinstance(v, dict) for v in value):
        # lists of records (profiles) by index; lists of scalars (a shape, a CC list) stay one value
        if not value:
            out[prefix] = []
        for i, v in enumerate(value):
            _flatten(v, f"{prefix}[{i}]", out)
    else:
        out[prefix] = value


def changed_inputs(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Human lines naming each key input that differs, e.g. ``builder.version: 10.13.2.6 -> 10.13.3.9``."""
    a: dict[str, Any] = {}
    b: dict[str, Any] = {}
    _flatten(old, "", a)
    _flatten(new, "", b)
    lines = []
    for path in sorted(set(a) | set(b)):
        if a.get(path, _MISSING) == b.get(path, _MISSING):
            continue
        before, after = a.get(path, _MISSING), b.get(path, _MISSING)
        lines.append(f"{path}: {_short(before)} -> {_short(after)}")
    return lines


class _Missing:
    def __repr__(self) -> str:
        return "(absent)"


_MISSING = _Missing()


def _short(value: Any) -> str:
    if value is _MISSING:
        return "(absent)"
    text = canonical_json(value) if not isinstance(value, str) else value
    if isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        return value[:12]
    if isinstance(value, str) and value.startswith("sha256:"):
        return value[:19]
    return text if len(text) <= 60 else text[:57] + "..."
