"""``export triton``: published engines -> a Triton Inference Server model repository.

Per model, one directory ``repo/<model>/`` with ``config.pbtxt`` and one integer version directory per published
model version (Triton's versions are integers: the mapping from the record's ``model.version`` lives in
``repo/<model>/orchestrate-versions.json``, which Triton ignores as it ignores every non-numeric entry)::

    repo/ocr-det/config.pbtxt
    repo/ocr-det/orchestrate-versions.json
    repo/ocr-det/1/model.sm75.plan                  one file per distinct engine, named by the GPUs it serves
    repo/ocr-det/1/model.sm75.plan.provenance.json  where it came from: record, digest, builder, gates

For each requested GPU the engine is the one ``pull --gpu smXY --runtime ...`` would choose (``app.deploy``'s
judge and ranking: an exact-CC engine before an ``ampere_plus`` one, which serves every CC >= 8.0 nothing exact
serves). TensorRT engines become ``platform: "tensorrt_plan"`` with ``cc_model_filenames`` (Triton picks the file
by the GPU's compute capability); onnxruntime engines ``backend: "onnxruntime"`` with ``model.onnx``. Triton's
tensorrt_plan platform loads TensorRT plans, not TensorRT-RTX ones. One Triton server runs one TensorRT release:
without ``runtime`` the newest TensorRT release published for the model is the one declared.

Everything is decided from metadata before anything is written; every engine is fetched through the store
(sha256 checked), its header checked by its runtime plugin, and renamed into place only then. A re-export with
nothing changed writes nothing.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from orchestrator import plugins
from orchestrator.app import outputs
from orchestrator.app.deploy import (
    GpuChoice,
    MissingGpu,
    choose_per_gpu,
    declared_gpus,
    holds,
    install_verified,
    missing_error,
    safe_name,
)
from orchestrator.app.judge import (
    RuntimeSpec,
    cc_label,
    check_precision,
    deployment_runtime,
    find_candidates,
    record_runtime,
)
from orchestrator.app.refit import Refitting
from orchestrator.app.signatures import SignatureCheck, required, trusted_signer, verify_all
from orchestrator.atomic import write_bytes_atomic
from orchestrator.contracts.runtime import TritonBackend
from orchestrator.contracts.store import Store, StoredArtifact
from orchestrator.core.fingerprint import InstalledRuntime, RunnerFingerprint
from orchestrator.core.serving import is_serving
from orchestrator.core.versions import parse_cc, parse_version
from orchestrator.errors import UsageError

STATE_FILE = "orchestrate-versions.json"
# numpy dtype names (metadata ``io``) -> Triton's DataType (model_config.proto)
TRITON_TYPES = {"bool": "TYPE_BOOL", "uint8": "TYPE_UINT8", "uint16": "TYPE_UINT16", "uint32": "TYPE_UINT32",
                "uint64": "TYPE_UINT64", "int8": "TYPE_INT8", "int16": "TYPE_INT16", "int32": "TYPE_INT32",
                "int64": "TYPE_INT64", "float16": "TYPE_FP16", "float32": "TYPE_FP32", "float64": "TYPE_FP64",
                "bfloat16": "TYPE_BF16", "object": "TYPE_STRING", "str": "TYPE_STRING", "bytes": "TYPE_STRING"}
NO_IO = "published before I/O was recorded (its metadata has no io): Triton needs the tensors; republish it"
FileStatus = Literal["written", "unchanged", "removed"]


@dataclass(frozen=True)
class VersionPolicy:
    """``latest`` / ``latest:N`` / ``all`` / ``specific:1,3``: which version directories Triton serves."""

    kind: Literal["latest", "all", "specific"]
    numbers: tuple[int, ...] = (1,)  # latest: (N,); specific: the versions

    @classmethod
    def parse(cls, text: str) -> VersionPolicy:
        kind, _, arg = text.strip().partition(":")
        try:
            numbers = tuple(int(p) for p in arg.split(",") if p.strip()) if arg else ()
        except ValueError:
            numbers = (0,)
        if kind == "latest" and len(numbers) <= 1 and all(n > 0 for n in numbers):
            return cls("latest", numbers or (1,))
        if kind == "all" and not arg:
            return cls("all", ())
        if kind == "specific" and numbers and all(n > 0 for n in numbers):
            return cls("specific", numbers)
        raise UsageError(f"unknown --version-policy {text!r}",
                         hint="latest, latest:N (the N newest), all, or specific:1,3 (Triton version numbers)")

    def pbtxt(self) -> str:
        if self.kind == "latest":
            return f"version_policy {{ latest {{ num_versions: {self.numbers[0]} }} }}"
        if self.kind == "all":
            return "version_policy { all { } }"
        return f"version_policy {{ specific {{ versions: [ {', '.join(str(n) for n in self.numbers)} ] }} }}"

    def text(self) -> str:
        if self.kind == "latest":
            return "latest" if self.numbers == (1,) else f"latest:{self.numbers[0]}"
        return "all" if self.kind == "all" else "specific:" + ",".join(str(n) for n in self.numbers)


@dataclass(frozen=True)
class ExportedFile:
    path: Path
    status: FileStatus
    digest: str | None = None  # engines: the engine digest
    size: int | None = None
    ccs: tuple[str, ...] = ()  # the compute capabilities it serves (engines)
    address: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "status": self.status, "digest": self.digest, "size": self.size,
                "compute_capabilities": list(self.ccs), "gpus": [cc_label(c) for c in self.ccs],
                "address": self.address}


@dataclass(frozen=True)
class TritonModel:
    name: str
    model_version: str  # the record's model.version
    version: int | None  # its Triton version directory (None: nothing exported)
    directory: Path
    backend: str  # the Triton platform or backend: "tensorrt_plan", "onnxruntime"
    runtime: str  # the runtime the engines were chosen for, in words
    files: tuple[ExportedFile, ...]
    missing: tuple[MissingGpu, ...]

    @property
    def unchanged(self) -> bool:
        return all(f.status == "unchanged" for f in self.files)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "model_version": self.model_version, "version": self.version,
                "directory": str(self.directory), "backend": self.backend, "runtime": self.runtime,
                "unchanged": self.unchanged, "files": [f.to_json() for f in self.files],
                "missing": [{"gpu": m.gpu, "compute_capability": m.cc,
                             "rejected": [{"artifact": a, "reason": r} for a, r in m.rejections]}
                            for m in self.missing]}


@dataclass(frozen=True)
class TritonExport:
    repo: Path
    models: tuple[TritonModel, ...]
    version_policy: str
    blobs: int = 0  # weights blobs fetched to refit stripped engines (once per model version's blob)
    signatures: tuple[SignatureCheck, ...] = ()  # who signed each engine, when signatures were required

    @property
    def unchanged(self) -> bool:
        return all(m.unchanged for m in self.models)

    @property
    def missing(self) -> tuple[MissingGpu, ...]:
        return tuple(m for model in self.models for m in model.missing)

    def to_json(self) -> dict[str, Any]:
        return {"repo": str(self.repo), "version_policy": self.version_policy, "unchanged": self.unchanged,
                "models": [m.to_json() for m in self.models], "weights_blobs_fetched": self.blobs,
                "signatures": [s.to_json() for s in self.signatures]}


# -- protobuf text format -----------------------------------------------------------------------------------------

def pbtxt_string(text: str) -> str:
    """A protobuf text-format string literal: printable ASCII as is, quotes and backslashes escaped, every other
    byte of the UTF-8 encoding as an octal escape (so no name can end the literal or the file)."""
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        if char in "\"\\":
            out.append("\\" + char)
        elif 0x20 <= byte < 0x7F:
            out.append(char)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def _tensors(field: str, tensors: Sequence[dict[str, Any]], model: str) -> list[str]:
    lines = [f"{field} ["]
    for i, tensor in enumerate(tensors):
        dtype = str(tensor["dtype"])
        if dtype not in TRITON_TYPES:
            raise UsageError(f"{model}: {field} {tensor['name']!r} has dtype {dtype!r}, which Triton has no type for",
                             hint=f"Triton's types: {', '.join(sorted(TRITON_TYPES))}")
        dims = ", ".join(str(int(d)) for d in tensor["shape"])
        lines += ["  {", f"    name: {pbtxt_string(str(tensor['name']))}", f"    data_type: {TRITON_TYPES[dtype]}",
                  f"    dims: [ {dims} ]", "  }" + ("," if i < len(tensors) - 1 else "")]
    return lines + ["]"]


def render_config(*, name: str, backend: TritonBackend, io: dict[str, Any], kind: str, profiles: int,
                  policy: VersionPolicy, default_file: str, cc_files: Sequence[tuple[str, str]]) -> str:
    """``config.pbtxt`` (model_config.proto in text format). ``max_batch_size: 0``: the engines have explicit batch
    dims; several optimization profiles are listed in the instance group (``ModelInstanceGroup.profile``)."""
    lines = ["# generated by `orchestrate export triton`; do not edit: re-run the export",
             f"name: {pbtxt_string(name)}"]
    lines.append(f"platform: {pbtxt_string(backend.platform)}" if backend.platform
                 else f"backend: {pbtxt_string(backend.backend or '')}")
    lines += ["max_batch_size: 0", policy.pbtxt()]
    lines += _tensors("input", io["inputs"], name) + _tensors("output", io["outputs"], name)
    group = ["instance_group [", "  {", "    count: 1", f"    kind: {kind}"]
    if profiles > 1:
        group.append("    profile: [ " + ", ".join(pbtxt_string(str(i)) for i in range(profiles)) + " ]")
    lines += [*group, "  }", "]", f"default_model_filename: {pbtxt_string(default_file)}"]
    if cc_files:
        lines.append("cc_model_filenames [")
        lines += [f"  {{ key: {pbtxt_string(cc)} value: {pbtxt_string(f)} }}" + ("," if i < len(cc_files) - 1 else "")
                  for i, (cc, f) in enumerate(cc_files)]
        lines.append("]")
    return "\n".join(lines) + "\n"


# -- planning (metadata only) -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Plan:
    model: str
    model_version: str
    backend: TritonBackend
    runtime: str
    choices: tuple[GpuChoice, ...]
    missing: tuple[MissingGpu, ...]


def _runtime_for(found: Sequence[tuple[str, StoredArtifact]], model: str, runtime: str | None,
                 backends: dict[str, TritonBackend]) -> tuple[RuntimeSpec, str]:
    """The runtime the engines are chosen for, and in words: the one given, else the newest release published for
    the model of the first runtime Triton serves per compute capability (one Triton server runs one TensorRT), else
    of any runtime Triton serves (the runtime plugins' ``triton`` attribute)."""
    if runtime is not None:
        spec = deployment_runtime(runtime)
        if spec.runtime not in backends:
            served = ", ".join(f"{n} ({b.kind})" for n, b in backends.items()) or "none installed"
            raise UsageError(f"--runtime {runtime!r}: Triton does not serve {spec.runtime} engines",
                             hint=f"Triton serves: {served}; pass one of those runtimes or a serving stack such as "
                                  "triton:25.01")
        words = f"{spec.runtime} {spec.version or '(any version)'}"
        return spec, words + (f" ({runtime})" if is_serving(runtime) else "")
    for family in sorted(backends, key=lambda n: not backends[n].per_compute_capability):
        versions = [str(a.metadata["builder"]["version"]) for _, a in found if record_runtime(a.metadata) == family]
        if versions:
            newest = max(versions, key=parse_version)
            return RuntimeSpec(family, newest), f"{family} {newest} (the newest published; --runtime to choose)"
    served = ", ".join(f"{n} ({b.kind})" for n, b in backends.items()) or "none installed"
    raise UsageError(f"{model}: no engine Triton can serve is published",
                     hint=f"Triton serves: {served} (not TensorRT-RTX engines); publish a target of one of those")


def _only_one(found: Sequence[tuple[str, StoredArtifact]], spec: RuntimeSpec, model: str, precision: str | None,
              profile: str | None) -> None:
    """One Triton model serves one precision and profile set: say so when the records leave a choice."""
    mine = [a.metadata for _, a in found if record_runtime(a.metadata) == spec.runtime]
    for field, given, flag in (("precision", precision, "--precision"), ("profile_set", profile, "--profile")):
        values = sorted({str(m[field]) for m in mine})
        if given is None and len(values) > 1:
            raise UsageError(f"{model}: engines of {len(values)} {field.replace('_', ' ')}s are published "
                             f"({', '.join(values)}); one Triton model serves one", hint=f"pass {flag} {values[0]}")


def _auto_gpus(found: Sequence[tuple[str, StoredArtifact]], spec: RuntimeSpec, backend: TritonBackend) -> list[str]:
    """``--gpus auto``: the CCs the published engines of a per-CC runtime (TensorRT) name (an ampere_plus engine
    names the CC it was built for; the others it serves cannot be listed); one file for every GPU: no GPU."""
    if not backend.per_compute_capability:
        return ["none"]
    ccs = {cc for _, a in found if record_runtime(a.metadata) == spec.runtime
           for cc in a.metadata["target"]["compute_capabilities"]}
    return sorted(ccs, key=lambda c: parse_cc(c) or (0, 0))


def _veto(art: StoredArtifact) -> str | None:
    return None if art.metadata.get("io") else NO_IO


def _plan(store: Store, model: str, *, fp: RunnerFingerprint, gpus: str | Sequence[str], version: str | None,
          precision: str | None, profile: str | None, runtime: str | None) -> _Plan:
    wanted, found = find_candidates(store, model, version, precision, profile)
    backends = plugins.triton_backends()
    spec, words = _runtime_for(found, model, runtime, backends)
    backend = backends[spec.runtime]
    _only_one(found, spec, model, precision, profile)
    requested = _auto_gpus(found, spec, backend) if isinstance(gpus, str) and gpus == "auto" else list(
        [gpus] if isinstance(gpus, str) else gpus)
    if not requested:
        raise UsageError(f"{model}: --gpus auto found no compute capability its {spec.runtime} engines name",
                         hint="pass --gpus sm80,sm86,... (ampere_plus engines serve every CC >= 8.0)")
    if backend.features:
        # what Triton's backend offers (onnxruntime: its CPU and CUDA execution providers), not what this machine has
        fp = fp.with_runtime(spec.runtime, InstalledRuntime(spec.version or "0", backend.features))
    choices, missing = choose_per_gpu(found, model, fp, declared_gpus(requested), spec, _veto)
    if not backend.per_compute_capability and len(choices) > 1:
        # one file for every GPU (the onnxruntime backend loads one model.onnx)
        merged = GpuChoice(model, choices[0].artifact, tuple(cc for c in choices for cc in c.ccs), choices[0].reason)
        choices = (merged,)
    return _Plan(model, wanted, backend, words, choices, missing)


# -- writing ------------------------------------------------------------------------------------------------------

def _load_state(directory: Path) -> dict[str, int]:
    path = directory / STATE_FILE
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
        return {str(k): int(v) for k, v in data["versions"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise UsageError(f"{path}: unreadable ({type(e).__name__}: {e})",
                         hint="restore it, or remove the model's directory and export again") from e


def _state_bytes(state: dict[str, int]) -> bytes:
    ordered = dict(sorted(state.items(), key=lambda kv: kv[1]))
    return (json.dumps({"schema": 1, "versions": ordered}, indent=2) + "\n").encode()


def _version_number(directory: Path, state: dict[str, int], model_version: str) -> int:
    if model_version in state:
        return state[model_version]
    taken = set(state.values())
    if directory.is_dir():
        taken |= {int(p.name) for p in directory.iterdir() if p.is_dir() and p.name.isdigit()}
    return max(taken, default=0) + 1


def _write_if_changed(path: Path, data: bytes) -> FileStatus:
    if path.is_file() and path.read_bytes() == data:
        return "unchanged"
    write_bytes_atomic(path, data)
    return "written"


def _provenance(art: StoredArtifact, ccs: Sequence[str]) -> bytes:
    meta = art.metadata
    gates = meta.get("gates") or {}
    record = {
        "address": meta["address"], "build_key": meta["build_key"], "record_key": meta.get("record_key"),
        "model": meta["model"], "precision": meta["precision"], "profile_set": meta["profile_set"],
        "engine": {"digest": meta["engine"]["digest"], "size": meta["engine"]["size"]},
        "builder": meta["builder"], "runtime": record_runtime(meta), "target": meta["target"],
        "serves_compute_capabilities": list(ccs),
        "gates": {"status": gates.get("status"), "ungated_publish_allowed": gates.get("ungated_publish_allowed"),
                  "parity": gates.get("parity"), "benchmark": gates.get("benchmark")},
        "published_at": meta.get("published_at"), "created_at": meta.get("created_at"),
    }
    return (json.dumps(record, indent=2, sort_keys=True) + "\n").encode()


def _files(plan: _Plan) -> list[tuple[str, GpuChoice]]:
    """(file name, choice) per engine: one file for every GPU (``model.onnx``), or one per engine named by the GPUs
    it serves (``model.sm75.plan``, ``model.sm80-sm86.plan``)."""
    name = plan.backend.filename
    if not plan.backend.per_compute_capability:
        return [(name, plan.choices[0])]
    stem, dot, suffix = name.partition(".")
    return [(f"{stem}." + "-".join(c.gpus) + dot + suffix, c) for c in plan.choices]


def _ours(name: str) -> bool:
    """A file an earlier export wrote in a version directory (and may remove when no longer wanted)."""
    return name.startswith("model.") and (name.endswith((".plan", ".onnx", ".provenance.json")))


def _write(store: Store, plan: _Plan, repo: Path, policy: VersionPolicy, refitting: Refitting) -> TritonModel:
    directory = repo / plan.model
    state = _load_state(directory)
    number = _version_number(directory, state, plan.model_version)
    vdir = directory / str(number)
    created = [p for p in (directory, vdir) if not p.exists()]
    parents = [p for p in directory.parents if not p.exists()]  # the repository itself, when this export makes it
    files: list[ExportedFile] = []
    wanted = _files(plan)
    try:
        outputs.make_directories([vdir], "--repo", repo)
        keep = {name for name, _ in wanted} | {f"{name}.provenance.json" for name, _ in wanted}
        for name, choice in wanted:
            art, ccs = choice.artifact, tuple(cc for cc in choice.ccs if cc)
            path = vdir / name
            status: FileStatus = "unchanged"
            if not holds(path, art, refitting):  # a stripped engine is refitted and checked first (app.refit)
                install_verified(store, art, path, refitting)
                status = "written"
            files.append(ExportedFile(path, status, art.digest, path.stat().st_size, ccs,
                                      str(art.metadata["address"])))
            prov = vdir / f"{name}.provenance.json"
            files.append(ExportedFile(prov, _write_if_changed(prov, _provenance(art, ccs))))
        for stale in sorted(vdir.iterdir()):
            if stale.is_file() and _ours(stale.name) and stale.name not in keep:
                stale.unlink()
                files.append(ExportedFile(stale, "removed"))
        first = wanted[0][1].artifact.metadata
        if not plan.backend.per_compute_capability:
            kind = "KIND_CPU" if first["target"]["device"] == "cpu" else "KIND_GPU"
            default, cc_files = plan.backend.filename, []
        else:
            kind = "KIND_GPU"
            cc_files = sorted(((cc, name) for name, c in wanted for cc in c.ccs if cc),
                              key=lambda pair: parse_cc(pair[0]) or (0, 0))
            # a GPU no cc_model_filenames entry names gets the hardware-compatible engine, if one is exported
            portable = [name for name, c in wanted if c.artifact.metadata["target"]["hardware_compatibility"]
                        == "ampere_plus"]
            default = portable[0] if portable else cc_files[0][1]
        profiles = len((first.get("key_inputs") or {}).get("profiles") or first.get("profiles") or [None])
        config = render_config(name=plan.model, backend=plan.backend, io=first["io"], kind=kind, profiles=profiles,
                               policy=policy, default_file=default, cc_files=cc_files)
        files.append(ExportedFile(directory / "config.pbtxt",
                                  _write_if_changed(directory / "config.pbtxt", config.encode())))
        files.append(ExportedFile(directory / STATE_FILE, _write_if_changed(
            directory / STATE_FILE, _state_bytes({**state, plan.model_version: number}))))
    except BaseException:
        for path in reversed(created):  # nothing half-written: what this export created goes
            shutil.rmtree(path, ignore_errors=True)
        outputs.remove_empty(parents)
        raise
    return TritonModel(plan.model, plan.model_version, number, directory, plan.backend.kind, plan.runtime, tuple(files),
                       plan.missing)


def _io_conflict(plan: _Plan) -> None:
    ios = {json.dumps(c.artifact.metadata["io"], sort_keys=True) for c in plan.choices}
    if len(ios) > 1:
        raise UsageError(f"{plan.model}: the chosen engines declare different inputs/outputs; one Triton model has "
                         "one signature: " + "; ".join(str(c.artifact.metadata["address"]) for c in plan.choices),
                         hint="pass --precision/--profile/--version so that the engines come from one build")


def export_triton(models: Sequence[str], *, registry: plugins.RegistryRef, repo: str | os.PathLike[str],
                  version: str | None = None, precision: str | None = None, profile: str | None = None,
                  runtime: str | None = None, gpus: str | Sequence[str] = "auto", allow_missing: bool = False,
                  version_policy: str = "latest", fingerprint: RunnerFingerprint | None = None,
                  require_signature: str | None = None, keep_stripped: bool = False) -> TritonExport:
    """Write (or bring up to date) a Triton model repository at ``repo`` for ``models``. ``runtime``: as ``pull
    --runtime`` (``trt10.13``, ``ort1.31``) or a serving stack (``triton:25.01``); ``gpus``: compute capabilities
    (``sm86``, ``8.6``) or ``auto`` (those the published TensorRT engines name). A requested GPU no published
    engine serves raises ``NoCompatibleEngineError`` (every candidate with its reason) before anything is written,
    unless ``allow_missing``: then the rest is written and the result lists the missing ones.
    ``require_signature`` (else the registry's ``signing.require``): every chosen engine's signed provenance must
    verify against it before anything is written. Stripped engines are refitted from their weights blob (fetched
    once per model version) and checked, unless ``keep_stripped``."""
    check_precision(precision)
    trusted = required(require_signature, registry)
    if trusted is not None:
        trusted_signer(trusted)
    if not models:
        raise UsageError("no model named", hint="orchestrate export triton MODEL... --repo DIR")
    policy = VersionPolicy.parse(version_policy)
    if runtime is not None:
        deployment_runtime(runtime)  # a malformed runtime or an unknown release is refused before the registry is read
    root = outputs.check_directory(repo, "--repo")
    fp = fingerprint or plugins.fingerprint()
    store = plugins.open_existing_store(registry)
    plans = [_plan(store, safe_name(model), fp=fp, gpus=gpus, version=version, precision=precision,
                   profile=profile, runtime=runtime) for model in dict.fromkeys(models)]
    missing = [m for p in plans for m in p.missing]
    if missing and not allow_missing:
        words = "; ".join(sorted({p.runtime for p in plans if p.missing}))
        raise missing_error(missing, "serve every requested GPU in Triton", words)
    for plan in plans:
        if plan.choices:
            _io_conflict(plan)
    checks = verify_all(store, [c.artifact for p in plans for c in p.choices], trusted)
    refitting = Refitting(store, keep_stripped)
    try:
        exported = [_write(store, p, root, policy, refitting) if p.choices else
                    TritonModel(p.model, p.model_version, None, root / p.model, p.backend.kind, p.runtime, (),
                                p.missing)
                    for p in plans]
    finally:
        refitting.close()
    return TritonExport(root, tuple(exported), policy.text(), refitting.blobs_fetched, checks)
