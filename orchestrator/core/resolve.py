"""Manifests -> cells -> BuildGraph. Pure: everything read from disk (model digests, tool versions) comes in
as data, so the same inputs always give the same graph, keys and order.

Nodes per cell: ``prepare`` (one per model file: verify/hash), ``calibrate`` (int8: one calibration cache per
model x data x samples x preprocess x method x calibrator, shared by every cell that needs it), ``transform``
(shared by every cell needing the same conversion of the same model), ``build``, ``gate:parity``,
``gate:benchmark``, ``publish``. Key inputs are listed field by field in ``core.keyspec``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from graphlib import TopologicalSorter
from typing import Any

from orchestrator.core.capabilities import MIN_CC, BuilderCapabilities, needs_calibration_data, route_of
from orchestrator.core.gatekeys import (
    GATE_KEY_SCHEMA_VERSION,
    benchmark_inputs,
    data_inputs,
    deploy_part,
    gate_key,
    gate_node_key,
    parity_inputs,
    runtime_part,
    settings_digest,
)
from orchestrator.core.graph import BuildGraph, Cell, Node, OptimizationProfile
from orchestrator.core.keys import KEY_SCHEMA_VERSION, canonical_json, digest_of, record_key
from orchestrator.core.model import DataSource, Manifest, MatrixRule, Model, PrecisionSpec, Target, cc_slug
from orchestrator.core.toolchain import RUNNER, ResolvedToolchain, ToolchainProblem, resolve_toolchain
from orchestrator.errors import ManifestError, Problem

CapabilitiesFn = Callable[[str, str], "BuilderCapabilities | None"]

_TRANSFORM_KIND = {"fp16": "fp16", "bf16": "bf16", "int8": "int8-qdq", "fp8": "fp8-qdq"}


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
    # ``builder:<name>`` / ``transform:<kind>`` -> the plugin's recipe version (``plugins.recipe``): a new release
    # of a plugin that builds other bytes moves the keys of what it builds (absent: "")
    recipes: Mapping[str, str] = field(default_factory=dict)
    # this runner's kernel-selecting CPU instruction-set features, for the gate keys of `cpu_match: isa` CPU targets
    # only (a verdict holds for the ISA it was given on); None: unknown
    cpu_isa: tuple[str, ...] | None = None


def address_part(target: Target) -> str:
    """The ``sm89+trt10.13`` after the ``@`` of every cell address of ``target``."""
    # A CC list is a set: its order in the YAML must not move the cell to a new address (and so a rebuild).
    ccs = tuple(sorted(target.compute_capabilities, key=_cc_tuple))
    if ccs != target.compute_capabilities:
        target = replace(target, compute_capabilities=ccs)
    return target.slug


def address_of(model: str, precision: str, profile_set: str, target: Target) -> str:
    return f"{model}/{precision}/{profile_set}@{address_part(target)}"


def _matches(rule: MatrixRule, model: str, precision: str, profile_set: str, target: str) -> bool:
    return ((rule.model is None or rule.model == model)
            and (rule.precision is None or rule.precision == precision)
            and (rule.profile_set is None or rule.profile_set == profile_set)
            and (rule.target is None or rule.target == target))


def _profiles(model: Model, set_name: str) -> tuple[OptimizationProfile, ...]:
    names = model.profile_sets[set_name]
    out = []
    for name in names:
        shapes = {i.name: (i.profiles[name].min, i.profiles[name].opt, i.profiles[name].max)
                  for i in model.inputs if name in i.profiles}
        out.append(OptimizationProfile(name=name, shapes=shapes))
    return tuple(out)


def _cc_tuple(cc: str) -> tuple[int, int]:
    major, _, minor = cc.partition(".")
    return int(major), int(minor or 0)


def _blocked_reason(manifest: Manifest, target: Target, spec: PrecisionSpec, route: str | None,
                    caps: BuilderCapabilities | None, transforms: frozenset[str] | None,
                    problems: Mapping[str, str]) -> str | None:
    if caps is None:
        return f"builder plugin {target.builder!r} is not installed"
    if route is None:
        return f"{target.builder} {target.builder_version} cannot build {spec.name} (via {spec.via})"
    need = MIN_CC.get(spec.name)
    if need and target.compute_capabilities:
        low = sorted((c for c in target.compute_capabilities if _cc_tuple(c) < need), key=_cc_tuple)
        if low:
            return (f"{spec.name} needs compute capability >= {need[0]}.{need[1]}; "
                    f"target has {', '.join(cc_slug(c) for c in low)}")
    kind = _TRANSFORM_KIND.get(spec.name)
    if route == "transform" and transforms is not None and kind not in transforms:
        why = problems.get(str(kind))
        if why:
            return f"{spec.name} needs the {kind!r} transform, which cannot run here: {why}"
        return f"{spec.name} needs the {kind!r} transform, which no installed plugin provides"
    if manifest.runner_pools:
        for role, labels in (("build", target.runners.build), ("gate", target.runners.gate)):
            if labels and not any(set(labels) <= set(p.labels) for p in manifest.runner_pools):
                return f"no runner pool has the {role} labels [{', '.join(labels)}]"
    return None


def _calibration_shapes(model: Model, profiles: tuple[OptimizationProfile, ...]) -> dict[str, list[int]]:
    """Calibration runs at the first profile's opt shapes; an input that profile gives no shape (every input of a
    static model, or a static input beside dynamic ones) at its declared shape (as the transform step reads them)."""
    first = profiles[0].shapes if profiles else {}
    return {i.name: list(first[i.name][1]) if i.name in first else [d if isinstance(d, int) else 1 for d in i.shape]
            for i in model.inputs}


def _tools(inputs: ResolveInputs, manifest: Manifest) -> dict[str, str]:
    # the manifest's declared tool versions, never the planning machine's: keys must not move with where `plan` runs
    return dict(sorted({**inputs.tool_versions, **dict(manifest.transform_tools)}.items()))


def calibration_inputs(model: Model, spec: PrecisionSpec, model_digest: str, profiles: tuple[OptimizationProfile, ...],
                       data_digests: Mapping[str, str], calibrator: dict[str, Any]) -> dict[str, Any]:
    """What a calibration cache depends on: the model, the data (by content, with samples and preprocessing), the
    method, the shapes it runs at, and the calibrator (its family and exact version: cache formats differ)."""
    data = model.calibration or DataSource()
    return {"kind": "calibrate", "model": model_digest,
            "data": data_inputs(data, data_digests.get(data.path) if data.path else None),
            "method": spec.calibration_method, "shapes": _calibration_shapes(model, profiles),
            "dtypes": {i.name: i.dtype for i in model.inputs}, "calibrator": calibrator}


def _transform_settings(spec: PrecisionSpec, inputs: ResolveInputs, manifest: Manifest) -> dict[str, Any]:
    settings: dict[str, Any] = {"keep_io_types": spec.keep_io_types,
                      "op_block_list": sorted(spec.op_block_list) if spec.op_block_list is not None else None}
    if spec.name in ("int8", "fp8"):
        settings["calibration_method"] = spec.calibration_method
        if spec.min_quantized_share is not None:  # what the transform accepts as done (absent: its default)
            settings["min_quantized_share"] = spec.min_quantized_share
    settings["tools"] = _tools(inputs, manifest)
    return settings


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
    cells: list[Cell] = []
    nodes: dict[str, Node] = {}
    origin: dict[str, str] = {}
    problems: list[Problem] = []
    caps_cache: dict[tuple[str, str], BuilderCapabilities | None] = {}
    # Per-resolve caches of key parts every cell of a model x profile set (or of a target) shares: a 100k-cell
    # fleet has a few thousand distinct ones. The cached dicts are shared between cells' key_inputs (read-only).
    profile_cache: dict[tuple[int, str], tuple[tuple[OptimizationProfile, ...], list[dict[str, Any]]]] = {}
    transform_cache: dict[tuple[int, PrecisionSpec, str], tuple[dict[str, Any], str]] = {}
    target_cache: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
    calib_cache: dict[tuple[int, str, str, str], tuple[dict[str, Any], str, str | None]] = {}
    parity_cache: dict[tuple[int, str], dict[str, Any] | None] = {}
    small_parts: dict[tuple[str | None, ...], dict[str, Any]] = {}
    bench_cache: dict[int, dict[str, Any] | None] = {}
    runtime_cache: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
    toolchain_cache: dict[int, tuple[ResolvedToolchain, str | None]] = {}
    gated_cache: dict[tuple[int, int], Model] = {}
    settings_cache: dict[tuple[int, int, int, int], str] = {}
    plugin_libraries = dict(sorted(inputs.plugin_libraries.items()))
    texts: dict[int, str] = {}  # canonical JSON of those shared parts, by id (the caches keep them alive)

    def shared_text(value: object) -> str:
        text = texts.get(id(value))
        if text is None:
            text = texts[id(value)] = canonical_json(value)
        return text

    digests: dict[int, str] = {}

    def shared_digest(value: object) -> str:
        digest = digests.get(id(value))
        if digest is None:
            digest = digests[id(value)] = hashlib.sha256(shared_text(value).encode("utf-8")).hexdigest()
        return digest

    for manifest in manifests:
        for model, spec, set_name, target in cells_of(manifest):
            ck = (target.builder, target.builder_version)
            if ck not in caps_cache:
                caps_cache[ck] = capabilities(*ck)
            caps = caps_cache[ck]
            route = route_of(spec, caps, target) if caps else None
            address = address_of(model.name, spec.name, set_name, target)
            if address in origin:
                problems.append(Problem(manifest.file, None, None, f"models[{model.name}]",
                                        f"cell {address} is also declared in {origin[address]}",
                                        "give one of the models or targets a different name"))
                continue
            origin[address] = manifest.file
            model_digest = inputs.model_digests[model.source.path]
            pk = (id(model), set_name)  # models live in the manifests for the whole call: ids are stable
            if pk not in profile_cache:
                ps = _profiles(model, set_name)
                # min/opt/max by name, so a changed dim is reported as e.g. profiles[0].shapes.x.max
                profile_cache[pk] = (ps, [{"name": p.name, "shapes": {
                    k: {"min": list(v[0]), "opt": list(v[1]), "max": list(v[2])} for k, v in p.shapes.items()}}
                    for p in ps])
            profiles, profiles_key = profile_cache[pk]

            prepare_id = f"prepare:{model.name}@{model.version}"
            blocked = _blocked_reason(manifest, target, spec, route, caps, inputs.transforms,
                                      inputs.transform_problems)
            if caps is not None and id(target) not in toolchain_cache:
                try:
                    toolchain_cache[id(target)] = (resolve_toolchain(target, caps.provisioning), None)
                except ToolchainProblem as e:
                    toolchain_cache[id(target)] = (RUNNER, f"toolchain {target.toolchain.kind}: {e.message}")
            toolchain, toolchain_problem = toolchain_cache.get(id(target), (RUNNER, None))
            blocked = blocked or toolchain_problem
            if not blocked:  # a blocked cell schedules no work: no prepare or transform only it would need
                nodes.setdefault(prepare_id, Node(prepare_id, "prepare", (), model_digest, model=model.name))

            calib_id = None
            calib_inputs = None
            kind = _TRANSFORM_KIND.get(spec.name) if route == "transform" else None
            if caps is not None and needs_calibration_data(spec, caps, target):
                by: str | None
                if kind:  # Q/DQ by the transform plugin's calibrator, whatever builder builds next: keyed by the
                    # tool versions the manifest pins for transforms and the plugin's recipe
                    calibrator = {"name": f"transform:{kind}", "tools": _tools(inputs, manifest), "for": kind,
                                  "recipe": inputs.recipes.get(f"transform:{kind}", "")}
                    by = f"transform:{kind}"
                elif spec.name == "int8" and caps is not None and caps.calibration_family:
                    # the builder's own calibrator: its cache format is that family's, of that exact version
                    calibrator = {"name": caps.calibration_family, "version": target.builder_version,
                                  "for": "native"}
                    by = f"builder:{target.builder}"
                else:  # a builder with no calibration cache calibrates inside its build (BuildRequest.calibration):
                    # the data still makes the engine, so it is keyed; there is no cache to share (no node)
                    calibrator = {"name": f"builder:{target.builder}", "version": target.builder_version,
                                  "for": "native"}
                    by = None
                calib_ck = (id(model), str(spec.calibration_method), set_name, canonical_json(calibrator))
                if calib_ck not in calib_cache:
                    c_inputs = calibration_inputs(model, spec, model_digest, profiles, inputs.data_digests,
                                                  calibrator)
                    calib_cache[calib_ck] = (c_inputs, digest_of(c_inputs), by)
                calib_inputs, ckey, by = calib_cache[calib_ck]
                if by is not None:
                    calib_id = f"calibrate:{model.name}/{spec.calibration_method}#{ckey[:12]}"
                    if not blocked:
                        nodes.setdefault(calib_id, Node(calib_id, "calibrate", (prepare_id,), ckey,
                                                        model=model.name, calibrator=by))

            transform_id = None
            transform_inputs = None
            if kind is not None:
                tk = (id(model), spec, set_name)
                if tk not in transform_cache:
                    t_inputs = {
                        "kind": kind,
                        "recipe": inputs.recipes.get(f"transform:{kind}", ""),
                        "model": model_digest,
                        "settings": _transform_settings(spec, inputs, manifest),
                        # the calibration cache's key (its inputs are the cell's `calibration` key part)
                        "calibration": digest_of(calib_inputs) if calib_inputs is not None else None,
                    }
                    transform_cache[tk] = (t_inputs, digest_of(t_inputs))
                transform_inputs, tkey = transform_cache[tk]
                transform_id = f"transform:{model.name}/{kind}#{tkey[:12]}"
                if not blocked:
                    deps = (prepare_id,) + ((calib_id,) if calib_id else ())
                    nodes.setdefault(transform_id, Node(transform_id, "transform", deps, tkey,
                                                        model=model.name, transform_kind=kind))

            if id(target) not in target_cache:  # targets live in the manifests: ids are stable
                target_part: dict[str, Any] = {
                    "compute_capabilities": sorted(target.compute_capabilities, key=_cc_tuple),
                    "hardware_compatibility": target.hardware_compatibility,
                    "device": target.device,
                }
                if caps is None or caps.platform_specific:
                    target_part["platform"] = target.platform
                target_cache[id(target)] = (target_part, target.options.to_key(caps.reads_options if caps else None))
            target_key, options_key = target_cache[id(target)]
            # parts many cells share, kept as one object each so their JSON is made once
            model_part = small_parts.setdefault(("model", model_digest), {"digest": model_digest})
            precision_part = small_parts.setdefault(("precision", spec.name, route),
                                                    {"name": spec.name, "route": route})
            builder_part = small_parts.setdefault(("builder", target.builder, target.builder_version),
                                                  {"name": target.builder, "version": target.builder_version,
                                                   "recipe": inputs.recipes.get(f"builder:{target.builder}", "")})
            key_inputs = {
                "schema": KEY_SCHEMA_VERSION,
                "model": model_part,
                "transform": transform_inputs,
                "calibration": calib_inputs,
                "precision": precision_part,
                "profiles": profiles_key,
                "builder": builder_part,
                "target": target_key,
                "options": options_key,
                "plugin_libraries": plugin_libraries,
                "salt": manifest.salt,
            }
            if target.weights != "embedded":  # embedded: the keys from before weights modes existed
                key_inputs["weights"] = target.weights
            key = _digest_from_parts(key_inputs, _SHARED_PARTS, shared_text)
            # the cell's gate: matrix rules' over the target's over the model's (``Manifest.gate_for``), as a model
            # with it; cells with the same settings object share one
            gate = manifest.gate_for(model, target, spec.name, set_name)
            gk = (id(model), id(gate))
            if gk not in gated_cache:
                gated_cache[gk] = model if gate is model.gate else replace(model, gate=gate)
            gmodel = gated_cache[gk]
            # gate key parts, each cached where cells share it (their JSON is then serialized once, by id)
            pk_gate = (id(gmodel), spec.name)
            if pk_gate not in parity_cache:
                parity_path = gmodel.gate.parity.data.path
                labels_path = gmodel.gate.parity.data.labels
                parity_cache[pk_gate] = parity_inputs(
                    gmodel, spec, inputs.data_digests.get(parity_path) if parity_path else None,
                    inputs.data_digests.get(labels_path) if labels_path else None
                ) if gmodel.gate.parity.enabled else None
            if id(gmodel) not in bench_cache:
                bench_cache[id(gmodel)] = (benchmark_inputs(gmodel, gmodel.gate.benchmark)
                                           if gmodel.gate.benchmark.enabled else None)
            if id(target) not in runtime_cache:
                runtime_cache[id(target)] = (runtime_part(target), deploy_part(
                    target, list(inputs.cpu_isa) if inputs.cpu_isa is not None else None))
            runtime, deploy = runtime_cache[id(target)]
            g_inputs = {"schema": GATE_KEY_SCHEMA_VERSION, "build_key": key, "runtime": runtime,
                        "parity": parity_cache[pk_gate], "benchmark": bench_cache[id(gmodel)], "deploy": deploy}
            sk = (id(runtime), id(g_inputs["parity"]), id(g_inputs["benchmark"]), id(deploy))
            if sk not in settings_cache:  # the cached parts live as long as the caches: their ids are stable
                settings_cache[sk] = settings_digest(g_inputs, shared_digest)
            cell_gate_key = gate_key(g_inputs, settings_cache[sk])
            cells.append(Cell(address=address, manifest=manifest.file, model=model.name,
                              model_version=model.version, model_path=model.source.path, precision=spec,
                              profile_set=set_name, profiles=profiles, target=target, route=route or "none",
                              build_key=key, key_inputs=key_inputs, transform_node=transform_id,
                              blocked=blocked, gate_key=cell_gate_key, gate_inputs=g_inputs, calibrate_node=calib_id,
                              toolchain=toolchain, gate=None if gmodel is model else gmodel.gate))
            if blocked:
                continue
            build_id = f"build:{address}"
            # the calibrate node too when a transform used it: the build log and metadata name the cache
            build_deps = (transform_id or prepare_id,) + ((calib_id,) if calib_id else ())
            nodes[build_id] = Node(build_id, "build", build_deps, key, address=address, model=model.name)
            gate_deps = []
            if gmodel.gate.parity.enabled:
                pid = f"gate:parity:{address}"
                pkey = gate_node_key(g_inputs, "parity", shared_digest(runtime), shared_digest(g_inputs["parity"]))
                nodes[pid] = Node(pid, "gate:parity", (build_id,), pkey, address=address, model=model.name)
                gate_deps.append(pid)
            if gmodel.gate.benchmark.enabled:
                bid = f"gate:benchmark:{address}"
                # benchmark after parity: timing a numerically wrong engine is wasted runner time
                nodes[bid] = Node(bid, "gate:benchmark", tuple(gate_deps) + (build_id,),
                                  gate_node_key(g_inputs, "benchmark", shared_digest(runtime),
                                                shared_digest(g_inputs["benchmark"])), address=address,
                                  model=model.name)
                gate_deps.append(bid)
            pub = f"publish:{address}"
            nodes[pub] = Node(pub, "publish", tuple(gate_deps) or (build_id,),
                              record_key(key, cell_gate_key, model.version), address=address, model=model.name)

    if problems:
        raise ManifestError(problems)
    cells.sort(key=lambda c: c.address)
    return BuildGraph(cells=tuple(cells), nodes=nodes, order=topological_order(nodes))


# key_inputs parts shared between cells (cached above): serialized once per resolve, not once per cell
_SHARED_PARTS = frozenset({"model", "transform", "calibration", "precision", "profiles", "builder", "target",
                           "options", "plugin_libraries"})


def _digest_from_parts(inputs: dict[str, Any], shared: frozenset[str], shared_text: Callable[[object], str]) -> str:
    """``digest_of(inputs)`` with the shared parts' JSON reused: canonical JSON of a dict is its sorted items
    as ``"key":value`` joined by ``,`` in braces, so splicing canonical parts gives the very same bytes."""
    text = ",".join(f"{_key_text(k)}:{shared_text(v) if k in shared else _value_text(v)}"
                    for k, v in sorted(inputs.items()))
    return hashlib.sha256(("{" + text + "}").encode("utf-8")).hexdigest()


@lru_cache(maxsize=256)
def _key_text(key: str) -> str:
    return canonical_json(key)


def _value_text(value: object) -> str:
    """``canonical_json(value)``, without the encoder for the values most parts are (hex keys, small ints)."""
    if isinstance(value, str) and value.isascii() and value.isalnum():
        return f'"{value}"'
    if type(value) is int:
        return str(value)
    return canonical_json(value)


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
