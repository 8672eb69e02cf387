"""Render a BuildGraph as Mermaid, Graphviz DOT or JSON text. Pure: graph in, string out.

Output is deterministic: nodes appear in the graph's topological ``order`` and edges in each node's dep order,
so the same graph always renders to the same bytes (diffable in review, cacheable in CI).

Addresses contain ``/ @ + .`` and transform ids ``#``: none of that is a valid Mermaid node id, so Mermaid ids
are positional (``n0``, ``n1``, ...) and the real id goes in a quoted, entity-escaped label. DOT ids are the real
ids as quoted strings (DOT's grammar allows any text inside ``"..."`` once ``\\`` and ``"`` are escaped).
"""

from __future__ import annotations

import json
from typing import Literal

from orchestrator.core.graph import NODE_KINDS, BuildGraph, Node
from orchestrator.errors import UsageError

Format = Literal["mermaid", "dot", "json"]
FORMATS: tuple[str, ...] = ("mermaid", "dot", "json")
JSON_FORMAT_VERSION = 1

# Mermaid flowchart shape per node kind: (open, close) around the quoted label.
_MERMAID_SHAPE = {
    "prepare": ("([", "])"),          # stadium
    "calibrate": ("[(", ")]"),        # cylinder (a cache)
    "transform": ("[/", "/]"),        # parallelogram
    "build": ("[", "]"),              # rectangle
    "gate:parity": ("{{", "}}"),      # hexagon
    "gate:benchmark": ("{{", "}}"),   # hexagon (told apart by class)
    "publish": ("[[", "]]"),          # subroutine
}
_MERMAID_STYLE = {
    "prepare": "fill:#eeeeee,stroke:#777777",
    "calibrate": "fill:#e0f7f7,stroke:#1b8a8a",
    "transform": "fill:#e8f0ff,stroke:#3b6fd6",
    "build": "fill:#fff4d6,stroke:#c98a00",
    "gate:parity": "fill:#e6f7ea,stroke:#2e8b57",
    "gate:benchmark": "fill:#f1e8ff,stroke:#7b4bc4",
    "publish": "fill:#ffe3e3,stroke:#c0392b",
}
_DOT_SHAPE = {
    "prepare": "cylinder",
    "calibrate": "folder",
    "transform": "parallelogram",
    "build": "box",
    "gate:parity": "hexagon",
    "gate:benchmark": "octagon",
    "publish": "doubleoctagon",
}
# Mermaid entity codes: '#' first, since every other escape introduces one.
_MERMAID_ESCAPES = (("#", "#35;"), ('"', "#quot;"), ("<", "#lt;"), (">", "#gt;"), ("`", "#96;"),
                    ("\r", " "), ("\n", " "))


def render(graph: BuildGraph, fmt: str) -> str:
    if fmt == "mermaid":
        return _mermaid(graph)
    if fmt == "dot":
        return _dot(graph)
    if fmt == "json":
        return json.dumps(graph_to_json(graph), indent=2, sort_keys=False) + "\n"
    raise UsageError(f"unknown graph format {fmt!r}", hint=f"use one of: {', '.join(FORMATS)}")


def mermaid_class(kind: str) -> str:
    """Mermaid class names are identifiers: ``gate:parity`` -> ``gate_parity``."""
    return kind.replace(":", "_")


def mermaid_label(text: str) -> str:
    for raw, entity in _MERMAID_ESCAPES:
        text = text.replace(raw, entity)
    return '"' + text + '"'


def dot_quote(text: str) -> str:
    """A DOT quoted ID: the only escape the language has in quoted strings is \\" (graphviz keeps every other
    backslash, and newlines, as they are), checked against graphviz's own parser in the tests."""
    text = text.replace('"', '\\"').replace("\\\n", "\\ \n")  # backslash-newline would be a line continuation
    if text.endswith("\\"):
        text += " "  # a final backslash would escape the closing quote (not reachable from manifest names)
    return '"' + text + '"'


def dot_label(text: str) -> str:
    """A DOT label (escString): backslashes and quotes escaped, newlines as \\n."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "") + '"'


def _ordered(graph: BuildGraph) -> list[Node]:
    seen = set(graph.order)
    # order should hold every node; anything missing still renders, after it, sorted
    return [graph.nodes[i] for i in graph.order] + [graph.nodes[i] for i in sorted(set(graph.nodes) - seen)]


def _mermaid(graph: BuildGraph) -> str:
    nodes = _ordered(graph)
    ids = {n.id: f"n{i}" for i, n in enumerate(nodes)}
    lines = ["flowchart LR"]
    for n in nodes:
        open_, close = _MERMAID_SHAPE.get(n.kind, ("[", "]"))
        lines.append(f"  {ids[n.id]}{open_}{mermaid_label(n.id)}{close}")
    for n in nodes:
        for dep in n.deps:
            if dep in ids:
                lines.append(f"  {ids[dep]} --> {ids[n.id]}")
    for kind in NODE_KINDS:
        lines.append(f"  classDef {mermaid_class(kind)} {_MERMAID_STYLE[kind]}")
    for kind in NODE_KINDS:
        members = [ids[n.id] for n in nodes if n.kind == kind]
        if members:
            lines.append(f"  class {','.join(members)} {mermaid_class(kind)}")
    return "\n".join(lines) + "\n"


def _dot(graph: BuildGraph) -> str:
    nodes = _ordered(graph)
    lines = ["digraph build_graph {", "  rankdir=LR;", '  node [fontname="Helvetica", fontsize=10];']
    for n in nodes:
        attrs = [f"label={dot_label(n.id)}", f"shape={_DOT_SHAPE.get(n.kind, 'box')}",
                 f"class={dot_label(mermaid_class(n.kind))}"]
        lines.append(f"  {dot_quote(n.id)} [{', '.join(attrs)}];")
    for n in nodes:
        for dep in n.deps:
            lines.append(f"  {dot_quote(dep)} -> {dot_quote(n.id)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def graph_to_json(graph: BuildGraph) -> dict:
    return {
        "format_version": JSON_FORMAT_VERSION,
        "nodes": [{"id": n.id, "kind": n.kind, "deps": list(n.deps), "key": n.key, "address": n.address,
                   "model": n.model, "transform_kind": n.transform_kind, "calibrator": n.calibrator}
                  for n in _ordered(graph)],
        "cells": [c.address for c in graph.cells],
    }


def nodes_from_json(data: dict) -> dict[str, Node]:
    """The nodes of a rendered JSON graph, back as Node values (round-trip of ``render(g, "json")``)."""
    if not isinstance(data, dict) or data.get("format_version") != JSON_FORMAT_VERSION:
        got = data.get("format_version") if isinstance(data, dict) else None
        raise UsageError(f"unsupported graph format_version {got!r} (this orchestrate reads {JSON_FORMAT_VERSION})")
    return {n["id"]: Node(id=n["id"], kind=n["kind"], deps=tuple(n["deps"]), key=n["key"],
                          address=n.get("address"), model=n.get("model"), transform_kind=n.get("transform_kind"),
                          calibrator=n.get("calibrator"))
            for n in data["nodes"]}
