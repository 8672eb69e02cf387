"""The build graph's data: cells (points of the matrix) and nodes (units of work). Pure data, no I/O."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from graphlib import TopologicalSorter
from typing import Any, Literal

from orchestrator.core.gatekeys import gate_inputs_of
from orchestrator.core.keys import BUILD_KEY_FIELDS, WEIGHTS_KEY_FIELD, record_key
from orchestrator.core.model import GateSettings, PrecisionSpec, Target
from orchestrator.core.toolchain import RUNNER, ResolvedToolchain


@dataclass(frozen=True)
class OptimizationProfile:
    """One TensorRT optimization profile: input name -> (min, opt, max)."""

    name: str
    shapes: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]


NodeKind = Literal["prepare", "calibrate", "transform", "build", "gate:parity", "gate:benchmark", "publish"]
NODE_KINDS: tuple[str, ...] = ("prepare", "calibrate", "transform", "build", "gate:parity", "gate:benchmark",
                               "publish")
Route = Literal["none", "native", "transform"]


@dataclass(frozen=True)
class Cell:
    """One point of the matrix: model x precision x profile set x target."""

    address: str  # ocr-det/fp16/default@sm89+trt10.13
    manifest: str
    model: str
    model_version: str
    model_path: str
    precision: PrecisionSpec
    profile_set: str
    profiles: tuple[OptimizationProfile, ...]
    target: Target
    route: Route  # how the precision is reached
    build_key: str
    # the build key's inputs, in ``keys.BUILD_KEY_FIELDS`` order (``key_inputs`` names them); parts are shared
    # between cells and read-only
    key_parts: tuple[Any, ...] = field(hash=False, compare=False)
    transform_node: str | None = None
    blocked: str | None = None  # reason, or None
    # what its gate verdicts depend on (``core.gatekeys``): published with the record; a moved gate key re-gates
    gate_key: str = ""
    # the gate key's inputs but the build key: the runtime, parity, benchmark and deploy parts (``gate_inputs``)
    gate_parts: tuple[Any, ...] = field(default=(), hash=False, compare=False)
    calibrate_node: str | None = None  # the calibration cache it is built from (int8)
    toolchain: ResolvedToolchain = RUNNER  # what CI provisions for it (``core.toolchain``); shards group by it
    # its gate where its target overrides the model's (``targets[].gate``); None: the model's gate
    gate: GateSettings | None = field(default=None, hash=False, compare=False)
    # the identity of the record that publishes this cell: its engine, verdicts and model version (made from them)
    record_key: str = field(init=False, hash=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "record_key", record_key(self.build_key, self.gate_key, self.model_version))

    @classmethod
    def trusted(cls, **values: Any) -> Cell:
        """The cell ``Cell(**values)`` makes, from every field's value (``record_key`` too) as ``resolve`` computed
        them, set without the generated ``__init__``: its ``object.__setattr__`` per frozen field is most of the
        cost of a cell, which a million-cell plan notices. Tests check that resolve's cells equal ``Cell(...)``'s
        field for field."""
        cell = object.__new__(cls)
        cell.__dict__.update(values)
        return cell

    @property
    def key_inputs(self) -> dict[str, Any]:
        """What the build key is the digest of (``keys.build_key``): a new dict of the shared parts each time, so a
        million cells hold a tuple each, not a dict."""
        inputs = dict(zip(BUILD_KEY_FIELDS, self.key_parts))
        if len(self.key_parts) > len(BUILD_KEY_FIELDS):  # a target whose weights are not embedded
            inputs[WEIGHTS_KEY_FIELD] = self.key_parts[-1]
        return inputs

    @property
    def gate_inputs(self) -> dict[str, Any]:
        """What the gate key is made of (``gatekeys.gate_inputs``); {} for a cell made without gate parts."""
        return gate_inputs_of(self.build_key, *self.gate_parts) if self.gate_parts else {}

    @property
    def build_labels(self) -> tuple[str, ...]:
        return self.target.runners.build

    @property
    def gate_labels(self) -> tuple[str, ...]:
        return self.target.runners.gate or self.target.runners.build


@dataclass(frozen=True)
class Node:
    id: str  # "build:ocr-det/fp16/default@sm89+trt10.13"
    kind: str  # one of NODE_KINDS
    deps: tuple[str, ...]
    key: str  # build key (build); gate key (gate:*); record key (publish); the transform's or calibration's own
    # key; the model digest (prepare)
    address: str | None = None  # cell address for build/gate/publish nodes
    model: str | None = None
    transform_kind: str | None = None  # fp16 | bf16 | int8-qdq
    # calibrate nodes: who computes the cache ("transform:int8-qdq" with onnxruntime, "builder:tensorrt" natively)
    calibrator: str | None = None


# the ids of a cell's own nodes are one of these and its address
CELL_NODE_PREFIXES = ("build:", "gate:parity:", "gate:benchmark:", "publish:")


class BuildGraph:
    """Cells and the work nodes they need, in a deterministic topological ``order``.

    ``nodes`` may be given whole, or as the shared nodes (prepare, calibrate, transform) with ``per_cell``, the
    function that makes a cell's own nodes (build, gates, publish): ``resolve`` does so, because planning a
    million cells reads none of them; they are made, and the order computed, when first read."""

    def __init__(self, cells: tuple[Cell, ...], nodes: dict[str, Node], order: tuple[str, ...] | None = None, *,
                 per_cell: Callable[[Cell], Iterable[Node]] | None = None) -> None:
        self.cells = cells
        self._nodes = nodes
        self._per_cell = per_cell
        self._order = order
        self._by_address: dict[str, Cell] | None = None
        self._made: dict[str, dict[str, Node]] = {}  # address -> the nodes of that cell made by ``node``

    @property
    def shared_nodes(self) -> Mapping[str, Node]:
        """The nodes cells share (prepare, calibrate, transform), without making any cell's own."""
        if self._per_cell is None:
            return {i: n for i, n in self._nodes.items() if n.address is None}
        return self._nodes

    @property
    def nodes(self) -> dict[str, Node]:
        if self._per_cell is not None:
            nodes = dict(self._nodes)
            for cell in self.cells:
                for node in self._per_cell(cell):
                    nodes[node.id] = node
            self._nodes, self._per_cell = nodes, None
        return self._nodes

    @property
    def order(self) -> tuple[str, ...]:
        if self._order is None:
            self._order = topological_order(self.nodes)
        return self._order

    def node(self, node_id: str) -> Node | None:
        """``nodes.get(node_id)``, making only the nodes of the cell it belongs to when they are not made yet (the
        plan's local outcomes look up a few nodes of every cell)."""
        found = self._nodes.get(node_id)
        if found is not None or self._per_cell is None:
            return found
        for prefix in CELL_NODE_PREFIXES:
            if node_id.startswith(prefix):
                address = node_id[len(prefix):]
                made = self._made.get(address)
                if made is None:
                    cell = self._cells_by_address().get(address)
                    made = self._made[address] = {n.id: n for n in self._per_cell(cell)} if cell else {}
                return made.get(node_id)
        return None

    def cell(self, address: str) -> Cell:
        return self._cells_by_address()[address]

    def _cells_by_address(self) -> dict[str, Cell]:
        if self._by_address is None:
            self._by_address = {c.address: c for c in self.cells}
        return self._by_address

    def nodes_of(self, address: str) -> list[Node]:
        """A cell's own nodes: build, gate:parity, gate:benchmark, publish (those it has)."""
        if self._per_cell is not None:
            return [n for n in (self.node(prefix + address) for prefix in CELL_NODE_PREFIXES) if n is not None]
        return [n for n in self.nodes.values() if n.address == address]


def topological_order(nodes: Mapping[str, Node]) -> tuple[str, ...]:
    """graphlib's ready/done loop with each ready layer sorted, so the same graph always gives the same order
    (a dependency that is not a node is placed like one, as graphlib does; a cycle raises CycleError)."""
    sorter: TopologicalSorter[str] = TopologicalSorter()
    for node_id in sorted(nodes):
        sorter.add(node_id, *nodes[node_id].deps)
    sorter.prepare()
    order: list[str] = []
    while sorter.is_active():
        ready = sorted(sorter.get_ready())
        order.extend(ready)
        sorter.done(*ready)
    return tuple(order)
