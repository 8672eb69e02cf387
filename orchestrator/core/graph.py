"""The build graph's data: cells (points of the matrix) and nodes (units of work). Pure data, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from orchestrator.core.keys import record_key
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
    key_inputs: dict[str, Any] = field(hash=False, compare=False)
    transform_node: str | None = None
    blocked: str | None = None  # reason, or None
    # what its gate verdicts depend on (``core.gatekeys``): published with the record; a moved gate key re-gates
    gate_key: str = ""
    gate_inputs: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    calibrate_node: str | None = None  # the calibration cache it is built from (int8)
    toolchain: ResolvedToolchain = RUNNER  # what CI provisions for it (``core.toolchain``); shards group by it
    # its gate where its target overrides the model's (``targets[].gate``); None: the model's gate
    gate: GateSettings | None = field(default=None, hash=False, compare=False)

    @property
    def record_key(self) -> str:
        """The identity of the record that publishes this cell: its engine, verdicts and model version."""
        return record_key(self.build_key, self.gate_key, self.model_version)

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


@dataclass(frozen=True)
class BuildGraph:
    cells: tuple[Cell, ...]
    nodes: dict[str, Node]
    order: tuple[str, ...]  # a deterministic topological order of node ids

    def cell(self, address: str) -> Cell:
        return self._by_address()[address]

    def _by_address(self) -> dict[str, Cell]:
        cache = self.__dict__.get("_cells_by_address")
        if cache is None:
            cache = {c.address: c for c in self.cells}
            object.__setattr__(self, "_cells_by_address", cache)
        return cache

    def nodes_of(self, address: str) -> list[Node]:
        return [n for n in self.nodes.values() if n.address == address]
