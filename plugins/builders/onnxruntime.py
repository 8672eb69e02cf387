"""The ``onnxruntime`` builder: an "engine" is the ONNX model optimized and serialized by onnxruntime for one
execution provider (``SessionOptions.optimized_model_filepath``).

ORT's docs warn that a model saved at level "all" can carry layout/hardware-specific rewrites (e.g. NCHWc on
CPU) and should run on the execution provider and ORT version that made it; so the provider, ORT version and
level are recorded in the metadata and ``available`` requires the target's ORT major.minor.

``onnxruntime`` is imported inside methods only.

- Options: it applies ``ort_optimization`` only (``reads_options``): a TensorRT option on an onnxruntime target
  never changes its build key, and any ``options.extra`` key is refused at validate (and again at build).
- Platform: ``platform_specific`` is True. ORT's docs on offline graph optimization (onnxruntime.ai
  docs/performance/model-optimizations/graph-optimizations.html, "Online/Offline Mode" notes): "When running in
  offline mode, make sure to use the exact same options (e.g., execution providers, optimization level) and
  hardware as the target machine that the model inference will run on", and "When layout optimizations are
  enabled, the offline mode can only be used on compatible hardware to the environment when the offline model is
  saved. For example, if model has layout optimized for AVX2, the offline model would require CPUs that support
  AVX2". Level ``all`` (the default) includes those layout optimizations (NCHWc, CPU EP), so a saved model is
  tied to the CPU architecture it was optimized on; the target's platform is a key input, ``available`` refuses a
  runner of another platform, and ``pull`` refuses another platform's engines.
- No timing cache, no native calibration.
- Weights (``targets[].weights``, docs/refit.md): ``stripped`` keeps every initializer of the optimized model that
  is byte for byte a tensor of the model version's weights blob as ONNX external data at that tensor's place in the
  blob's ``weights.bin`` (``orchestrator.weights_file.strip_identical``); an initializer the optimizer rewrote (a
  Conv folded with its BatchNorm, NCHWc-reordered weights at level ``all`` on the CPU) stays inside, and the build
  metadata says how many bytes went each way. The deployment puts the bytes back (the runtime's ``refit``). Where
  the optimizer rewrote most weight bytes, stripping would cost the blob and save little: the engine then keeps all
  its weights (``stripped: false`` with the reason; measured on the demo's convolutional models at level ``all``).
  ``refittable`` is refused: an optimized model bakes weights into rewritten initializers, so new weights are a new
  optimization (a rebuild), not a refit.
"""

from __future__ import annotations

import collections
import time
from pathlib import Path

from orchestrator.atomic import free_bytes, no_space
from orchestrator.contracts.builder import BuilderCapabilities, BuildRequest, BuildResult, Provisioning, probe_target
from orchestrator.core.artifact import ONNX_ENGINE_MEDIA_TYPE
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.model import Target
from orchestrator.errors import BuildError, NoSpaceError
from orchestrator.weights_file import data_digest_of, strip_identical
from trt_orchestrator_plugins._onnx.io import EXTERNAL_DATA_THRESHOLD, model_bytes

ENGINE_NAME = "engine.onnx"
LOG_NAME = "build.log"

PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}
LEVELS = {"basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}


def _family(version: str) -> str:
    return ".".join(version.strip().split(".")[:2])


def _op_histogram(path: Path) -> dict[str, int]:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return dict(collections.Counter(f"{n.domain + '.' if n.domain else ''}{n.op_type}" for n in model.graph.node))


def _out_of_space(out_dir: Path, onnx_path: Path, error: Exception) -> NoSpaceError | None:
    """onnxruntime reports a failed write of the optimized model as ``INVALID_PROTOBUF : Protobuf serialization
    failed``, without the OS error (measured with 1.31 on a full tmpfs): when the folder has less room than the
    model it was writing (its partial file removed), that is why."""
    found = no_space(error, out_dir)
    if found is not None:
        return found
    free = free_bytes(out_dir)
    need = model_bytes(onnx_path)
    if free is None or free >= need:
        return None
    return NoSpaceError(str(out_dir), free, what=f"the optimized model (about {need / (1024 * 1024):.0f} MiB)")


class OnnxRuntimeBuilder:
    name = "onnxruntime"
    runtime = "onnxruntime"
    slug = "ort"
    # the recipe version (a build-key input): bump it in the change that makes this plugin build other bytes
    recipe = "1"

    def probe_target(self, fingerprint: RunnerFingerprint) -> Target | None:
        cuda = PROVIDERS["cuda"] in fingerprint.runtime_features(self.runtime)
        return probe_target(self, fingerprint, device="cuda" if cuda else "cpu")

    def capabilities(self, version: str) -> BuilderCapabilities:
        return BuilderCapabilities(
            native=frozenset(),
            via_transform=frozenset({"fp16", "bf16", "int8"}),
            target_kinds=frozenset({"cpu", "cuda"}),
            needs_gpu=False,  # the CPU EP builds anywhere; a cuda target's availability is checked per runner
            runs_on=f"onnxruntime {_family(version)} with the execution provider it was optimized for "
                    "(CPU anywhere; CUDA EP on NVIDIA GPUs)",
            native_missing_reason={
                p: f"onnxruntime has no builder precision switch; {p} comes from the ONNX transform"
                for p in ("fp16", "bf16", "int8", "fp8")},
            supports_calibrator=False,
            engine_suffix=".onnx",
            # an optimized ONNX file, not a TensorRT plan: a distinct media type so no TensorRT loader gets one
            engine_media_type=ONNX_ENGINE_MEDIA_TYPE,
            reads_options=frozenset({"ort_optimization"}),
            extra_options={},  # applies none: any options.extra key is refused at validate
            # Decision: ORT's offline-mode notes tie a saved optimized model to the hardware it was optimized for
            # (layout optimizations, e.g. AVX2 NCHWc); see the module docstring for the citation.
            platform_specific=True,
            calibration_family=None,
            pins_timing_cache=False,
            weights_modes=frozenset({"embedded", "stripped"}),
            weights_missing_reason={"refittable": "an onnxruntime-optimized model bakes its weights into rewritten "
                                                  "initializers (fused, reordered): new weights need a new "
                                                  "optimization, which is a rebuild (seconds), not a refit"},
            provisioning=Provisioning(
                # builder_version is "1.31" or "1.31.1": the family pins every patch release of it
                pip_requirements={"": (f"onnxruntime=={version}" + (".*" if version.count(".") == 1 else ""),),
                                  "12": (f"onnxruntime-gpu=={version}" + (".*" if version.count(".") == 1 else ""),)},
                container_missing="no container image of onnxruntime is known to this tool"),
        )

    def available(self, fingerprint: RunnerFingerprint, target: Target) -> str | None:
        # the fingerprint knows which onnxruntime `import onnxruntime` really gives (with both the CPU and the GPU
        # package installed, package metadata names the wrong one); it is the runner being asked about, which may
        # not be this machine (a shard's runner check)
        installed = fingerprint.runtime_version(self.runtime)
        if installed is None:
            return (f"onnxruntime {target.builder_version} is not installed "
                    f"(pip install 'trt-orchestrator[ort]')")
        if _family(installed) != _family(target.builder_version):
            return (f"installed onnxruntime {installed} but target {target.name!r} wants "
                    f"{_family(target.builder_version)}.x (a level-'all' optimized model is tied to the ORT "
                    f"version that wrote it)")
        provider = PROVIDERS.get(target.device)
        if provider is None:
            return f"onnxruntime targets need device 'cpu' or 'cuda', not {target.device!r}"
        if fingerprint.platform != target.platform:
            return (f"target {target.name!r} is for {target.platform}, this runner is {fingerprint.platform}; an "
                    "optimized model is saved for the hardware it was optimized on (ORT docs, offline mode: layout "
                    "optimizations need compatible CPUs), so it is built on the platform it runs on")
        providers = fingerprint.runtime_features(self.runtime)
        if provider not in providers:
            return (f"{provider} is not available in this onnxruntime (has: {', '.join(providers) or 'none'}); "
                    + ("install onnxruntime-gpu on a runner with an NVIDIA GPU" if target.device == "cuda"
                       else "reinstall onnxruntime"))
        return None

    def build(self, request: BuildRequest) -> BuildResult:
        try:
            import onnxruntime as ort
        except ImportError as e:
            raise BuildError(f"cannot import onnxruntime: {e}", node=request.address,
                             hint="pip install 'trt-orchestrator[ort]'") from e
        if request.native_precision and request.precision.name != "fp32":
            raise BuildError(f"onnxruntime cannot build {request.precision.name} natively",
                             node=request.address, hint="build it from the fp16/bf16/int8-qdq transform's ONNX")
        provider = PROVIDERS.get(request.target.device)
        if provider is None:
            raise BuildError(f"onnxruntime targets need device 'cpu' or 'cuda', not {request.target.device!r}",
                             node=request.address)
        if request.options.extra:
            raise BuildError(f"onnxruntime applies no extra options; got {sorted(request.options.extra)}",
                             node=request.address, hint="remove options.extra from this target")
        if request.timing_cache is not None or request.calibration_cache is not None:
            what = "a pinned timing cache" if request.timing_cache is not None else "a native calibration cache"
            raise BuildError(f"onnxruntime was given {what}, which it has no use for", node=request.address)
        level_name = request.options.ort_optimization
        out_dir = Path(request.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        engine_path = out_dir / ENGINE_NAME
        log_path = out_dir / LOG_NAME

        options = ort.SessionOptions()
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, LEVELS[level_name])
        options.optimized_model_filepath = str(engine_path)
        # protobuf's 2 GiB limit: weights go beside the model
        if model_bytes(request.onnx_path) > EXTERNAL_DATA_THRESHOLD:
            options.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                             ENGINE_NAME + ".data")
        started = time.perf_counter()
        try:
            session = ort.InferenceSession(str(request.onnx_path), options, providers=[provider])
        except Exception as e:  # ORT raises its own Fail/InvalidGraph/NotImplemented: one family for us
            for partial in (engine_path, out_dir / (ENGINE_NAME + ".data")):
                partial.unlink(missing_ok=True)
            full = _out_of_space(out_dir, Path(request.onnx_path), e)
            if full is not None:
                raise full from e
            raise BuildError(f"onnxruntime {ort.__version__} could not optimize {request.onnx_path.name} "
                             f"for {provider}: {e}", node=request.address) from e
        build_seconds = time.perf_counter() - started
        used = session.get_providers()
        if provider not in used:
            raise BuildError(f"onnxruntime fell back to {used} instead of {provider}", node=request.address,
                             hint="check the CUDA/cuDNN libraries onnxruntime-gpu needs")
        inputs = {i.name for i in session.get_inputs()}
        for profile in request.profiles:
            unknown = set(profile.shapes) - inputs
            if unknown:
                raise BuildError(f"profile {profile.name!r} names inputs {sorted(unknown)} that the model does not "
                                 f"have; its inputs: {', '.join(sorted(inputs))}", node=request.address)
        io = [{"name": t.name, "mode": mode, "dtype": t.type, "shape": list(t.shape)}
              for mode, group in (("input", session.get_inputs()), ("output", session.get_outputs()))
              for t in group]
        del session
        if not engine_path.is_file():
            raise BuildError(f"onnxruntime wrote no optimized model to {engine_path}", node=request.address)

        before, after = _op_histogram(Path(request.onnx_path)), _op_histogram(engine_path)
        weights = self._strip(request, engine_path) if request.target.weights == "stripped" else None
        facts = {
            "onnxruntime_version": ort.__version__,
            "provider": provider,
            "optimization_level": level_name,
            "graph_optimization_level": LEVELS[level_name],
            # ORT docs: an "all"-level model may hold EP/hardware-specific rewrites; run it where it was made.
            "run_only_with": {"provider": provider, "onnxruntime": _family(ort.__version__)},
            "precision": request.precision.name,
            "profiles": [p.name for p in request.profiles],
            "profile_count": len(request.profiles),
            "io_tensors": io,
            "nodes_before": sum(before.values()),
            "nodes_after": sum(after.values()),
            "engine_bytes": engine_path.stat().st_size,
        }
        if weights is not None:
            facts["weights"] = weights
        lines = [f"{k}: {v}" for k, v in facts.items() if k != "io_tensors"]
        lines.append(f"build_seconds: {build_seconds:.3f}")
        lines += [f"op {op}: {before.get(op, 0)} -> {after.get(op, 0)}"
                  for op in sorted(set(before) | set(after))]
        try:
            log_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        except OSError as e:
            full = no_space(e, log_path, what="the build log")
            if full is None:
                raise
            raise full from e
        if weights is not None and weights["stripped"]:
            request.log(f"onnxruntime: stripped {weights['stripped_tensors']} initializers "
                        f"({weights['stripped_bytes']} bytes) into the weights blob; {weights['kept_tensors']} "
                        f"({weights['kept_bytes']} bytes) the optimizer rewrote stay in the engine")
        elif weights is not None:
            request.log(f"onnxruntime: not stripped: {weights['why_not']}")
        request.log(f"onnxruntime: optimized {request.onnx_path.name} for {provider} at level {level_name}: "
                    f"{facts['nodes_before']} -> {facts['nodes_after']} nodes in {build_seconds:.2f}s")
        return BuildResult(
            engine_path=engine_path,
            log_path=log_path,
            builder=self.name,
            builder_version=ort.__version__,
            build_seconds=round(build_seconds, 3),
            layer_info_path=None,
            metadata=facts,
        )


    @staticmethod
    def _strip(request: BuildRequest, engine_path: Path) -> dict:
        """``weights: stripped``: the engine's initializers that the blob of the ONNX it was built from holds become
        external data into that blob (the module docstring); what went where, and the blob data it needs."""
        stripped = engine_path.with_name(f".stripped-{engine_path.name}")
        try:
            blob_digest, table = data_digest_of(Path(request.onnx_path))
            stats = strip_identical(engine_path, table, stripped)
            # Stripped only where it pays: the blob holds every weight of the model, so an engine whose optimizer
            # rewrote most of its weights (Conv+BatchNorm folded, NCHWc reordered at level "all") would cost the
            # blob and keep nearly as many bytes itself; such an engine carries its weights (nothing to refit).
            pays = stats["stripped_bytes"] >= stats["kept_bytes"] and stats["stripped_tensors"] > 0
            if pays:
                stripped.replace(engine_path)
        except OSError as e:
            full = no_space(e, engine_path)
            if full is not None:
                raise full from e
            raise BuildError(f"could not strip the weights of {engine_path.name}: {e}", node=request.address) from e
        finally:
            stripped.unlink(missing_ok=True)
        facts = {"mode": "stripped", "stripped": pays, "blob_data_digest": blob_digest, **stats}
        if not pays:
            facts["why_not"] = (f"the optimizer rewrote {stats['kept_bytes']} of "
                                f"{stats['kept_bytes'] + stats['stripped_bytes']} weight bytes: the engine keeps them "
                                "all (stripping would publish the blob and keep most bytes; ort_optimization: basic "
                                "or extended rewrites fewer)")
        return facts


builder = OnnxRuntimeBuilder()
