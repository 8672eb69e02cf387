"""keys: canonical JSON, build keys, and the lines naming what changed."""

from __future__ import annotations

import hashlib
import math

import pytest

from orchestrator.core.keys import build_key, canonical_json, changed_inputs, digest_of


def test_canonical_json_is_sorted_compact_and_unicode():
    assert canonical_json({"b": [1, (2, 3)], "a": {"z": None, "y": True}, "é": "ü"}) == \
        '{"a":{"y":true,"z":null},"b":[1,[2,3]],"é":"ü"}'


def test_canonical_json_refuses_nan():
    with pytest.raises(ValueError):
        canonical_json({"x": math.nan})


def test_digest_is_sha256_of_the_canonical_bytes():
    assert digest_of({"a": 1}) == hashlib.sha256(b'{"a":1}').hexdigest()
    assert build_key({"b": 2, "a": 1}) == build_key({"a": 1, "b": 2}) == digest_of({"a": 1, "b": 2})
    assert build_key({"a": [1, 2]}) != build_key({"a": [2, 1]})  # lists keep their order: callers sort sets


def test_changed_inputs_names_nested_paths():
    old = {"builder": {"name": "tensorrt", "version": "10.13.2.6"}, "salt": ""}
    new = {"builder": {"name": "tensorrt", "version": "10.13.3.9"}, "salt": ""}
    assert changed_inputs(old, new) == ["builder.version: 10.13.2.6 -> 10.13.3.9"]
    assert changed_inputs(new, new) == []


def test_changed_inputs_absent_lists_empty_dicts_and_sorting():
    old = {"b": {"x": 1}, "a": [1, 2], "e": {}, "t": None}
    new = {"b": {"x": 1, "y": 2}, "a": [1, 3], "e": {"k": "v"}}
    assert changed_inputs(old, new) == [
        "a: [1,2] -> [1,3]",
        "b.y: (absent) -> 2",
        "e: {} -> (absent)",
        "e.k: (absent) -> v",
        "t: null -> (absent)",
    ]


def test_changed_inputs_shortens_digests_and_long_values():
    old = {"model": {"digest": "sha256:" + "a" * 64}, "k": "0" * 64, "long": "x" * 100}
    new = {"model": {"digest": "sha256:" + "b" * 64}, "k": "1" * 64, "long": "y" * 100}
    assert changed_inputs(old, new) == [
        "k: 000000000000 -> 111111111111",
        "long: " + "x" * 57 + "... -> " + "y" * 57 + "...",
        "model.digest: sha256:aaaaaaaaaaaa -> sha256:bbbbbbbbbbbb",
    ]
