"""How a deployment judges published engines: which records are candidates at all, and, for each, whether it can
run on the deployment as declared (or detected) and how well. ``pull``, ``pull --all`` and ``export triton`` all
judge this way; each artifact's own runtime plugin answers (``can_run`` -> ``Compat``), ``core.select`` ranks.

Candidates: the records of the model version asked for, narrowed to the precision and profile asked for. What was
never published (a model, a version, a precision or a profile) is ``ArtifactNotFoundError`` (exit 1) saying what is
published; ``NoCompatibleEngineError`` (exit 4) is kept for "published, but none runs there".

Around the runtime's answer, rules every runtime shares:

- platform (before the runtime is asked): an engine whose builder makes platform-specific engines runs only on
  the platform it was built for (``core.platform.platform_mismatch``); a record from before platforms were
  recorded is judged by the platform of the machine that built it (its ``runner``);
- a declared GPU gets a GPU engine: an engine whose record says it runs on the CPU (``target.device``, which the
  manifest's target and so the builder's runtime recorded) serves a declared GPU only when the user accepts CPU
  engines (``pull --allow-cpu``; ``none`` among ``--gpus``). A runner detected as it is (``--gpu auto``) takes
  the best engine that runs on it, a CPU one included;
- GPU model: a GPU engine built on this runner's exact GPU model (SKU) ranks before one built on another model
  (``Compat.preference``); a ``gpu_match: sku`` engine runs only on the model it was built on;
- lean runtime: a version-compatible engine built without its lean runtime runs only where the deployment loads
  that TensorRT version's lean runtime (``--lean-runtime PATH``, its version checked from the file name).
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from orchestrator import plugins
from orchestrator.app.registry import record_key_of
from orchestrator.app.store_check import damage_error, damaged_matching
from orchestrator.contracts.store import Store, StoredArtifact
from orchestrator.core.artifact import EngineDescriptor
from orchestrator.core.fingerprint import DECLARED_PREFIX, InstalledRuntime, RunnerFingerprint, same_gpu_model
from orchestrator.core.model import PRECISIONS, cc_slug
from orchestrator.core.platform import PlatformError, normalize_platform, platform_mismatch, platform_text
from orchestrator.core.query import (
    engines,
    latest_version,
    matches_profile,
    published_values,
    select,
    versions_newest_first,
)
from orchestrator.core.select import Compat
from orchestrator.core.serving import is_serving, resolve_serving
from orchestrator.core.versions import parse_version, version_text
from orchestrator.errors import ArtifactNotFoundError, PluginError, UsageError

# ``libnvinfer_lean.so.10.13.3``, ``nvinfer_lean_10.dll``: the version a lean runtime library's file name carries
_LEAN_NAME = re.compile(r"nvinfer_lean(?:\.so)?[._-](?P<version>[0-9]+(?:\.[0-9]+)*)", re.IGNORECASE)
LEAN_HINT = ("pass --lean-runtime PATH: the lean runtime library the deployment loads (IRuntime.load_runtime), "
             "e.g. libnvinfer_lean.so.{version} or nvinfer_lean_{major}.dll")
# a runtime's release after its slug: 10.13, 10.13.3.9, and the PEP 440 tails some releases carry (9.3.0.post12.dev1)
_RELEASE = re.compile(r"[0-9]+(?:\.[0-9]+)*(?:\.?(?:post|dev|rc|a|b)[0-9]+)*")
SERVING_FORMS = "triton:25.01, ngc-tensorrt:25.01, jetpack:6.2"


def cc_label(cc: str | None) -> str:
    """``8.6`` -> ``sm86``; no GPU -> ``cpu``."""
    return cc_slug(cc) if cc else "cpu"


def lean_version(name: str) -> tuple[int, ...]:
    """The TensorRT version a lean runtime library's file name carries; () when none."""
    m = _LEAN_NAME.search(name)
    return parse_version(m.group("version")) if m else ()


@dataclass(frozen=True)
class LeanRuntime:
    """``--lean-runtime PATH``: the lean runtime library the deployment loads, and the version its file name (or,
    for a symlink such as ``libnvinfer_lean.so.10``, its target's) carries."""

    path: Path
    version: tuple[int, ...]

    @classmethod
    def of(cls, text: str | os.PathLike[str]) -> LeanRuntime:
        path = Path(text).expanduser()
        if not path.is_file():
            raise UsageError(f"--lean-runtime {str(text)!r}: " + ("not a file" if path.exists() else "no such file"),
                             hint=LEAN_HINT.format(version="10.13.3", major="10") + "; the path must exist here")
        names = (path.name, path.resolve().name)
        return cls(path, max((lean_version(n) for n in names), key=len))

    def mismatch(self, needed: str) -> str | None:
        """Why this library cannot be the lean runtime of TensorRT ``needed`` (None: it can, as far as its file
        name says: major.minor.patch at least, the build number too when both carry one)."""
        want = parse_version(needed)
        n = min(len(want), len(self.version))
        if n and self.version[:n] != want[:n]:
            return (f"needs the TensorRT {needed} lean runtime; --lean-runtime {self.path.name} is TensorRT "
                    f"{version_text(self.version)} (the lean runtime must be the release that built the engine)")
        return None

    def describe(self, needed: str) -> str:
        if not self.version:
            return f"loads the TensorRT {needed} lean runtime from {self.path} (its file name carries no version)"
        if len(self.version) < 3:
            return (f"loads the TensorRT {needed} lean runtime from {self.path} (its file name says only TensorRT "
                    f"{version_text(self.version)}; it must be {needed})")
        return f"loads the TensorRT {needed} lean runtime from {self.path}"


@dataclass(frozen=True)
class RuntimeSpec:
    """``--runtime trt10.13``: the runtime (by its slug) and release the deployment will use."""

    runtime: str
    version: str

    @classmethod
    def parse(cls, text: str) -> RuntimeSpec:
        """``<slug><release>`` of an installed runtime plugin (``trt10.13``, ``ort1.31``); anything else, a bare
        slug or a release that is not one (``trtx``, ``rtx1.7.x``, ``''``) included, is a ``UsageError`` naming
        the accepted forms: a misread runtime would judge every engine against the wrong release."""
        slugs = plugins.runtime_slugs()
        # the longest slug that prefixes the text wins (a slug may be a prefix of another)
        for slug in sorted(slugs, key=len, reverse=True):
            if text.startswith(slug) and _RELEASE.fullmatch(text[len(slug):]):
                return cls(slugs[slug], text[len(slug):])
        raise UsageError(f"--runtime {text!r} is not a runtime and release", hint=runtime_forms(slugs))


def runtime_forms(slugs: Mapping[str, str] | None = None) -> str:
    """The accepted ``--runtime`` forms, with the slugs of the runtime plugins installed here."""
    slugs = plugins.runtime_slugs() if slugs is None else slugs
    runtimes = ", ".join(f"{s}X.Y ({name})" for s, name in sorted(slugs.items())) or "no runtime plugin installed"
    return (f"use auto, a runtime slug and its release, e.g. {runtimes} (X.Y, X.Y.Z or the exact X.Y.Z.B), or a "
            f"serving stack: {SERVING_FORMS}")


def deployment_runtime(text: str | None) -> RuntimeSpec:
    """What a deployment declares it runs: ``trt10.13`` / ``rtx1.7`` / ``ort1.31`` (as ``pull --runtime``), a
    serving stack (``triton:25.01``: the exact TensorRT it ships, ``core.serving``), or None/``auto``: every engine
    on the runtime and release that built it (``AS_BUILT``)."""
    if text is None or text == "auto":
        return AS_BUILT
    if is_serving(text):
        return RuntimeSpec.parse(resolve_serving(text).runtime)  # trt10.8.0.43: the runtime it ships
    return RuntimeSpec.parse(text)


# A deployment that runs each engine on the runtime (and release) that built it: ``pull --all`` run by an init
# container, which is not the machine that will load the engines.
AS_BUILT = RuntimeSpec("", "")


@dataclass(frozen=True)
class CpuRule:
    """A declared GPU and CPU engines: whether the user accepted them for it, and how they say so (the words a
    refusal or an acceptance quotes: ``--allow-cpu``, ``none among --gpus``)."""

    allowed: bool
    how: str


def _declared(fp: RunnerFingerprint, spec: RuntimeSpec, engine: EngineDescriptor) -> RunnerFingerprint | str:
    """The runner as the deployment declares it, or why this candidate is out (another runtime)."""
    if spec.runtime and engine.runtime != spec.runtime:
        return f"runs on {engine.runtime}, not the requested runtime {spec.runtime}"
    name = spec.runtime or engine.runtime
    built = engine.builder_version
    if spec.version and not (built == spec.version or built.startswith(spec.version + ".")):
        # a version-compatible engine may still run on the newer runtime declared here
        version = spec.version
    else:
        version = built
    return fp.with_runtime(name, InstalledRuntime(version, fp.runtime_features(name)))


def _runner(meta: Mapping[str, Any]) -> Mapping[str, Any]:
    runner = meta.get("runner")
    return runner if isinstance(runner, Mapping) else {}


def built_platform(meta: Mapping[str, Any], engine: EngineDescriptor) -> str:
    """The platform an engine was built for: its target's, or for a record from before platforms were recorded,
    the platform of the machine that built it (``runner.os``/``runner.arch``)."""
    if engine.target.platform:
        return engine.target.platform
    runner = _runner(meta)
    l4t = runner.get("l4t")
    return platform_text(str(runner.get("os") or ""), str(runner.get("arch") or ""), f"l4t{l4t}" if l4t else None)


def platform_reason(meta: Mapping[str, Any], engine: EngineDescriptor, deployment: str) -> str | None:
    """Why this engine cannot run on the deployment's platform (None: it can, or its engines are portable)."""
    if not engine.target.platform_specific:
        return None
    why = platform_mismatch(built_platform(meta, engine), deployment)
    if why and not engine.target.platform:
        why += " (recorded before platforms were: judged by the machine that built it)"
    return why


def built_on_cc(meta: Mapping[str, Any]) -> str | None:
    gpus = _runner(meta).get("gpus") or []
    first = gpus[0] if gpus and isinstance(gpus[0], Mapping) else {}
    cc = first.get("compute_capability")
    return str(cc) if cc else None


def _declared_gpu(fp: RunnerFingerprint) -> str:
    return fp.gpus[0].name if fp.gpus else "none"


def cpu_policy(compat: Compat, engine: EngineDescriptor, fp: RunnerFingerprint, rule: CpuRule | None) -> Compat:
    """A CPU engine the runtime would run, for a declared GPU (``rule``; None: the runner was detected, not
    declared): refused unless the user accepted CPU engines, else the reason says they did."""
    if rule is None or engine.target.device != "cpu" or not fp.has_gpu:
        return compat
    gpu = cc_label(fp.compute_capability)
    if rule.allowed:
        return replace(compat, reason=f"{compat.reason}; accepted for the declared GPU {gpu} ({rule.how})")
    return Compat.no(f"a CPU engine, and the deployment declares GPU {gpu}: a declared GPU is served a GPU engine "
                     f"only ({compat.reason}; {rule.how} to accept a CPU engine)")


def gpu_model_policy(compat: Compat, meta: Mapping[str, Any], engine: EngineDescriptor, fp: RunnerFingerprint
                     ) -> Compat:
    """A GPU engine the runtime would run: refused when it is ``gpu_match: sku`` and this is not the GPU model it
    was built on; else ranked, within its rank, first when built on this exact GPU model (preference 0), after
    when built on another (1), the reason saying which."""
    if engine.target.device == "cpu":
        return compat
    here, built = fp.gpu_model, engine.built_on_gpu
    if engine.target.gpu_match == "sku":
        if built is None:
            return Compat.no("built gpu_match: sku, but its record names no GPU model it was built on "
                             "(rebuild it on the GPU model it is for)")
        if not fp.has_gpu:
            return Compat.no(f"built for the {built} only (gpu_match: sku); this runner has no GPU")
        if here is None:
            return Compat.no(f"built for the {built} only (gpu_match: sku); the declared GPU "
                             f"({_declared_gpu(fp).removeprefix(DECLARED_PREFIX)}) has no model: declare it with "
                             f"--gpu-model '{built}' if the deployment's GPU is one")
        if not same_gpu_model(here, built):
            return Compat.no(f"built for the {built} only (gpu_match: sku); this GPU is {here}")
    if here is not None and same_gpu_model(here, built):
        return replace(compat, reason=f"{compat.reason}; built on this GPU model ({here})", preference=0)
    if built is None:
        note = "the GPU model it was built on is not recorded"
    else:
        built_cc = built_on_cc(meta)
        note = (f"same compute capability {built_cc}, built on {built}" if built_cc and
                built_cc == fp.compute_capability else f"built on {built}" + (f" (CC {built_cc})" if built_cc else ""))
    note += f"; this GPU is {here}" if here else "; this GPU's model is not declared (--gpu-model)"
    return replace(compat, reason=f"{compat.reason}; {note}", preference=1)


def lean_policy(compat: Compat, engine: EngineDescriptor, lean: LeanRuntime | None) -> Compat:
    """An engine that needs a lean runtime loaded by the deployment: refused unless one of its version is given."""
    needed = engine.target.lean_runtime
    if not needed:
        return compat
    if lean is None:
        want = parse_version(needed)
        return Compat.no(f"needs the TensorRT {needed} lean runtime loaded by the deployment (version compatible, "
                         "built without its lean runtime); "
                         + LEAN_HINT.format(version=version_text(want[:3]) or needed,
                                            major=want[0] if want else "N"))
    why = lean.mismatch(needed)
    if why:
        return Compat.no(why)
    return replace(compat, reason=f"{compat.reason}; {lean.describe(needed)}")


def descriptor(meta: dict[str, Any]) -> EngineDescriptor:
    """A record's engine as its runtime judges it (records from before runtimes were recorded: its builder's)."""
    return EngineDescriptor.from_json(meta, runtime=_declared_runtime(meta))


def judge(fp: RunnerFingerprint, spec: RuntimeSpec | None, *, lean: LeanRuntime | None = None,
          cpu: CpuRule | None = None) -> Callable[[StoredArtifact], Compat]:
    """How one candidate is judged for the runner ``fp`` (declared or detected) and runtime ``spec`` (None: what is
    installed on ``fp``; ``AS_BUILT``: each engine's own runtime and release); ``cpu``: the rule for CPU engines
    when ``fp``'s GPU is declared (None: detected)."""
    def judge_one(art: StoredArtifact) -> Compat:
        return judge_engine(art.metadata, descriptor(art.metadata), fp, spec, lean=lean, cpu=cpu)

    return judge_one


def judge_engine(meta: Mapping[str, Any], engine: EngineDescriptor, fp: RunnerFingerprint, spec: RuntimeSpec | None,
                 *, lean: LeanRuntime | None = None, cpu: CpuRule | None = None) -> Compat:
    """``judge``'s answer for one engine: its record's metadata (``{}`` for an engine not built yet: its platform
    is its target's) and its descriptor."""
    wrong_platform = platform_reason(meta, engine, fp.platform)
    if wrong_platform:
        return Compat.no(wrong_platform)
    try:
        runtime = plugins.runtime_for(engine)
    except PluginError as e:
        return Compat.no(f"its runtime plugin is not usable here: {e.message}")
    local = fp
    if spec is not None:
        declared = _declared(fp, spec, engine)
        if isinstance(declared, str):
            return Compat.no(declared)
        local = declared
    compat = runtime.can_run(engine, local)
    if not compat.ok:
        return compat
    compat = cpu_policy(compat, engine, local, cpu)
    if not compat.ok:
        return compat
    return lean_policy(gpu_model_policy(compat, meta, engine, local), engine, lean)


def declared_platform(text: str) -> str:
    try:
        return normalize_platform(text)
    except PlatformError as e:
        raise UsageError(f"--platform: {e}", hint=e.hint) from None


def on_platform(fp: RunnerFingerprint, platform: str) -> RunnerFingerprint:
    """The runner as ``--platform`` declares it (os, arch and the L4T release of a Jetson)."""
    os_name, arch, *variant = platform.split("/")
    return replace(fp, os=os_name, arch=arch, l4t=variant[0].removeprefix("l4t") if variant else None)


def _declared_runtime(meta: Mapping[str, Any]) -> str | None:
    """Metadata written before artifacts recorded their runtime: the builder plugin says which it is."""
    if meta.get("runtime"):
        return None
    try:
        return plugins.runtime_name_of(str(meta["builder"]["name"]))
    except PluginError:
        return None


def record_runtime(meta: Mapping[str, Any]) -> str:
    """The runtime plugin that runs a record's engine (records from before runtimes were recorded: its builder's)."""
    return str(meta.get("runtime") or _declared_runtime(meta) or meta["builder"]["name"])


def check_precision(precision: str | None) -> None:
    """A ``UsageError`` for a precision no engine can have (with the close one suggested)."""
    if precision is not None and precision not in PRECISIONS:
        close = [p for p in PRECISIONS if p[:2] == precision[:2].lower()] if precision else []
        raise UsageError(f"unknown --precision {precision!r}",
                         hint=(f"did you mean {close[0]}? " if len(close) == 1 else "")
                         + f"one of: {', '.join(PRECISIONS)} (or leave it out: any precision)")


# -- candidates ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Candidate:
    """A candidate the deployment did not take, machine-readable: which record (``id`` is how messages name it:
    address and short digest), why, and the GPU it was judged for (``pull --all``, ``export triton``)."""

    id: str
    reason: str
    metadata: Mapping[str, Any]
    gpu: str | None = None

    def to_json(self) -> dict[str, Any]:
        m = self.metadata
        target = m.get("target") or {}
        model = m.get("model") or {}
        out = {"artifact": self.id, "address": m.get("address"), "record_key": record_key_of(m),
               "digest": (m.get("engine") or {}).get("digest"), "model": model.get("name"),
               "version": model.get("version"), "precision": m.get("precision"), "profile_set": m.get("profile_set"),
               "target": target.get("name"), "device": target.get("device"),
               "compute_capabilities": list(target.get("compute_capabilities") or ()),
               "runtime": record_runtime(m), "builder": m.get("builder"), "reason": self.reason}
        if self.gpu is not None:
            out["gpu"] = self.gpu
        return out


def explained(pairs: Sequence[tuple[str, str]], found: Sequence[tuple[str, StoredArtifact]],
              gpu: str | None = None) -> tuple[Candidate, ...]:
    """``(id, reason)`` pairs of a ranking as ``Candidate``s (the ids are ``find_candidates``')."""
    by_id = dict(found)
    return tuple(Candidate(who, why, by_id[who].metadata, gpu) for who, why in pairs if who in by_id)


def _not_published(store: Store, model: str) -> ArtifactNotFoundError:
    names = sorted({str(r.metadata["model"]["name"]) for r in engines(store.records(), lambda a: a.metadata)})
    close = difflib.get_close_matches(model, names, n=3)
    return ArtifactNotFoundError(f"model {model!r} is not published",
                                 hint=(f"did you mean {' or '.join(close)}? " if close else "")
                                 + (f"published models: {', '.join(names)}" if names else
                                    "nothing is published in this registry") + " (see `orchestrate ls`)")


def find_candidates(store: Store, model: str, version: str | None, precision: str | None = None,
                    profile: str | None = None) -> tuple[str, list[tuple[str, StoredArtifact]]]:
    """The published version of ``model`` asked for (None/"latest": the newest) and its records of ``precision``
    and ``profile`` (None: any), one per build key, each with the id rejections name it by (address and short
    digest). What was never published is an ``ArtifactNotFoundError`` saying what is."""
    records = select(store.records(model), lambda a: a.metadata, model=model)
    metas = [r.metadata for r in records]
    if not records:
        damaged = damaged_matching(store, lambda d: d.model == model)
        if damaged:  # only damaged records of it: say which, not "nothing published"
            raise damage_error(f"model {model!r}", damaged)
        raise _not_published(store, model)
    wanted = version if version not in (None, "latest") else latest_version(metas, model)
    artifacts = select(records, lambda a: a.metadata, version=wanted)
    if not wanted or not artifacts:
        raise ArtifactNotFoundError(f"{model} version {version} is not published",
                                    hint=f"published for {model}: versions "
                                         f"{', '.join(versions_newest_first(metas))} (newest first)")
    matching = [a for a in artifacts if (precision is None or a.metadata["precision"] == precision)
                and (profile is None or matches_profile(a.metadata, profile))]
    if not matching:
        asked = " with ".join(f"{what} {value}" for what, value in (("precision", precision), ("profile", profile))
                              if value is not None)
        values = published_values([a.metadata for a in artifacts])
        elsewhere = [v for v in versions_newest_first(metas) if v != wanted and any(
            (precision is None or m["precision"] == precision) and (profile is None or matches_profile(m, profile))
            for m in metas if m["model"]["version"] == v)]
        raise ArtifactNotFoundError(
            f"{model} {wanted}: {asked} is not published",
            hint=f"published for {model} {wanted}: precisions {', '.join(values.precisions)}; profile sets "
                 f"{', '.join(values.profile_sets)}"
                 + (f"; {asked} is published for version {', '.join(elsewhere)} (--version {elsewhere[0]})"
                    if elsewhere else ""))
    unique: dict[str, StoredArtifact] = {}
    for art in matching:
        unique.setdefault(art.metadata["build_key"], art)
    return wanted, [(f"{a.metadata['address']} ({a.metadata['engine']['digest'][:19]})", a) for a in unique.values()]
