"""render_graph: Mermaid / DOT / JSON text of a BuildGraph, with literal graphs."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from orchestrator.cli.render.graph import mermaid_label, nodes_from_json, render
from orchestrator.core.graph import NODE_KINDS, BuildGraph, Node
from orchestrator.core.resolve import resolve, topological_order
from orchestrator.errors import UsageError
from tests.unit.core_fixtures import capabilities, inputs_for, manifest, model, ort_target, rtx_target, target


def _graph() -> BuildGraph:
    m = manifest([model("ocr-det", precs=("fp16", "int8"), calibration="/data/calib"), model("ocr-rec")],
                 [target(), rtx_target(), ort_target()])
    return resolve([m], inputs_for(m), capabilities)


def _nasty_graph() -> BuildGraph:
    """Ids with every character a renderer could trip on."""
    nodes = {
        'prepare:we"ird<m>@1': Node('prepare:we"ird<m>@1', "prepare", (), "sha256:1", model='we"ird'),
        "transform:m/fp16#abc": Node("transform:m/fp16#abc", "transform", ('prepare:we"ird<m>@1',), "k2"),
        "build:a\\b/fp16/x`y@sm89+trt10.13": Node("build:a\\b/fp16/x`y@sm89+trt10.13", "build",
                                                 ("transform:m/fp16#abc",), "k3", address="a\\b"),
        "gate:parity:p;q": Node("gate:parity:p;q", "gate:parity", ("build:a\\b/fp16/x`y@sm89+trt10.13",), "k4"),
        "gate:benchmark:p{q}": Node("gate:benchmark:p{q}", "gate:benchmark", ("gate:parity:p;q",), "k5"),
        "publish:p\nq": Node("publish:p\nq", "publish", ("gate:parity:p;q", "gate:benchmark:p{q}"), "k6"),
    }
    return BuildGraph(cells=(), nodes=nodes, order=topological_order(nodes))


_NODE_LINE = re.compile(r'^  (n\d+)(\(\[|\[\(|\[/|\{\{|\[\[|\[)"([^"\n<>`]*)"(\]\)|\)\]|/\]|\}\}|\]\]|\])$')
_EDGE_LINE = re.compile(r"^  (n\d+) --> (n\d+)$")
_CLASSDEF_LINE = re.compile(r"^  classDef ([A-Za-z_]\w*) [a-z-]+:#[0-9a-f]{6}(,[a-z-]+:#[0-9a-f]{6})*$")
_CLASS_LINE = re.compile(r"^  class (n\d+(?:,n\d+)*) ([A-Za-z_]\w*)$")
_SHAPE = {"prepare": ("([", "])"), "calibrate": ("[(", ")]"),
          "transform": ("[/", "/]"), "build": ("[", "]"), "gate:parity": ("{{", "}}"),
          "gate:benchmark": ("{{", "}}"), "publish": ("[[", "]]")}


def _unescape(label: str) -> str:
    return re.sub(r"#(\d+);", lambda m: chr(int(m.group(1))), label.replace("#quot;", '"')
                  .replace("#lt;", "<").replace("#gt;", ">"))


def _parse_mermaid(text: str) -> tuple[dict[str, tuple[str, str, str]], list[tuple[str, str]], dict[str, str]]:
    """A strict line grammar of the subset we emit; any other line fails the test."""
    lines = text.splitlines()
    assert lines[0] == "flowchart LR"
    nodes, edges, classes, classdefs = {}, [], {}, set()
    for line in lines[1:]:
        if m := _NODE_LINE.match(line):
            assert m.group(1) not in nodes
            nodes[m.group(1)] = (m.group(2), _unescape(m.group(3)), m.group(4))
        elif m := _EDGE_LINE.match(line):
            edges.append((m.group(1), m.group(2)))
        elif m := _CLASSDEF_LINE.match(line):
            classdefs.add(m.group(1))
        elif m := _CLASS_LINE.match(line):
            assert m.group(2) in classdefs, "class used before classDef"
            for nid in m.group(1).split(","):
                assert nid not in classes
                classes[nid] = m.group(2)
        else:
            raise AssertionError(f"line is not valid in the emitted mermaid subset: {line!r}")
    for a, b in edges:
        assert a in nodes and b in nodes
    return nodes, edges, classes


@pytest.mark.parametrize("make", [_graph, _nasty_graph])
def test_mermaid_is_structurally_valid_and_reconstructs_the_graph(make):
    g = make()
    text = render(g, "mermaid")
    nodes, edges, classes = _parse_mermaid(text)
    # ids are n0..n{N-1} in topological order; labels carry the real (escaped) ids
    assert list(nodes) == [f"n{i}" for i in range(len(g.nodes))]
    by_label = {label: nid for nid, (_, label, _) in nodes.items()}
    assert [nodes[f"n{i}"][1] for i in range(len(g.order))] == [i.replace("\n", " ") for i in g.order]
    for node_id, node in g.nodes.items():
        nid = by_label[node_id.replace("\n", " ")]
        assert (nodes[nid][0], nodes[nid][2]) == _SHAPE[node.kind]
        assert classes[nid] == node.kind.replace(":", "_")
    want = sorted((by_label[d.replace("\n", " ")], by_label[n.replace("\n", " ")])
                  for n, node in g.nodes.items() for d in node.deps)
    assert sorted(edges) == want


def test_mermaid_exact_small_graph():
    nodes = {"prepare:m@1": Node("prepare:m@1", "prepare", (), "d"),
             "build:m/fp16/default@sm89+trt10.13": Node("build:m/fp16/default@sm89+trt10.13", "build",
                                                        ("prepare:m@1",), "k", address="m/fp16/default@sm89+trt10.13")}
    g = BuildGraph(cells=(), nodes=nodes, order=topological_order(nodes))
    lines = render(g, "mermaid").splitlines()
    assert lines[:4] == [
        "flowchart LR",
        '  n0(["prepare:m@1"])',
        '  n1["build:m/fp16/default@sm89+trt10.13"]',
        "  n0 --> n1",
    ]
    assert "  class n0 prepare" in lines and "  class n1 build" in lines
    assert "  classDef gate_parity fill:#e6f7ea,stroke:#2e8b57" in lines


def test_mermaid_label_escaping():
    assert mermaid_label('a"b#c<d>`e\nf') == '"a#quot;b#35;c#lt;d#gt;#96;e f"'
    assert mermaid_label("transform:m/fp16#ab") == '"transform:m/fp16#35;ab"'


_DOT_TOKEN = re.compile(r'\s*(?:("(?:[^"\\]|\\.)*")|(->|[{}\[\];,=])|([\w.]+)|(\S))', re.S)


def _dot_statements(text: str) -> list[list[str]]:
    """Tokenise DOT (quoted strings with escapes) and split the graph body into statements."""
    tokens = []
    for m in _DOT_TOKEN.finditer(text):
        if m.group(4):
            raise AssertionError(f"unexpected character in DOT: {m.group(4)!r}")
        tokens.append(m.group(1) or m.group(2) or m.group(3))
    assert tokens[:3] == ["digraph", "build_graph", "{"] and tokens[-1] == "}"
    stmts, cur = [], []
    for tok in tokens[3:-1]:
        if tok == ";":
            stmts.append(cur)
            cur = []
        else:
            cur.append(tok)
    assert not cur, "statement without ;"
    return stmts


def _dot_unquote(tok: str) -> str:
    """A quoted ID as graphviz reads it: only \\" is an escape."""
    assert tok.startswith('"') and tok.endswith('"')
    return tok[1:-1].replace('\\"', '"')


def _dot_unlabel(tok: str) -> str:
    """An escString label: \\n is a newline, \\X is X."""
    assert tok.startswith('"') and tok.endswith('"')
    return re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), tok[1:-1])


@pytest.mark.parametrize("make", [_graph, _nasty_graph])
def test_dot_quoting_reconstructs_the_graph(make):
    g = make()
    stmts = _dot_statements(render(g, "dot"))
    declared, edges = {}, []
    for st in stmts:
        if len(st) == 3 and st[1] == "->":
            edges.append((_dot_unquote(st[0]), _dot_unquote(st[2])))
        elif len(st) > 2 and st[1] == "[" and st[-1] == "]" and st[0].startswith('"'):
            attrs = dict(zip(st[2:-1:4], st[4:-1:4]))
            declared[_dot_unquote(st[0])] = _dot_unlabel(attrs["label"])
    assert declared == {i: i for i in g.nodes}
    assert sorted(edges) == sorted((d, n) for n, node in g.nodes.items() for d in node.deps)


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz `dot` is not installed")
@pytest.mark.parametrize("make", [_graph, _nasty_graph])
def test_dot_parses_with_graphviz(make):
    out = subprocess.run(["dot", "-Tjson"], input=render(make(), "dot"), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert {o["name"] for o in json.loads(out.stdout)["objects"]} == set(make().nodes)


@pytest.mark.parametrize("make", [_graph, _nasty_graph])
def test_json_round_trips(make):
    g = make()
    text = render(g, "json")
    data = json.loads(text)
    assert data["format_version"] == 1
    assert [n["id"] for n in data["nodes"]] == list(g.order)
    assert set(data["nodes"][0]) >= {"id", "kind", "deps", "key", "address"}
    assert data["cells"] == [c.address for c in g.cells]
    assert nodes_from_json(data) == g.nodes
    assert json.dumps(data, indent=2) + "\n" == text


def test_json_exact_cells_and_a_node():
    data = json.loads(render(_graph(), "json"))
    assert data["cells"][:3] == ["ocr-det/fp16/default@cpu+ort1.23", "ocr-det/fp16/default@sm86-sm89+rtx1.2",
                                 "ocr-det/fp16/default@sm89+trt10.13"]
    build = next(n for n in data["nodes"] if n["id"] == "build:ocr-det/fp16/default@sm89+trt10.13")
    assert build["kind"] == "build" and build["deps"] == ["prepare:ocr-det@1.0.0"]
    assert build["address"] == "ocr-det/fp16/default@sm89+trt10.13"
    assert {n["kind"] for n in data["nodes"]} == set(NODE_KINDS)


@pytest.mark.parametrize("fmt", ["mermaid", "dot", "json"])
def test_rendering_is_deterministic(fmt):
    assert render(_graph(), fmt) == render(_graph(), fmt)


def test_unknown_format_is_a_usage_error():
    with pytest.raises(UsageError) as e:
        render(_graph(), "svg")
    assert e.value.message == "unknown graph format 'svg'"
    assert e.value.hint == "use one of: mermaid, dot, json"
