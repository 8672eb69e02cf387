"""Key completeness: every field of the manifest schema, and which key it reaches. Pure data.

``KEY_TABLE`` maps each leaf path of ``manifest-v1.schema.json`` to a ``KeyRule``: the key the field reaches,
the cells it reaches, and why. ``schema_leaves(schema)`` lists the schema's leaf paths and ``disagreement``
compares them with the table; ``tests/unit/test_keyspec.py`` fails on any difference and, for every entry,
mutates the field in real manifests and checks that exactly the cells the entry names move their keys.

Paths: ``a.b`` a property, ``a[]`` each item of an array of objects (an array of scalars, such as a shape or a
list of labels, is one leaf), ``a.*`` each entry of a map (``additionalProperties``; the map key goes with its
value). A union (``anyOf``/``oneOf``) gives the leaves of every branch: ``models[].precisions[]`` is the short
form ``- fp16`` and ``models[].precisions[].name`` the long form; ``targets[].options.timing_cache`` is the
boolean and ``targets[].options.timing_cache.pin`` the object form.

The classes:

- ``build``: changes the build key (and with it the gate key and the record) of the cells ``KeyRule.build``
  names: the engine is rebuilt. ``KeyRule.gate`` may name more cells whose gate key alone moves.
- ``gate``: changes only the gate key of the cells ``KeyRule.gate`` names: they are re-gated (and the record
  republished) without a rebuild.
- ``address``: names other cells instead of changing a key (a model, target or precision name, a matrix rule):
  cells come or go, and every cell that exists before and after keeps its keys.
- ``none``: reaches no key; ``KeyRule.reason`` says why no engine byte or verdict depends on it.

``defaults.*`` fields are not written out: each is the entry of the model or target field it defaults
(``DEFAULT_MIRRORS``), reaching the cells of the models or targets that do not set that field themselves.

How to classify a new manifest field (the agreement test names it, and fails until it is here):

1. Find who reads it. If a build step (prepare, calibrate, transform, build) or a builder plugin reads it, it
   changes engine bytes: put it into the cell's ``key_inputs`` (``core.resolve``; a shared part where cells share
   it) and classify it ``build`` with the narrowest ``Cells`` that is true (e.g. ``calibrated=True`` for a
   calibration setting, ``reads_option`` for a builder option). If a gate reads it, it changes verdicts: put it
   into ``core.gatekeys.gate_inputs`` and classify it ``gate``.
2. If it selects or names cells rather than changing what one is, classify it ``address``.
3. Otherwise classify it ``none`` and write the reason a reviewer can check: what reads it, and why that is not
   an engine input or a verdict input (where work runs, where records are published, a policy recorded in
   metadata, an editor hint).
4. A new ``Cells`` condition needs its reading in the test (``tests/unit/test_keyspec.py``, ``_matches``), and
   the test's base manifests must set the new field where it matters (``BASE_A``/``BASE_B``; a test fails until
   they do).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

KeyClass = Literal["build", "gate", "address", "none"]
KEY_CLASSES: tuple[str, ...] = ("build", "gate", "address", "none")
GateKind = Literal["parity", "benchmark"]


@dataclass(frozen=True)
class Cells:
    """The cells a change reaches: the cells of the field's owner (the model or target entry it sits in; every cell
    of the manifest for a top-level field; for a ``defaults`` field, the models or targets that take the default),
    narrowed by every condition that is set. A map key condition reads the ``*`` nearest to the leaf."""

    text: str
    # the cell's precision: that of the ``precisions[]`` entry the field is in ("entry"), or the map key ("key")
    precision: Literal["entry", "key"] | None = None
    profile_in_set: bool = False  # the cell's profile set holds the profile the map key names
    profile_set: bool = False  # the cell is of the profile set the map key names
    calibrated: bool = False  # int8/fp8 built from calibration data: Q/DQ transform or the builder's calibrator
    transformed: bool = False  # built from a transformed ONNX (route "transform")
    route_changes: bool = False  # the change moves the cell's route (native <-> transform)
    # the input the map key names has no shape in the cell's first profile (a static input): calibration runs at
    # its declared shape
    input_not_in_profile: bool = False
    reads_option: str | None = None  # the target's builder applies this option (capabilities.reads_options)
    platform_specific: bool = False  # the target's builder makes platform-specific engines (capabilities)
    gates: frozenset[str] = frozenset()  # at least one of these gates of the model is enabled
    parity_data: Literal["path", "random"] | None = None  # the model's parity data is a dataset / random


@dataclass(frozen=True)
class KeyRule:
    key: KeyClass
    reason: str
    build: Cells | None = None  # build: the cells whose build key moves
    gate: Cells | None = None  # cells whose gate key moves (besides those whose build key does)


_PARITY = frozenset({"parity"})
_BENCH = frozenset({"benchmark"})
_GATES = frozenset({"parity", "benchmark"})

_MODEL = Cells("every cell of the model")
_TARGET = Cells("every cell of the target")
_CALIBRATED = Cells("the model's int8/fp8 cells (calibrated: Q/DQ transform or the builder's calibrator)",
                    calibrated=True)
_PARITY_CELLS = Cells("every cell of the model, while its parity gate is enabled", gates=_PARITY)
_BENCH_CELLS = Cells("every cell of the model, while its benchmark gate is enabled", gates=_BENCH)
_TOL_CELLS = Cells("the model's cells of the precision the map key names, while parity is enabled",
                   precision="key", gates=_PARITY)


def _build(reason: str, cells: Cells, gate: Cells | None = None) -> KeyRule:
    return KeyRule("build", reason, build=cells, gate=gate)


def _gate(reason: str, cells: Cells) -> KeyRule:
    return KeyRule("gate", reason, gate=cells)


def _address(reason: str) -> KeyRule:
    return KeyRule("address", reason)


def _none(reason: str) -> KeyRule:
    return KeyRule("none", reason)


def _option(name: str, reason: str, read: str | None = None) -> KeyRule:
    key = read or name
    return _build(f"{reason} (key_inputs.options.{key}, only for builders that read it)",
                  Cells(f"the target's cells, if its builder reads {key!r}", reads_option=key))


def _preprocess(where: str, rule: KeyRule) -> dict[str, KeyRule]:
    return {f"{where}.preprocess.{f}": rule for f in ("resize", "mean", "std", "scale", "layout", "dtype", "color")}


def _tolerance(where: str, cells: Cells, what: str) -> dict[str, KeyRule]:
    return {f"{where}.{f}": _gate(f"the {f} {what} is judged with (gate_inputs.parity.tolerances, resolved)", cells)
            for f in ("atol", "rtol", "min_cosine", "max_rel_l2", "topk", "min_topk_agreement")}


# models[].task and gate.parity.task*: what the parity gate's task metric judges (gate_inputs.parity.task)
_TASK_FIELDS = ("kind", "output", "charset", "blank", "threshold", "box_iou", "min_box_side", "layout", "boxes",
                "scores", "classes", "score_threshold", "iou_threshold", "match_iou", "max_detections",
                "class_agnostic", "sigmoid", "boundary_tolerance")
_TASK_THRESHOLDS = ("max_top1_disagreement", "min_top1_agreement", "min_top5_agreement", "min_accuracy",
                    "min_text_accuracy", "max_norm_edit_distance", "min_label_text_accuracy",
                    "max_label_norm_edit_distance", "min_mask_iou", "min_box_recall", "min_box_precision",
                    "min_map50", "min_map50_95", "min_boundary_f", "min_pixel_agreement", "min_label_mask_iou")


def _task() -> dict[str, KeyRule]:
    rules = {f"models[].task.{f}": _gate(f"the task metric's {f} (gate_inputs.parity.task)", _PARITY_CELLS)
             for f in _TASK_FIELDS}
    for name in _TASK_THRESHOLDS:
        rules[f"models[].gate.parity.task.{name}"] = _gate(
            f"the task threshold {name} (gate_inputs.parity.task.thresholds)", _PARITY_CELLS)
        rules[f"models[].gate.parity.task_by_precision.*.{name}"] = _gate(
            f"the precision's task threshold {name} (gate_inputs.parity.task.thresholds_for_precision)", _TOL_CELLS)
    rules["models[].gate.parity.tensor"] = _gate(
        "whether tensor tolerances fail the parity gate (gate_inputs.parity.task.tensor)", _PARITY_CELLS)
    return rules


_CALIB_PRE = _build("how calibration images become tensors (key_inputs.calibration.data.preprocess)", _CALIBRATED)
_PARITY_PRE = _gate("how parity images become tensors (gate_inputs.parity.data.preprocess; a dataset only)",
                    Cells("every cell of the model, while parity is enabled and reads a dataset", gates=_PARITY,
                          parity_data="path"))


def _benchmark(field: str, what: str) -> KeyRule:
    return _gate(f"{what} (gate_inputs.benchmark.{field})", _BENCH_CELLS)


# The one table: schema leaf path -> the key it reaches. Keep it sorted by section; every entry says why.
_EXPLICIT: dict[str, KeyRule] = {
    # --- the file -------------------------------------------------------------------------------------------
    "$schema": _none("an editor hint naming the schema; the loader ignores it"),
    "manifest_version": _none("the format version (the schema allows only 1); it selects the loader, not an "
                              "engine"),
    "project": _none("a label for the manifest; no build or gate step reads it"),
    "salt": _build("an explicit rebuild switch: key_inputs.salt of every cell of the manifest",
                   Cells("every cell of the manifest")),
    "transforms.tools.*": _build(
        "the version a transform library runs at changes its output: key_inputs.transform.settings.tools and the "
        "Q/DQ calibrator's tools (key_inputs.calibration.calibrator.tools)",
        Cells("the manifest's cells built from a transformed ONNX", transformed=True)),
    # --- models -------------------------------------------------------------------------------------------------
    "models[].name": _address("names the model's cells (model/precision/set@target); no key holds it"),
    "models[].version": _none("a release label recorded in the published metadata and node ids; engines are "
                              "keyed by the model file's content (models[].source.path), not by its label; it is "
                              "part of a record's identity (core.keys.record_key): a new version of an unchanged "
                              "engine is published again (plan: + publish), never rebuilt"),
    "models[].source.path": _build("the model file, by content digest (with external data): key_inputs.model",
                                   _MODEL),
    "models[].source.sha256": _none("a pin the loader checks against the file; the file's digest is keyed "
                                    "(models[].source.path), so a pin changes nothing it could not refuse; for a "
                                    "url source the download is verified against it and its content is keyed the "
                                    "same way (key_inputs.model)"),
    "models[].source.url": _none("where the file is fetched from, not what it is: the download must match "
                                 "source.sha256 and its content is keyed (key_inputs.model)"),
    "models[].inputs.*.shape": _build(
        "a static input's declared shape is the shape calibration runs at (key_inputs.calibration.shapes); every "
        "declared shape shapes the gates' inputs (gate_inputs.*.model.inputs)",
        Cells("the model's calibrated cells whose first profile gives that input no shape", calibrated=True,
              input_not_in_profile=True),
        gate=Cells("every cell of the model, while a gate is enabled", gates=_GATES)),
    "models[].inputs.*.dtype": _build(
        "the dtype calibration and gate tensors are made in (key_inputs.calibration.dtypes, "
        "gate_inputs.*.model.inputs)", _CALIBRATED,
        gate=Cells("every cell of the model, while a gate is enabled", gates=_GATES)),
    **{f"models[].inputs.*.profiles.*.{w}": _build(
        f"the {w} shape of a TensorRT optimization profile (key_inputs.profiles; the first profile's opt is also "
        "the calibration shape)", Cells("the model's cells whose profile set holds that profile",
                                        profile_in_set=True))
       for w in ("min", "opt", "max")},
    **{f"models[].constraints.*.{f}": _gate(
        f"the {f} of a named dim bounds the shapes random gate inputs are drawn at (gate_inputs.*.model."
        "constraints); the checks hold profiles to it, so engines do not depend on it",
        Cells("every cell of the model, while a gate is enabled", gates=_GATES))
       for f in ("multiple_of", "min", "max")},
    "models[].precisions[]": _address("names a precision of the model: its cells (model/<precision>/...)"),
    "models[].precisions[].name": _address("names a precision of the model: its cells (model/<precision>/...)"),
    "models[].precisions[].via": _build(
        "native builder flag or transformed ONNX: key_inputs.precision.route",
        Cells("the model's cells of that precision whose route it changes", precision="entry",
              route_changes=True)),
    "models[].precisions[].keep_io_types": _build(
        "the conversion keeps fp32 model I/O (key_inputs.transform.settings.keep_io_types)",
        Cells("the model's transformed cells of that precision", precision="entry", transformed=True)),
    "models[].precisions[].op_block_list": _build(
        "ops the conversion leaves in fp32 (key_inputs.transform.settings.op_block_list)",
        Cells("the model's transformed cells of that precision", precision="entry", transformed=True)),
    "models[].precisions[].calibration_method": _build(
        "entropy/percentile/minmax ranges (key_inputs.calibration.method; Q/DQ: transform settings too)",
        Cells("the model's calibrated cells of that precision", precision="entry", calibrated=True)),
    "models[].precisions[].min_quantized_share": _build(
        "the share of quantizable nodes the Q/DQ transform must quantize, or fail (key_inputs.transform.settings."
        "min_quantized_share): a transform accepted under one share is not accepted under a higher one unseen",
        Cells("the model's transformed int8/fp8 cells of that precision", precision="entry", calibrated=True,
              transformed=True)),
    "models[].profile_sets.*": _build(
        "the profiles (and their order) one engine holds: key_inputs.profiles",
        Cells("the model's cells of that profile set", profile_set=True)),
    "models[].calibration.path": _build(
        "the calibration data, by content digest (key_inputs.calibration.data.digest)", _CALIBRATED),
    "models[].calibration.samples": _build(
        "how many calibration samples are read (key_inputs.calibration.data.samples)", _CALIBRATED),
    "models[].calibration.seed": _none(
        "seeds random calibration data only (keyed in key_inputs.calibration.data.seed when there is no path), "
        "but int8/fp8 need a calibration path (the checks refuse random calibration data) and a path ignores it"),
    **_preprocess("models[].calibration", _CALIB_PRE),
    "models[].gate.parity.data.path": _gate(
        "the parity dataset, by content digest (gate_inputs.parity.data.digest)", _PARITY_CELLS),
    "models[].gate.parity.data.samples": _gate(
        "how many parity samples are compared (gate_inputs.parity.data.samples)", _PARITY_CELLS),
    "models[].gate.parity.data.labels": _gate(
        "the labels of the parity images, by content digest (gate_inputs.parity.data.labels)",
        Cells("every cell of the model, while parity is enabled and reads a dataset", gates=_PARITY,
              parity_data="path")),
    "models[].gate.parity.data.seed": _gate(
        "seeds random parity inputs (gate_inputs.parity.data.seed; a dataset ignores it)",
        Cells("every cell of the model, while parity is enabled and draws random data", gates=_PARITY,
              parity_data="random")),
    **_preprocess("models[].gate.parity.data", _PARITY_PRE),
    **_tolerance("models[].gate.parity.tolerances.*", _TOL_CELLS, "the precision's outputs"),
    **_tolerance("models[].gate.parity.per_output.*", _PARITY_CELLS, "that output"),
    "models[].gate.parity.enabled": _gate("whether parity runs (gate_inputs.parity: None when off)", _MODEL),
    **_task(),
    "models[].gate.benchmark.warmup": _benchmark("warmup", "untimed runs before the series"),
    "models[].gate.benchmark.iterations": _benchmark("iterations", "the timed series' length"),
    "models[].gate.benchmark.time_budget_s": _benchmark("time_budget_s", "the series' time budget"),
    "models[].gate.benchmark.shapes": _benchmark("shapes", "the profile points timed"),
    "models[].gate.benchmark.max_p95_ms": _benchmark("max_p95_ms", "a latency threshold"),
    "models[].gate.benchmark.min_throughput": _benchmark("min_throughput", "a throughput threshold"),
    "models[].gate.benchmark.max_regression_pct": _benchmark("max_regression_pct",
                                                             "the regression threshold and its baseline rule"),
    "models[].gate.benchmark.max_refit_cost_pct": _benchmark(
        "max_refit_cost_pct", "the bound on a refittable engine's latency cost against the embedded engine"),
    "models[].gate.benchmark.enabled": _gate("whether the benchmark runs (gate_inputs.benchmark: None when off)",
                                             _MODEL),
    "models[].gate.benchmark.blocks": _benchmark("blocks", "how the series is split in time"),
    "models[].gate.benchmark.block_gap_s": _benchmark("block_gap_s", "the pause between rounds of blocks"),
    "models[].gate.benchmark.max_spread_pct": _benchmark("max_spread_pct", "the spread past which it is noisy"),
    "models[].gate.benchmark.max_p99_p50_ratio": _benchmark("max_p99_p50_ratio", "a stability threshold (tail)"),
    "models[].gate.benchmark.max_cv_pct": _benchmark("max_cv_pct", "a stability threshold (variation)"),
    "models[].gate.benchmark.max_device_memory_mib": _benchmark("max_device_memory_mib",
                                                                "the device memory bound at the max shape"),
    "models[].gate.benchmark.soak_s": _benchmark("soak_s", "how long the soak runs"),
    "models[].gate.benchmark.max_memory_growth_mib": _benchmark("max_memory_growth_mib",
                                                                "the soak's memory growth bound"),
    "models[].gate.drift.enabled": _gate(
        "whether engines are compared with the previous builder version's (gate_inputs.parity.drift and "
        "gate_inputs.benchmark.drift: None when off)", Cells("every cell of the model, while a gate is enabled",
                                                            gates=_GATES)),
    **{f"models[].gate.drift.{f}": _gate(f"a drift threshold of the outputs (gate_inputs.parity.drift.{f})",
                                         _PARITY_CELLS)
       for f in ("min_cosine", "max_rel_l2", "max_abs_error")},
    "models[].gate.drift.max_latency_regression_pct": _benchmark(
        "drift.max_latency_regression_pct", "the latency drift threshold against the drift baseline"),
    **{f"models[].gate.drift.task.{name}": _gate(
        f"the task drift threshold {name} (gate_inputs.parity.drift.task)", _PARITY_CELLS)
       for name in _TASK_THRESHOLDS},
    "models[].gate.allow_ungated_publish": _none(
        "a publishing policy, recorded in the published metadata: it decides whether an unpassed verdict may be "
        "published, not what the verdict is"),
    "models[].gate.require_gpu_parity": _none(
        "a publishing policy (core.gpu_parity): it holds back GPU engines of the listed precisions that have no "
        "parity verdict from a GPU; it decides whether an engine may be published, not what any verdict is"),
    "models[].classifier_outputs.*": _gate(
        "the k of top-k agreement for a classifier output (gate_inputs.parity.classifier_outputs)", _PARITY_CELLS),
    # --- targets ------------------------------------------------------------------------------------------------
    "targets[].name": _address("names the target in matrix rules and reports; cell addresses use its slug"),
    "targets[].builder": _build("the builder plugin (key_inputs.builder.name, and the recipe version the installed "
                                "plugin states, key_inputs.builder.recipe; the address slug too)", _TARGET),
    "targets[].builder_version": _build("the exact builder version (key_inputs.builder.version)", _TARGET),
    "targets[].serve": _build("the serving stack: where builder_version is left out, the TensorRT it ships is the "
                              "builder version (key_inputs.builder.version); otherwise only checked against it",
                              _TARGET),
    "targets[].compute_capability": _build("the GPU architecture built for (key_inputs.target)", _TARGET),
    "targets[].compute_capabilities": _build("the AOT architectures built for, as a set (key_inputs.target)",
                                             _TARGET),
    "targets[].hardware_compatibility": _build("the hardware compatibility level (key_inputs.target)", _TARGET),
    "targets[].device": _build("the device an onnxruntime engine is optimized for (key_inputs.target)", _TARGET),
    "targets[].platform": _build(
        "the OS/architecture engines are built for (key_inputs.target.platform), for builders whose capabilities "
        "say platform_specific", Cells("the target's cells, if its builder's engines are platform-specific",
                                       platform_specific=True)),
    **{path: _none("how CI provisions the target's exact builder version (container image, pinned wheels or the "
                   "runner's install), not which version: builder_version is keyed, and a shard verifies the version "
                   "it got before building")
       for path in ("targets[].toolchain", "targets[].toolchain.kind", "targets[].toolchain.image",
                    "targets[].toolchain.index_url", "targets[].toolchain.cuda")},
    "targets[].weights": _build(
        "where the engine's weights live: TensorRT's STRIP_PLAN / REFIT_IDENTICAL / REFIT flags (trtexec "
        "--stripWeights / --refit), an onnxruntime engine whose initializers are external data in the weights blob "
        "(key_inputs.weights; absent for embedded, so embedded keys are those from before the field)", _TARGET),
    "targets[].gpu_match": _gate(
        "the deployment policy its records carry (gate_inputs.deploy): republished without a rebuild", _TARGET),
    "targets[].cpu_match": _gate(
        "which CPU a CPU engine's verdict holds for (gate_inputs.deploy; under isa also the gating runner's "
        "kernel-selecting ISA features, so a verdict from another ISA is re-gated): no rebuild", _TARGET),
    "targets[].runners.build": _none("runner labels say where work runs, not what is built; the runner's GPU and "
                                     "runtime are checked when a cached result is reused"),
    "targets[].runners.gate": _none("runner labels say where gates run, not what they judge; the runtime version "
                                    "and GPU model a verdict came from are checked before it is reused"),
    "targets[].options.optimization_level": _option("optimization_level", "the builder's optimization level"),
    "targets[].options.tiling_level": _option("tiling_level", "the tiling optimization level"),
    "targets[].options.workspace_mib": _option("workspace_mib", "the workspace limit tactics are chosen under"),
    "targets[].options.strongly_typed": _option("strongly_typed", "a strongly typed network"),
    "targets[].options.version_compatible": _option("version_compatible",
                                                    "a version-compatible engine (the address gets -vc)"),
    "targets[].options.exclude_lean_runtime": _option("exclude_lean_runtime",
                                                      "whether the lean runtime is embedded"),
    "targets[].options.timing_cache": _none(
        "a build-speed cache of tactic timings: it changes how long a build takes, not what it must produce "
        "(TensorRT builds are not bit-reproducible either way); a pinned cache (timing_cache.pin) is keyed"),
    "targets[].options.timing_cache.pin": _option("timing_cache.pin",
                                                  "build from the published timing cache, failing on a miss",
                                                  read="timing_cache_pin"),
    "targets[].options.ort_optimization": _option("ort_optimization", "onnxruntime's graph optimization level"),
    "targets[].options.extra.*": _option("extra", "a builder-specific setting the builder declares"),
    # --- matrix, registry, runner pools ---------------------------------------------------------------------------
    **{f"matrix.{section}[].{f}": _address(f"{section}s cells by {f}: which cells exist, not what they are")
       for section in ("include", "exclude") for f in ("model", "precision", "profile_set", "target")},
    **{f"registry.{f}": _none("where engines and records are published, not what they are (a verdict's "
                              "benchmark baseline from the registry is checked when a verdict is reused)")
       for f in ("store", "path", "url", "insecure", "credentials.username_secret", "credentials.password_secret",
                 "credentials.read_username_secret", "credentials.read_password_secret")},
    "registry.publish_onnx": _none("whether each model version's ONNX is published beside its engines (what "
                                   "pull --build-on-miss builds from): a record of the model, never an input to an "
                                   "engine or a verdict"),
    **{f"registry.signing.{f}": _none("who signs an artifact's provenance at publish and what pull requires: a "
                                      "statement about the engine, never an input to it (docs/trust.md)")
       for f in ("signer", "key", "require")},
    **{path: _none("a runner pool the team has: it marks cells blocked when no pool can run them, never what is "
                   "built or judged")
       for path in ("runners[].labels", "runners[].compute_capability", "runners[].gpu", "runners[].tensorrt",
                    "runners[].tensorrt_rtx")},
}

# defaults.<section> -> the model/target field each of its fields defaults
DEFAULT_MIRRORS: dict[str, str] = {
    "defaults.precisions": "models[].precisions",
    "defaults.gate": "models[].gate",
    "defaults.builder_options": "targets[].options",
    "defaults.runners": "targets[].runners",
}


# A target's own `gate:` overrides the model's settings for that target's cells, a `matrix.include` rule's `gate:`
# those of the cells the rule names (``Manifest.gate_for``): each of their fields reaches the keys the model's field
# does, on those cells only.
TARGET_MIRRORS: dict[str, str] = {"targets[].gate": "models[].gate", "matrix.include[].gate": "models[].gate"}
_OVERRIDDEN_CELLS = {"targets[].gate": "the target's cells", "matrix.include[].gate": "the cells the rule names"}


def _with_defaults(table: Mapping[str, KeyRule]) -> dict[str, KeyRule]:
    out = dict(table)
    for override, mirrored in TARGET_MIRRORS.items():
        for path, rule in table.items():
            if path.startswith(mirrored + "."):
                out[override + path[len(mirrored):]] = replace(
                    rule, reason=f"overrides {path} for {_OVERRIDDEN_CELLS[override]}: {rule.reason}")
    for default, mirrored in DEFAULT_MIRRORS.items():
        for path, rule in table.items():
            if path == mirrored or path.startswith(mirrored + ".") or path.startswith(mirrored + "["):
                owners = "models" if mirrored.startswith("models") else "targets"
                out[default + path[len(mirrored):]] = replace(
                    rule, reason=f"the default of {path} for the {owners} that do not set it: {rule.reason}")
    return dict(sorted(out.items()))


KEY_TABLE: dict[str, KeyRule] = _with_defaults(_EXPLICIT)


def mirrored_path(path: str) -> str | None:
    """The model/target field a ``defaults`` path defaults, or a target's gate field overrides (None: neither)."""
    for default, mirrored in {**DEFAULT_MIRRORS, **TARGET_MIRRORS}.items():
        if path == default or path.startswith(default + ".") or path.startswith(default + "["):
            return mirrored + path[len(default):]
    return None


# --- the schema's leaves -------------------------------------------------------------------------------------

_UNIONS = ("anyOf", "oneOf", "allOf")


def _resolve_ref(schema: Mapping[str, Any], node: Mapping[str, Any], seen: tuple[str, ...]
                 ) -> tuple[Mapping[str, Any], tuple[str, ...]]:
    while "$ref" in node:
        ref = str(node["$ref"])
        if not ref.startswith("#/$defs/"):
            raise ValueError(f"only local $defs references are supported, got {ref!r}")
        name = ref[len("#/$defs/"):]
        if name in seen:
            raise ValueError(f"recursive schema reference {ref!r}: its leaves cannot be listed")
        seen = seen + (name,)
        node = schema["$defs"][name]
    return node, seen


def _maps(node: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    out = [node["additionalProperties"]] if isinstance(node.get("additionalProperties"), dict) else []
    patterns = node.get("patternProperties")
    if isinstance(patterns, dict):
        out += [v for v in patterns.values() if isinstance(v, dict)]
    return out


def _structured(schema: Mapping[str, Any], node: Mapping[str, Any], seen: tuple[str, ...]) -> bool:
    """Does ``node`` (or a branch of it) have named or mapped fields?"""
    node, seen = _resolve_ref(schema, node, seen)
    if isinstance(node.get("properties"), dict) or _maps(node):
        return True
    return any(_structured(schema, b, seen) for k in _UNIONS for b in node.get(k) or ())


def _walk(schema: Mapping[str, Any], node: Mapping[str, Any], path: str, seen: tuple[str, ...],
          out: set[str]) -> None:
    node, seen = _resolve_ref(schema, node, seen)
    leaf = True
    for k in _UNIONS:
        for branch in node.get(k) or ():
            _walk(schema, branch, path, seen, out)
            leaf = False
    properties = node.get("properties")
    if isinstance(properties, dict):
        leaf = False
        for name, sub in properties.items():
            _walk(schema, sub, f"{path}.{name}" if path else str(name), seen, out)
    for sub in _maps(node):
        leaf = False
        _walk(schema, sub, f"{path}.*", seen, out)
    items = node.get("items")
    if isinstance(items, dict) and _structured(schema, items, seen):
        leaf = False
        _walk(schema, items, f"{path}[]", seen, out)
    if leaf:
        out.add(path)


def schema_leaves(schema: Mapping[str, Any]) -> tuple[str, ...]:
    """Every leaf path of a manifest JSON Schema (the parsed ``manifest-v1.schema.json``), sorted."""
    out: set[str] = set()
    _walk(schema, schema, "", (), out)
    out.discard("")
    return tuple(sorted(out))


@dataclass(frozen=True)
class Disagreement:
    """Where the schema and ``KEY_TABLE`` disagree: schema leaves with no entry, entries with no schema leaf."""

    unclassified: tuple[str, ...]
    stale: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.unclassified or self.stale)

    def message(self) -> str:
        lines = []
        for path in self.unclassified:
            where = mirrored_path(path)
            lines.append(f"manifest field {path} is not classified: add it to _EXPLICIT in "
                         "orchestrator/core/keyspec.py as build, gate, address or none (with the reason)"
                         + (f" - as a defaults field it mirrors {where}: classify that one" if where else ""))
        for path in self.stale:
            lines.append(f"orchestrator/core/keyspec.py classifies {path}, which the schema no longer has: "
                         "remove or rename the entry")
        return "\n".join(lines)


def disagreement(schema: Mapping[str, Any], table: Mapping[str, KeyRule] | None = None) -> Disagreement:
    """The schema's unclassified leaves and the table's stale entries (both empty: they agree)."""
    entries = KEY_TABLE if table is None else table
    leaves = set(schema_leaves(schema))
    return Disagreement(unclassified=tuple(sorted(leaves - set(entries))),
                        stale=tuple(sorted(set(entries) - leaves)))


def counts(table: Mapping[str, KeyRule] | None = None) -> dict[str, int]:
    """How many entries of each class."""
    entries = KEY_TABLE if table is None else table
    out = dict.fromkeys(KEY_CLASSES, 0)
    for rule in entries.values():
        out[rule.key] += 1
    return out
