"""Schema-valid manifest data -> the typed model (``model.py``): defaults merged, paths made absolute.

Pure: takes the parsed mapping and the manifest's folder, returns dataclasses plus findings for what a JSON
Schema cannot say well (a compute capability YAML read as an integer, a target that is neither a CC, a CC list,
a compatibility level nor a device). Only parts without schema errors are converted, so one typo in one model
still lets every other model be checked.

Values taken from ``defaults:`` are recorded in ``redirects`` (model path -> defaults path), so a problem in a
defaulted value points at the line in ``defaults:`` that the user must edit.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import unquote, urlsplit

from orchestrator.core.model import (
    DEFAULT_PLATFORM,
    BenchmarkGate,
    BuilderOptions,
    DataSource,
    DimConstraint,
    DriftGate,
    GateSettings,
    InputSpec,
    MatrixRule,
    Model,
    ParityGate,
    PrecisionSpec,
    Preprocess,
    ProfileShapes,
    RegistryConfig,
    RegistryCredentials,
    RunnerLabels,
    RunnerPool,
    SigningConfig,
    SourceModel,
    Target,
    TaskSpec,
    Tolerance,
    Toolchain,
)
from orchestrator.core.platform import PlatformError, normalize_platform
from orchestrator.core.serving import resolve_serving
from orchestrator.core.tolerances import override_layers
from orchestrator.core.versions import parse_version, same_version
from orchestrator.errors import UsageError
from orchestrator.manifest.positions import Finding, Path

_CC = re.compile(r"^[0-9]+\.[0-9]$")


@dataclass
class Converted:
    """What conversion produced; ``models[i]``/``targets[i]`` is None where that entry could not be typed."""

    models: list[Model | None] = field(default_factory=list)
    targets: list[Target | None] = field(default_factory=list)
    include: list[MatrixRule] = field(default_factory=list)
    exclude: list[MatrixRule] = field(default_factory=list)
    registry: RegistryConfig | None = None
    pools: list[RunnerPool] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    redirects: dict[Path, Path] = field(default_factory=dict)
    # (model name, target name) -> merged gate, where a target has `gate:` (``Manifest.cell_gates``)
    cell_gates: list[tuple[tuple[str, str], GateSettings]] = field(default_factory=list)
    # (model, precision, profile set, target) -> merged gate, where `matrix.include` rules with `gate:` name the cell
    rule_gates: list[tuple[tuple[str, str, str, str], GateSettings]] = field(default_factory=list)
    # each target's and include rule's own `gate:` alone (manifest path of it, settings): its files are checked
    own_gates: list[tuple[Path, GateSettings]] = field(default_factory=list)


def _abs(base_dir: str, path: str) -> str:
    return os.path.normpath(os.path.join(base_dir, os.path.expanduser(path)))


def deep_merge(default: dict, own: dict, own_path: Path, default_path: Path, redirects: dict[Path, Path]) -> dict:
    """``own`` over ``default``, mappings merged key by key; keys that came from the default are redirected."""
    out = dict(own)
    for key, value in default.items():
        if key not in own:
            out[key] = value
            redirects[own_path + (key,)] = default_path + (key,)
        elif isinstance(value, dict) and isinstance(own[key], dict):
            out[key] = deep_merge(value, own[key], own_path + (key,), default_path + (key,), redirects)
    return out


def _data(raw: dict | None, base_dir: str) -> DataSource | None:
    if raw is None:
        return None
    pre = raw.get("preprocess")
    preprocess = None
    if pre is not None:
        preprocess = Preprocess(
            resize=tuple(pre["resize"]) if "resize" in pre else None,
            mean=tuple(float(v) for v in pre.get("mean", (0.0, 0.0, 0.0))),
            std=tuple(float(v) for v in pre.get("std", (1.0, 1.0, 1.0))),
            scale=float(pre.get("scale", 1.0 / 255.0)), layout=pre.get("layout", "NCHW"),
            dtype=pre.get("dtype", "float32"), color=pre.get("color", "RGB"))
    return DataSource(path=_abs(base_dir, raw["path"]) if "path" in raw else None, preprocess=preprocess,
                      samples=raw.get("samples", 8), seed=raw.get("seed", 0),
                      labels=_abs(base_dir, raw["labels"]) if "labels" in raw else None)


def _tolerance(raw: dict) -> Tolerance:
    return Tolerance(atol=float(raw["atol"]) if "atol" in raw else None,
                     rtol=float(raw["rtol"]) if "rtol" in raw else None, min_cosine=raw.get("min_cosine"),
                     max_rel_l2=raw.get("max_rel_l2"), topk=raw.get("topk"),
                     min_topk_agreement=raw.get("min_topk_agreement"))


def _gate(raw: dict, base_dir: str) -> GateSettings:
    parity = raw.get("parity", {})
    bench = raw.get("benchmark", {})
    return GateSettings(
        parity=ParityGate(
            data=_data(parity.get("data"), base_dir) or DataSource(),
            tolerances={k: _tolerance(v) for k, v in parity.get("tolerances", {}).items()},
            per_output={k: _tolerance(v) for k, v in parity.get("per_output", {}).items()},
            enabled=parity.get("enabled", True),
            task={k: float(v) for k, v in parity.get("task", {}).items()},
            task_by_precision={p: {k: float(v) for k, v in t.items()}
                               for p, t in parity.get("task_by_precision", {}).items()},
            tensor=parity.get("tensor", True)),
        benchmark=BenchmarkGate(
            warmup=bench.get("warmup", 10), iterations=bench.get("iterations", 100),
            time_budget_s=bench.get("time_budget_s"), shapes=tuple(bench.get("shapes", ("opt",))),
            max_p95_ms=bench.get("max_p95_ms"), min_throughput=bench.get("min_throughput"),
            max_regression_pct=bench.get("max_regression_pct"), enabled=bench.get("enabled", True),
            blocks=bench.get("blocks"), block_gap_s=bench.get("block_gap_s"),
            max_spread_pct=bench.get("max_spread_pct"), max_p99_p50_ratio=bench.get("max_p99_p50_ratio"),
            max_cv_pct=bench.get("max_cv_pct"), max_device_memory_mib=bench.get("max_device_memory_mib"),
            soak_s=bench.get("soak_s"), max_memory_growth_mib=bench.get("max_memory_growth_mib"),
            max_refit_cost_pct=bench.get("max_refit_cost_pct")),
        drift=_drift(raw.get("drift", {})),
        allow_ungated_publish=raw.get("allow_ungated_publish", False),
        require_gpu_parity=tuple(raw.get("require_gpu_parity", ())))


def _drift(raw: dict) -> DriftGate:
    return DriftGate(enabled=raw.get("enabled", True), max_latency_regression_pct=raw.get("max_latency_regression_pct"),
                     min_cosine=raw.get("min_cosine"), max_rel_l2=raw.get("max_rel_l2"),
                     max_abs_error=raw.get("max_abs_error"),
                     task={k: float(v) for k, v in raw.get("task", {}).items()})


def _task(raw: dict | None, base_dir: str) -> TaskSpec | None:
    """``models[].task``: kind and output, the rest are the kind's options (a charset path made absolute)."""
    if raw is None:
        return None
    options = {k: v for k, v in raw.items() if k not in ("kind", "output")}
    if "charset" in options:
        options["charset"] = _abs(base_dir, str(options["charset"]))
    return TaskSpec(kind=raw["kind"], output=raw.get("output"), options=dict(sorted(options.items())))


def _precision(raw: str | dict) -> PrecisionSpec:
    if isinstance(raw, str):
        return PrecisionSpec(name=raw)
    block = raw.get("op_block_list")
    return PrecisionSpec(name=raw["name"], via=raw.get("via", "auto"), keep_io_types=raw.get("keep_io_types", True),
                         op_block_list=tuple(block) if block is not None else None,
                         calibration_method=raw.get("calibration_method", "entropy"),
                         min_quantized_share=raw.get("min_quantized_share"))


def _model(raw: dict, base_dir: str, path: Path, findings: list[Finding]) -> Model:
    inputs = tuple(
        InputSpec(name=name, shape=tuple(spec["shape"]), dtype=spec.get("dtype", "float32"),
                  profiles={p: ProfileShapes(tuple(s["min"]), tuple(s["opt"]), tuple(s["max"]))
                            for p, s in spec.get("profiles", {}).items()})
        for name, spec in raw["inputs"].items())
    names = list(dict.fromkeys(p for spec in inputs for p in spec.profiles))
    # Default: each profile is its own one-profile set (one engine per profile); a static model still needs one
    # (empty) set, or it would have no cells at all.
    sets = raw.get("profile_sets") or ({p: (p,) for p in names} if names else {"default": ()})
    return Model(
        name=raw["name"], version=raw["version"],
        source=_source(raw["source"], base_dir, path + ("source",), findings),
        inputs=inputs,
        constraints=tuple(DimConstraint(dim=d, multiple_of=c.get("multiple_of"), min=c.get("min"), max=c.get("max"))
                          for d, c in raw.get("constraints", {}).items()),
        precisions=tuple(_precision(p) for p in raw.get("precisions", ("fp32",))),
        profile_sets={k: tuple(v) for k, v in sets.items()}, calibration=_data(raw.get("calibration"), base_dir),
        gate=_gate(raw.get("gate", {}), base_dir), classifier_outputs=dict(raw.get("classifier_outputs", {})),
        task=_task(raw.get("task"), base_dir))


def normalize_cc(value: Any, path: Path, findings: list[Finding], text: str | None) -> str | None:
    """"8.9" stays; YAML float 8.9 -> "8.9"; integer 9 is refused (was it 9.0? 90?), quoted hint."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        findings.append(Finding(path, f"compute capability {value} is an integer",
                                f'write it as a quoted "major.minor" string, e.g. "{value}.0"'))
        return None
    cc = repr(value) if isinstance(value, float) else str(value)
    if not _CC.match(cc):
        shown = text if text is not None else cc
        findings.append(Finding(path, f"compute capability {shown!r} is not \"major.minor\"",
                                'e.g. "8.9" or "12.0" (quote it so YAML keeps the digits)'))
        return None
    return cc


# Where a model may be fetched from (through fsspec: app/sources.py). Plain http is allowed on the loopback only:
# the tests' local server; anywhere else a download that is only checked after it finished must not be in clear.
URL_SCHEMES = ("https", "s3", "gs", "hf")
_LOOPBACK = ("127.0.0.1", "localhost", "::1")
_URL_HINT = ("a model url is https://host/path/model.onnx, s3://bucket/key.onnx, gs://bucket/key.onnx or "
             "hf://owner/repo/path/in/repo.onnx (http:// only for 127.0.0.1/localhost)")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,199}$")


def source_url_problem(url: str) -> tuple[str, str] | None:
    """(message, hint) when ``url`` is no model url this project can fetch, else None. Pure: no network."""
    try:
        parts = urlsplit(url)
    except ValueError as e:  # "Invalid IPv6 URL" and friends
        return f"not a url: {url} ({e})", _URL_HINT
    scheme = parts.scheme.lower()
    if not scheme:
        return f"the model url has no scheme: {url}", _URL_HINT
    if scheme == "http":
        if (parts.hostname or "") not in _LOOPBACK:
            return (f"plain http is refused for model downloads: {url}",
                    "use https:// (http:// is only for a server on 127.0.0.1/localhost, as in tests)")
    elif scheme not in URL_SCHEMES:
        return f"unsupported url scheme '{scheme}://' for a model source: {url}", _URL_HINT
    if parts.username is not None or parts.password is not None:
        return (f"the model url carries credentials: {parts.scheme}://***@{parts.hostname}",
                "credentials in a manifest end up in logs and plans: give them to fsspec's filesystem through "
                "its environment (AWS_*, GOOGLE_APPLICATION_CREDENTIALS, HF_TOKEN)")
    segments = [s for s in parts.path.split("/") if s]
    host = parts.netloc
    if not host or not segments or parts.path.endswith("/"):
        return f"the model url names no file: {url}", _URL_HINT
    if scheme == "hf" and len(segments) < 2:  # hf://owner/repo/file: the host is the owner
        return (f"an hf:// url is hf://owner/repo/path/in/repo.onnx, got {url}",
                "e.g. hf://onnx-community/resnet-50/model.onnx (a revision: owner/repo@v1.0/model.onnx)")
    return None


def source_url_basename(url: str) -> str:
    """The file name a verified download is stored under: the url's last path segment when it is a plain file
    name, else ``model.onnx`` (the cache folder is the content's sha256, so the name only helps people)."""
    try:
        url_path = urlsplit(url).path
    except ValueError:
        url_path = ""
    name = unquote(url_path.rstrip("/").rsplit("/", 1)[-1])
    return name if _SAFE_NAME.match(name) and name not in (".", "..") else "model.onnx"


def _source(raw: dict, base_dir: str, path: Path, findings: list[Finding]) -> SourceModel:
    if "url" in raw:  # the path is where the verified download lives, set by the project loader (app.sources)
        if "sha256" not in raw:
            findings.append(Finding(path + ("url",), "a model fetched from a url needs its sha256",
                                    "add sha256: <64 hex digits> (`sha256sum model.onnx` of the file you expect)"))
        problem = source_url_problem(raw["url"])
        if problem is not None:
            findings.append(Finding(path + ("url",), *problem))
        return SourceModel(path="", sha256=raw.get("sha256"), url=raw["url"])
    if "path" not in raw:
        findings.append(Finding(path, "a model source needs a path or a url",
                                "e.g. source: {path: models/det.onnx} or {url: https://..., sha256: ...}"))
        return SourceModel(path="")
    return SourceModel(path=_abs(base_dir, raw["path"]), sha256=raw.get("sha256"))


def _builder_version(raw: dict, path: Path, findings: list[Finding]) -> str | None:
    """``builder_version``, or the exact TensorRT the target's serving stack ships (``serve: triton:25.01``,
    ``core.serving``); both given must agree on every part both carry, and the more precise one is the target's
    (``10.8`` with 10.8.0.43 is 10.8.0.43; ``10.0.1.6`` with a stack known only as 10.0.1 is 10.0.1.6)."""
    version = raw.get("builder_version")
    serve = raw.get("serve")
    if serve is None:
        if version is None:
            findings.append(Finding(path, "a target needs builder_version (or serve: a serving stack that sets it)",
                                    'e.g. builder_version: "10.13.3.9", or serve: "triton:25.01"'))
        return version
    try:
        stack = resolve_serving(str(serve))
    except UsageError as e:
        findings.append(Finding(path + ("serve",), e.message, e.hint))
        return None
    if version is not None and not same_version(version, stack.tensorrt):
        findings.append(Finding(path + ("builder_version",),
                                f"builder_version {version} is not the TensorRT {stack.tensorrt} that {stack.name} "
                                f"ships ({stack.image or 'JetPack'})",
                                f"leave builder_version out (serve sets it), or set it to \"{stack.tensorrt}\""))
        return None
    if version is None or len(parse_version(stack.tensorrt)) > len(parse_version(version)):
        return stack.tensorrt
    return version


def _target(raw: dict, i: int, scalars: dict[Path, str], findings: list[Finding]) -> Target | None:
    path: Path = ("targets", i)
    before = len(findings)
    kinds = [k for k in ("compute_capability", "compute_capabilities", "device") if k in raw]
    compat = raw.get("hardware_compatibility", "none")
    if compat == "ampere_plus" and not kinds:
        kinds.append("hardware_compatibility")
    ccs: list[str] = []
    if "compute_capability" in raw:
        cc = normalize_cc(raw["compute_capability"], path + ("compute_capability",), findings,
                          scalars.get(path + ("compute_capability",)))
        ccs += [cc] if cc else []
    for j, value in enumerate(raw.get("compute_capabilities", ())):
        p = path + ("compute_capabilities", j)
        cc = normalize_cc(value, p, findings, scalars.get(p))
        ccs += [cc] if cc else []
    if len(kinds) != 1:
        given = ", ".join(kinds) if kinds else "none of them"
        findings.append(Finding(path, f"a target needs exactly one of compute_capability, compute_capabilities, "
                                      f"hardware_compatibility: ampere_plus or device (given: {given})",
                                "e.g. compute_capability: \"8.9\", or device: cpu for onnxruntime"))
    if compat == "same_compute_capability" and "compute_capability" not in raw:
        findings.append(Finding(path + ("hardware_compatibility",),
                                "same_compute_capability needs the compute_capability it is built for",
                                'add compute_capability: "8.6" (TensorRT >= 10.9)'))
    if compat != "none" and "device" in raw:
        findings.append(Finding(path + ("hardware_compatibility",), "a device target has no compatibility level"))
    if "cpu_match" in raw and raw.get("device") != "cpu":
        # only a CPU engine's numbers follow the CPU's instruction set; a GPU target would record a policy nothing reads
        findings.append(Finding(path + ("cpu_match",), "cpu_match is for CPU targets (device: cpu) only",
                                "remove cpu_match here, or set it on the device: cpu target"))
    version = _builder_version(raw, path, findings)
    platform = DEFAULT_PLATFORM
    if "platform" in raw:
        try:
            platform = normalize_platform(str(raw["platform"]))
        except PlatformError as e:
            findings.append(Finding(path + ("platform",), str(e), e.hint))
    if len(findings) > before:
        return None
    runners = raw.get("runners", {"build": []})
    assert version is not None  # a missing one is a finding above
    return Target(
        name=raw["name"], builder=raw["builder"], builder_version=version, compute_capabilities=tuple(ccs),
        hardware_compatibility=compat, device=raw.get("device", "gpu"),
        runners=RunnerLabels(tuple(runners["build"]), tuple(runners.get("gate", runners["build"]))),
        options=_options(raw.get("options", {})), platform=platform, gpu_match=raw.get("gpu_match", "cc"),
        cpu_match=raw.get("cpu_match", "any"),
        serve=raw.get("serve"), toolchain=_toolchain(raw.get("toolchain", "runner")),
        weights=raw.get("weights", "embedded"))


def _toolchain(raw: str | dict) -> Toolchain:
    if isinstance(raw, str):
        return Toolchain(kind=raw)  # type: ignore[arg-type]  # the schema allows only the kinds
    cuda = raw.get("cuda")
    return Toolchain(kind=raw["kind"], image=raw.get("image"), index_url=raw.get("index_url"),
                     cuda=None if cuda is None else str(cuda))


def _options(raw: dict) -> BuilderOptions:
    options: dict[str, Any] = {k: (dict(v) if k == "extra" else v) for k, v in raw.items()}
    timing = options.get("timing_cache")
    if isinstance(timing, dict):  # {pin: true}: a timing cache, pinned to the published one
        options["timing_cache"] = True
        options["timing_cache_pin"] = bool(timing.get("pin"))
    return BuilderOptions(**options)


def _rule(raw: dict) -> MatrixRule:
    return MatrixRule(model=raw.get("model"), precision=raw.get("precision"), profile_set=raw.get("profile_set"),
                      target=raw.get("target"))


def _override_keys(raw_gate: object) -> dict[str, set[str]]:
    """The parity tolerance overrides a gate writes, as written: {"tolerances": precisions, "per_output": outputs}."""
    parity = raw_gate.get("parity") if isinstance(raw_gate, dict) else None
    parity = parity if isinstance(parity, dict) else {}
    return {f: set(parity[f]) if isinstance(parity.get(f), dict) else set() for f in ("tolerances", "per_output")}


def _layered(gate: GateSettings, own: dict, layers: Sequence[tuple[str, object]]) -> GateSettings:
    """A merged gate with the layer each parity override came from (``ParityGate.layers``: a tolerance's
    ``source`` then names the target or matrix rule that set it, not the model)."""
    named = override_layers(_override_keys(own), [(label, _override_keys(raw)) for label, raw in layers])
    return replace(gate, parity=replace(gate.parity, layers=named)) if named else gate


def _rule_gates(includes: Sequence[dict], out: Converted, model_gates: list[dict], target_gates: dict[int, dict],
                base_dir: str) -> list[tuple[tuple[str, str, str, str], GateSettings]]:
    """The gate of each cell that `matrix.include` rules with `gate:` name: those rules' gates in manifest order
    (a later rule's keys win) over the target's `gate:` over the model's, key by key. Only the (model, target) pairs
    a gate rule can name are walked, over the model's precisions and profile sets."""
    rules = [(i, _rule(raw), raw["gate"]) for i, raw in enumerate(includes)
             if isinstance(raw, dict) and isinstance(raw.get("gate"), dict)]
    for i, rule, _ in rules:
        if rule == MatrixRule():  # `gate:` alone would name every cell: that is defaults.gate, said plainly
            out.findings.append(Finding(("matrix", "include", i), "a matrix rule with gate: names no cells",
                                        "give it a model, precision, profile_set or target; settings for every "
                                        "cell go in defaults.gate"))
    out.own_gates += [(("matrix", "include", i, "gate"), _gate(g, base_dir)) for i, _, g in rules]
    if not rules:
        return []
    found: list[tuple[tuple[str, str, str, str], GateSettings]] = []
    for model, own in zip(out.models, model_gates, strict=True):
        if model is None:
            continue
        for t, target in enumerate(out.targets):
            if target is None:
                continue
            named = [(i, r, g) for i, r, g in rules
                     if r.model in (None, model.name) and r.target in (None, target.name)]
            if not named:
                continue
            merged: dict[tuple[int, ...], GateSettings] = {}  # the same rules -> one settings object
            for precision in (p.name for p in model.precisions):  # the checks refuse a rule naming another
                for profile_set in model.profile_sets:
                    hits = [(i, g) for i, r, g in named
                            if r.precision in (None, precision) and r.profile_set in (None, profile_set)]
                    if not hits:
                        continue
                    which = tuple(i for i, _ in hits)
                    if which not in merged:
                        gate = deep_merge(own, target_gates.get(t, {}), ("targets", t, "gate"), ("models",), {})
                        for i, g in hits:
                            gate = deep_merge(gate, g, ("matrix", "include", i, "gate"), ("models",), {})
                        layers = ([(f"target:{target.name}", target_gates[t])] if t in target_gates else []) \
                            + [(f"matrix.include[{i}]", g) for i, g in hits]
                        merged[which] = _layered(_gate(gate, base_dir), own, layers)
                    found.append(((model.name, precision, profile_set, target.name), merged[which]))
    return found


def _invalid(bad: set[Path], prefix: Path) -> bool:
    return any(p[:len(prefix)] == prefix for p in bad)


def default_registry_dir(manifest_file: str) -> str:
    """The embedded default store: ``<repo>/artifacts`` for ``<repo>/manifests/x.yaml``, else next to the file."""
    folder = os.path.dirname(manifest_file)
    if os.path.basename(folder) == "manifests":
        return os.path.join(os.path.dirname(folder), "artifacts")
    return os.path.join(folder, "artifacts")


def _section(data: dict, key: str, kind: type):
    """A top-level section, or an empty one when it has the wrong type (the schema has reported that)."""
    value = data.get(key)
    return value if isinstance(value, kind) else kind()


def convert(data: dict, manifest_file: str, bad: set[Path], scalars: dict[Path, str]) -> Converted:
    """``bad``: manifest paths that have schema errors; entries under them are skipped, not guessed."""
    out = Converted()
    base_dir = os.path.dirname(manifest_file)
    defaults = data.get("defaults", {}) if not _invalid(bad, ("defaults",)) else None
    model_gates: list[dict] = []  # each model's gate after defaults, as written (targets[].gate merges over it)
    for i, raw in enumerate(_section(data, "models", list)):
        if defaults is None or _invalid(bad, ("models", i)) or not isinstance(raw, dict):
            out.models.append(None)
            model_gates.append({})
            continue
        path: Path = ("models", i)
        if "precisions" not in raw and "precisions" in defaults:
            raw = {**raw, "precisions": defaults["precisions"]}
            out.redirects[path + ("precisions",)] = ("defaults", "precisions")
        if "gate" in defaults:
            raw = {**raw, "gate": deep_merge(defaults["gate"], raw.get("gate", {}), path + ("gate",),
                                             ("defaults", "gate"), out.redirects)}
        out.models.append(_model(raw, base_dir, path, out.findings))
        model_gates.append(raw.get("gate", {}))
    target_gates: dict[int, dict] = {}  # a target's own `gate:`, as written
    for i, raw in enumerate(_section(data, "targets", list)):
        if defaults is None or _invalid(bad, ("targets", i)) or not isinstance(raw, dict):
            out.targets.append(None)
            continue
        path = ("targets", i)
        if "runners" not in raw and "runners" in defaults:
            raw = {**raw, "runners": defaults["runners"]}
            out.redirects[path + ("runners",)] = ("defaults", "runners")
        if "builder_options" in defaults:
            own = raw.get("options", {})
            merged = deep_merge(defaults["builder_options"], own, path + ("options",), ("defaults", "builder_options"),
                                out.redirects)
            raw = {**raw, "options": merged}
        target = _target(raw, i, scalars, out.findings)
        out.targets.append(target)
        if target is not None and isinstance(raw.get("gate"), dict):
            target_gates[i] = raw["gate"]
            out.own_gates.append((path + ("gate",), _gate(raw["gate"], base_dir)))
            for model, own in zip(out.models, model_gates, strict=True):
                if model is not None:  # the target's keys over the model's (itself over defaults'), key by key
                    merged = deep_merge(own, raw["gate"], path + ("gate",), ("models",), {})
                    out.cell_gates.append(((model.name, target.name),
                                           _layered(_gate(merged, base_dir), own,
                                                    [(f"target:{target.name}", raw["gate"])])))
    if not _invalid(bad, ("matrix",)):
        includes = data.get("matrix", {}).get("include", ())
        out.include = [_rule(r) for r in includes]
        out.exclude = [_rule(r) for r in data.get("matrix", {}).get("exclude", ())]
        out.rule_gates = _rule_gates(includes, out, model_gates, target_gates, base_dir)
    if not _invalid(bad, ("registry",)):
        out.registry = _registry(data.get("registry", {}), manifest_file, out.findings)
    if not _invalid(bad, ("runners",)):
        for i, raw in enumerate(_section(data, "runners", list)):
            p: Path = ("runners", i, "compute_capability")
            cc = raw.get("compute_capability")
            cc = normalize_cc(cc, p, out.findings, scalars.get(p)) if cc is not None else None
            out.pools.append(RunnerPool(labels=tuple(raw["labels"]), compute_capability=cc, gpu=raw.get("gpu"),
                                        tensorrt=raw.get("tensorrt"), tensorrt_rtx=raw.get("tensorrt_rtx")))
    return out


def _registry(raw: dict, manifest_file: str, findings: list[Finding]) -> RegistryConfig:
    store = raw.get("store", "local")
    base_dir = os.path.dirname(manifest_file)
    if store == "oci" and "url" not in raw:
        findings.append(Finding(("registry",), "an oci registry needs a url",
                                "e.g. url: 127.0.0.1:5000/engines"))
    if store == "local" and "url" in raw:
        findings.append(Finding(("registry", "url"), "a local store takes a path, not a url",
                                "use store: oci for a registry url"))
    path = raw.get("path")
    if store == "local":
        path = _abs(base_dir, path) if path else default_registry_dir(manifest_file)
    elif path is not None:
        path = _abs(base_dir, path)
    creds = raw.get("credentials")
    credentials = (RegistryCredentials(creds["username_secret"], creds["password_secret"],
                                       creds.get("read_username_secret"), creds.get("read_password_secret"))
                   if isinstance(creds, dict) else None)
    if credentials is not None and store == "local":
        findings.append(Finding(("registry", "credentials"), f"a {store} store takes no credentials",
                                "remove credentials, or use store: oci"))
    for key in ("username_secret", "password_secret", "read_username_secret", "read_password_secret"):
        name = getattr(credentials, key, "") or ""
        if name.upper().startswith("GITHUB_"):
            findings.append(Finding(("registry", "credentials", key), f"secret name {name!r} is reserved by GitHub",
                                    "GHCR needs no credentials (the workflow uses GITHUB_TOKEN); name your own "
                                    "secret otherwise, e.g. REGISTRY_TOKEN"))
    return RegistryConfig(store=store, path=path, url=raw.get("url"), insecure=raw.get("insecure", False),
                          credentials=credentials, signing=_signing(raw.get("signing"), base_dir, findings),
                          publish_onnx=bool(raw.get("publish_onnx", False)))


def _signing(raw: dict | None, base_dir: str, findings: list[Finding]) -> SigningConfig | None:
    """``registry.signing``: a key-based signer needs its key; relative key and public-key files are the
    manifest's."""
    if not isinstance(raw, dict):
        return None
    signer = raw.get("signer", "ed25519")
    key = raw.get("key")
    if key and key.startswith("file:"):
        key = "file:" + _abs(base_dir, key[5:])
    require = raw.get("require")
    if require and not require.startswith(("env:", "https://")):
        spec = require[5:] if require.startswith("file:") else require
        require = "file:" + _abs(base_dir, spec)
    if signer == "ed25519" and not key and "require" not in raw:
        findings.append(Finding(("registry", "signing"), "the ed25519 signer needs a key to sign with",
                                "key: env:ORCH_SIGNING_KEY (the PEM private key in that variable), or only "
                                "require: PUBLIC_KEY to verify what others signed"))
    return SigningConfig(signer=signer, key=key, require=require)
