"""The manifest's JSON Schema (shipped as ``manifest-v1.schema.json``) and its errors, said for people.

jsonschema's own messages dump whole sub-documents (``{...} is not valid under any of the given schemas``), so
each validator keyword is translated into one short finding at the offending node, with a close-match hint
for unknown keys and enum values and a quoting hint when YAML turned a version into a number. A schema node
may carry ``x-hint`` (ignored by validators) to say how to fix a pattern mismatch.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator, Sequence
from functools import cache
from importlib import resources
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError

from orchestrator.manifest.positions import Finding, Path, SourceMap

SCHEMA_FILE = "manifest-v1.schema.json"
_JSON_TYPES = {dict: "mapping", list: "list", str: "string", bool: "boolean", int: "integer", float: "number",
               type(None): "null"}
_SCHEMA_TYPES: dict[str | None, str] = {"object": "mapping", "array": "list", "string": "string",
                                        "boolean": "boolean", "integer": "integer", "number": "number", "null": "null"}


def schema() -> dict:
    """The manifest JSON Schema (draft 2020-12) as a fresh dict (callers may mutate it)."""
    return json.loads(_schema_text())


@cache
def _schema_text() -> str:
    return resources.files("orchestrator.manifest").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")


@cache
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema())


@cache
def task_output_keys() -> frozenset[str]:
    """The keys of ``models[].task`` that name a model output (``output``; detection's ``boxes``, ``scores`` and
    ``classes``): those the schema types as ``io_name``."""
    properties = schema()["$defs"]["task"]["properties"]
    return frozenset(k for k, v in properties.items() if v.get("$ref") == "#/$defs/io_name")


def did_you_mean(word: str, choices: Sequence[str]) -> str | None:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else None


def kind_of(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _short(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _too_long(value: str, limit: int) -> str:
    return f"{_short(value)} is {len(value)} characters long: at most {limit} characters"


def schema_findings(data: Any, source: SourceMap) -> list[Finding]:
    findings: list[Finding] = []
    for error in _validator().iter_errors(data):
        findings.extend(_translate(error, source))
    return findings


def _branch_errors(error: ValidationError) -> list[ValidationError] | None:
    """For anyOf/oneOf, the sub-errors of the one branch whose type fits the instance (e.g. a precision given as
    a mapping is judged as a mapping), or None when no single branch fits."""
    fitting = []
    for i, sub in enumerate(error.validator_value):
        sub = _resolve(sub)
        types = sub.get("type") or ("string" if "enum" in sub and all(isinstance(v, str) for v in sub["enum"])
                                    else None)
        types = [types] if isinstance(types, str) else types or []
        if any(_SCHEMA_TYPES.get(t) == kind_of(error.instance) for t in types):
            fitting.append(i)
    if len(fitting) != 1:
        return None
    return [e for e in error.context if e.schema_path and e.schema_path[0] == fitting[0]]


def _resolve(sub: dict) -> dict:
    ref = sub.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return _resolve(schema()["$defs"][ref.removeprefix("#/$defs/")])
    return sub


def _translate(error: ValidationError, source: SourceMap) -> Iterator[Finding]:
    path: Path = tuple(error.absolute_path)
    kw = error.validator
    value = error.instance
    sch = error.schema if isinstance(error.schema, dict) else {}
    if "propertyNames" in error.schema_path and isinstance(value, str):
        # jsonschema judges the key itself and reports it at the mapping; point at the key
        resolved = _resolve(sch)
        choices = [str(c) for c in resolved.get("enum", [])] if kw == "enum" else []
        hint = did_you_mean(value, choices)
        if choices:
            message = f"{_short(value)} is not one of: {', '.join(choices)}"
        elif kw == "maxLength":
            message = _too_long(value, error.validator_value)
        elif kw == "pattern":
            message, hint = f"{_short(value)} is not valid here", resolved.get("x-hint")
        else:
            message = f"{_short(value)} is not allowed here"
        yield Finding(path + (value,), message, hint, at_key=True)
    elif kw in ("anyOf", "oneOf"):
        subs = _branch_errors(error)
        if subs:
            for sub in subs:
                yield from _translate(sub, source)
            return
        kinds = []
        for s in error.validator_value:
            s = _resolve(s)
            kinds.append("one of " + ", ".join(s["enum"]) if "enum" in s else _SCHEMA_TYPES.get(s.get("type"), "?"))
        yield Finding(path, f"expected {' or '.join(kinds)}, got {kind_of(value)} {_short(value)}")
    elif kw == "additionalProperties" and isinstance(value, dict):
        known = list(sch.get("properties", {}))
        for key in value:
            if key not in known:
                hint = did_you_mean(key, known) or (f"allowed keys: {', '.join(known)}" if known else None)
                yield Finding(path + (key,), f"unknown key '{key}'", hint, at_key=True)
    elif kw == "required" and isinstance(value, dict):
        for key in error.validator_value:
            if key not in value:
                yield Finding(path, f"missing required key '{key}'")
    elif kw == "type":
        expected = error.validator_value
        expected = [expected] if isinstance(expected, str) else expected
        names = " or ".join(_SCHEMA_TYPES.get(t, t) for t in expected)
        hint = None
        if "string" in expected and isinstance(value, (int, float)) and not isinstance(value, bool):
            text = source.scalars.get(path, str(value))
            hint = f'YAML read this as a number; quote it: "{text}"'
        yield Finding(path, f"expected {names}, got {kind_of(value)} {_short(value)}", hint)
    elif kw == "enum":
        choices = [str(c) for c in error.validator_value]
        hint = did_you_mean(str(value), choices) if isinstance(value, str) else None
        yield Finding(path, f"{_short(value)} is not one of: {', '.join(choices)}", hint)
    elif kw == "const":
        yield Finding(path, f"must be {_short(error.validator_value)}, got {_short(value)}",
                      "this tool reads manifest format version 1" if path == ("manifest_version",) else None)
    elif kw == "pattern":
        yield Finding(path, f"{_short(value)} is not valid here", sch.get("x-hint"))
    elif kw == "minItems" and error.validator_value == 1:
        yield Finding(path, "must not be empty")
    elif kw == "minProperties" and error.validator_value == 1:
        yield Finding(path, "must not be empty")
    elif kw == "uniqueItems":
        yield Finding(path, "has duplicate entries")
    elif kw == "maxLength" and isinstance(value, str):
        yield Finding(path, _too_long(value, error.validator_value), sch.get("x-hint"))
    elif kw == "minLength" and error.validator_value == 1:
        yield Finding(path, "must not be empty")
    elif kw == "maxItems" and isinstance(value, list):
        yield Finding(path, f"has {len(value)} entries: at most {error.validator_value}")
    elif kw == "maximum":
        yield Finding(path, f"{_short(value)} is above the maximum {error.validator_value}",
                      "no tool, tensor or engine takes a value that large")
    else:  # minimum, maximum, maxItems, exclusiveMinimum, minLength: jsonschema's sentence is already short
        yield Finding(path, error.message if len(error.message) <= 120 else f"{kw} violated")
