"""Planning a million cells (issue 24.1): what a cell costs does not grow with the number of cells, and nothing
that is the same for many cells is made once per cell. Timings live in bench/ (bench_plan.py); these tests count
what the timing depends on (JSON encodings, nodes made, calls), which no machine or load changes."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.core import graph as graph_module
from orchestrator.core import keys
from orchestrator.core.artifact import IndexEntry
from orchestrator.core.graph import Cell, Node
from orchestrator.core.keys import MISSING, changed_values
from orchestrator.core.model import Tolerance
from orchestrator.core.plan import PlanEntry, plan_against
from orchestrator.core.resolve import resolve
from orchestrator.core.tolerances import DEFAULT_TOLERANCES, apply_override
from tests.unit.core_fixtures import capabilities, inputs_for, manifest, model, ort_target, rtx_target, target
from tests.unit.test_keys_unchanged import WORLDS


def _world(models: int):
    """``models`` models x (fp16, int8 calibrated) x 5 targets: 10 cells per model, in two manifests."""
    targets = (target("l4", ccs=("8.9",)), target("h100-11", version="11.1.0.8", ccs=("9.0",)),
               rtx_target("rtx", version="1.7.1.116", ccs=("8.6", "8.9")), ort_target("cpu"),
               target("ampere", ccs=(), hardware_compatibility="ampere_plus"))
    half = models // 2
    mans = [manifest([model(f"m{i:05d}", precs=("fp16", "int8"), calibration=f"/data/c{i}") for i in rng], targets,
                     file=f"/repo/m{k}.yaml") for k, rng in enumerate((range(half), range(half, models)))]
    return mans, inputs_for(*mans)


def _index(graph) -> dict[str, IndexEntry]:
    """Every other cell published by an older TensorRT build (a rebuild names the change), the rest unpublished."""
    out = {}
    for i, cell in enumerate(graph.cells):
        if i % 2:
            old = {**cell.key_inputs, "builder": {**cell.key_inputs["builder"], "version": "10.13.2.6"}}
            out[cell.address] = IndexEntry(cell.address, "0" * 64, old, cell.model, cell.model_version,
                                           "sha256:" + "e" * 64)
    return out


class _Count:
    def __init__(self) -> None:
        self.n = 0


def _count_json(monkeypatch) -> _Count:
    """Counts canonical JSON encodings (every one goes through keys' one encoder)."""
    count = _Count()
    encode = keys._ENCODER.encode

    class Counting:
        def encode(self, value: Any) -> str:
            count.n += 1
            return encode(value)

    monkeypatch.setattr(keys, "_ENCODER", Counting())
    return count


def _count_nodes(monkeypatch) -> _Count:
    count = _Count()
    init = Node.__init__

    def counting(self, *args, **kwargs):
        count.n += 1
        init(self, *args, **kwargs)

    monkeypatch.setattr(Node, "__init__", counting)
    return count


def _wide(models: int):
    """``models`` models x (fp16, int8) x 15 TensorRT targets (3 versions x 5 CCs): 30 cells per model."""
    targets = tuple(target(f"t{v}-{cc}", version=v, ccs=(cc,)) for v in ("10.8.0.43", "10.13.3.9", "10.14.1.48")
                    for cc in ("7.5", "8.0", "8.6", "8.9", "9.0"))
    man = manifest([model(f"m{i:05d}", precs=("fp16", "int8"), calibration=f"/data/c{i}") for i in range(models)],
                   targets)
    return [man], inputs_for(man)


def test_resolve_and_plan_encode_json_per_shared_part_not_per_cell(monkeypatch):
    """The key parts many cells share are encoded once (per model, per target): four times the models is four
    times the encodings, fewer than one for two cells. Before, every cell's keys encoded parts again."""
    counts, cells = [], []
    for models in (4, 16):
        manifests, inputs = _wide(models)
        count = _count_json(monkeypatch)
        graph = resolve(manifests, inputs, capabilities)
        plan_against(graph, {}, "s")
        counts.append(count.n)
        cells.append(len(graph.cells))
    # what the 360 more cells cost: the parts of 12 more models (a few each), nothing per cell
    assert (counts[1] - counts[0]) / (cells[1] - cells[0]) < 0.5, (counts, cells)


def test_planning_makes_no_per_cell_node_and_no_order(monkeypatch):
    """Only the nodes cells share are made by resolve + plan_against: a cell's build, gate and publish nodes, and
    the topological order, are made when the graph's nodes are read (build, gate), never by `plan`."""
    manifests, inputs = _wide(16)
    made = _count_nodes(monkeypatch)
    monkeypatch.setattr(graph_module, "topological_order", lambda nodes: pytest.fail("plan computed the order"))
    graph = resolve(manifests, inputs, capabilities)
    plan = plan_against(graph, _index(graph), "s")
    shared, before = len(graph.shared_nodes), made.n
    # the shared nodes, made per model and route (a row's combination), never per cell
    assert shared <= made.n < len(graph.cells) / 2, (made.n, shared, len(graph.cells))
    assert len(plan.entries) == len(graph.cells) == 480
    # reading one cell's node makes that cell's nodes only
    cell = graph.cells[7]
    assert graph.node(f"gate:parity:{cell.address}").address == cell.address
    assert made.n == before + len(graph.nodes_of(cell.address)) == before + 4


def test_lazy_nodes_are_the_nodes():
    """The nodes made on first read, by id or all at once, are the same nodes."""
    manifests, inputs = _world(6)
    one, whole = resolve(manifests, inputs, capabilities), resolve(manifests, inputs, capabilities)
    ids = sorted(whole.nodes)
    assert [one.node(i) for i in ids] == [whole.nodes[i] for i in ids]
    assert len(ids) == len(whole.shared_nodes) + 4 * len(whole.cells)


def _calls(fn) -> int:
    calls = 0

    def profile(frame, event, arg):
        nonlocal calls
        if event in ("call", "c_call"):
            calls += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def test_the_work_per_cell_does_not_grow_with_the_cells():
    """Function calls (Python and C) of resolve + plan_against per cell at 200 and 1,600 cells: the same within
    the per-model and per-manifest parts. A quadratic step (an address uniqueness check, a shard lookup, a scan
    of the graph per cell) would multiply it by eight."""
    per_cell = []
    for models in (20, 160):
        manifests, inputs = _world(models)
        graph = resolve(manifests, inputs, capabilities)
        index = _index(graph)
        calls = _calls(lambda: plan_against(resolve(manifests, inputs, capabilities), index, "s"))
        per_cell.append(calls / len(graph.cells))
    assert per_cell[1] <= per_cell[0] * 1.05, per_cell


@pytest.mark.parametrize("world", sorted(WORLDS))
def test_trusted_cells_and_entries_are_what_their_init_makes(world):
    """resolve and plan_against build cells and plan entries without the generated __init__ (Cell.trusted,
    PlanEntry.trusted): each is field for field what Cell(...)/PlanEntry(...) makes of the same values."""
    graph, index = WORLDS[world]()
    for cell in graph.cells:
        fields = {f.name: getattr(cell, f.name) for f in dataclasses.fields(Cell) if f.init}
        assert vars(cell) == vars(Cell(**fields))
    for entry in plan_against(graph, index, "s").entries:
        assert vars(entry) == vars(PlanEntry(**vars(entry)))


def test_resolved_tolerance_json_is_its_asdict():
    for tol in DEFAULT_TOLERANCES.values():
        for t in (tol, apply_override(tol, Tolerance(atol=0.5, topk=3), "model:fp16")):
            assert t.to_json() == dataclasses.asdict(t)
            assert list(t.to_json()) == list(dataclasses.asdict(t))


def _plain_changed_values(old: dict, new: dict) -> list:
    """changed_values as first defined: both sides flattened whole, compared path by path."""
    a: dict = {}
    b: dict = {}
    keys._flatten(old, "", a)
    keys._flatten(new, "", b)
    return [(p, a.get(p, MISSING), b.get(p, MISSING)) for p in sorted(set(a) | set(b))
            if a.get(p, MISSING) != b.get(p, MISSING)]


_names = st.sampled_from(["a", "b", "c", "min", "opt", "x_1"])
_leaves = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(["s", "t", ""]),
                    st.lists(st.integers(0, 3), max_size=3))
_values = st.recursive(_leaves, lambda inner: st.one_of(st.dictionaries(_names, inner, max_size=4),
                                                       st.lists(st.dictionaries(_names, inner, max_size=3),
                                                                max_size=3)), max_leaves=12)
_docs = st.dictionaries(_names, _values, max_size=5)


@settings(max_examples=300, deadline=None)
@given(_docs, _docs, st.data())
def test_changed_values_walks_only_what_differs_and_says_the_same(old, new, data):
    """changed_values skips equal parts; what it names is what the whole walk names (random nested documents,
    and a document against a copy with one value changed)."""
    assert changed_values(old, new) == _plain_changed_values(old, new)
    if old:
        key = data.draw(st.sampled_from(sorted(old)))
        edited = {**old, key: data.draw(_values)}
        assert changed_values(old, edited) == _plain_changed_values(old, edited)
