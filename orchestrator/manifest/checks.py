"""Semantic checks of a typed manifest: what a JSON Schema cannot see. Pure: no files, no plugins imported.

The builder knowledge comes in as parameters: ``capabilities(builder, version) -> BuilderCapabilities | None``
(None: no such plugin) and ``builder_names`` for close-match hints, so tests pass literals and production
passes the installed plugins. Every check appends findings and goes on; nothing stops at the first problem.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from orchestrator.contracts.builder import BuilderCapabilities, target_kind
from orchestrator.core.capabilities import MIN_CC, needs_calibration_data, route_of, strongly_typed
from orchestrator.core.gatekeys import DEFAULT_MAX_SPREAD_PCT
from orchestrator.core.model import (
    PRECISIONS,
    GateSettings,
    InputSpec,
    MatrixRule,
    Model,
    PrecisionSpec,
    ProfileShapes,
    Target,
    cc_slug,
)
from orchestrator.core.toolchain import ToolchainProblem, resolve_toolchain
from orchestrator.core.versions import parse_cc
from orchestrator.errors import OrchestratorError
from orchestrator.manifest.model_file import ModelFile
from orchestrator.manifest.positions import Finding, Path
from orchestrator.manifest.schema import did_you_mean, task_output_keys

CapabilitiesFn = Callable[[str, str], "BuilderCapabilities | None"]
# Precisions that may be calibrated (Q/DQ transforms, a builder's calibrator): they need data unless every target's
# builder quantizes them without (``core.capabilities.needs_calibration_data``).
_CALIBRATED = ("int8", "fp8")
# Precisions made by converting a float32 graph (the fp16/bf16 transform; onnxconverter-common's fp16 pass for both).
_CONVERTED = ("fp16", "bf16")
_KIND_WORDS = {"compute_capability": "one compute capability", "compute_capability_list": "a compute capability "
               "list", "hardware_compatible": "a hardware compatibility level", "cpu": "device cpu",
               "cuda": "device cuda"}


@dataclass(frozen=True)
class CheckInput:
    """The converted manifest; ``models[i]``/``targets[i]`` None where schema errors kept it untyped, while
    ``model_names``/``target_names`` still carry whatever names were readable, for references."""

    models: Sequence[Model | None]
    targets: Sequence[Target | None]
    model_names: Sequence[str | None]
    target_names: Sequence[str | None]
    include: Sequence[MatrixRule]
    exclude: Sequence[MatrixRule]
    # what each typed model's ONNX file holds (``model_file.read_model_file``); None where it could not be read
    # (a finding says why) or the model comes from a url; empty: no file was read (tests of the checks alone)
    model_files: Sequence[ModelFile | None] = ()


def _dims(shape: Iterable) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def check(manifest: CheckInput, *, capabilities: CapabilitiesFn, builder_names: Sequence[str]) -> list[Finding]:
    out: list[Finding] = []
    _duplicates(manifest.model_names, "models", "model", out)
    _duplicates(manifest.target_names, "targets", "target", out)
    caps: dict[int, BuilderCapabilities] = {}
    targets: list[Finding] = []  # reported after the models', as before
    for i, target in enumerate(manifest.targets):
        if target is not None:
            found = check_target(target, ("targets", i), capabilities, builder_names, targets)
            if found is not None:
                caps[i] = found
    for i, model in enumerate(manifest.models):
        if model is not None:
            check_model(model, ("models", i), out, no_data=_quantized_without_data(manifest, model, caps))
            facts = _file_of(manifest, i)
            if facts is not None:
                _check_outputs(model, facts, ("models", i), out)
    out.extend(targets)
    _matrix(manifest, out)
    _cells(manifest, caps, out)
    return out


def _duplicates(names: Sequence[str | None], section: str, what: str, out: list[Finding]) -> None:
    first: dict[str, int] = {}
    for i, name in enumerate(names):
        if name is None:
            continue
        if name in first:
            out.append(Finding((section, i, "name"),
                               f"duplicate {what} name '{name}' (first at {section}[{first[name]}])",
                               f"{what} names must be unique; rename one"))
        else:
            first[name] = i


# -- models -------------------------------------------------------------------------------------------------

def _quantized_without_data(manifest: CheckInput, model: Model, caps: dict[int, BuilderCapabilities]) -> set[str]:
    """The model's calibrated precisions whose every cell is built without calibration data: each target is known
    and its builder quantizes that precision without data (``BuilderCapabilities.calibrated``)."""
    out: set[str] = set()
    for spec in model.precisions:
        if spec.name not in _CALIBRATED:
            continue
        targets = [(t, target) for t, target in enumerate(manifest.targets)
                   if target is None or _live(manifest, model.name, spec.name, target.name)]
        if targets and all(target is not None and t in caps and not needs_calibration_data(spec, caps[t], target)
                           for t, target in targets):
            out.add(spec.name)
    return out


def check_model(model: Model, path: Path, out: list[Finding], *, no_data: set[str] | frozenset[str] = frozenset()
                ) -> None:
    """``no_data``: calibrated precisions the model's targets quantize without calibration data."""
    symbols = {d for spec in model.inputs for d in spec.shape if isinstance(d, str)}
    constraints = {c.dim: c for c in model.constraints}
    for c in model.constraints:
        if c.dim not in symbols:
            hint = did_you_mean(c.dim, sorted(symbols)) or (
                f"named dims: {', '.join(sorted(symbols))}" if symbols else "the inputs have no named dims")
            out.append(Finding(path + ("constraints", c.dim), f"no input has a dim named '{c.dim}'", hint, at_key=True))
        if c.min is not None and c.max is not None and c.min > c.max:
            out.append(Finding(path + ("constraints", c.dim), f"min {c.min} exceeds max {c.max}"))
    reference: InputSpec | None = None
    for spec in model.inputs:
        ipath = path + ("inputs", spec.name)
        if spec.is_dynamic and not spec.profiles:
            dyn = ", ".join(str(d) for d in spec.shape if isinstance(d, str))
            out.append(Finding(ipath, f"input '{spec.name}' has dynamic dims ({dyn}) but no profiles",
                               "add profiles: {default: {min: [...], opt: [...], max: [...]}}"))
        for name, shapes in spec.profiles.items():
            _check_profile(spec, shapes, ipath + ("profiles", name), constraints, out)
        if spec.profiles or spec.is_dynamic:
            if reference is None:
                reference = spec
            elif set(spec.profiles) != set(reference.profiles):
                _profile_names_differ(spec, reference, ipath, out)
    names = model.profile_names()
    for set_name, members in model.profile_sets.items():
        for k, member in enumerate(members):
            if member not in names:
                hint = did_you_mean(member, names) or f"profiles: {', '.join(names) or 'none'}"
                out.append(Finding(path + ("profile_sets", set_name, k), f"unknown profile '{member}'", hint))
    seen: dict[str, int] = {}
    for j, prec in enumerate(model.precisions):
        ppath = path + ("precisions", j)
        if prec.name in seen:
            out.append(Finding(ppath,
                               f"precision '{prec.name}' is listed twice (first at precisions[{seen[prec.name]}])"))
            continue
        seen[prec.name] = j
        if prec.name == "fp32" and prec.via == "transform":
            out.append(Finding(ppath, "fp32 has no transform: it is the model's own precision", "drop `via`"))
        if prec.min_quantized_share is not None and prec.name not in _CALIBRATED:
            out.append(Finding(ppath + ("min_quantized_share",), f"{prec.name} quantizes nothing: "
                               "min_quantized_share is for the int8 and fp8 Q/DQ transforms",
                               "remove min_quantized_share from this precision"))
        if prec.name in _CALIBRATED and prec.name not in no_data and model.calibration is None:
            out.append(Finding(ppath, f"{prec.name} needs calibration data, and model '{model.name}' has none",
                               "add calibration: {path: data/calib, samples: 64} (npy/npz files or images)"))
    calibrated = [p.name for p in model.precisions if p.name in _CALIBRATED and p.name not in no_data]
    if calibrated and model.calibration is not None and model.calibration.path is None:
        # `{samples: 4, seed: 0}` alone: seeded random tensors, which a parity gate takes and a calibrator must not
        samples = model.calibration.samples
        out.append(Finding(path + ("calibration",), f"calibration names no path: {' and '.join(calibrated)} "
                           f"calibrate on real inputs, and samples: {samples} without a path would be random tensors",
                           f"add path: a folder of .npy/.npz files or images (calibration: {{path: data/calib, "
                           f"samples: {samples}}})"))


def _profile_names_differ(spec: InputSpec, reference: InputSpec, ipath: Path, out: list[Finding]) -> None:
    missing = sorted(set(reference.profiles) - set(spec.profiles))
    extra = sorted(set(spec.profiles) - set(reference.profiles))
    parts = ([f"missing {', '.join(repr(m) for m in missing)}"] if missing else []) + (
        [f"has extra {', '.join(repr(e) for e in extra)}"] if extra else [])
    out.append(Finding(ipath + ("profiles",), f"profile names differ from input '{reference.name}': "
                       + "; ".join(parts), "every input of a model must define the same profile names"))


def _check_profile(spec: InputSpec, shapes: ProfileShapes, path: Path, constraints: dict,
                   out: list[Finding]) -> None:
    rank = len(spec.shape)
    ok = True
    for which in ("min", "opt", "max"):
        dims = getattr(shapes, which)
        if len(dims) != rank:
            out.append(Finding(path + (which,), f"{which} {_dims(dims)} has rank {len(dims)} but input "
                               f"'{spec.name}' has rank {rank} {_dims(spec.shape)}"))
            ok = False
            continue
        for d, (declared, value) in enumerate(zip(spec.shape, dims)):
            if isinstance(declared, int) and declared != value:
                out.append(Finding(path + (which,), f"{which} {_dims(dims)} has {value} in dim {d}, but the input's "
                                   f"shape {_dims(spec.shape)} fixes it to {declared}"))
                ok = False
            elif isinstance(declared, str) and declared in constraints:
                _check_constraint(constraints[declared], which, dims, d, path + (which,), out)
    if not ok:
        return
    pairs = (("min", "max"),) if _first_over(shapes.min, shapes.max) is not None else (("min", "opt"), ("opt", "max"))
    for low, high in pairs:
        a, b = getattr(shapes, low), getattr(shapes, high)
        over = _first_over(a, b)
        if over is not None:
            out.append(Finding(path + (high,), f"{low} {_dims(a)} exceeds {high} {_dims(b)} in dim {over}",
                               "each dim needs min <= opt <= max"))


def _first_over(a: Sequence[int], b: Sequence[int]) -> int | None:
    return next((d for d, (x, y) in enumerate(zip(a, b)) if x > y), None)


def _check_constraint(c, which: str, dims: Sequence[int], d: int, path: Path, out: list[Finding]) -> None:
    value = dims[d]
    where = f"{which} {_dims(dims)}: dim {d} ({c.dim}) is {value}"
    if c.multiple_of and value % c.multiple_of:
        lower = value - value % c.multiple_of
        options = " or ".join(str(v) for v in (lower, lower + c.multiple_of) if v > 0)
        out.append(Finding(path, f"{where}, not a multiple of {c.multiple_of}", f"use {options}"))
    if c.min is not None and value < c.min:
        out.append(Finding(path, f"{where}, below the constraint's min {c.min}"))
    if c.max is not None and value > c.max:
        out.append(Finding(path, f"{where}, above the constraint's max {c.max}"))


def _file_of(manifest: CheckInput, i: int) -> ModelFile | None:
    return manifest.model_files[i] if i < len(manifest.model_files) else None


def _check_outputs(model: Model, facts: ModelFile, path: Path, out: list[Finding]) -> None:
    """The outputs a task and ``classifier_outputs`` name are the model's: a parity gate that names another errors
    after every build of the model (the task contract: no ``output`` means the model's only output)."""
    outputs = list(facts.outputs)
    listed = ", ".join(outputs)
    task = model.task
    if task is not None:
        named = {key: value for key, value in (("output", task.output), *task.options.items())
                 if key in task_output_keys() and isinstance(value, str)}
        for key, name in named.items():
            if name not in outputs:
                out.append(Finding(path + ("task", key), f"the model has no output '{name}' (its outputs: {listed})",
                                   did_you_mean(name, outputs) or f"set task.{key} to one of them"))
        if not named and len(outputs) != 1:
            out.append(Finding(path + ("task",), f"task {task.kind} reads the model's only output, but the model "
                               f"has {len(outputs)}: {listed}", "set task.output to the one it judges"))
    for name in model.classifier_outputs:
        if name not in outputs:
            out.append(Finding(path + ("classifier_outputs", name), f"the model has no output '{name}' (its "
                               f"outputs: {listed})", did_you_mean(name, outputs), at_key=True))


# -- targets ------------------------------------------------------------------------------------------------

def check_target(target: Target, path: Path, capabilities: CapabilitiesFn, builder_names: Sequence[str],
                 out: list[Finding]) -> BuilderCapabilities | None:
    try:
        caps = capabilities(target.builder, target.builder_version)
    except OrchestratorError as e:  # a plugin that fails to load is this target's problem, reported with it
        out.append(Finding(path + ("builder",), f"builder '{target.builder}' could not be loaded: {e.message}",
                           e.hint))
        return None
    if caps is None:
        hint = did_you_mean(target.builder, builder_names) or (
            f"installed builders: {', '.join(builder_names)}" if builder_names else "no builder plugins installed")
        out.append(Finding(path + ("builder",), f"unknown builder '{target.builder}'", hint))
        return None
    kind = target_kind(target)
    if kind not in caps.target_kinds:
        key = {"compute_capability_list": "compute_capabilities", "cpu": "device", "cuda": "device",
               "hardware_compatible": "hardware_compatibility"}.get(kind, "compute_capability")
        can = ", ".join(_KIND_WORDS.get(k, k) for k in sorted(caps.target_kinds)) or "nothing"
        hint = ("build one target per compute capability (only AOT builders such as tensorrt-rtx take a list)"
                if kind == "compute_capability_list" else f"it can target: {can}")
        out.append(Finding(path + (key,), f"{target.builder} {target.builder_version} cannot build for "
                           f"{_KIND_WORDS.get(kind, kind)}", hint))
    if caps.version_problem is not None:
        message, hint = caps.version_problem
        if target.serve is not None:  # the version came from (or was completed by) the serving stack
            message = f"{message} (serve: {target.serve} ships TensorRT {target.builder_version})"
            hint = f"{hint}; set builder_version alongside serve"
        out.append(Finding(path + ("builder_version" if target.serve is None else "serve",), message, hint))
    _check_options(target, path, caps, out)
    if target.weights not in caps.weights_modes:
        why = caps.weights_missing_reason.get(target.weights) or "it builds no such engines"
        out.append(Finding(path + ("weights",), f"{target.builder} {target.builder_version} cannot build "
                           f"weights: {target.weights} engines: {why}",
                           f"it can build: {', '.join(sorted(caps.weights_modes))} (docs/refit.md)"))
    try:
        resolve_toolchain(target, caps.provisioning)
    except ToolchainProblem as e:
        where = path + ("toolchain",) + ((e.field,) if e.field and not _shorthand(target) else ())
        out.append(Finding(where, f"toolchain {target.toolchain.kind}: {e.message}", e.hint))
    return caps


def _shorthand(target: Target) -> bool:
    """`toolchain: pip` (a string): findings about its fields point at the toolchain line itself."""
    t = target.toolchain
    return t.image is None and t.index_url is None and t.cuda is None


def _check_options(target: Target, path: Path, caps: BuilderCapabilities, out: list[Finding]) -> None:
    """Options the builder would ignore are refused, never hashed and dropped: ``extra`` keys it does not
    apply (listing those it does), and a timing-cache pin on a builder that keeps no timing cache."""
    known = dict(caps.extra_options)
    for name in sorted(target.options.extra):
        if name not in known:
            if known:
                listed = "; ".join(f"{k}: {v}" for k, v in sorted(known.items()))
                hint = (did_you_mean(name, list(known)) or "") + f" {target.builder} applies: {listed}"
            else:
                hint = f"{target.builder} applies no extra options: remove options.extra"
            out.append(Finding(path + ("options", "extra", name),
                               f"{target.builder} {target.builder_version} does not apply extra option {name!r}",
                               hint.strip()))
    reads = caps.reads_options
    if target.options.timing_cache_pin and reads is not None and "timing_cache_pin" not in reads:
        out.append(Finding(path + ("options", "timing_cache"),
                           f"{target.builder} {target.builder_version} keeps no timing cache to pin",
                           "remove timing_cache: {pin: true} from this target"))


# -- matrix and cells ---------------------------------------------------------------------------------------

def _matrix(manifest: CheckInput, out: list[Finding]) -> None:
    models = {m.name: m for m in manifest.models if m is not None}
    model_names = [n for n in manifest.model_names if n is not None]
    target_names = [n for n in manifest.target_names if n is not None]
    for section, rules in (("include", manifest.include), ("exclude", manifest.exclude)):
        for k, rule in enumerate(rules):
            path: Path = ("matrix", section, k)
            if rule.model is not None and rule.model not in model_names:
                out.append(Finding(path + ("model",), f"unknown model '{rule.model}'",
                                   did_you_mean(rule.model, model_names)))
            if rule.target is not None and rule.target not in target_names:
                out.append(Finding(path + ("target",), f"unknown target '{rule.target}'",
                                   did_you_mean(rule.target, target_names)))
            scope = [models[rule.model]] if rule.model in models else list(models.values())
            if rule.precision is not None:
                declared = list(dict.fromkeys(p.name for m in scope for p in m.precisions))
                if scope and rule.precision not in declared:
                    known = " (declared: " + ", ".join(declared) + ")"
                    what = ("unknown precision '{}'" if rule.precision not in PRECISIONS
                            else "precision '{}' is not declared by the models it names").format(rule.precision)
                    out.append(Finding(path + ("precision",), what + known,
                                       did_you_mean(rule.precision, declared)))
            if rule.profile_set is not None:
                sets = list(dict.fromkeys(s for m in scope for s in m.profile_sets))
                if scope and rule.profile_set not in sets:
                    out.append(Finding(path + ("profile_set",), f"unknown profile set '{rule.profile_set}'"
                                       f" (defined: {', '.join(sets)})", did_you_mean(rule.profile_set, sets)))
                    continue
            if section == "include" and rule.model is None and rule.precision is not None \
                    and rule.profile_set is not None and scope and len(scope) == len(manifest.models) \
                    and any(rule.precision in {p.name for p in m.precisions} for m in scope) \
                    and not any(rule.precision in {p.name for p in m.precisions} and rule.profile_set in m.profile_sets
                                for m in scope):
                # each is declared by some model, never both by one: the rule adds nothing (a typo, surely)
                out.append(Finding(path, f"no model declares both precision '{rule.precision}' and profile set "
                                   f"'{rule.profile_set}': the rule matches no cell",
                                   "name the model the rule is for, or fix the precision or profile set"))


def _matches(rule: MatrixRule, model: str, precision: str, target: str) -> bool:
    # profile sets do not change what a builder can do, so a rule limited to one set still counts as a match
    return ((rule.model is None or rule.model == model) and (rule.precision is None or rule.precision == precision)
            and (rule.target is None or rule.target == target))


def _live(manifest: CheckInput, model: str, precision: str, target: str) -> bool:
    """Does the matrix keep this cell? All cells minus ``exclude``, plus any an ``include`` names again."""
    if any(_matches(r, model, precision, target) for r in manifest.include):
        return True
    return not any(_matches(r, model, precision, target) and r.profile_set is None for r in manifest.exclude)


def _cells(manifest: CheckInput, caps: dict[int, BuilderCapabilities], out: list[Finding]) -> None:
    for i, model in enumerate(manifest.models):
        if model is None:
            continue
        facts = _file_of(manifest, i)
        for j, spec in enumerate(model.precisions):
            if spec.name == "fp32":
                continue
            converting: list[str] = []  # targets that build this precision from the fp16/bf16 conversion
            for t, target in enumerate(manifest.targets):
                if target is None or t not in caps or not _live(manifest, model.name, spec.name, target.name):
                    continue
                problem = (_route_problem(spec.name, spec.via, caps[t])
                           or _int8_route_problem(spec.name, spec.via, target, caps[t])
                           or _calibration_method_problem(spec, target, caps[t])
                           or _min_cc_problem(spec.name, target))
                if problem:
                    message, hint = problem
                    who = f"{target.builder} {target.builder_version} (target '{target.name}')"
                    out.append(Finding(("models", i, "precisions", j),
                                       f"model '{model.name}' {spec.name}: {who} {message}",
                                       hint + f"; or exclude it: matrix.exclude: [{{model: {model.name}, "
                                       f"precision: {spec.name}, target: {target.name}}}]"))
                elif spec.name in _CONVERTED and route_of(spec, caps[t], target) == "transform":
                    converting.append(target.name)
            if converting and facts is not None and facts.float16 is not None:
                out.append(_converting_half(model, spec, facts.float16, converting, ("models", i, "precisions", j)))


def _converting_half(model: Model, spec: PrecisionSpec, why: str, targets: list[str], path: Path) -> Finding:
    """An fp16/bf16 conversion of a model that is float16 already: onnxconverter-common refuses it ("already
    converted to float16 ... set check_fp16_ready=False"), and converting a converted graph again would wrap its
    float16 parts in casts it does not need. There is nothing to convert: the model is built as it is."""
    return Finding(path, f"model '{model.name}' is float16 already ({why}): the {spec.name} conversion (via: "
                         f"transform, for target{'s' if len(targets) > 1 else ''} {', '.join(targets)}) converts "
                         "float32 models and refuses one converted before",
                   "its own precision needs no conversion: declare precisions: [fp32] (the engine is built from the "
                   "graph as it is, float16 weights and all) or, on a builder with an FP16 flag (TensorRT <= 10), "
                   f"{{name: {spec.name}, via: native}}; or point source.path at the float32 export")


def _route_problem(name: str, via: str, caps: BuilderCapabilities) -> tuple[str, str] | None:
    if via == "native" and name not in caps.native:
        reason = caps.native_missing_reason.get(name, "")
        alt = "use via: transform" if name in caps.via_transform else "use another target"
        return f"cannot build {name} natively (via: native)", (reason + "; " if reason else "") + alt
    if via == "transform" and name not in caps.via_transform:
        alt = "use via: native" if name in caps.native else "use another target"
        return f"cannot build {name} from a converted model (via: transform)", alt
    if not caps.can(name):
        return f"cannot build {name} at all", "drop the precision"
    return None


def _int8_route_problem(name: str, via: str, target: Target, caps: BuilderCapabilities) -> tuple[str, str] | None:
    """A precision on the route the resolver will take: refuse a cell that route cannot build.

    Native precisions are builder flags (+ a calibrator for int8; TensorRT 8.6-10.x); a strongly typed network
    ignores precision builder flags, so ``via: native`` on a target with ``options.strongly_typed: true`` (on a
    builder whose ``reads_options`` names it) leaves nothing to build. With ``via: auto`` such cells take the
    conversion/Q-DQ transform instead. (11.x and TensorRT-RTX have no native precisions.)"""
    if via != "native" or name not in caps.native or not strongly_typed(target, caps):
        return None
    how = "INT8 builder flag + calibrator" if name == "int8" else f"{name.upper()} builder flag"
    return (f"cannot build {name} on the native route ({how}): the target is strongly typed "
            "(options.strongly_typed: true), and a strongly typed network ignores precision builder flags",
            f"give the precision via: transform (or via: auto) ({{name: {name}, via: transform}}: the graph carries "
            "the precision), or drop options.strongly_typed from the target")


def _calibration_method_problem(spec: PrecisionSpec, target: Target, caps: BuilderCapabilities
                                ) -> tuple[str, str] | None:
    """A native int8 cell calibrates with the builder's own calibrators: a method it has not is refused here, not
    at build time (TensorRT has entropy and minmax calibrators; trtexec reads only entropy caches)."""
    allowed = caps.native_calibration_methods
    if spec.name != "int8" or allowed is None or route_of(spec, caps, target) != "native":
        return None
    if spec.calibration_method in allowed:
        return None
    return (f"cannot calibrate int8 with {spec.calibration_method!r} on the native route (its calibrators: "
            f"{', '.join(sorted(allowed))})",
            f"use calibration_method: {sorted(allowed)[0]}, or {{name: int8, via: transform}} (the Q/DQ transform "
            f"calibrates with {spec.calibration_method!r})")


def _min_cc_problem(name: str, target: Target) -> tuple[str, str] | None:
    """fp8 needs CC >= 8.9, bf16 >= 8.0 (``core.capabilities.MIN_CC``): a target listing an older GPU cannot build
    it (TensorRT-RTX refuses: "model contains HW-specific datatypes: fp8_e4m3")."""
    need = MIN_CC.get(name)
    if need is None:
        return None
    low = []
    for c in target.compute_capabilities:
        cc = parse_cc(c)
        if cc is not None and cc < need:
            low.append(c)
    if not low:
        return None
    return (f"targets {', '.join(cc_slug(c) for c in low)}; {name} needs compute capability >= "
            f"{need[0]}.{need[1]}", f"build {name} only for targets of CC >= {need[0]}.{need[1]}")


# -- thresholds inside the benchmark's noise (issue 24) ------------------------------------------------------------

def noise_threshold_problems(gate: GateSettings) -> list[tuple[tuple[str, ...], str, str]]:
    """A regression or drift latency threshold below ``max_spread_pct``: the gate accepts blocks that far apart from
    one run, so a change that small cannot be told from noise (docs/gates.md, "Benchmark noise"). Each problem is
    (the threshold's key under ``gate``, message, hint); the measured case is judged in the verdict (gates.noise)."""
    bench = gate.benchmark
    if not bench.enabled:
        return []
    spread = DEFAULT_MAX_SPREAD_PCT if bench.max_spread_pct is None else float(bench.max_spread_pct)
    out: list[tuple[tuple[str, ...], str, str]] = []
    for key, name, value in ((("benchmark", "max_regression_pct"), "max_regression_pct", bench.max_regression_pct),
                             (("drift", "max_latency_regression_pct"), "drift.max_latency_regression_pct",
                              gate.drift.max_latency_regression_pct if gate.drift.enabled else None)):
        if value is not None and value < spread:
            out.append((key, f"{name} {value:g}% is below max_spread_pct {spread:g}%: a change that small cannot be "
                             "told from the noise the benchmark gate accepts from one run",
                        f"raise {name} to at least {spread:g}, or lower gate.benchmark.max_spread_pct where the runner "
                        "is quiet (a GPU with CUDA graphs repeats within ~3 %: docs/gates.md, Benchmark noise)"))
    return out
