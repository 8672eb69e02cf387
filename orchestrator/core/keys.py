"""Canonical JSON, build keys and naming what changed between two sets of key inputs. Pure.

A build key is sha256 over the canonical JSON of everything that changes an engine (DESIGN "Build key"). TensorRT
builds are not bit-reproducible, so caches and the registry are keyed by this, never by engine bytes.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

KEY_SCHEMA_VERSION = 1
# the fields of a build key's inputs, in the order a cell's ``key_inputs`` lists them (``core.keyspec`` says what
# goes in each)
BUILD_KEY_FIELDS = ("schema", "model", "transform", "calibration", "precision", "profiles", "builder", "target",
                    "options", "plugin_libraries", "salt")
# a build key field only targets whose weights are not embedded have (``targets[].weights``), so the keys of
# every engine from before weights modes stay what they were; a cell's key parts then end with it
WEIGHTS_KEY_FIELD = "weights"


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


def record_key(build_key: str, gate_key: str, model_version: str | None = None) -> str:
    """A published record's identity: one engine (build key) with one set of verdicts (gate key, see
    ``core.gatekeys``), published as one model version. A re-gated engine is a new record of the same build key;
    so is the same engine published for a new model version (a ``version:`` bump of an unchanged ONNX: same bytes,
    same verdicts, another release). A record without a gate key (published before gate keys existed) is
    identified by its build key alone, and one without ``model_version`` (published before versions were part of
    the identity) by its build key and gate key (``accepted_record_keys``)."""
    if not gate_key:
        return build_key
    if build_key.isascii() and build_key.isalnum() and gate_key.isascii() and gate_key.isalnum():
        # keys JSON writes as they are (hex digests): the parts spliced into their canonical JSON (a million cells)
        return record_key_of(record_key_template(model_version), build_key, gate_key)
    parts = {"build_key": build_key, "gate_key": gate_key}
    if model_version is not None:
        parts["model_version"] = model_version
    return digest_of(parts)


def record_key_template(model_version: str | None) -> str:
    """The canonical JSON ``record_key`` hashes, with ``%s`` for the build key and the gate key (made once per model
    version); only for keys that JSON writes as they are (``str.isalnum`` ASCII: hex digests)."""
    version = f',"model_version":{canonical_json(model_version)}' if model_version is not None else ""
    return '{"build_key":"%s","gate_key":"%s"' + version.replace("%", "%%") + "}"


def record_key_of(template: str, build_key: str, gate_key: str) -> str:
    return hashlib.sha256((template % (build_key, gate_key)).encode("utf-8")).hexdigest()


def accepted_record_keys(build_key: str, gate_key: str, model_version: str | None) -> tuple[str, ...]:
    """Every record key a record of these keys may carry: today's, then the one of records published before the
    model version was part of a record's identity (a store written then reads unchanged)."""
    keys = (record_key(build_key, gate_key, model_version), record_key(build_key, gate_key))
    return tuple(dict.fromkeys(keys))


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


def _differing(before: Any, after: Any, prefix: str, a: dict[str, Any], b: dict[str, Any]) -> None:
    """``_flatten`` of both sides into ``a`` and ``b``, but only where they differ: an equal part has no path that
    differs, so it is not walked (the rebuilds and re-gates of a million-cell plan each name one or two values)."""
    if before is not MISSING and after is not MISSING:
        if before is after or before == after:
            return
        if isinstance(before, dict) and isinstance(after, dict) and before and after:
            for key in before.keys() | after.keys():
                _differing(before.get(key, MISSING), after.get(key, MISSING), f"{prefix}.{key}" if prefix else str(key),
                           a, b)
            return
    if before is not MISSING:
        _flatten(before, prefix, a)
    if after is not MISSING:
        _flatten(after, prefix, b)


def changed_values(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(path, before, after)`` of each key input that differs, sorted by path (a side that lacks it: ``MISSING``)."""
    a: dict[str, Any] = {}
    b: dict[str, Any] = {}
    _differing(old, new, "", a, b)
    return [(path, a.get(path, MISSING), b.get(path, MISSING)) for path in sorted(set(a) | set(b))
            if a.get(path, MISSING) != b.get(path, MISSING)]


def change_line(path: str, before: Any, after: Any) -> str:
    """``path: before -> after``, each value shortened (digests to 12 hex digits, long JSON cut)."""
    return f"{path}: {_short(before)} -> {_short(after)}"


def changed_inputs(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Human lines naming each key input that differs, e.g. ``builder.version: 10.13.2.6 -> 10.13.3.9``; a plugin's
    recipe version with the plugin it is of (``builder recipe: onnx-copy 0.1.0 -> 0.2.0``)."""
    lines = []
    for path, before, after in changed_values(old, new):
        part = _RECIPES.get(path)
        if part is not None:
            owner = (new.get(part[0]) or old.get(part[0]) or {}).get(part[1], "?")
            lines.append(change_line(f"{part[0]} recipe", before, after).replace(": ", f": {owner} ", 1))
        else:
            lines.append(change_line(path, before, after))
    return lines


# recipe versions (``plugins.recipe``) and the key input naming their plugin: key part -> (part, name field)
_RECIPES = {"builder.recipe": ("builder", "name"), "transform.recipe": ("transform", "kind")}


class _Missing:
    def __repr__(self) -> str:
        return "(absent)"


MISSING: Any = _Missing()


def _short(value: Any) -> str:
    if value is MISSING:
        return "(absent)"
    text = canonical_json(value) if not isinstance(value, str) else value
    if isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        return value[:12]
    if isinstance(value, str) and value.startswith("sha256:"):
        return value[:19]
    return text if len(text) <= 60 else text[:57] + "..."
