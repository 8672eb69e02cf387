"""Manifests -> cells -> BuildGraph. Pure: everything read from disk (model digests, tool versions) comes in
as data, so the same inputs always give the same graph, keys and order.

Nodes per cell: ``prepare`` (one per model file: verify/hash), ``calibrate`` (int8: one calibration cache per
model x data x samples x preprocess x method x calibrator, shared by every cell that needs it), ``transform``
(shared by every cell needing the same conversion of the same model), ``build``, ``gate:parity``,
``gate:benchmark``, ``publish``. Key inputs are listed field by field in ``core.keyspec``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import Any

from orchestrator.core.capabilities import BuilderCapabilities
from orchestrator.core.cellparts import NONE_PART, Column, Part, Row, SharedParts, address_part, sha256_hex
from orchestrator.core.gatekeys import (
    GATE_KEY_SCHEMA_VERSION,
    benchmark_inputs,
    gate_key_of,
    gate_node_key,
    parity_inputs,
)
from orchestrator.core.graph import BuildGraph, Cell, Node, topological_order
from orchestrator.core.keys import WEIGHTS_KEY_FIELD, canonical_json, digest_of, record_key_of
from orchestrator.core.model import GateSettings, Manifest, MatrixRule, Model, PrecisionSpec, Target
from orchestrator.core.weights import refit_inputs
from orchestrator.errors import ManifestError, Problem

CapabilitiesFn = Callable[[str, str], "BuilderCapabilities | None"]


@dataclass(frozen=True)
class ResolveInputs:
    """Everything the resolver needs that was read from disk, gathered at the edge."""

    model_digests: Mapping[str, str]  # absolute model path -> "sha256:<hex>" (covers external data)
    data_digests: Mapping[str, str] = field(default_factory=dict)  # calibration/parity data path -> digest
    # transform libraries' versions every manifest's keys hold (a manifest's `transforms.tools` adds to them);
    # the app passes none: keys come from what manifests declare, not from the planning machine
    tool_versions: Mapping[str, str] = field(default_factory=dict)
    plugin_libraries: Mapping[str, str] = field(default_factory=dict)  # TensorRT plugin .so -> digest
    transforms: frozenset[str] | None = None  # installed transform kinds; None: not checked
    # installed transform kinds that cannot run here -> why (e.g. a library they need is missing)
    transform_problems: Mapping[str, str] = field(default_factory=dict)
    # absolute model path -> (graph digest, {initializer: digest}) for the models of refittable targets: what plans
    # ``~ refit`` (``core.weights.refit_inputs``); a model without one keys its refittable cells by mode alone
    model_structures: Mapping[str, tuple[str, Mapping[str, str]]] = field(default_factory=dict)
    # ``builder:<name>`` / ``transform:<kind>`` -> the plugin's recipe version (``plugins.recipe``): a new release
    # of a plugin that builds other bytes moves the keys of what it builds (absent: "")
    recipes: Mapping[str, str] = field(default_factory=dict)
    # this runner's kernel-selecting CPU instruction-set features, for the gate keys of `cpu_match: isa` CPU targets
    # only (a verdict holds for the ISA it was given on); None: unknown
    cpu_isa: tuple[str, ...] | None = None


def address_of(model: str, precision: str, profile_set: str, target: Target) -> str:
    return f"{model}/{precision}/{profile_set}@{address_part(target)}"


def _matches(rule: MatrixRule, model: str, precision: str, profile_set: str, target: str) -> bool:
    return ((rule.model is None or rule.model == model)
            and (rule.precision is None or rule.precision == precision)
            and (rule.profile_set is None or rule.profile_set == profile_set)
            and (rule.target is None or rule.target == target))


def cells_of(manifest: Manifest) -> Iterable[tuple[Model, PrecisionSpec, str, Target]]:
    """The matrix's cells: every model x its precisions x its profile sets x every target, minus ``exclude``,
    plus what ``include`` names. A rule that names no model applies to the models that declare the precision
    and define the profile set it names (a model never gets a precision or profile set it does not declare)."""
    targets = {t.name: t for t in manifest.targets}
    seen: set[tuple[str, str, str, str]] = set()
    for model in manifest.models:
        for spec in model.precisions:
            for set_name in model.profile_sets:
                for target in manifest.targets:
                    if any(_matches(r, model.name, spec.name, set_name, target.name) for r in manifest.exclude):
                        continue
                    seen.add((model.name, spec.name, set_name, target.name))
                    yield model, spec, set_name, target
    models = {m.name: m for m in manifest.models}
    for rule in manifest.include:
        for model in ([models[rule.model]] if rule.model else manifest.models):
            specs = {s.name: s for s in model.precisions}
            if rule.model is None and rule.precision is not None and rule.precision not in specs:
                continue
            if rule.profile_set is not None and rule.profile_set not in model.profile_sets:
                # a rule without model: not this model's set; with one, the manifest checks refuse it (a hand-made
                # Manifest gets no cell rather than a crash)
                continue
            names = [rule.precision] if rule.precision else list(specs)
            for name in names:
                spec = specs.get(name) or PrecisionSpec(name=name)
                sets = [rule.profile_set] if rule.profile_set else list(model.profile_sets)
                for set_name in sets:
                    for target in ([targets[rule.target]] if rule.target else manifest.targets):
                        key = (model.name, name, set_name, target.name)
                        if key not in seen:
                            seen.add(key)
                            yield model, spec, set_name, target


def resolve(manifests: Iterable[Manifest], inputs: ResolveInputs, capabilities: CapabilitiesFn) -> BuildGraph:
    """Every cell of ``manifests`` with its keys, and the shared work nodes (prepare, calibrate, transform); each
    cell's own nodes (build, gates, publish) are made from the cell when the graph's ``nodes`` are first read.

    A cell is a row (model x precision x profile set) crossed with a column (target): every part either shares
    is made once (``core.cellparts``); per cell there are only its address, its keys and the cell itself."""
    cells: list[Cell] = []
    shared: dict[str, Node] = {}
    origin: dict[str, str] = {}
    problems: list[Problem] = []
    parts = SharedParts(inputs.model_digests, inputs.data_digests, inputs.tool_versions, inputs.recipes,
                        inputs.transforms, inputs.transform_problems, inputs.plugin_libraries, capabilities,
                        cpu_isa=list(inputs.cpu_isa) if inputs.cpu_isa is not None else None)
    gates = _GateParts(inputs.data_digests)
    scheduled: set[int] = set()  # ids of the combinations whose shared nodes are in ``shared``
    refit_parts: dict[str, Any] = {}  # model path -> its refittable cells' weights part

    for manifest in manifests:
        per_cell_gates = bool(manifest.cell_gates or manifest.rule_gates)
        columns: dict[int, Column] = {}
        row: Row | None = None
        row_gate: tuple[Model, Part, Part] | None = None
        for model, spec, set_name, target in cells_of(manifest):
            col = columns.get(id(target))
            if col is None:
                col = columns[id(target)] = parts.column(manifest, target)
            address = f"{model.name}/{spec.name}/{set_name}@{col.address_part}"
            if address in origin:
                problems.append(Problem(manifest.file, None, None, f"models[{model.name}]",
                                        f"cell {address} is also declared in {origin[address]}",
                                        "give one of the models or targets a different name"))
                continue
            origin[address] = manifest.file
            if row is None or row.model is not model or row.spec is not spec or row.set_name != set_name:
                # cells come row by row (matrix includes aside): the row's parts are looked up when it changes
                row = parts.row(manifest, model, spec, set_name)
                row_gate = None if per_cell_gates else gates.of(model, model.gate, spec)
            how = col.routes.get((spec.name, spec.via)) or parts.route(col, spec)
            combo = parts.combination(row, how.work)
            blocked = how.blocked
            if not blocked and id(combo) not in scheduled:
                # a blocked cell schedules no work: no prepare, calibrate or transform only it would need
                scheduled.add(id(combo))
                for node in combo.nodes:
                    shared.setdefault(node.id, node)
            key_text = combo.template % col.key_texts
            key_parts = combo.head + col.key_values + combo.tail
            if target.weights != "embedded":  # embedded: the keys from before weights modes existed
                weights_part = _weights_part(target.weights, model, inputs, refit_parts)
                # "weights" sorts after every other field: canonical JSON of the key inputs with it added
                key_text = f'{key_text[:-1]},"{WEIGHTS_KEY_FIELD}":{canonical_json(weights_part)}}}'
                key_parts = (*key_parts, weights_part)
            key = sha256_hex(key_text)
            # the cell's gate: matrix rules' over the target's over the model's (``Manifest.gate_for``), as a model
            # with it; cells with the same settings object share one
            gmodel, parity, benchmark = row_gate or gates.of(
                model, manifest.gate_for(model, target, spec.name, set_name), spec)
            settings = sha256_hex(_SETTINGS % (benchmark.digest, col.deploy.digest, parity.digest, col.runtime.digest,
                                               GATE_KEY_SCHEMA_VERSION))
            cell_gate_key = gate_key_of(key, settings)
            cells.append(Cell.trusted(
                address=address, manifest=manifest.file, model=model.name, model_version=model.version,
                model_path=model.source.path, precision=spec, profile_set=set_name, profiles=row.profiles,
                target=target, route=how.work.route or "none", build_key=key,
                key_parts=key_parts, transform_node=combo.transform_node,
                blocked=blocked, gate_key=cell_gate_key,
                gate_parts=(col.runtime.value, parity.value, benchmark.value, col.deploy.value),
                calibrate_node=combo.calibrate_node, toolchain=col.toolchain,
                gate=None if gmodel is model else gmodel.gate,
                record_key=record_key_of(row.record_template, key, cell_gate_key)))

    if problems:
        raise ManifestError(problems)
    cells.sort(key=attrgetter("address"))
    return BuildGraph(cells=tuple(cells), nodes=shared, per_cell=_CellNodes().of)


def _weights_part(mode: str, model: Model, inputs: ResolveInputs, made: dict[str, Any]) -> Any:
    """The build key's ``weights`` part of a target whose weights are not embedded: ``stripped`` by its mode; a
    refittable cell by the graph and weights a refit is planned from (``core.weights.refit_inputs``), made once per
    model file; a model whose structure is not known keys its refittable cells by mode alone."""
    if mode != "refittable":
        return mode
    path = model.source.path
    if path not in made:
        found = inputs.model_structures.get(path)
        made[path] = refit_inputs(*found) if found else {"mode": "refittable"}
    return made[path]


# ``gatekeys.settings_digest``: canonical JSON of the digest of each gate input but the build key (the schema as
# itself), keys sorted
_SETTINGS = '{"benchmark":"%s","deploy":"%s","parity":"%s","runtime":"%s","schema":%d}'


class _GateParts:
    """Gate key parts cells share: a model with a cell's gate settings, its parity and benchmark parts, and the
    digest of their combination (``gatekeys.settings_digest``)."""

    def __init__(self, data_digests: Mapping[str, str]) -> None:
        self.data_digests = data_digests
        self._gated: dict[tuple[int, int], tuple[Model, GateSettings, Model]] = {}
        self._parity: dict[tuple[int, str], tuple[Model, Part]] = {}
        self._benchmark: dict[int, tuple[Model, Part]] = {}

    def of(self, model: Model, gate: GateSettings, spec: PrecisionSpec) -> tuple[Model, Part, Part]:
        gk = (id(model), id(gate))
        found = self._gated.get(gk)
        if found is None:
            found = self._gated[gk] = (model, gate, model if gate is model.gate else replace(model, gate=gate))
        gmodel = found[2]
        pk = (id(gmodel), spec.name)
        parity = self._parity.get(pk)
        if parity is None:
            data = gmodel.gate.parity.data
            value = parity_inputs(gmodel, spec,
                                  self.data_digests.get(data.path) if data.path else None,
                                  self.data_digests.get(data.labels) if data.labels else None
                                  ) if gmodel.gate.parity.enabled else None
            parity = self._parity[pk] = (gmodel, Part.of(value) if value is not None else NONE_PART)
        benchmark = self._benchmark.get(id(gmodel))
        if benchmark is None:
            value = benchmark_inputs(gmodel, gmodel.gate.benchmark) if gmodel.gate.benchmark.enabled else None
            benchmark = self._benchmark[id(gmodel)] = (gmodel, Part.of(value) if value is not None else NONE_PART)
        return gmodel, parity[1], benchmark[1]


class _CellNodes:
    """A cell's own nodes (build, gate:parity, gate:benchmark, publish), made from the cell: the plan reads none of
    them, so a graph makes them only when its ``nodes`` are read (``BuildGraph``)."""

    def __init__(self) -> None:
        self._digests: dict[int, tuple[object, str]] = {}  # id(part) -> (the part, digest_of(part))

    def _digest(self, value: object) -> str:
        found = self._digests.get(id(value))
        if found is None:
            found = self._digests[id(value)] = (value, digest_of(value))
        return found[1]

    def of(self, cell: Cell) -> list[Node]:
        if cell.blocked:
            return []
        address, model = cell.address, cell.model
        build_id = f"build:{address}"
        # the calibrate node too when a transform used it: the build log and metadata name the cache
        source = cell.transform_node or f"prepare:{model}@{cell.model_version}"
        build_deps = (source,) + ((cell.calibrate_node,) if cell.calibrate_node else ())
        out = [Node(build_id, "build", build_deps, cell.build_key, address=address, model=model)]
        g_inputs = cell.gate_inputs
        gate_deps: list[str] = []
        runtime = self._digest(g_inputs["runtime"])
        if g_inputs["parity"] is not None:
            pid = f"gate:parity:{address}"
            key = gate_node_key(g_inputs, "parity", runtime, self._digest(g_inputs["parity"]))
            out.append(Node(pid, "gate:parity", (build_id,), key, address=address, model=model))
            gate_deps.append(pid)
        if g_inputs["benchmark"] is not None:
            bid = f"gate:benchmark:{address}"
            # benchmark after parity: timing a numerically wrong engine is wasted runner time
            key = gate_node_key(g_inputs, "benchmark", runtime, self._digest(g_inputs["benchmark"]))
            out.append(Node(bid, "gate:benchmark", tuple(gate_deps) + (build_id,), key, address=address, model=model))
            gate_deps.append(bid)
        pub = f"publish:{address}"
        out.append(Node(pub, "publish", tuple(gate_deps) or (build_id,), cell.record_key, address=address,
                        model=model))
        return out


__all__ = ["CapabilitiesFn", "ResolveInputs", "address_of", "address_part", "cells_of", "resolve",
           "topological_order"]
