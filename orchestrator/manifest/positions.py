"""YAML text -> plain data plus where every node came from (1-based line/column), in one parse.

``yaml.safe_load`` forgets positions and silently keeps the last of two duplicate keys, so the document is
composed into nodes and turned into data here, recording for each manifest path the mark of its value node,
of its key node (unknown and duplicate keys point at the key) and the scalar's source text (so a hint can say
``quote it: "1.20"`` when YAML already turned it into the float 1.2).
"""

from __future__ import annotations

import math
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
# A manifest is at most ~8 levels deep. The composers recurse per level (libyaml's overflows the C stack near
# 30,000 levels; PyYAML's and ours raise RecursionError near 500), so nesting is measured on the flat event
# stream first, and again while building (aliases can stack shallow texts into a deep tree).
MAX_DEPTH = 50
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_$][A-Za-z0-9_$-]*$")
_TAG_PREFIX = "tag:yaml.org,2002:"
# the core schema's scalars; `!!str 1.31` (or `!!int "3"`) stays allowed where the value fits the tag
_SCALAR_TAGS = frozenset(_TAG_PREFIX + t for t in ("null", "bool", "int", "float", "str"))
# Plain scalars YAML 1.1 resolves to types a manifest has no use for (`2024-01-31`, a lone `=` or `<<`): their text
_AS_TEXT = frozenset(_TAG_PREFIX + t for t in ("timestamp", "value", "merge"))
_COLLECTION_TAGS = {"seq": _TAG_PREFIX + "seq", "map": _TAG_PREFIX + "map"}
# Text no manifest value needs and every renderer must fear: C0/C1 controls, DEL, line/paragraph separators and
# the bidirectional overrides ("Trojan Source" spoofing of names in tables and logs).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]")
TAG_HINT = "a manifest is plain data: remove the tag"


def unsafe_character(text: str) -> str | None:
    """The first character of ``text`` no manifest value may hold, as ``U+000A``; None when clean."""
    m = _UNSAFE.search(text)
    return f"U+{ord(m.group()):04X}" if m else None


def printable(text: str) -> str:
    """``text`` with every unsafe character written as an escape (``\\n``, ``\\u202e``): safe in one line."""
    return _UNSAFE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def _free_text(path: Path) -> bool:
    """Runner labels are free text (the CI emitters pass them through the environment, never into a script, and
    every renderer escapes them); every other value and key refuses control characters."""
    return (len(path) >= 2 and isinstance(path[-1], int)
            and (path[-2] == "labels" and path[:1] == ("runners",)
                 or path[-2] in ("build", "gate") and len(path) >= 3 and path[-3] == "runners"))


def short_tag(tag: str) -> str:
    return "!!" + tag[len(_TAG_PREFIX):] if tag.startswith(_TAG_PREFIX) else tag


def render_path(path: Path) -> str:
    """``("models", 0, "inputs", "x")`` -> ``models[0].inputs.x`` (odd keys are quoted: ``profiles["a b"]``)."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.match(part):
            out += f".{part}" if out else part
        else:
            out += '["' + printable(part.replace("\\", "\\\\").replace('"', '\\"')) + '"]'
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


class _TooDeep(Exception):
    def __init__(self, mark: tuple[int, int]) -> None:
        super().__init__(mark)
        self.mark = mark


def _mark(node: yaml.Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


def _too_deep(mark: tuple[int, int] | None) -> Finding:
    return Finding((), f"the manifest nests deeper than {MAX_DEPTH} levels",
                   "a manifest needs fewer than 10: look for runaway brackets, indentation or aliases", mark=mark)


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
        if len(active) >= MAX_DEPTH:
            raise _TooDeep(_mark(node))
        self.source.values.setdefault(path, _mark(node))
        if id(node) in active:  # PyYAML registers an anchor before its children, so `&a [*a]` is legal
            self.findings.append(Finding(path, "recursive YAML alias", "an alias cannot refer to its own parent"))
            return None
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node, path)
        inner = active | {id(node)}
        if isinstance(node, yaml.SequenceNode):
            self._collection_tag(node, "seq", path)
            return [self.build(child, path + (i,), inner) for i, child in enumerate(node.value)]
        self._collection_tag(node, "map", path)
        return self._mapping(cast(yaml.MappingNode, node), path, inner)  # the only other kind PyYAML composes

    def _collection_tag(self, node: yaml.Node, kind: str, path: Path) -> None:
        """`!!set`, `!!omap`, `!!python/object:...` on a collection: PyYAML would build a plain list or mapping and
        drop the tag silently; say so instead."""
        if node.tag != _COLLECTION_TAGS[kind]:
            self.findings.append(Finding(path, f"YAML tag '{short_tag(node.tag)}' is not allowed", TAG_HINT))

    def _scalar(self, node: yaml.ScalarNode, path: Path) -> Any:
        self.source.scalars.setdefault(path, node.value)
        if node.tag in _AS_TEXT:  # `version: 2024-01-31` is text here (YAML 1.1 would make it a date)
            return self._text(node.value, path)
        if node.tag not in _SCALAR_TAGS:  # !!binary, !!python/name:..., !custom: never data a manifest takes
            self.findings.append(Finding(path, f"YAML tag '{short_tag(node.tag)}' is not allowed", TAG_HINT))
            return self._text(node.value, path)
        try:
            value = self.scalar.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, TypeError, OverflowError, KeyError) as e:
            # An explicit tag the text cannot satisfy (`!!int cpu`, `!!bool maybe`): keep the text, report it.
            if isinstance(e, KeyError):
                why = f"{node.value!r} is not a YAML boolean (true or false)"
            else:
                why = (e.problem if isinstance(e, yaml.MarkedYAMLError) else None) or str(e)
            self.findings.append(Finding(path, f"invalid {short_tag(node.tag)[2:]} value: {printable(str(why))}"))
            return self._text(node.value, path)
        if isinstance(value, float) and not math.isfinite(value):
            self.findings.append(Finding(path, f"not a finite number: {node.value}",
                                         "give a finite number (omit the key to use the default, which never "
                                         "disables a check)"))
        elif isinstance(value, str):
            return self._text(value, path)
        return value

    def _text(self, text: str, path: Path) -> str:
        bad = unsafe_character(text)
        if bad and not _free_text(path):
            self.findings.append(Finding(path, f"contains the control character {bad}: '{printable(text)[:60]}'",
                                         "remove it: manifest values are single-line printable text"))
        return text

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
                self.findings.append(Finding(child, f"duplicate key '{printable(key)}' (first defined at line "
                                             f"{first[0]})", "each key may appear once; remove or rename one",
                                             mark=_mark(key_node)))
                continue
            self.source.keys[child] = _mark(key_node)
            bad = unsafe_character(key)
            if bad:
                self.findings.append(Finding(child, f"the key contains the control character {bad}",
                                             "remove it: keys are single-line printable names", at_key=True))
            if key_node.tag not in _SCALAR_TAGS | _AS_TEXT:
                self.findings.append(Finding(child, f"YAML tag '{short_tag(key_node.tag)}' is not allowed", TAG_HINT,
                                             at_key=True))
            out[key] = self.build(value_node, child, active)
        for k, v in merged.items():
            out.setdefault(k, v)
        return out


def _nesting(text: str) -> tuple[int, int] | None:
    """Where the text first nests deeper than MAX_DEPTH, from the flat event stream (no recursion); else None."""
    depth = 0
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                mark = event.start_mark
                return (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
    return None


def _position(text: str, index: int) -> tuple[int, int]:
    line = text.count("\n", 0, index) + 1
    return line, index - (text.rfind("\n", 0, index) + 1) + 1


def parse_yaml(text: str, file: str) -> Parsed:
    """Compose ``text`` into data and positions. YAML syntax errors become findings with their own marks."""
    source = SourceMap(file)
    try:
        deep = _nesting(text)
        if deep is not None:
            return Parsed(None, source, (_too_deep(deep),))
        node = yaml.compose(text, Loader=_LOADER)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        if "maximum nesting depth" in (e.problem or ""):
            # libyaml >= 0.2.6 (bundled from PyYAML 6.0.4) stops deep flow nesting in its scanner, which reads
            # ahead of the events _nesting counts: the same finding, at libyaml's mark
            return Parsed(None, source, (_too_deep(where),))
        what = printable(e.problem or e.context or "invalid YAML")
        context = ""
        if e.context and e.problem:
            started = e.context_mark
            at = f" at line {started.line + 1}" if started is not None and started is not mark else ""
            context = f" ({printable(e.context)}{at})"
        return Parsed(None, source, (Finding((), f"YAML syntax error: {what}{context}", mark=where),))
    except yaml.reader.ReaderError as e:  # a character YAML does not allow (e.g. a control character)
        where = _position(text, e.position)
        character = f"U+{e.character:04X}" if isinstance(e.character, int) else repr(e.character)
        return Parsed(None, source, (Finding((), f"YAML error: the character {character} is not allowed in YAML",
                                             "remove it", mark=where),))
    except yaml.YAMLError as e:
        return Parsed(None, source, (Finding((), f"YAML error: {printable(str(e))}", mark=(1, 1)),))
    if node is None or (isinstance(node, yaml.ScalarNode) and node.tag == _TAG_PREFIX + "null"):
        # no document, `---` alone, or a document that is only `~`: nothing a plan could come from
        return Parsed(None, source, (Finding((), "the manifest is empty", "start with `manifest_version: 1`",
                                             mark=(1, 1)),))
    builder = _Builder(source)
    try:
        data = builder.build(node, (), frozenset())
    except _TooLarge:
        return Parsed(None, source, (Finding((), f"the manifest expands to more than {MAX_NODES} YAML nodes",
                                             "avoid deeply nested aliases", mark=_mark(node)),))
    except _TooDeep as e:
        return Parsed(None, source, (_too_deep(e.mark),))
    return Parsed(data, source, tuple(builder.findings))
