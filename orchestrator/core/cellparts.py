"""The key parts cells share, made once per resolve (pure).

A cell is a row (model x precision x profile set, of one manifest) crossed with a column (a target, of one
manifest): its build key is made of the row's parts (model, profiles, transform, calibration), the column's
(builder, target, options) and the parts the two make together (the route the target takes to the precision
and what that needs). A million-cell fleet has a few thousand rows and a few dozen columns, so each part, its
canonical JSON and its digest are made once here (``SharedParts``) and a cell splices them
(``build_key_text``): the very bytes ``canonical_json(key_inputs)`` gives, which tests check cell by cell.

Caches are keyed by ``id``; each entry holds the objects whose ids key it, so no id is reused by another
object while its entry lives.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from orchestrator.core.capabilities import MIN_CC, BuilderCapabilities, needs_calibration_data, route_of
from orchestrator.core.gatekeys import data_inputs, deploy_part
from orchestrator.core.graph import Node, OptimizationProfile
from orchestrator.core.keys import BUILD_KEY_FIELDS, KEY_SCHEMA_VERSION, canonical_json, record_key_template
from orchestrator.core.model import DataSource, Manifest, Model, PrecisionSpec, Target, cc_slug
from orchestrator.core.toolchain import RUNNER, ResolvedToolchain, ToolchainProblem, resolve_toolchain

CapabilitiesFn = Callable[[str, str], "BuilderCapabilities | None"]

TRANSFORM_KIND = {"fp16": "fp16", "bf16": "bf16", "int8": "int8-qdq", "fp8": "fp8-qdq"}


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Part:
    """A key part, its canonical JSON and that JSON's sha256 (``digest_of(value)``)."""

    value: Any
    text: str
    digest: str

    @classmethod
    def of(cls, value: Any) -> Part:
        text = canonical_json(value)
        return cls(value, text, sha256_hex(text))


NONE_PART = Part.of(None)
SCHEMA_PART = Part.of(KEY_SCHEMA_VERSION)

# Canonical JSON of a dict is its items sorted by key, ``"key":value`` joined by ``,`` in braces: the template
# holds the build key's fields in that order.
_SORTED = tuple(sorted(range(len(BUILD_KEY_FIELDS)), key=lambda i: BUILD_KEY_FIELDS[i]))
_TEMPLATE = "{" + ",".join(f"{canonical_json(BUILD_KEY_FIELDS[i])}:%s" for i in _SORTED) + "}"


def build_key_text(texts: tuple[str, ...]) -> str:
    """``canonical_json(key_inputs)`` from each field's canonical JSON, given in ``BUILD_KEY_FIELDS`` order."""
    return _TEMPLATE % tuple([texts[i] for i in _SORTED])


def cc_tuple(cc: str) -> tuple[int, int]:
    major, _, minor = cc.partition(".")
    return int(major), int(minor or 0)


def address_part(target: Target) -> str:
    """The ``sm89+trt10.13`` after the ``@`` of every cell address of ``target``."""
    # A CC list is a set: its order in the YAML must not move the cell to a new address (and so a rebuild).
    ccs = tuple(sorted(target.compute_capabilities, key=cc_tuple))
    if ccs != target.compute_capabilities:
        target = replace(target, compute_capabilities=ccs)
    return target.slug


def tools_of(tool_versions: Mapping[str, str], manifest: Manifest) -> dict[str, str]:
    # the manifest's declared tool versions, never the planning machine's: keys must not move with where `plan` runs
    return dict(sorted({**tool_versions, **dict(manifest.transform_tools)}.items()))


def blocked_reason(manifest: Manifest, target: Target, spec: PrecisionSpec, route: str | None,
                   caps: BuilderCapabilities | None, transforms: frozenset[str] | None,
                   problems: Mapping[str, str]) -> str | None:
    if caps is None:
        return f"builder plugin {target.builder!r} is not installed"
    if route is None:
        return f"{target.builder} {target.builder_version} cannot build {spec.name} (via {spec.via})"
    need = MIN_CC.get(spec.name)
    if need and target.compute_capabilities:
        low = sorted((c for c in target.compute_capabilities if cc_tuple(c) < need), key=cc_tuple)
        if low:
            return (f"{spec.name} needs compute capability >= {need[0]}.{need[1]}; "
                    f"target has {', '.join(cc_slug(c) for c in low)}")
    kind = TRANSFORM_KIND.get(spec.name)
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


def calibration_shapes(model: Model, profiles: tuple[OptimizationProfile, ...]) -> dict[str, list[int]]:
    """Calibration runs at the first profile's opt shapes; an input that profile gives no shape (every input of a
    static model, or a static input beside dynamic ones) at its declared shape (as the transform step reads them)."""
    first = profiles[0].shapes if profiles else {}
    return {i.name: list(first[i.name][1]) if i.name in first else [d if isinstance(d, int) else 1 for d in i.shape]
            for i in model.inputs}


def calibration_inputs(model: Model, spec: PrecisionSpec, model_digest: str, profiles: tuple[OptimizationProfile, ...],
                       data_digests: Mapping[str, str], calibrator: dict[str, Any]) -> dict[str, Any]:
    """What a calibration cache depends on: the model, the data (by content, with samples and preprocessing), the
    method, the shapes it runs at, and the calibrator (its family and exact version: cache formats differ)."""
    data = model.calibration or DataSource()
    return {"kind": "calibrate", "model": model_digest,
            "data": data_inputs(data, data_digests.get(data.path) if data.path else None),
            "method": spec.calibration_method, "shapes": calibration_shapes(model, profiles),
            "dtypes": {i.name: i.dtype for i in model.inputs}, "calibrator": calibrator}


def profiles_of(model: Model, set_name: str) -> tuple[OptimizationProfile, ...]:
    out = []
    for name in model.profile_sets[set_name]:
        shapes = {i.name: (i.profiles[name].min, i.profiles[name].opt, i.profiles[name].max)
                  for i in model.inputs if name in i.profiles}
        out.append(OptimizationProfile(name=name, shapes=shapes))
    return tuple(out)


@dataclass(frozen=True)
class Work:
    """What a cell's route to its precision needs, whichever target took it (interned: columns that take the same
    route share one, so a row makes its calibration and transform parts once for all of them)."""

    route: str | None
    precision: Part  # {"name", "route"}
    kind: str | None  # the transform kind when the route is a transform
    # made from calibration data: the calibrator's inputs and who computes the cache ("transform:int8-qdq",
    # "builder:tensorrt"; None: the builder calibrates inside its build, no cache to share); else None
    calibrator: tuple[Part, str | None] | None


@dataclass(frozen=True)
class Route:
    """How one column reaches a precision (asked ``via`` a route): the work, and why the cell is blocked."""

    work: Work
    blocked: str | None


@dataclass
class Column:
    """What every cell of one target of one manifest shares. Its build key parts are ``COLUMN_FIELDS``."""

    manifest: Manifest
    target: Target
    caps: BuilderCapabilities | None
    address_part: str  # sm89+trt10.13
    toolchain: ResolvedToolchain
    toolchain_problem: str | None
    builder: Part
    target_part: Part
    options: Part
    runtime: Part  # gate keys: the runtime the cell declares
    deploy: Part  # gate keys: the deployment policy its record carries
    routes: dict[tuple[str, str], Route] = field(default_factory=dict)  # (precision, via) -> how
    # its build key parts' values (COLUMN_FIELDS order) and JSON (in the order a combination's template takes
    # them: sorted by field name)
    key_values: tuple[Any, ...] = field(init=False)
    key_texts: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        parts = (self.builder, self.target_part, self.options)
        self.key_values = tuple(p.value for p in parts)
        self.key_texts = tuple(parts[i].text for i in _COL_SORTED)


# A column's fields of the build key, consecutive in BUILD_KEY_FIELDS: a cell's key inputs are a combination's head,
# the column's values and the combination's tail
COLUMN_FIELDS = ("builder", "target", "options")
_COL_AT = BUILD_KEY_FIELDS.index(COLUMN_FIELDS[0])
if BUILD_KEY_FIELDS[_COL_AT:_COL_AT + len(COLUMN_FIELDS)] != COLUMN_FIELDS:
    raise ImportError("cellparts: a column's build key fields must stay consecutive in BUILD_KEY_FIELDS")
_COL_SORTED = sorted(range(len(COLUMN_FIELDS)), key=lambda i: COLUMN_FIELDS[i])


@dataclass(frozen=True)
class Combination:
    """A row taking one route's work: every build key part but the column's, made once."""

    head: tuple[Any, ...]  # key values before the column's (BUILD_KEY_FIELDS order)
    tail: tuple[Any, ...]  # key values after them
    template: str  # canonical JSON of the key inputs with %s where the column's texts go (in COLUMN_FIELDS order)
    work: Work
    nodes: tuple[Node, ...]  # the shared nodes its cells need (prepare, calibrate, transform)
    calibrate_node: str | None
    transform_node: str | None


@dataclass
class Row:
    """What every cell of one model x precision spec x profile set of one manifest shares."""

    manifest: Manifest
    model: Model
    spec: PrecisionSpec
    set_name: str
    model_digest: str
    model_part: Part
    profiles: tuple[OptimizationProfile, ...]
    profiles_part: Part
    salt: Part
    prepare_id: str
    record_template: str  # ``keys.record_key_template`` of the model's version
    combinations: dict[int, Combination] = field(default_factory=dict)  # id(work) -> (the works are interned)
    transform: tuple[Part, str] | None = None  # (transform inputs, transform node id), made on first use


class SharedParts:
    """The per-resolve caches of rows, columns, routes, calibrations and small parts."""

    def __init__(self, model_digests: Mapping[str, str], data_digests: Mapping[str, str],
                 tool_versions: Mapping[str, str], recipes: Mapping[str, str], transforms: frozenset[str] | None,
                 transform_problems: Mapping[str, str], plugin_libraries: Mapping[str, str],
                 capabilities: CapabilitiesFn, cpu_isa: list[str] | None = None) -> None:
        self.model_digests = model_digests
        self.cpu_isa = cpu_isa  # the runner's CPU features: `cpu_match: isa` targets' deploy part names them
        self.data_digests = data_digests
        self.tool_versions = tool_versions
        self.recipes = recipes
        self.transforms = transforms
        self.transform_problems = transform_problems
        self.plugin_libraries = Part.of(dict(sorted(plugin_libraries.items())))
        self.capabilities = capabilities
        self._caps: dict[tuple[str, str], BuilderCapabilities | None] = {}
        self._columns: dict[tuple[int, int], Column] = {}
        self._rows: dict[tuple[int, int, int, str], Row] = {}
        self._targets: dict[int, tuple[Target, BuilderCapabilities | None, str, ResolvedToolchain, str | None, Part,
                                       Part, Part, Part, Part]] = {}
        self._profiles: dict[tuple[int, str], tuple[Model, tuple[OptimizationProfile, ...], Part]] = {}
        self._calibrations: dict[tuple[int, str, str, str], tuple[Model, Part, str | None]] = {}
        self._small: dict[tuple[str | None, ...], Part] = {}
        self._works: dict[tuple[str | None, ...], Work] = {}
        self._manifests: dict[int, tuple[Manifest, dict[str, str], Part]] = {}

    def small(self, *key: str | None) -> Part:
        """A small part many cells share (model digest, precision + route), made once."""
        part = self._small.get(key)
        if part is None:
            if key[0] == "model":
                part = Part.of({"digest": key[1]})
            else:
                part = Part.of({"name": key[1], "route": key[2]})
            self._small[key] = part
        return part

    def _manifest(self, manifest: Manifest) -> tuple[Manifest, dict[str, str], Part]:
        found = self._manifests.get(id(manifest))
        if found is None:
            found = self._manifests[id(manifest)] = (manifest, tools_of(self.tool_versions, manifest),
                                                     Part.of(manifest.salt))
        return found

    def tools(self, manifest: Manifest) -> dict[str, str]:
        return self._manifest(manifest)[1]

    def caps(self, target: Target) -> BuilderCapabilities | None:
        ck = (target.builder, target.builder_version)
        if ck not in self._caps:
            self._caps[ck] = self.capabilities(*ck)
        return self._caps[ck]

    def column(self, manifest: Manifest, target: Target) -> Column:
        col = self._columns.get((id(manifest), id(target)))
        if col is None:
            per_target = self._targets.get(id(target))
            if per_target is None:
                per_target = self._targets[id(target)] = self._target_parts(target)
            col = Column(manifest, *per_target)
            self._columns[(id(manifest), id(target))] = col
        return col

    def _target_parts(self, target: Target) -> tuple[Target, BuilderCapabilities | None, str, ResolvedToolchain,
                                                     str | None, Part, Part, Part, Part, Part]:
        caps = self.caps(target)
        toolchain, problem = RUNNER, None
        if caps is not None:
            try:
                toolchain = resolve_toolchain(target, caps.provisioning)
            except ToolchainProblem as e:
                problem = f"toolchain {target.toolchain.kind}: {e.message}"
        target_part: dict[str, Any] = {
            "compute_capabilities": sorted(target.compute_capabilities, key=cc_tuple),
            "hardware_compatibility": target.hardware_compatibility,
            "device": target.device,
        }
        if caps is None or caps.platform_specific:
            target_part["platform"] = target.platform
        builder = {"name": target.builder, "version": target.builder_version,
                   "recipe": self.recipes.get(f"builder:{target.builder}", "")}
        return (target, caps, address_part(target), toolchain, problem, Part.of(builder), Part.of(target_part),
                Part.of(target.options.to_key(caps.reads_options if caps else None)),
                Part.of({"builder": target.builder, "version": target.builder_version}),
                Part.of(deploy_part(target, self.cpu_isa)))

    def route(self, col: Column, spec: PrecisionSpec) -> Route:
        # what a route depends on of a spec: its precision and how it asks for it (the other fields are the row's)
        found = col.routes.get((spec.name, spec.via))
        if found is None:
            found = col.routes[(spec.name, spec.via)] = self._route(col, spec)
        return found

    def _route(self, col: Column, spec: PrecisionSpec) -> Route:
        caps, target, manifest = col.caps, col.target, col.manifest
        route = route_of(spec, caps, target) if caps else None
        blocked = blocked_reason(manifest, target, spec, route, caps, self.transforms, self.transform_problems)
        blocked = blocked or col.toolchain_problem
        kind = TRANSFORM_KIND.get(spec.name) if route == "transform" else None
        calibrator: tuple[Part, str | None] | None = None
        if caps is not None and needs_calibration_data(spec, caps, target):
            by: str | None
            if kind:  # Q/DQ by the transform plugin's calibrator, whatever builder builds next: keyed by the
                # tool versions the manifest pins for transforms and the plugin's recipe
                value = {"name": f"transform:{kind}", "tools": self.tools(manifest), "for": kind,
                         "recipe": self.recipes.get(f"transform:{kind}", "")}
                by = f"transform:{kind}"
            elif spec.name == "int8" and caps.calibration_family:
                # the builder's own calibrator: its cache format is that family's, of that exact version
                value = {"name": caps.calibration_family, "version": target.builder_version, "for": "native"}
                by = f"builder:{target.builder}"
            else:  # a builder with no calibration cache calibrates inside its build (BuildRequest.calibration):
                # the data still makes the engine, so it is keyed; there is no cache to share (no node)
                value = {"name": f"builder:{target.builder}", "version": target.builder_version, "for": "native"}
                by = None
            calibrator = (Part.of(value), by)
        precision = self.small("precision", spec.name, route)
        wk = (route, precision.text, kind, calibrator[0].text if calibrator else None,
              calibrator[1] if calibrator else None)
        work = self._works.get(wk)
        if work is None:
            work = self._works[wk] = Work(route, precision, kind, calibrator)
        return Route(work, blocked)

    def row(self, manifest: Manifest, model: Model, spec: PrecisionSpec, set_name: str) -> Row:
        rk = (id(manifest), id(model), id(spec), set_name)
        row = self._rows.get(rk)
        if row is None:
            digest = self.model_digests[model.source.path]
            pk = (id(model), set_name)
            if pk not in self._profiles:
                ps = profiles_of(model, set_name)
                # min/opt/max by name, so a changed dim is reported as e.g. profiles[0].shapes.x.max
                self._profiles[pk] = (model, ps, Part.of([{"name": p.name, "shapes": {
                    k: {"min": list(v[0]), "opt": list(v[1]), "max": list(v[2])} for k, v in p.shapes.items()}}
                    for p in ps]))
            _, profiles, profiles_part = self._profiles[pk]
            row = self._rows[rk] = Row(manifest, model, spec, set_name, digest, self.small("model", digest),
                                       profiles, profiles_part, self._manifest(manifest)[2],
                                       f"prepare:{model.name}@{model.version}", record_key_template(model.version))
        return row

    def combination(self, row: Row, work: Work) -> Combination:
        found = row.combinations.get(id(work))
        if found is None:
            found = row.combinations[id(work)] = self._combination(row, work)
        return found

    def _combination(self, row: Row, work: Work) -> Combination:
        model = row.model
        nodes = [Node(row.prepare_id, "prepare", (), row.model_digest, model=model.name)]
        calibration, calib_id = NONE_PART, None
        if work.calibrator is not None:
            calibration, calib_id = self.calibration(row, *work.calibrator)
            if calib_id is not None:
                nodes.append(Node(calib_id, "calibrate", (row.prepare_id,), calibration.digest, model=model.name,
                                  calibrator=work.calibrator[1]))
        transform, transform_id = NONE_PART, None
        if work.kind is not None:
            transform, transform_id = self.transform(row, work.kind,
                                                     calibration if work.calibrator is not None else None)
            deps = (row.prepare_id,) + ((calib_id,) if calib_id else ())
            nodes.append(Node(transform_id, "transform", deps, transform.digest, model=model.name,
                              transform_kind=work.kind))
        parts = (SCHEMA_PART, row.model_part, transform, calibration, work.precision, row.profiles_part, None, None,
                 None, self.plugin_libraries, row.salt)
        texts = tuple("%s" if p is None else p.text.replace("%", "%%") for p in parts)
        values = tuple(p.value if p is not None else None for p in parts)
        end = _COL_AT + len(COLUMN_FIELDS)
        return Combination(values[:_COL_AT], values[end:], build_key_text(texts), work, tuple(nodes), calib_id,
                           transform_id)

    def calibration(self, row: Row, calibrator: Part, by: str | None) -> tuple[Part, str | None]:
        """The calibration cache a cell is made from: its inputs and its calibrate node id (None: no node)."""
        model, spec = row.model, row.spec
        ck = (id(model), str(spec.calibration_method), row.set_name, calibrator.text)
        found = self._calibrations.get(ck)
        if found is None:
            inputs = calibration_inputs(model, spec, row.model_digest, row.profiles, self.data_digests,
                                        calibrator.value)
            found = self._calibrations[ck] = (model, Part.of(inputs), by)
        _, part, by = found
        node = f"calibrate:{model.name}/{spec.calibration_method}#{part.digest[:12]}" if by is not None else None
        return part, node

    def transform(self, row: Row, kind: str, calibration: Part | None) -> tuple[Part, str]:
        """The row's transform (its inputs and node id), made by the first cell that needs it."""
        if row.transform is None:
            spec = row.spec
            settings: dict[str, Any] = {"keep_io_types": spec.keep_io_types,
                                        "op_block_list": sorted(spec.op_block_list)
                                        if spec.op_block_list is not None else None}
            if spec.name in ("int8", "fp8"):
                settings["calibration_method"] = spec.calibration_method
                if spec.min_quantized_share is not None:  # what the transform accepts as done (absent: its default)
                    settings["min_quantized_share"] = spec.min_quantized_share
            settings["tools"] = self.tools(row.manifest)
            part = Part.of({
                "kind": kind,
                "recipe": self.recipes.get(f"transform:{kind}", ""),
                "model": row.model_digest,
                "settings": settings,
                # the calibration cache's key (its inputs are the cell's `calibration` key part)
                "calibration": calibration.digest if calibration is not None else None,
            })
            row.transform = (part, f"transform:{row.model.name}/{kind}#{part.digest[:12]}")
        return row.transform
