"""Deploy-time resolution: pick the published engine that can run on this runner (or the declared one), verify it
and write it out — or explain, candidate by candidate, why none can. Decided from metadata alone, before any byte
of an engine is read; each artifact's own runtime plugin judges it, ``core.select`` ranks the answers.

Around the runtime's answer, rules every runtime shares:

- platform (before the runtime is asked): an engine whose builder makes platform-specific engines runs only on
  the platform it was built for (``core.platform.platform_mismatch``); a record from before platforms were
  recorded is judged by the platform of the machine that built it (its ``runner``);
- GPU model: a GPU engine built on this runner's exact GPU model (SKU) ranks before one built on another model
  (``Compat.preference``); a ``gpu_match: sku`` engine runs only on the model it was built on;
- lean runtime: a version-compatible engine built without its lean runtime runs only where the deployment loads
  that TensorRT version's lean runtime (``--lean-runtime PATH``, its version checked from the file name).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from orchestrator import plugins
from orchestrator.contracts.store import Store, StoredArtifact
from orchestrator.core.artifact import EngineDescriptor
from orchestrator.core.fingerprint import DECLARED_PREFIX, InstalledRuntime, RunnerFingerprint, same_gpu_model
from orchestrator.core.model import PRECISIONS, RegistryConfig, cc_slug
from orchestrator.core.platform import PlatformError, normalize_platform, platform_mismatch, platform_text
from orchestrator.core.query import latest_version, select
from orchestrator.core.select import Compat, rank_candidates
from orchestrator.core.serving import is_serving, resolve_serving
from orchestrator.core.versions import parse_cc, parse_version, version_text
from orchestrator.digests import hash_file
from orchestrator.errors import ArtifactNotFoundError, IntegrityError, NoCompatibleEngineError, PluginError, UsageError


@dataclass(frozen=True)
class PullResult:
    path: Path | None
    metadata: dict[str, Any]
    reason: str  # why this artifact was chosen
    rejections: tuple[tuple[str, str], ...]
    platform: str = ""  # the deployment platform it was chosen for
    # the TensorRT version whose lean runtime the deployment must load for this engine (None: none), and the
    # library given for it (``--lean-runtime``)
    lean_runtime: str | None = None
    lean_runtime_path: Path | None = None


# ``libnvinfer_lean.so.10.13.3``, ``nvinfer_lean_10.dll``: the version a lean runtime library's file name carries
_LEAN_NAME = re.compile(r"nvinfer_lean(?:\.so)?[._-](?P<version>[0-9]+(?:\.[0-9]+)*)", re.IGNORECASE)
LEAN_HINT = ("pass --lean-runtime PATH: the lean runtime library the deployment loads (IRuntime.load_runtime), "
             "e.g. libnvinfer_lean.so.{version} or nvinfer_lean_{major}.dll")


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
    """``--runtime trt10.13``: the runtime (by its slug) and version the deployment will use."""

    runtime: str
    version: str

    @classmethod
    def parse(cls, text: str) -> RuntimeSpec:
        slugs = plugins.runtime_slugs()
        # the longest slug that prefixes the text wins (a slug may be a prefix of another)
        for slug in sorted(slugs, key=len, reverse=True):
            if text.startswith(slug):
                return cls(slugs[slug], text[len(slug):])
        known = ", ".join(f"{s}X.Y" for s in sorted(slugs)) or "none installed"
        raise UsageError(f"unknown --runtime {text!r}", hint=f"use auto, or one of: {known}")


# A deployment that runs each engine on the runtime (and release) that built it: ``pull --all`` run by an init
# container, which is not the machine that will load the engines.
AS_BUILT = RuntimeSpec("", "")


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


def _built_on_cc(meta: Mapping[str, Any]) -> str | None:
    gpus = _runner(meta).get("gpus") or []
    first = gpus[0] if gpus and isinstance(gpus[0], Mapping) else {}
    cc = first.get("compute_capability")
    return str(cc) if cc else None


def _declared_gpu(fp: RunnerFingerprint) -> str:
    return fp.gpus[0].name if fp.gpus else "none"


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
        built_cc = _built_on_cc(meta)
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


def _judge(fp: RunnerFingerprint, spec: RuntimeSpec | None, precision: str | None, profile: str | None,
           lean: LeanRuntime | None = None) -> Callable[[StoredArtifact], Compat]:
    def judge(art: StoredArtifact) -> Compat:
        meta = art.metadata
        if precision and meta["precision"] != precision:
            return Compat.no(f"precision {meta['precision']}, not {precision}")
        if profile and profile != meta.get("profile_set") and profile not in meta.get("profiles", []):
            return Compat.no(f"profile set {meta.get('profile_set')}, not {profile}")
        engine = EngineDescriptor.from_json(meta, runtime=_declared_runtime(meta))
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
        return lean_policy(gpu_model_policy(compat, meta, engine, local), engine, lean)

    return judge


def _precision(art: StoredArtifact) -> str:
    """The ranking's precision of a candidate: among engines that fit equally well, the most precise wins
    (``core.select.PRECISION_ORDER``), so `pull` without `--precision` is predictable."""
    return str(art.metadata.get("precision") or "")


def _declared_platform(text: str) -> str:
    try:
        return normalize_platform(text)
    except PlatformError as e:
        raise UsageError(f"--platform: {e}", hint=e.hint) from None


def _on_platform(fp: RunnerFingerprint, platform: str) -> RunnerFingerprint:
    """The runner as ``--platform`` declares it (os, arch and the L4T release of a Jetson)."""
    os_name, arch, *variant = platform.split("/")
    return replace(fp, os=os_name, arch=arch, l4t=variant[0].removeprefix("l4t") if variant else None)


def _declared_runtime(meta: dict[str, Any]) -> str | None:
    """Metadata written before artifacts recorded their runtime: the builder plugin says which it is."""
    if meta.get("runtime"):
        return None
    try:
        return plugins.runtime_name_of(str(meta["builder"]["name"]))
    except PluginError:
        return None


def check_precision(precision: str | None) -> None:
    """A ``UsageError`` for a precision no engine can have (with the close one suggested)."""
    if precision is not None and precision not in PRECISIONS:
        close = [p for p in PRECISIONS if p[:2] == precision[:2].lower()] if precision else []
        raise UsageError(f"unknown --precision {precision!r}",
                         hint=(f"did you mean {close[0]}? " if len(close) == 1 else "")
                         + f"one of: {', '.join(PRECISIONS)} (or leave it out: any precision)")


def candidates(store: Store, model: str, version: str | None) -> tuple[str, list[tuple[str, StoredArtifact]]]:
    """The published version of ``model`` asked for (None/"latest": the newest) and its records, one per build key,
    each with the id rejections name it by (address and short digest); ``ArtifactNotFoundError`` when none."""
    records = store.records(model)
    wanted = version if version not in (None, "latest") else latest_version((r.metadata for r in records), model)
    artifacts = select(records, lambda a: a.metadata, model=model, version=wanted) if wanted else []
    if not wanted or not artifacts:
        raise ArtifactNotFoundError(f"nothing published for model {model!r}"
                                    + (f" version {version}" if version not in (None, "latest") else ""),
                                    hint="see `orchestrate ls`")
    unique: dict[str, StoredArtifact] = {}
    for art in artifacts:
        unique.setdefault(art.metadata["build_key"], art)
    return wanted, [(f"{a.metadata['address']} ({a.metadata['engine']['digest'][:19]})", a) for a in unique.values()]


def judge(fp: RunnerFingerprint, spec: RuntimeSpec | None, precision: str | None = None, profile: str | None = None,
          lean: LeanRuntime | None = None) -> Callable[[StoredArtifact], Compat]:
    """How ``pull`` judges one candidate for the runner ``fp`` (declared or detected) and runtime ``spec`` (None:
    what is installed on ``fp``; ``AS_BUILT``: each engine's own runtime and release)."""
    return _judge(fp, spec, precision, profile, lean)


def fetch_verified(store: Store, chosen: StoredArtifact, path: Path) -> None:
    """Write ``chosen``'s engine to ``path`` through the store (which checks its sha256), then check that the
    store delivered that record and that the engine's own header agrees with its metadata (its runtime plugin's
    ``verify_engine``); an ``IntegrityError`` removes the file."""
    delivered = store.get(chosen.digest, path)
    engine = EngineDescriptor.from_json(chosen.metadata, runtime=_declared_runtime(chosen.metadata))
    problem = None
    if (delivered.digest, delivered.metadata.get("build_key")) != (chosen.digest, chosen.metadata["build_key"]):
        problem = (f"the store delivered {delivered.metadata.get('address')} ({delivered.digest[:19]}) for the "
                   f"selected {chosen.metadata['address']} ({chosen.digest[:19]})")
    problem = problem or plugins.runtime_for(engine).verify_engine(path, engine)
    if problem:
        path.unlink(missing_ok=True)
        raise IntegrityError(f"{chosen.metadata['address']}: engine check failed: {problem}",
                             hint="the stored engine does not match its metadata; republish it")


def pull(model: str, *, registry: RegistryConfig, version: str | None = None, precision: str | None = None,
         profile: str | None = None, gpu: str = "auto", runtime: str = "auto",
         out: str | os.PathLike[str] | None = None, fingerprint: RunnerFingerprint | None = None,
         platform: str | None = None, gpu_model: str | None = None,
         lean_runtime: str | os.PathLike[str] | None = None) -> PullResult:
    """Pick the published engine of ``model`` that can run here (or on ``gpu``/``gpu_model``/``runtime``/
    ``platform`` as declared; ``lean_runtime``: the lean runtime library the deployment loads), verify its digest
    and header, and write it to ``out``. Decided from metadata before any engine byte is read; when nothing fits,
    ``NoCompatibleEngineError`` lists every candidate with the reason it was rejected."""
    check_precision(precision)
    # the declared GPU is checked before anything is read: a misread one would pick an engine for another machine
    declared_gpu = RunnerFingerprint.parse_gpu_spec(gpu) if gpu != "auto" else None
    if gpu_model is not None:
        if declared_gpu is None:
            raise UsageError("--gpu-model declares the model of a declared GPU; with --gpu auto this machine's own "
                             "GPU model is used", hint=f"pass its compute capability too: --gpu sm89 --gpu-model "
                             f"{gpu_model!r}")
        declared_gpu = declared_gpu.with_gpu_model(gpu_model)
    spec = RuntimeSpec.parse(runtime) if runtime != "auto" else None
    lean = LeanRuntime.of(lean_runtime) if lean_runtime is not None else None
    declared_platform = _declared_platform(platform) if platform is not None else None
    fp = fingerprint or plugins.fingerprint()
    if declared_platform is not None:
        fp = _on_platform(fp, declared_platform)
    if declared_gpu is not None:
        fp = replace(fp, gpus=declared_gpu.gpus)
    store = plugins.open_store(registry)
    wanted, found = candidates(store, model, version)
    ranking = rank_candidates(found, _judge(fp, spec, precision, profile, lean), precision_of=_precision)
    if ranking.best is None:
        raise NoCompatibleEngineError(
            f"no published engine of {model} {wanted} can run on this runner ({fp.describe()}"
            + (f"; declared runtime {spec.runtime} {spec.version or '(any version)'}" if spec else "")
            + "). Candidates:",
            rejections=list(ranking.rejected),
            hint="build a target for this platform/GPU/runtime, or declare the deployment machine with "
                 "--platform/--gpu/--gpu-model/--runtime/--lean-runtime")
    chosen = ranking.best.item
    path = None
    if out is not None:
        path = Path(out)
        fetch_verified(store, chosen, path)
    needs = EngineDescriptor.from_json(chosen.metadata).target.lean_runtime
    return PullResult(path=path, metadata=chosen.metadata, reason=ranking.best.compat.reason,
                      rejections=ranking.explanations(), platform=fp.platform, lean_runtime=needs,
                      lean_runtime_path=lean.path if lean is not None and needs else None)


# -- deployments: several GPUs at once (``pull --all``, ``export triton``) ------------------------------------------

def deployment_runtime(text: str | None) -> RuntimeSpec:
    """What a deployment declares it runs: ``trt10.13`` / ``rtx1.7`` / ``ort1.31`` (as ``pull --runtime``), a
    serving stack (``triton:25.01``: the exact TensorRT it ships, ``core.serving``), or None: every engine on the
    runtime and release that built it (``AS_BUILT``)."""
    if text is None or text == "auto":
        return AS_BUILT
    if is_serving(text):
        return RuntimeSpec.parse(resolve_serving(text).runtime)  # trt10.8.0.43: the runtime it ships
    return RuntimeSpec.parse(text)


def safe_name(name: str, what: str = "model") -> str:
    """A published name used as one directory name: refused when it could leave the directory it goes in."""
    if not name or name in (".", "..") or any(c in name for c in "/\\\0") or not name.isprintable():
        raise UsageError(f"the {what} name {name!r} cannot be a directory name",
                         hint="rename the model in its manifest (no '/', '\\', control characters, '.' or '..') "
                              "and republish")
    return name


def declared_gpus(gpus: Sequence[str]) -> tuple[RunnerFingerprint, ...]:
    """``["sm75", "8.6", "none"]`` -> one declared GPU per distinct compute capability (``none``: no GPU), in CC
    order, no GPU first; a ``UsageError`` for anything that is not a compute capability."""
    found: dict[str, RunnerFingerprint] = {}
    for text in gpus:
        for part in str(text).split(","):
            if part.strip():
                declared = RunnerFingerprint.parse_gpu_spec(part.strip())
                found.setdefault(declared.compute_capability or "none", declared)
    if not found:
        raise UsageError("no GPU declared", hint="pass --gpus sm75,sm86 (compute capabilities)")
    return tuple(found[cc] for cc in sorted(found, key=lambda c: parse_cc(c) or (0, 0)))


def cc_label(cc: str | None) -> str:
    """``8.6`` -> ``sm86``; no GPU -> ``cpu``."""
    return cc_slug(cc) if cc else "cpu"


def file_digest(path: Path) -> str | None:
    """``sha256:<hex>`` of a file, or None when there is no such file."""
    return hash_file(str(path))[0] if path.is_file() else None


def install_verified(store: Store, chosen: StoredArtifact, path: Path) -> None:
    """``fetch_verified`` into a hidden file beside ``path``, renamed over it only once every check passed: a
    failed check leaves ``path`` as it was."""
    staging = path.with_name(f".{path.name}.partial")
    try:
        fetch_verified(store, chosen, staging)
        os.replace(staging, path)
    finally:
        staging.unlink(missing_ok=True)


@dataclass(frozen=True)
class MissingGpu:
    """A requested GPU no published engine of ``model`` can serve, with every candidate's reason."""

    model: str
    cc: str | None  # None: no GPU
    rejections: tuple[tuple[str, str], ...]

    @property
    def gpu(self) -> str:
        return cc_label(self.cc)


@dataclass(frozen=True)
class GpuChoice:
    """One model's engine chosen for a set of the requested GPUs (one engine may serve several)."""

    model: str
    artifact: StoredArtifact
    ccs: tuple[str | None, ...]
    reason: str

    @property
    def gpus(self) -> tuple[str, ...]:
        return tuple(cc_label(cc) for cc in self.ccs)


def choose_per_gpu(found: Sequence[tuple[str, StoredArtifact]], model: str, fp: RunnerFingerprint,
                   gpus: Sequence[RunnerFingerprint], spec: RuntimeSpec, precision: str | None,
                   profile: str | None, veto: Callable[[StoredArtifact], str | None] | None = None
                   ) -> tuple[tuple[GpuChoice, ...], tuple[MissingGpu, ...]]:
    """For each declared GPU, the engine ``pull --gpu`` would choose (``pull``'s judge and ranking; ``veto``: why
    the caller cannot use a candidate, asked first); one ``GpuChoice`` per distinct engine, in the order of the
    GPUs, and a ``MissingGpu`` for each GPU nothing serves."""
    chosen: dict[str, tuple[StoredArtifact, list[str | None], str]] = {}
    missing: list[MissingGpu] = []
    for gpu in gpus:
        judged = _judge(replace(fp, gpus=gpu.gpus), spec, precision, profile)

        def judge_one(art: StoredArtifact, judged: Callable[[StoredArtifact], Compat] = judged) -> Compat:
            why = veto(art) if veto is not None else None
            return Compat.no(why) if why else judged(art)

        ranking = rank_candidates(found, judge_one, precision_of=_precision)
        if ranking.best is None:
            missing.append(MissingGpu(model, gpu.compute_capability, ranking.rejected))
            continue
        art = ranking.best.item
        chosen.setdefault(art.digest, (art, [], ranking.best.compat.reason))[1].append(gpu.compute_capability)
    return (tuple(GpuChoice(model, art, tuple(ccs), why) for art, ccs, why in chosen.values()), tuple(missing))


def runtime_words(spec: RuntimeSpec) -> str:
    return (f"{spec.runtime} {spec.version or '(any version)'}" if spec.runtime
            else "each engine's own runtime and release")


def missing_error(missing: Sequence[MissingGpu], what: str, runtime: str) -> NoCompatibleEngineError:
    """Every GPU nothing serves, each candidate with its reason (as ``pull`` lists them)."""
    where = ", ".join(f"{m.model} on {m.gpu}" for m in missing)
    return NoCompatibleEngineError(
        f"no published engine can {what}: {where} (runtime: {runtime}). Candidates:",
        rejections=[(f"{m.model} on {m.gpu}: {who}", why) for m in missing for who, why in m.rejections],
        hint="build a target for those GPUs (or an ampere_plus one), leave those GPUs out, or declare another "
             "--runtime")


@dataclass(frozen=True)
class PulledEngine:
    """One engine file ``pull --all`` wrote (or found already there), and the GPUs it serves."""

    model: str
    model_version: str
    address: str
    digest: str
    size: int
    path: Path
    ccs: tuple[str | None, ...]
    status: str  # "written" | "unchanged"
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "model_version": self.model_version, "address": self.address,
                "digest": self.digest, "size": self.size, "path": str(self.path),
                "gpus": [cc_label(cc) for cc in self.ccs], "compute_capabilities": [cc for cc in self.ccs if cc],
                "status": self.status, "reason": self.reason}


@dataclass(frozen=True)
class PullAllResult:
    out: Path
    engines: tuple[PulledEngine, ...]
    runtime: str  # the declared runtime, in words

    @property
    def changed(self) -> bool:
        return any(e.status != "unchanged" for e in self.engines)

    def to_json(self) -> dict[str, Any]:
        return {"out": str(self.out), "runtime": self.runtime, "changed": self.changed,
                "engines": [e.to_json() for e in self.engines]}


def _engine_suffix(meta: Mapping[str, Any]) -> str:
    return Path(str(meta["engine"].get("filename") or "engine.plan")).suffix or ".engine"


def engine_filename(meta: Mapping[str, Any], ccs: Sequence[str | None]) -> str:
    """``model.sm75-sm86.plan``: the GPUs an engine serves, with the suffix of its published file."""
    return "model." + "-".join(cc_label(cc) for cc in ccs) + _engine_suffix(meta)


def pull_all(models: Sequence[str], *, registry: RegistryConfig, gpus: Sequence[str], out: str | os.PathLike[str],
             version: str | None = None, precision: str | None = None, profile: str | None = None,
             runtime: str | None = None, platform: str | None = None,
             fingerprint: RunnerFingerprint | None = None) -> PullAllResult:
    """For every model (none named: every model in the registry) and every declared GPU, the engine ``pull --gpu``
    would choose, verified and written once per engine as ``out/<model>/model.<gpus>.<suffix>``. ``runtime``:
    the deployment's (``trt10.13``, ``triton:25.01``), or None: each engine on the runtime and release that built
    it (an init container is not the machine that loads the engines). Everything is decided from metadata before
    anything is written: a GPU nothing serves raises ``NoCompatibleEngineError`` and writes nothing. A file that
    already holds the chosen engine (same sha256) is left alone."""
    check_precision(precision)
    declared = declared_gpus(gpus)
    spec = deployment_runtime(runtime)
    fp = fingerprint or plugins.fingerprint()
    if platform is not None:
        fp = _on_platform(fp, _declared_platform(platform))
    store = plugins.open_store(registry)
    names = list(dict.fromkeys(models)) or sorted({str(r.metadata["model"]["name"]) for r in store.records()})
    if not names:
        raise ArtifactNotFoundError("nothing is published in this registry", hint="see `orchestrate ls`")
    choices: list[GpuChoice] = []
    missing: list[MissingGpu] = []
    for model in names:
        safe_name(model)
        _, found = candidates(store, model, version)
        picked, lacking = choose_per_gpu(found, model, fp, declared, spec, precision, profile)
        choices += picked
        missing += lacking
    if missing:
        raise missing_error(missing, "serve every declared GPU", runtime_words(spec))
    root = Path(out)
    engines = []
    for choice in choices:
        meta = choice.artifact.metadata
        path = root / choice.model / engine_filename(meta, choice.ccs)
        status = "unchanged"
        if file_digest(path) != choice.artifact.digest:
            path.parent.mkdir(parents=True, exist_ok=True)
            install_verified(store, choice.artifact, path)
            status = "written"
        engines.append(PulledEngine(choice.model, str(meta["model"]["version"]), str(meta["address"]),
                                    choice.artifact.digest, int(meta["engine"]["size"]), path, choice.ccs, status,
                                    choice.reason))
    return PullAllResult(root, tuple(engines), runtime_words(spec))


def record_runtime(meta: dict[str, Any]) -> str:
    """The runtime plugin that runs a record's engine (records from before runtimes were recorded: its builder's)."""
    return str(meta.get("runtime") or _declared_runtime(meta) or meta["builder"]["name"])
