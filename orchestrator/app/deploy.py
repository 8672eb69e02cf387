"""Deploy-time resolution: pick the published engine that can run on this runner (or the declared one), verify it
and write it out — or explain, candidate by candidate, why none can. Decided before any deserialization; each
artifact's own runtime plugin judges it, ``core.select`` ranks the answers."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from orchestrator import plugins
from orchestrator.contracts.store import StoredArtifact
from orchestrator.core.artifact import EngineDescriptor
from orchestrator.core.fingerprint import InstalledRuntime, RunnerFingerprint
from orchestrator.core.model import PRECISIONS, RegistryConfig
from orchestrator.core.query import latest_version, select
from orchestrator.core.select import Compat, rank_candidates
from orchestrator.errors import ArtifactNotFoundError, IntegrityError, NoCompatibleEngineError, PluginError, UsageError


@dataclass(frozen=True)
class PullResult:
    path: Path | None
    metadata: dict[str, Any]
    reason: str  # why this artifact was chosen
    rejections: tuple[tuple[str, str], ...]


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


def _judge(fp: RunnerFingerprint, spec: RuntimeSpec | None, precision: str | None, profile: str | None
           ) -> Callable[[StoredArtifact], Compat]:
    def judge(art: StoredArtifact) -> Compat:
        meta = art.metadata
        if precision and meta["precision"] != precision:
            return Compat.no(f"precision {meta['precision']}, not {precision}")
        if profile and profile != meta.get("profile_set") and profile not in meta.get("profiles", []):
            return Compat.no(f"profile set {meta.get('profile_set')}, not {profile}")
        try:
            engine = EngineDescriptor.from_json(meta, runtime=_declared_runtime(meta))
            runtime = plugins.runtime_for(engine)
        except PluginError as e:
            return Compat.no(f"its runtime plugin is not usable here: {e.message}")
        local = fp
        if spec is not None:
            declared = _declared(fp, spec, engine)
            if isinstance(declared, str):
                return Compat.no(declared)
            local = declared
        return runtime.can_run(engine, local)

    return judge


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
         out: str | os.PathLike[str] | None = None, fingerprint: RunnerFingerprint | None = None) -> PullResult:
    """Pick the published engine of ``model`` that can run here (or on ``gpu``/``runtime`` as declared), verify
    its digest and header, and write it to ``out``. Decided before any deserialization; when nothing fits,
    ``NoCompatibleEngineError`` lists every candidate with the reason it was rejected."""
    if precision is not None and precision not in PRECISIONS:
        close = [p for p in PRECISIONS if p[:2] == precision[:2].lower()] if precision else []
        raise UsageError(f"unknown --precision {precision!r}",
                         hint=(f"did you mean {close[0]}? " if len(close) == 1 else "")
                         + f"one of: {', '.join(PRECISIONS)} (or leave it out: any precision)")
    # the declared GPU is checked before anything is read: a misread one would pick an engine for another machine
    declared_gpu = RunnerFingerprint.parse_gpu_spec(gpu) if gpu != "auto" else None
    spec = RuntimeSpec.parse(runtime) if runtime != "auto" else None
    fp = fingerprint or plugins.fingerprint()
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
    ranking = rank_candidates(candidates, _judge(fp, spec, precision, profile))
    if ranking.best is None:
        raise NoCompatibleEngineError(
            f"no published engine of {model} {wanted} can run on this runner ({fp.describe()}"
            + (f"; declared runtime {spec.runtime} {spec.version or '(any version)'}" if spec else "")
            + "). Candidates:",
            rejections=list(ranking.rejected),
            hint="build a target for this GPU/runtime, or pass --gpu/--runtime for the deployment machine")
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
    return PullResult(path=path, metadata=chosen.metadata, reason=ranking.best.compat.reason,
                      rejections=ranking.explanations())
