"""Deploy-time resolution: pick the published engine that can run on this runner (or the declared one), verify it
and write it out, or explain, candidate by candidate, why none can. Decided from metadata alone, before any byte
of an engine is read: ``app.judge`` finds the candidates and judges each (its own runtime plugin answers),
``core.select`` ranks the answers.

``pull`` writes one engine; ``pull_all`` fills a deployment directory for several GPUs at once (what an init
container runs), and ``choose_per_gpu`` is the per-GPU choice ``export triton`` shares. Output paths are checked
before the registry is read and tried before any byte is written (``app.outputs``). A stripped engine
(``targets[].weights``) is refitted from its model version's weights blob and checked against its gate's recorded
outputs before it is written (``app.refit``; ``keep_stripped`` writes it as published).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from orchestrator import plugins
from orchestrator.app import outputs, signatures
from orchestrator.app.judge import (
    Candidate,
    CpuRule,
    LeanRuntime,
    RuntimeSpec,
    cc_label,
    check_precision,
    declared_platform,
    deployment_runtime,
    descriptor,
    explained,
    find_candidates,
    judge,
    on_platform,
)
from orchestrator.app.refit import Refitting
from orchestrator.contracts.store import Store, StoredArtifact
from orchestrator.core.artifact import EngineDescriptor
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.query import engines as engine_records
from orchestrator.core.select import Compat, rank_candidates
from orchestrator.core.versions import parse_cc
from orchestrator.digests import hash_file
from orchestrator.errors import ArtifactNotFoundError, IntegrityError, NoCompatibleEngineError, UsageError

ALLOW_CPU = "--allow-cpu"


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
    candidates: tuple[Candidate, ...] = ()  # the rejections, machine-readable (same order)
    refit: dict[str, Any] | None = None  # a stripped engine refitted at deployment: what was done and checked
    signature: signatures.SignatureCheck | None = None  # who signed it, when a signature was required


def fetch_verified(store: Store, chosen: StoredArtifact, path: Path) -> None:
    """Write ``chosen``'s engine to ``path`` through the store (which checks its sha256), then check that the
    store delivered that engine and that the engine's own header agrees with its metadata (its runtime plugin's
    ``verify_engine``); an ``IntegrityError`` removes the file. Two records may hold the very same bytes (an
    onnxruntime engine does not depend on the profile set, a stripped one not on the weights): the store may then
    answer with either record, and the bytes, checked by digest, are the selected engine's all the same."""
    delivered = store.get(chosen.digest, path)
    engine = descriptor(chosen.metadata)
    problem = None
    if delivered.digest != chosen.digest:
        problem = (f"the store delivered {delivered.metadata.get('address')} ({delivered.digest[:19]}) for the "
                   f"selected {chosen.metadata['address']} ({chosen.digest[:19]})")
    problem = problem or plugins.runtime_for(engine).verify_engine(path, engine)
    if problem:
        path.unlink(missing_ok=True)
        raise IntegrityError(f"{chosen.metadata['address']}: engine check failed: {problem}",
                             hint="the stored engine does not match its metadata; republish it")


def no_compatible(message: str, candidates: Sequence[Candidate], hint: str) -> NoCompatibleEngineError:
    """Exit 4: every candidate with its reason, in words and machine-readable (``--json``: ``candidates``)."""
    who = [(c.id if c.gpu is None else f"{c.metadata['model']['name']} on {c.gpu}: {c.id}", c.reason)
           for c in candidates]
    return NoCompatibleEngineError(message, rejections=who, hint=hint,
                                   candidates=[c.to_json() for c in candidates])


def _precision(art: StoredArtifact) -> str:
    """The ranking's precision of a candidate: among engines that fit equally well, the most precise wins
    (``core.select.PRECISION_ORDER``), so `pull` without `--precision` is predictable."""
    return str(art.metadata.get("precision") or "")


@dataclass(frozen=True)
class Deployment:
    """The machine a deployment verb chooses for, as declared (``--gpu``, ``--gpu-model``, ``--platform``,
    ``--runtime``, ``--lean-runtime``, ``--allow-cpu``); ``on(fingerprint)`` is this runner seen as that machine."""

    declared_gpu: RunnerFingerprint | None
    platform: str | None
    spec: RuntimeSpec | None
    lean: LeanRuntime | None
    cpu: CpuRule | None  # the rule for CPU engines when the GPU is declared (None: detected)

    def on(self, fp: RunnerFingerprint) -> RunnerFingerprint:
        if self.platform is not None:
            fp = on_platform(fp, self.platform)
        if self.declared_gpu is not None:
            fp = replace(fp, gpus=self.declared_gpu.gpus)
        return fp


def deployment(*, gpu: str = "auto", gpu_model: str | None = None, runtime: str = "auto", platform: str | None = None,
               lean_runtime: str | os.PathLike[str] | None = None, allow_cpu: bool = False) -> Deployment:
    """The declared deployment machine, every declaration checked before anything is read (a misread GPU would pick
    an engine for another machine)."""
    declared_gpu = RunnerFingerprint.parse_gpu_spec(gpu) if gpu != "auto" else None
    if gpu_model is not None:
        if declared_gpu is None:
            raise UsageError("--gpu-model declares the model of a declared GPU; with --gpu auto this machine's own "
                             "GPU model is used", hint=f"pass its compute capability too: --gpu sm89 --gpu-model "
                             f"{gpu_model!r}")
        declared_gpu = declared_gpu.with_gpu_model(gpu_model)
    spec = RuntimeSpec.parse(runtime) if runtime != "auto" else None
    lean = LeanRuntime.of(lean_runtime) if lean_runtime is not None else None
    where = declared_platform(platform) if platform is not None else None
    cpu = CpuRule(allow_cpu, ALLOW_CPU if allow_cpu else f"pass {ALLOW_CPU}") if declared_gpu is not None else None
    return Deployment(declared_gpu, where, spec, lean, cpu)


def pull(model: str, *, registry: plugins.RegistryRef, version: str | None = None, precision: str | None = None,
         profile: str | None = None, gpu: str = "auto", runtime: str = "auto",
         out: str | os.PathLike[str] | None = None, fingerprint: RunnerFingerprint | None = None,
         platform: str | None = None, gpu_model: str | None = None,
         lean_runtime: str | os.PathLike[str] | None = None, allow_cpu: bool = False,
         require_signature: str | None = None, keep_stripped: bool = False) -> PullResult:
    """Pick the published engine of ``model`` that can run here (or on ``gpu``/``gpu_model``/``runtime``/
    ``platform`` as declared; ``lean_runtime``: the lean runtime library the deployment loads), verify its digest
    and header, and write it to ``out``. A declared GPU is served a CPU engine only with ``allow_cpu``. Decided
    from metadata before any engine byte is read; when nothing fits, ``NoCompatibleEngineError`` lists every
    candidate with the reason it was rejected (``candidates``: machine-readable). ``require_signature`` (else the
    registry's ``signing.require``): the chosen engine's signed provenance must verify against it before anything
    is written (``app.signatures``). A stripped engine is refitted and checked before it is written
    (``app.refit``), unless ``keep_stripped``."""
    check_precision(precision)
    trusted = signatures.required(require_signature, registry)
    if trusted is not None:
        signatures.trusted_signer(trusted)  # a flag no signer takes is refused before the registry is read
    where = deployment(gpu=gpu, gpu_model=gpu_model, runtime=runtime, platform=platform, lean_runtime=lean_runtime,
                       allow_cpu=allow_cpu)
    path = outputs.check_file(out) if out is not None else None
    fp = where.on(fingerprint or plugins.fingerprint())
    spec, lean, cpu = where.spec, where.lean, where.cpu
    store = plugins.open_existing_store(registry)
    wanted, found = find_candidates(store, model, version, precision, profile)
    ranking = rank_candidates(found, judge(fp, spec, lean=lean, cpu=cpu), precision_of=_precision)
    if ranking.best is None:
        raise no_compatible(
            f"no published engine of {model} {wanted} can run on this runner ({fp.describe()}"
            + (f"; declared runtime {spec.runtime} {spec.version or '(any version)'}" if spec else "")
            + "). Candidates:", explained(ranking.rejected, found),
            hint="build a target for this platform/GPU/runtime (or build it here: pull --build-on-miss --manifest M), "
                 "or declare the deployment machine with "
                 "--platform/--gpu/--gpu-model/--runtime/--lean-runtime"
                 + (f" ({ALLOW_CPU} accepts a CPU engine for the declared GPU)" if cpu and not allow_cpu else ""))
    chosen = ranking.best.item
    signed = signatures.verify(store, chosen, trusted) if trusted is not None else None
    refitting = Refitting(store, keep_stripped)
    if path is not None:
        created = outputs.probe_file(path, "-o", str(out))
        try:
            if refitting.refits(chosen):
                install_verified(store, chosen, path, refitting)
            else:
                fetch_verified(store, chosen, path)
        except BaseException:
            outputs.remove_empty(created)
            raise
        finally:
            refitting.close()
    needs = EngineDescriptor.from_json(chosen.metadata).target.lean_runtime
    return PullResult(path=path, metadata=chosen.metadata, reason=ranking.best.compat.reason,
                      rejections=ranking.explanations(), platform=fp.platform, lean_runtime=needs,
                      lean_runtime_path=lean.path if lean is not None and needs else None,
                      candidates=explained(ranking.explanations(), found), signature=signed,
                      refit=refitting.done.get(chosen.digest))


# -- deployments: several GPUs at once (``pull --all``, ``export triton``) ------------------------------------------

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


def cpu_rule(gpus: Sequence[RunnerFingerprint]) -> CpuRule:
    """CPU engines for declared GPUs (``pull --all``, ``export triton``): accepted when the deployment declares
    ``none`` among its GPUs too (it runs on machines without a GPU, so a CPU engine is what it asked for)."""
    if any(not g.has_gpu for g in gpus):
        return CpuRule(True, "none among --gpus")
    labels = ",".join(cc_label(g.compute_capability) for g in gpus)
    return CpuRule(False, f"add none to --gpus (--gpus {labels},none)")


def file_digest(path: Path) -> str | None:
    """``sha256:<hex>`` of a file, or None when there is no such file."""
    return hash_file(str(path))[0] if path.is_file() else None


def install_verified(store: Store, chosen: StoredArtifact, path: Path, refitting: Refitting | None = None) -> None:
    """``fetch_verified`` into a hidden file beside ``path``, renamed over it only once every check passed (a
    stripped engine refitted and checked first, ``app.refit``): a failed check leaves ``path`` as it was."""
    staging = path.with_name(f".{path.name}.partial")
    own = refitting is None
    refitting = refitting or Refitting(store)
    try:
        fetch_verified(store, chosen, staging)
        refitting.install(staging, chosen, path)
    finally:
        staging.unlink(missing_ok=True)
        if own:
            refitting.close()


def holds(path: Path, chosen: StoredArtifact, refitting: Refitting) -> bool:
    """``path`` already holds the engine ``chosen`` as it would be written (a refitted engine is written again:
    its bytes are not the published ones)."""
    return not refitting.refits(chosen) and file_digest(path) == chosen.digest


@dataclass(frozen=True)
class MissingGpu:
    """A requested GPU no published engine of ``model`` can serve, with every candidate's reason."""

    model: str
    cc: str | None  # None: no GPU
    candidates: tuple[Candidate, ...]

    @property
    def gpu(self) -> str:
        return cc_label(self.cc)

    @property
    def rejections(self) -> tuple[tuple[str, str], ...]:
        return tuple((c.id, c.reason) for c in self.candidates)


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
                   gpus: Sequence[RunnerFingerprint], spec: RuntimeSpec,
                   veto: Callable[[StoredArtifact], str | None] | None = None
                   ) -> tuple[tuple[GpuChoice, ...], tuple[MissingGpu, ...]]:
    """For each declared GPU, the engine ``pull --gpu`` would choose (``pull``'s judge and ranking, CPU engines
    only when ``none`` is declared too; ``veto``: why the caller cannot use a candidate, asked first); one
    ``GpuChoice`` per distinct engine, in the order of the GPUs, and a ``MissingGpu`` for each GPU nothing
    serves."""
    chosen: dict[str, tuple[StoredArtifact, list[str | None], str]] = {}
    missing: list[MissingGpu] = []
    cpu = cpu_rule(gpus)
    for gpu in gpus:
        judged = judge(replace(fp, gpus=gpu.gpus), spec, cpu=cpu)

        def judge_one(art: StoredArtifact, judged: Callable[[StoredArtifact], Compat] = judged) -> Compat:
            why = veto(art) if veto is not None else None
            return Compat.no(why) if why else judged(art)

        ranking = rank_candidates(found, judge_one, precision_of=_precision)
        if ranking.best is None:
            label = cc_label(gpu.compute_capability)
            missing.append(MissingGpu(model, gpu.compute_capability, explained(ranking.rejected, found, label)))
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
    return no_compatible(
        f"no published engine can {what}: {where} (runtime: {runtime}). Candidates:",
        [c for m in missing for c in m.candidates],
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
    status: str  # "written" | "unchanged" | "refitted"
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
    blobs: int = 0  # weights blobs fetched to refit stripped engines (once per model version's blob)
    signatures: tuple[signatures.SignatureCheck, ...] = ()  # who signed each engine, when signatures were required

    @property
    def changed(self) -> bool:
        return any(e.status != "unchanged" for e in self.engines)

    def to_json(self) -> dict[str, Any]:
        return {"out": str(self.out), "runtime": self.runtime, "changed": self.changed,
                "engines": [e.to_json() for e in self.engines], "weights_blobs_fetched": self.blobs,
                "signatures": [s.to_json() for s in self.signatures]}


def _engine_suffix(meta: Mapping[str, Any]) -> str:
    return Path(str(meta["engine"].get("filename") or "engine.plan")).suffix or ".engine"


def engine_filename(meta: Mapping[str, Any], ccs: Sequence[str | None]) -> str:
    """``model.sm75-sm86.plan``: the GPUs an engine serves, with the suffix of its published file."""
    return "model." + "-".join(cc_label(cc) for cc in ccs) + _engine_suffix(meta)


def pull_all(models: Sequence[str], *, registry: plugins.RegistryRef, gpus: Sequence[str], out: str | os.PathLike[str],
             version: str | None = None, precision: str | None = None, profile: str | None = None,
             runtime: str | None = None, platform: str | None = None,
             fingerprint: RunnerFingerprint | None = None, require_signature: str | None = None,
             keep_stripped: bool = False) -> PullAllResult:
    """For every model (none named: every model in the registry) and every declared GPU, the engine ``pull --gpu``
    would choose, verified and written once per engine as ``out/<model>/model.<gpus>.<suffix>``. ``runtime``:
    the deployment's (``trt10.13``, ``triton:25.01``), or None: each engine on the runtime and release that built
    it (an init container is not the machine that loads the engines). A CPU engine serves the declared GPUs only
    when ``none`` is among ``gpus``. Everything is decided from metadata before anything is written: a GPU nothing
    serves raises ``NoCompatibleEngineError`` and writes nothing. A file that already holds the chosen engine
    (same sha256) is left alone. ``require_signature``: as ``pull``'s, every chosen engine checked before any is
    written. Stripped engines are refitted and checked (``app.refit``: each weights blob fetched once), unless
    ``keep_stripped``."""
    check_precision(precision)
    trusted = signatures.required(require_signature, registry)
    if trusted is not None:
        signatures.trusted_signer(trusted)
    declared = declared_gpus(gpus)
    spec = deployment_runtime(runtime)
    root = outputs.check_directory(out, "-o")
    fp = fingerprint or plugins.fingerprint()
    if platform is not None:
        fp = on_platform(fp, declared_platform(platform))
    store = plugins.open_existing_store(registry)
    names = list(dict.fromkeys(models)) or sorted({str(r.metadata["model"]["name"])
                                                   for r in engine_records(store.records(), lambda a: a.metadata)})
    if not names:
        raise ArtifactNotFoundError("nothing is published in this registry", hint="see `orchestrate ls`")
    choices: list[GpuChoice] = []
    missing: list[MissingGpu] = []
    for model in names:
        safe_name(model)
        _, found = find_candidates(store, model, version, precision, profile)
        picked, lacking = choose_per_gpu(found, model, fp, declared, spec)
        choices += picked
        missing += lacking
    if missing:
        raise missing_error(missing, "serve every declared GPU", runtime_words(spec))
    checks = signatures.verify_all(store, [c.artifact for c in choices], trusted)
    # every directory first: one that cannot be made stops the pull before any engine is written
    directories = sorted({root / c.model for c in choices})
    created = list(dict.fromkeys(p for d in directories for p in (d, *d.parents) if not p.exists()))
    outputs.make_directories(directories, "-o", out)
    engines = []
    refitting = Refitting(store, keep_stripped)
    written = False
    try:
        for choice in choices:
            meta = choice.artifact.metadata
            path = root / choice.model / engine_filename(meta, choice.ccs)
            status = "unchanged"
            if not holds(path, choice.artifact, refitting):
                install_verified(store, choice.artifact, path, refitting)
                status = "refitted" if refitting.refits(choice.artifact) else "written"
            engines.append(PulledEngine(choice.model, str(meta["model"]["version"]), str(meta["address"]),
                                        choice.artifact.digest, path.stat().st_size, path, choice.ccs, status,
                                        choice.reason))
        written = True
    finally:
        refitting.close()
        if not written:  # a refused engine (integrity, a failed refit): the folders made for it go too
            outputs.remove_empty(created)
    return PullAllResult(root, tuple(engines), runtime_words(spec), refitting.blobs_fetched, checks)
