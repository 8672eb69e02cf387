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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from orchestrator import plugins
from orchestrator.contracts.store import StoredArtifact
from orchestrator.core.artifact import EngineDescriptor
from orchestrator.core.fingerprint import DECLARED_PREFIX, InstalledRuntime, RunnerFingerprint, same_gpu_model
from orchestrator.core.model import PRECISIONS, RegistryConfig
from orchestrator.core.platform import PlatformError, normalize_platform, platform_mismatch, platform_text
from orchestrator.core.query import latest_version, select
from orchestrator.core.select import Compat, rank_candidates
from orchestrator.core.versions import parse_version, version_text
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
        slugs = {}
        for name in plugins.names(plugins.RUNTIMES):
            try:
                slugs[plugins.runtime(name).slug] = name
            except PluginError:
                continue
        # the longest slug that prefixes the text wins (a slug may be a prefix of another)
        for slug in sorted(slugs, key=len, reverse=True):
            if text.startswith(slug):
                return cls(slugs[slug], text[len(slug):])
        known = ", ".join(f"{s}X.Y" for s in sorted(slugs)) or "none installed"
        raise UsageError(f"unknown --runtime {text!r}", hint=f"use auto, or one of: {known}")


def _declared(fp: RunnerFingerprint, spec: RuntimeSpec, engine: EngineDescriptor) -> RunnerFingerprint | str:
    """The runner as the deployment declares it, or why this candidate is out (another runtime)."""
    if engine.runtime != spec.runtime:
        return f"runs on {engine.runtime}, not the requested runtime {spec.runtime}"
    built = engine.builder_version
    if spec.version and not (built == spec.version or built.startswith(spec.version + ".")):
        # a version-compatible engine may still run on the newer runtime declared here
        version = spec.version
    else:
        version = built
    return fp.with_runtime(spec.runtime, InstalledRuntime(version, fp.runtime_features(spec.runtime)))


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


def pull(model: str, *, registry: RegistryConfig, version: str | None = None, precision: str | None = None,
         profile: str | None = None, gpu: str = "auto", runtime: str = "auto",
         out: str | os.PathLike[str] | None = None, fingerprint: RunnerFingerprint | None = None,
         platform: str | None = None, gpu_model: str | None = None,
         lean_runtime: str | os.PathLike[str] | None = None) -> PullResult:
    """Pick the published engine of ``model`` that can run here (or on ``gpu``/``gpu_model``/``runtime``/
    ``platform`` as declared; ``lean_runtime``: the lean runtime library the deployment loads), verify its digest
    and header, and write it to ``out``. Decided from metadata before any engine byte is read; when nothing fits,
    ``NoCompatibleEngineError`` lists every candidate with the reason it was rejected."""
    if precision is not None and precision not in PRECISIONS:
        close = [p for p in PRECISIONS if p[:2] == precision[:2].lower()] if precision else []
        raise UsageError(f"unknown --precision {precision!r}",
                         hint=(f"did you mean {close[0]}? " if len(close) == 1 else "")
                         + f"one of: {', '.join(PRECISIONS)} (or leave it out: any precision)")
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
    records = store.records(model)
    wanted = version if version not in (None, "latest") else latest_version((r.metadata for r in records), model)
    artifacts = select(records, lambda a: a.metadata, model=model, version=wanted) if wanted else []
    if not artifacts:
        raise ArtifactNotFoundError(f"nothing published for model {model!r}"
                                    + (f" version {version}" if version not in (None, "latest") else ""),
                                    hint="see `orchestrate ls`")
    unique: dict[str, StoredArtifact] = {}
    for art in artifacts:
        unique.setdefault(art.metadata["build_key"], art)
    candidates = [(f"{a.metadata['address']} ({a.metadata['engine']['digest'][:19]})", a) for a in unique.values()]
    ranking = rank_candidates(candidates, _judge(fp, spec, precision, profile, lean))
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
    needs = EngineDescriptor.from_json(chosen.metadata).target.lean_runtime
    return PullResult(path=path, metadata=chosen.metadata, reason=ranking.best.compat.reason,
                      rejections=ranking.explanations(), platform=fp.platform, lean_runtime=needs,
                      lean_runtime_path=lean.path if lean is not None and needs else None)
