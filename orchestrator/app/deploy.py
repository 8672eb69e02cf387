"""Deploy-time resolution: pick the published engine that can run on this runner (or the declared one), verify it
and write it out — or explain, candidate by candidate, why none can. Decided before any deserialization."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from orchestrator.errors import UsageError
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.hardware import detect
from orchestrator.core.model import RegistryConfig


@dataclass(frozen=True)
class PullResult:
    path: Path | None
    metadata: dict
    reason: str  # why this artifact was chosen
    rejections: tuple[tuple[str, str], ...]


def _apply_runtime_spec(fp: RunnerFingerprint, spec: str, candidate: dict) -> tuple[RunnerFingerprint, str | None]:
    """``--runtime trt10.13`` / ``rtx1.7`` / ``ort1.31``: declare the runtime the deployment will use instead of
    the one installed here. A candidate of another flavour or version is rejected with that reason."""
    flavours = {"trt": ("tensorrt", "trtexec"), "rtx": ("tensorrt-rtx",), "ort": ("onnxruntime",)}
    field_of = {"trt": "tensorrt", "rtx": "tensorrt_rtx", "ort": "onnxruntime"}
    prefix = next((p for p in flavours if spec.startswith(p)), None)
    if prefix is None:
        raise UsageError(f"unknown --runtime {spec!r}", hint="use auto, trtX.Y[.Z.B], rtxX.Y[.Z] or ortX.Y")
    version = spec[len(prefix):]
    builder = candidate["builder"]
    if builder["name"] not in flavours[prefix]:
        return fp, f"built with {builder['name']}, not the requested runtime {spec}"
    if version and not (builder["version"] == version or builder["version"].startswith(version + ".")):
        # a version-compatible TensorRT engine may still run on the newer runtime declared here
        return replace(fp, **{field_of[prefix]: version}), None
    return replace(fp, **{field_of[prefix]: builder["version"]}), None


def pull(model: str, *, registry: RegistryConfig, version: str | None = None, precision: str | None = None,
         profile: str | None = None, gpu: str = "auto", runtime: str = "auto", out: str | os.PathLike | None = None,
         fingerprint: RunnerFingerprint | None = None) -> PullResult:
    """Pick the published engine of ``model`` that can run here (or on ``gpu``/``runtime`` as declared), verify
    its digest and header, and write it to ``out``. Decided before any deserialization; when nothing fits,
    ``NoCompatibleEngineError`` lists every candidate with the reason it was rejected."""
    from orchestrator.core.compat import check
    from trt_orchestrator_plugins._trt.plan_header import check_header, read_header_file
    from orchestrator.errors import ArtifactNotFoundError, IntegrityError, NoCompatibleEngineError

    fp = fingerprint or detect()
    if gpu != "auto":
        fp = RunnerFingerprint.parse_gpu_spec(gpu, fp)
    from orchestrator.app.pipeline import open_store

    store = open_store(registry)
    if version in (None, "latest"):
        artifacts = store.find(model=model)
        versions = sorted({a.metadata["model"]["version"] for a in artifacts})
        if artifacts:
            latest = artifacts[0].metadata["model"]["version"]  # find() returns newest first
            artifacts = [a for a in artifacts if a.metadata["model"]["version"] == latest]
    else:
        artifacts = store.find(model=model, version=version)
        versions = [version]
    if not artifacts:
        raise ArtifactNotFoundError(f"nothing published for model {model!r}"
                                    + (f" version {version}" if version not in (None, "latest") else ""),
                                    hint="see `orchestrate ls`")
    rejections: list[tuple[str, str]] = []
    seen_keys = set()
    candidates = []
    for art in artifacts:
        meta = art.metadata
        if meta["build_key"] in seen_keys:
            continue
        seen_keys.add(meta["build_key"])
        who = f"{meta['address']} ({meta['engine']['digest'][:19]})"
        if precision and meta["precision"] != precision:
            rejections.append((who, f"precision {meta['precision']}, not {precision}"))
            continue
        if profile and profile != meta.get("profile_set") and profile not in meta.get("profiles", []):
            rejections.append((who, f"profile set {meta.get('profile_set')}, not {profile}"))
            continue
        local = fp
        if runtime != "auto":
            local, why = _apply_runtime_spec(fp, runtime, meta)
            if why:
                rejections.append((who, why))
                continue
        verdict = check(meta, local)
        if not verdict.ok:
            rejections.append((who, verdict.reason))
            continue
        candidates.append((verdict.rank, len(candidates), art, verdict, who))
    where = (f"{fp.gpus[0].name} (CC {fp.compute_capability})" if fp.gpus else "no GPU")
    if not candidates:
        raise NoCompatibleEngineError(
            f"no published engine of {model} {'/'.join(versions)} can run on this runner ({where}; tensorrt "
            f"{fp.tensorrt or 'absent'}, tensorrt-rtx {fp.tensorrt_rtx or 'absent'}, onnxruntime "
            f"{fp.onnxruntime or 'absent'}). Candidates:", rejections=rejections,
            hint="build a target for this GPU/runtime, or pass --gpu/--runtime for the deployment machine")
    candidates.sort(key=lambda c: (c[0], c[1]))
    _, _, chosen, verdict, who = candidates[0]
    for _, _, art, v, w in candidates[1:]:
        rejections.append((w, f"also compatible, ranked lower ({v.reason})"))
    path = None
    if out is not None:
        path = Path(out)
        store.get(chosen.digest, path)
        problem = check_header(read_header_file(path), chosen.metadata)
        if problem:
            path.unlink(missing_ok=True)
            raise IntegrityError(f"{chosen.metadata['address']}: engine header check failed: {problem}",
                                 hint="the stored engine does not match its metadata; republish it")
    return PullResult(path=path, metadata=chosen.metadata, reason=verdict.reason or f"chosen for {where}",
                      rejections=tuple(rejections))
