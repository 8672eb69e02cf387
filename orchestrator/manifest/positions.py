"""YAML text -> plain data plus where every node came from (1-based line/column), in one parse.

``yaml.safe_load`` forgets positions and silently keeps the last of two duplicate keys, so the document is
composed into nodes and turned into data here, recording for each manifest path the mark of its value node,
of its key node (unknown and duplicate keys point at the key) and the scalar's source text (so a hint can say
``quote it: "1.20"`` when YAML already turned it into the float 1.2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, cast

import yaml

Path = tuple[str | int, ...]

_MERGE_TAG = "tag:yaml.org,2002:merge"
# libyaml composes ~10x faster than the pure-Python loader (0.2 s for the fleet manifest); same nodes and marks.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# Anchors and aliases can expand a small text into a huge (or, in PyYAML, recursive) tree; stop early.
MAX_NODES = 200_000
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_$][A-Za-z0-9_$-]*$")


def render_path(path: Path) -> str:
    """``("models", 0, "inputs", "x")`` -> ``models[0].inputs.x`` (odd keys are quoted: ``profiles["a b"]``)."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.match(part):
            out += f".{part}" if out else part
        else:
            out += '["' + part.replace("\\", "\\\\").replace('"', '\\"') + '"]'
    return out


@dataclass(frozen=True)
class SourceMap:
    """Positions of one YAML document's nodes, by manifest path."""

    file: str
    values: dict[Path, tuple[int, int]] = field(default_factory=dict)
    keys: dict[Path, tuple[int, int]] = field(default_factory=dict)
    scalars: dict[Path, str] = field(default_factory=dict)

    def locate(self, path: Path, *, key: bool = False) -> tuple[int | None, int | None]:
        """The mark of ``path`` (its key when ``key``), else of its nearest ancestor that has one."""
        if key and path in self.keys:
            return self.keys[path]
        probe = path
        while True:
            if probe in self.values:
                return self.values[probe]
            if not probe:
                return None, None
            probe = probe[:-1]


@dataclass(frozen=True)
class Finding:
    """A problem found before positions are attached: manifest path, message, hint; ``at_key`` points at the
    mapping key rather than its value (unknown or duplicate keys)."""

    path: Path
    message: str
    hint: str | None = None
    at_key: bool = False
    mark: tuple[int, int] | None = None  # explicit position (YAML syntax errors have no manifest path)


@dataclass(frozen=True)
class Parsed:
    data: Any
    source: SourceMap
    findings: tuple[Finding, ...]


class _TooLarge(Exception):
    pass


def _mark(node: yaml.Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


class _Builder:
    def __init__(self, source: SourceMap) -> None:
        self.source = source
        self.findings: list[Finding] = []
        self.count = 0
        self.scalar = yaml.constructor.SafeConstructor()

    def build(self, node: yaml.Node, path: Path, active: frozenset[int]) -> Any:
        self.count += 1
        if self.count > MAX_NODES:
            raise _TooLarge
        self.source.values.setdefault(path, _mark(node))
        if id(node) in active:  # PyYAML registers an anchor before its children, so `&a [*a]` is legal
            self.findings.append(Finding(path, "recursive YAML alias", "an alias cannot refer to its own parent"))
            return None
        if isinstance(node, yaml.ScalarNode):
            self.source.scalars.setdefault(path, node.value)
            try:
                return self.scalar.construct_object(node, deep=True)
            except (yaml.YAMLError, ValueError, TypeError, OverflowError) as e:
                # An explicit tag the text cannot satisfy (`!!int cpu`, an unknown `!tag`): keep the text, report it.
                why = e.problem if isinstance(e, yaml.MarkedYAMLError) else str(e)
                self.findings.append(Finding(path, f"invalid {node.tag.rsplit(':', 1)[-1]} value: {why}"))
                return node.value
        inner = active | {id(node)}
        if isinstance(node, yaml.SequenceNode):
            return [self.build(child, path + (i,), inner) for i, child in enumerate(node.value)]
        return self._mapping(cast(yaml.MappingNode, node), path, inner)  # the only other kind PyYAML composes

    def _mapping(self, node: yaml.MappingNode, path: Path, active: frozenset[int]) -> dict:
        out: dict[str, Any] = {}
        merged: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:  # `<<: *defaults`: explicit keys win over merged ones
                sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                for src in sources:
                    value = self.build(src, path, active) if isinstance(src, yaml.MappingNode) else None
                    if not isinstance(value, dict):
                        self.findings.append(Finding(path, "'<<' merge needs a mapping or a list of mappings"))
                        continue
                    for k, v in value.items():
                        merged.setdefault(k, v)
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                self.source.values.setdefault(path + ("?",), _mark(key_node))
                self.findings.append(Finding(path + ("?",), "mapping keys must be plain names, not lists or "
                                             "mappings"))
                continue
            # Keys are names: keep their text (YAML 1.1 would turn `on:` into True and `1.0:` into a float).
            key = key_node.value
            child = path + (key,)
            if key in out:
                first = self.source.keys[child]
                self.findings.append(Finding(child, f"duplicate key '{key}' (first defined at line {first[0]})",
                                             "each key may appear once; remove or rename one",
                                             mark=_mark(key_node)))
                continue
            self.source.keys[child] = _mark(key_node)
            out[key] = self.build(value_node, child, active)
        for k, v in merged.items():
            out.setdefault(k, v)
        return out


def parse_yaml(text: str, file: str) -> Parsed:
    """Compose ``text`` into data and positions. YAML syntax errors become findings with their own marks."""
    source = SourceMap(file)
    try:
        node = yaml.compose(text, Loader=_LOADER)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = (mark.line + 1, mark.column + 1) if mark is not None else None
        what = e.problem or e.context or "invalid YAML"
        context = ""
        if e.context and e.problem:
            started = e.context_mark
            at = f" at line {started.line + 1}" if started is not None and started is not mark else ""
            context = f" ({e.context}{at})"
        return Parsed(None, source, (Finding((), f"YAML syntax error: {what}{context}", mark=where),))
    except yaml.YAMLError as e:  # a reader error (e.g. a control character) has a position but no mark
        return Parsed(None, source, (Finding((), f"YAML error: {e}"),))
    if node is None:
        return Parsed(None, source, (Finding((), "the manifest is empty",
                                             "start with `manifest_version: 1`"),))
    builder = _Builder(source)
    try:
        data = builder.build(node, (), frozenset())
    except _TooLarge:
        return Parsed(None, source, (Finding((), f"the manifest expands to more than {MAX_NODES} YAML nodes",
                                             "avoid deeply nested aliases"),))
    return Parsed(data, source, tuple(builder.findings))
