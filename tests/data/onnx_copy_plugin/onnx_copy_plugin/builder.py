"""The ``onnx-copy`` builder: the engine is the ONNX model, copied byte for byte.

``weights: refittable`` (``BuilderCapabilities.weights_modes``): the copy keeps its weights and takes new ones by name
(the runtime's ``refit``), so a model version with new weights in the same graph is refitted, not rebuilt."""

from __future__ import annotations

import hashlib
import shutil
import time
from pathlib import Path

from onnx_copy_plugin.versions import family, onnxruntime_version, plugin_version
from orchestrator.contracts.builder import BuilderCapabilities, BuildRequest, BuildResult, probe_target
from orchestrator.core.artifact import ONNX_ENGINE_MEDIA_TYPE
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.model import Target
from orchestrator.errors import BuildError

ENGINE_NAME = "model.onnx"
LOG_NAME = "build.log"


class OnnxCopyBuilder:
    name = "onnx-copy"
    runtime = "onnx-copy-ort"
    slug = "copy"

    def probe_target(self, fingerprint: RunnerFingerprint) -> Target | None:
        # the version of our runtime installed here (its probe reports this package's version), device cpu
        return probe_target(self, fingerprint, device="cpu")

    def capabilities(self, version: str) -> BuilderCapabilities:
        return BuilderCapabilities(
            native=frozenset(),
            via_transform=frozenset(),
            target_kinds=frozenset({"cpu"}),
            needs_gpu=False,
            runs_on=f"onnxruntime's CPU execution provider, through the onnx-copy-ort {family(version)} runtime",
            native_missing_reason={p: "onnx-copy only copies fp32 models" for p in ("fp16", "bf16", "int8", "fp8")},
            supports_calibrator=False,
            engine_suffix=".onnx",
            engine_media_type=ONNX_ENGINE_MEDIA_TYPE,
            weights_modes=frozenset({"embedded", "refittable"}),
            weights_missing_reason={"stripped": "an onnx-copy engine is the whole model: it keeps its weights"},
        )

    def available(self, fingerprint: RunnerFingerprint, target: Target) -> str | None:
        if onnxruntime_version() is None:
            return "onnx-copy engines run on onnxruntime, which is not installed (pip install onnxruntime)"
        if target.device != "cpu":
            return f"onnx-copy targets need device 'cpu', not {target.device!r}"
        installed = plugin_version()
        if family(installed) != family(target.builder_version):
            return (f"installed onnx-copy-plugin {installed} but target {target.name!r} wants "
                    f"{family(target.builder_version)}.x")
        return None

    def build(self, request: BuildRequest) -> BuildResult:
        if request.precision.name != "fp32":
            raise BuildError(f"onnx-copy builds fp32 only, not {request.precision.name}", node=request.address)
        if request.target.device != "cpu":
            raise BuildError(f"onnx-copy targets need device 'cpu', not {request.target.device!r}",
                             node=request.address)
        version = plugin_version()
        if family(version) != family(request.target.builder_version):
            raise BuildError(f"installed onnx-copy-plugin {version} cannot build for target "
                             f"{request.target.name!r} (wants {request.target.builder_version})",
                             node=request.address)
        source = Path(request.onnx_path)
        out_dir = Path(request.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        engine_path = out_dir / ENGINE_NAME
        log_path = out_dir / LOG_NAME
        started = time.perf_counter()
        try:
            shutil.copyfile(source, engine_path)
        except OSError as e:
            raise BuildError(f"cannot copy {source} to {engine_path}: {e}", node=request.address) from e
        seconds = time.perf_counter() - started
        digest = hashlib.sha256(engine_path.read_bytes()).hexdigest()
        facts = {"source": source.name, "engine_bytes": engine_path.stat().st_size, "sha256": digest,
                 "plugin_version": version}
        if request.target.weights == "refittable":  # the weights stay in the copy: nothing to refit at deployment
            facts["weights"] = {"mode": "refittable", "stripped": False}
        log_path.write_text("".join(f"{k}: {v}\n" for k, v in facts.items())
                            + f"build_seconds: {seconds:.6f}\n", encoding="utf-8")
        request.log(f"onnx-copy: copied {source.name} ({facts['engine_bytes']} bytes)")
        return BuildResult(engine_path=engine_path, log_path=log_path, builder=self.name,
                           builder_version=version, build_seconds=round(seconds, 6), metadata=facts)
