"""The ``onnx-tidy`` builder: a third-party builder whose engines run on a runtime it does not ship, trt-orchestrator's
own ``onnxruntime`` runtime (docs/architecture.md, "A builder for an existing runtime").

Its engine is the ONNX model tidied: doc strings and metadata props dropped, every intermediate tensor's type and
shape inferred into ``value_info`` (``onnx.shape_inference``). onnxruntime runs it like any ONNX file.

What reusing a runtime asks of a builder, because that runtime judges an engine by its OWN library's version:

- ``runtime = "onnxruntime"``: published metadata records it; ``gate`` and ``pull`` ask that runtime's ``can_run``;
- the version namespace is onnxruntime's: ``BuildResult.builder_version`` is the onnxruntime version installed
  where it built (the ``onnxruntime`` runtime compares its major.minor with the runner's onnxruntime), so a
  target's ``builder_version`` names an onnxruntime release (``"1.31"``) and ``available`` checks onnxruntime's
  version, not this package's; ``probe_target`` (the contract's helper) reads that same version from the
  fingerprint's ``onnxruntime`` entry;
- the engine is the runtime's format: ``.onnx``, ``ONNX_ENGINE_MEDIA_TYPE``, a ``device: cpu`` target (the
  runtime loads CPU targets on its CPU execution provider);
- the plugin's own version is not the engine's version: a change to what it builds reaches the build key by the
  plugin's own means (a recipe version of the builder), not through ``builder_version``.
"""

from __future__ import annotations

import time
from pathlib import Path

from onnx_copy_plugin.versions import family, onnxruntime_version
from orchestrator.contracts.builder import BuilderCapabilities, BuildRequest, BuildResult, probe_target
from orchestrator.core.artifact import ONNX_ENGINE_MEDIA_TYPE
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.model import Target
from orchestrator.errors import BuildError

ENGINE_NAME = "model.onnx"
LOG_NAME = "build.log"


class OnnxTidyBuilder:
    name = "onnx-tidy"
    runtime = "onnxruntime"  # not ours: trt-orchestrator's onnxruntime runtime runs these engines
    slug = "tidy"

    def probe_target(self, fingerprint: RunnerFingerprint) -> Target | None:
        # fingerprint.runtime_version("onnxruntime"): the version our engines are judged by
        return probe_target(self, fingerprint, device="cpu")

    def capabilities(self, version: str) -> BuilderCapabilities:
        return BuilderCapabilities(
            native=frozenset(),
            via_transform=frozenset(),
            target_kinds=frozenset({"cpu"}),
            needs_gpu=False,
            runs_on=f"onnxruntime {family(version)} on the CPU execution provider (the onnxruntime runtime)",
            native_missing_reason={p: "onnx-tidy builds fp32 only" for p in ("fp16", "bf16", "int8", "fp8")},
            engine_suffix=".onnx",
            engine_media_type=ONNX_ENGINE_MEDIA_TYPE,
            reads_options=frozenset(),
            platform_specific=False,  # a plain ONNX file: no CPU-specific layout, unlike an ORT-optimized one
        )

    def available(self, fingerprint: RunnerFingerprint, target: Target) -> str | None:
        return _why_not(target, onnxruntime_version())

    def build(self, request: BuildRequest) -> BuildResult:
        import onnx

        ort = onnxruntime_version()
        why = _why_not(request.target, ort)
        if why or ort is None:
            raise BuildError(why or "onnxruntime is not installed", node=request.address)
        if request.precision.name != "fp32":
            raise BuildError(f"onnx-tidy builds fp32 only, not {request.precision.name}", node=request.address)
        out_dir = Path(request.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        try:
            model = onnx.load(str(request.onnx_path))
        except Exception as e:  # DecodeError, OSError
            raise BuildError(f"cannot read {request.onnx_path}: {e}", node=request.address) from e
        dropped = _strip_docs(model)
        del model.metadata_props[:]
        tidy = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
        onnx.checker.check_model(tidy)
        engine_path = out_dir / ENGINE_NAME
        onnx.save(tidy, str(engine_path))
        seconds = time.perf_counter() - started
        facts = {"doc_strings_dropped": dropped, "value_info": len(tidy.graph.value_info), "onnxruntime": ort}
        log_path = out_dir / LOG_NAME
        log_path.write_text("".join(f"{k}: {v}\n" for k, v in facts.items()), encoding="utf-8")
        request.log(f"onnx-tidy: {dropped} doc strings dropped, {facts['value_info']} tensors typed")
        # the onnxruntime version, not this package's: the onnxruntime runtime judges the engine by it
        return BuildResult(engine_path=engine_path, log_path=log_path, builder=self.name, builder_version=ort,
                           build_seconds=round(seconds, 6), metadata=facts)


def _why_not(target: Target, ort: str | None) -> str | None:
    """Why this runner cannot build ``target`` (its onnxruntime is the version the engines will be judged by)."""
    if ort is None:
        return "onnx-tidy engines are checked and run by onnxruntime, which is not installed"
    if target.device != "cpu":
        return f"onnx-tidy targets need device 'cpu', not {target.device!r}"
    if family(ort) != family(target.builder_version):
        return (f"target {target.name!r} wants engines for onnxruntime {family(target.builder_version)}, this "
                f"runner has onnxruntime {ort}")
    return None


def _strip_docs(model) -> int:
    """Clear every doc string in the graph (nodes, graph, model); return how many were set."""
    count = 0
    for holder in [model, model.graph, *model.graph.node, *model.graph.input, *model.graph.output]:
        if holder.doc_string:
            count += 1
            holder.doc_string = ""
    return count
