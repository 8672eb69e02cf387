"""Whatever is done to a valid manifest, loading either succeeds or raises ManifestError with positioned
problems; never another exception (no traceback ever reaches a user for a bad manifest)."""

from __future__ import annotations

import copy

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.errors import ManifestError
from orchestrator.manifest import load_manifest

from . import fakes
from .test_load import FULL, MINIMAL

JUNK = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                 st.text(max_size=12), st.lists(st.integers(), max_size=3),
                 st.dictionaries(st.text(max_size=6), st.integers(), max_size=2))


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


def _mutate(doc, data):
    doc = copy.deepcopy(doc)
    for _ in range(data.draw(st.integers(1, 4))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = data.draw(st.sampled_from(paths))
        parent = doc
        for part in path[:-1]:
            parent = parent[part]
        action = data.draw(st.sampled_from(["delete", "replace", "insert"]))
        if action == "delete":
            del parent[path[-1]]
        elif action == "replace":
            parent[path[-1]] = data.draw(JUNK)
        elif isinstance(parent, dict):
            parent[data.draw(st.text(max_size=8))] = data.draw(JUNK)
        else:
            parent.insert(path[-1], data.draw(JUNK))
    return doc


def _check(path, text):
    path.write_bytes(text.encode("utf-8", errors="replace"))  # lone surrogates from st.text() become '?'

    try:
        load_manifest(path, capabilities=fakes.capabilities, builder_names=fakes.BUILDER_NAMES)
    except ManifestError as e:
        assert e.problems
        for p in e.problems:
            assert p.file.endswith(path.name)
            assert isinstance(p.path, str) and p.message
            assert p.path or p.line is not None or p.message.startswith(("the manifest", "YAML")), p


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(data=st.data(), base=st.sampled_from(["full", "minimal"]))
def test_structural_mutations(repo_root, digests, data, base):
    text = FULL.replace("SHA", digests["tiny.onnx"]) if base == "full" else MINIMAL
    doc = _mutate(yaml.safe_load(text), data)
    _check(repo_root / "manifests" / "fuzz.yaml", yaml.safe_dump(doc, allow_unicode=True))


@SETTINGS
@given(data=st.data())
def test_text_corruption(repo_root, digests, data):
    text = FULL.replace("SHA", digests["tiny.onnx"])
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(text)))
        cut = data.draw(st.integers(0, 8))
        insert = data.draw(st.one_of(st.text(max_size=6), st.sampled_from(
            ["\t", ":", "- ", "{", "]", "&a ", "*a", "<<: ", "!!binary ", "!!int ", "? ", "\n  ", "\x00", "\ufeff"])))
        text = text[:at] + insert + text[at + cut:]
    _check(repo_root / "manifests" / "fuzz-text.yaml", text)
