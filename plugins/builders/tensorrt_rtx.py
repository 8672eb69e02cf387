"""The ``tensorrt-rtx`` builder: ahead-of-time TensorRT-RTX engines for a list of compute capabilities.

RTX AOT builds run on the CPU with no GPU or driver (RTX docs, "CPU-Only AOT and TensorRT-RTX Engines",
https://docs.nvidia.com/deeplearning/tensorrt-rtx/latest/inference-library/cpu-engines.html ; measured with
RTX 1.7.1 on machines with neither), so any runner with the ``tensorrt-rtx`` wheel can build; the engines run only
on RTX/Ampere+ GPUs whose CC is in the engine's list. Networks are always strongly typed: RTX 1.x has no
FP16/INT8/BF16/FP8 builder flags, so lower precisions arrive as an already-converted ONNX (fp16/bf16 transforms)
or as Q/DQ nodes (int8-qdq).

``tensorrt_rtx`` is imported inside ``build`` only; ``available`` reads the version of what that import would load
without importing it (``_trt.install``).

- Options: it applies ``optimization_level``, ``tiling_level`` and ``workspace_mib`` (``reads_options``; only
  they reach its build keys) and no ``options.extra`` key (any is refused at validate, and again at build).
- Timing cache: none. RTX 1.2 deprecated the timing-cache APIs and made them no-ops, and using them forces a GPU
  during AOT builds (RTX 1.1 release notes, "Limitations",
  https://docs.nvidia.com/deeplearning/tensorrt-rtx/latest/getting-started/release-notes-1/1.1.html ); so a
  build reports no timing cache read or written (``timing_cache_read/written/path`` None), ``pins_timing_cache``
  is False and a pin is refused at validate. RTX's own cache is the runtime (JIT) cache, which the
  ``tensorrt-rtx`` runtime keeps.
- Platform: RTX engines are OS-independent ("portable to both Windows and Linux operating systems", cpu-engines.html
  above; "not compatible between different releases of TensorRT-RTX",
  https://docs.nvidia.com/deeplearning/tensorrt-rtx/latest/inference-library/engine-compatibility.html ), so
  ``platform_specific`` is False: the target's platform is not a key input and ``pull`` does not refuse another
  OS. The AOT list itself supports this: the same x86_64 wheel that builds here offers ``ComputeCapability.SM121``
  (GB10, a part only sold in aarch64 systems) as a target.
- No native calibration (no INT8 flag, calibrators deprecated): ``calibration_family`` None.
- Weights (``targets[].weights``, docs/refit.md): ``stripped`` sets ``BuilderFlag.STRIP_PLAN`` + ``REFIT_IDENTICAL``,
  ``refittable`` ``REFIT`` + ``STRIP_PLAN`` (RTX's weightless workflow, "Refitting Engines",
  https://docs.nvidia.com/deeplearning/tensorrt-rtx/latest/inference-library/refitting-engines.html ). Measured with
  RTX 1.7.1.116 on a machine with no CUDA driver: plain AOT builds succeed, but any of REFIT, REFIT_IDENTICAL or
  STRIP_PLAN makes ``build_serialized_network`` fail with "MyelinCheckException: graph_jit.cpp:278:
  CHECK(status == CUDA_SUCCESS) failed" (even for a one-Conv model), so ``available`` asks for a runner with an
  NVIDIA driver for those targets and a build without one says why.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from orchestrator.contracts.builder import BuilderCapabilities, BuildRequest, BuildResult, Provisioning, probe_target
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.model import Target
from orchestrator.core.versions import parse_version, same_release
from orchestrator.errors import BuildError
from trt_orchestrator_plugins._trt import install
from trt_orchestrator_plugins._trt.config import RTX_READS, weights_flags, weights_missing_reasons, weights_modes
from trt_orchestrator_plugins._trt.plan_header import read_header
from trt_orchestrator_plugins._trt.releases import exact_problem

DISTRIBUTION = "tensorrt-rtx"
MODULE = "tensorrt_rtx"
ENGINE_NAME = "engine.plan"
LOG_NAME = "build.log"
LAYERS_NAME = "layers.json"

# ORT's dynamic-quantization ops have no TensorRT importer (measured: the RTX 1.7.1 parser rejects ConvInteger,
# MatMulInteger and DynamicQuantizeLinear); name the way out.
_ORT_ONLY_OPS = {"ConvInteger", "MatMulInteger", "DynamicQuantizeLinear", "QLinearConv", "QLinearMatMul"}

_NO_FLAG = ("TensorRT-RTX {v} has no {p} builder flag: RTX networks are strongly typed only "
            "(its BuilderFlag has no FP16/INT8/BF16 members; NVIDIA/TensorRT-RTX "
            "samples/helloWorld/python/hello_world.py builds strongly typed networks only)")


def _installed_version() -> str | None:
    """The ``__version__`` of what ``import tensorrt_rtx`` would load, read without importing it
    (``_trt.install``); None when that import would fail."""
    found = install.find_install(install.RTX_MODULES, install.RTX_DISTRIBUTIONS)
    return found.version if found is not None else None


def _version_matches(installed: str, wanted: str) -> bool:
    """The version rule (``core.versions.same_release``): the parts both carry agree and the target is at least as
    precise as the install, so ``1.7.1.116`` needs exactly that build and a looser target (``1.7``) names no
    release (validate refuses it). RTX engines are not compatible across RTX releases (RTX docs,
    engine-compatibility.html), so no looser rule exists."""
    return same_release(wanted.strip(), installed)


class _LogSink:
    """Where the process-wide TensorRT logger writes during one build: the build log file (every message),
    the request's log callback (INFO and worse), and the errors kept for the BuildError."""

    def __init__(self, path: Path, echo: Callable[[str], None]) -> None:
        self.file = open(path, "w", encoding="utf-8")
        self.echo = echo
        self.errors: list[str] = []
        self.tail: list[str] = []
        self.layer_listing: str | None = None

    def write(self, severity: str, message: str) -> None:
        line = f"[{severity}] {message}"
        self.file.write(line + "\n")
        if severity in ("INTERNAL_ERROR", "ERROR"):
            self.errors.append(message)
        if severity != "VERBOSE":
            self.echo(f"tensorrt-rtx: {line}")
            self.tail = (self.tail + [line])[-30:]
        elif message.startswith("Layers:\n"):  # the builder's own layer listing (ProfilingVerbosity.DETAILED)
            self.layer_listing = message

    def close(self) -> None:
        self.file.close()


_LOCK = threading.Lock()
_LOGGER = None  # one ILogger per process: TensorRT warns that a second logger "differs from one already
# registered" and keeps using the first for global messages, so a dispatching logger is created once.
_SINK: _LogSink | None = None


def _logger(trt):
    global _LOGGER
    if _LOGGER is None:

        class _Dispatch(trt.ILogger):
            def __init__(self) -> None:
                trt.ILogger.__init__(self)

            def log(self, severity, msg) -> None:  # TensorRT calls this for every message
                sink = _SINK
                if sink is not None:
                    sink.write(str(severity).rsplit(".", 1)[-1], msg)

        _LOGGER = _Dispatch()
    return _LOGGER


@contextmanager
def _capture(trt, path: Path, echo: Callable[[str], None]) -> Iterator[_LogSink]:
    """Route TensorRT's messages to one build's sink; builds in one process are serialized by the lock."""
    global _SINK
    with _LOCK:
        _logger(trt)  # created before any Builder so that it is the process's first TensorRT logger
        sink = _LogSink(path, echo)
        _SINK = sink
        try:
            yield sink
        finally:
            _SINK = None
            sink.close()


def _cc_enum(trt, cc: str):
    """``"8.6"`` -> ``trt.ComputeCapability.SM86`` (Polygraphy builds the name the same way:
    NVIDIA/TensorRT tools/Polygraphy/polygraphy/backend/tensorrt_rtx/config.py)."""
    major, _, minor = cc.strip().partition(".")
    name = f"SM{major}{minor or '0'}"
    member = getattr(trt.ComputeCapability, name, None)
    if member is None:
        supported = sorted(n for n in trt.ComputeCapability.__members__ if n.startswith("SM"))
        raise BuildError(
            f"TensorRT-RTX {trt.__version__} cannot target compute capability {cc} "
            f"(no ComputeCapability.{name}); supported: {', '.join(supported)}",
            hint="pick compute capabilities from that list, or a TensorRT-RTX release that adds this one")
    return member


def _parser_errors(parser) -> list[str]:
    lines = []
    for i in range(parser.num_errors):
        e = parser.get_error(i)
        where = f"{e.func()} at {Path(e.file()).name}:{e.line()}" if e.file() else e.func()
        code = str(e.code()).rsplit(".", 1)[-1]
        lines.append(f"node {e.node()} {e.node_name()!r} ({e.node_operator()}): {code}: {e.desc()} [{where}]")
    return lines


def _layer_info_from_inspector(trt, plan: bytes, out: Path) -> tuple[str | None, str | None]:
    """Deserialize the plan and dump the inspector's JSON. Needs a CUDA driver and a GPU whose CC is in the
    engine's list: on a CPU-only runner deserialize_cuda_engine returns None ("CUDA driver version is
    insufficient", measured here), on a CC 9.0 GPU the runtime refuses every RTX engine (measured on a lent H100:
    "The engine cannot run on this GPU, which has compute capability 9.0").
    Returns (source, reason why not)."""
    global _SINK
    saved, _SINK = _SINK, None  # keep deserialization noise out of the build log; keep its errors as the reason
    try:
        runtime = trt.Runtime(_logger(trt))
        _SINK = errors = _ErrorsOnly()
        engine = runtime.deserialize_cuda_engine(plan)
        if engine is None:
            return None, "engine inspector skipped: deserialize_cuda_engine failed on this machine: " + (
                errors.first or "no error message")
        inspector = engine.create_engine_inspector()
        text = inspector.get_engine_information(trt.LayerInformationFormat.JSON)
        out.write_text(text, encoding="utf-8")
        return "engine-inspector", None
    except Exception as e:  # any failure here only costs the optional layer info, never the build
        return None, f"engine inspector skipped: {type(e).__name__}: {e}"
    finally:
        _SINK = saved


class _ErrorsOnly:
    """Sink for the inspection step: keeps the first error as the reason, drops the rest."""

    first: str | None = None

    def write(self, severity: str, message: str) -> None:
        if self.first is None and severity in ("INTERNAL_ERROR", "ERROR"):
            self.first = message.splitlines()[0]


_LAYER_LINE = re.compile(r"^Name: (?P<name>.*?), LayerType: (?P<type>[^,]*),.*?TacticName: (?P<tactic>[^,]*),")


def _layer_info_from_log(listing: str, out: Path) -> None:
    """Fallback when the inspector cannot run: the builder's own verbose 'Layers:' listing, one entry a layer."""
    layers = []
    for line in listing.splitlines()[1:]:
        m = _LAYER_LINE.match(line)
        layers.append({"name": m["name"], "type": m["type"], "tactic": m["tactic"], "text": line} if m
                      else {"text": line})
    out.write_text(json.dumps({"source": "build-log", "layers": layers}, indent=1), encoding="utf-8")


def _shared_dim_conflicts(onnx_path: Path, profiles) -> list[str]:
    """Equally named symbolic dims are one dim to TensorRT; a profile that sizes them differently fails deep in
    the builder ("Input dimensions with this name have different constant values", seen with PP-OCR cls, whose
    H and W are both named "?"). Find that before building and say which dims and values clash."""
    import onnx

    try:
        graph = onnx.load(str(onnx_path), load_external_data=False).graph
    except Exception:  # the parser already read it; nothing to add
        return []
    named: dict[str, list[tuple[str, int]]] = {}
    for value in graph.input:
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            if dim.HasField("dim_param") and dim.dim_param:
                named.setdefault(dim.dim_param, []).append((value.name, axis))
    problems = []
    for param, places in named.items():
        if len(places) < 2:
            continue
        for profile in profiles:
            for which, index in (("min", 0), ("opt", 1), ("max", 2)):
                sizes = {(name, axis): profile.shapes[name][index][axis] for name, axis in places
                         if name in profile.shapes and axis < len(profile.shapes[name][index])}
                if len(set(sizes.values())) > 1:
                    where = ", ".join(f"{name}[{axis}]={size}" for (name, axis), size in sizes.items())
                    problems.append(f"dim {param!r} in profile {profile.name!r} {which}: {where}")
    return problems


class TensorRtxBuilder:
    """Builds one strongly typed TensorRT-RTX AOT engine per request."""

    name = "tensorrt-rtx"
    runtime = "tensorrt-rtx"
    slug = "rtx"
    # the recipe version (a build-key input): bump it in the change that makes this plugin build other bytes
    recipe = "1"

    def probe_target(self, fingerprint: RunnerFingerprint) -> Target | None:
        return probe_target(self, fingerprint)

    def capabilities(self, version: str) -> BuilderCapabilities:
        reason = {p: _NO_FLAG.format(v=version, p=p.upper()) + f"; use precision via 'transform' for {p}"
                  for p in ("fp16", "bf16", "int8", "fp8")}
        reason["fp8"] += " (FP8 GEMMs need CC >= 8.9, RTX docs 'Advanced')"
        return BuilderCapabilities(
            native=frozenset(),  # no precision builder flags in RTX 1.x (strongly typed networks only)
            via_transform=frozenset({"fp16", "bf16", "int8", "fp8"}),
            target_kinds=frozenset({"compute_capability", "compute_capability_list"}),
            needs_gpu=False,  # AOT: CPU-only builds (RTX docs, cpu-engines.html)
            runs_on="RTX/Ampere+ GPUs with CC in the engine's list (8.0, 8.6, 8.9, 12.x); not 9.0/10.0",
            native_missing_reason=reason,
            supports_calibrator=False,
            engine_suffix=".plan",
            reads_options=RTX_READS,  # optimization_level, tiling_level, workspace_mib
            extra_options={},  # applies none: any options.extra key is refused at validate
            # Decision: RTX engines are OS-independent (RTX docs cpu-engines.html: "portable to both Windows and
            # Linux"); see the module docstring.
            platform_specific=False,
            calibration_family=None,
            pins_timing_cache=False,  # timing cache APIs are no-ops since RTX 1.2 (see the module docstring)
            # PyPI ships `tensorrt-rtx` wheels (the demo's pin); NVIDIA publishes no TensorRT-RTX container
            provisioning=Provisioning(
                pip_requirements={"": (f"tensorrt-rtx=={version}",)},
                container_missing=f"NVIDIA publishes no container image of TensorRT-RTX {version}"),
            version_problem=exact_problem(version, "tensorrt-rtx"),
            weights_modes=weights_modes(parse_version(version), "tensorrt-rtx"),
            weights_missing_reason=weights_missing_reasons(parse_version(version), "tensorrt-rtx"),
        )

    def available(self, fingerprint: RunnerFingerprint, target: Target) -> str | None:
        installed = _installed_version()
        if installed is None:
            return (f"tensorrt-rtx {target.builder_version} is not installed "
                    f"(pip install 'trt-orchestrator[rtx]')")
        if not _version_matches(installed, target.builder_version):
            return (f"installed tensorrt-rtx {installed} but target {target.name!r} wants "
                    f"{target.builder_version} (RTX engines load only on the release that built them)")
        if target.hardware_compatibility != "none":
            return "tensorrt-rtx targets compute capabilities, not a hardware compatibility level"
        if target.options.version_compatible:
            return "TensorRT-RTX engines are not compatible across RTX releases; drop version_compatible"
        if target.weights != "embedded" and not fingerprint.driver_version:
            return (f"TensorRT-RTX {installed} builds weights: {target.weights} engines only where a CUDA driver is "
                    "present (measured: without one, REFIT/STRIP_PLAN builds fail in Myelin with CUDA_SUCCESS not "
                    "met); build this target on a runner with an NVIDIA driver")
        return None

    def build(self, request: BuildRequest) -> BuildResult:
        try:
            import tensorrt_rtx as trt
        except ImportError as e:
            raise BuildError(f"cannot import tensorrt_rtx: {e}", node=request.address,
                             hint="pip install 'trt-orchestrator[rtx]'") from e
        if request.native_precision and request.precision.name != "fp32":
            raise BuildError(_NO_FLAG.format(v=trt.__version__, p=request.precision.name.upper()),
                             node=request.address, hint="build it from the fp16/bf16/int8-qdq transform's ONNX")
        if request.options.extra:
            raise BuildError(f"TensorRT-RTX applies no extra options; got {sorted(request.options.extra)}",
                             node=request.address, hint="remove options.extra from this target")
        if request.timing_cache is not None or request.calibration_cache is not None:
            what = "a pinned timing cache" if request.timing_cache is not None else "a native calibration cache"
            raise BuildError(f"TensorRT-RTX was given {what}, which it cannot use (no timing cache since RTX 1.2, "
                             "no native int8)", node=request.address)
        out_dir = Path(request.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        log_path = out_dir / LOG_NAME
        started = time.perf_counter()
        with _capture(trt, log_path, request.log) as sink:
            try:
                plan, facts = self._build_plan(trt, request, sink)
            except BuildError:
                raise
            except Exception as e:  # pybind TypeError/ValueError/RuntimeError from the bindings: ours to name
                raise BuildError(f"TensorRT-RTX {trt.__version__} failed: {type(e).__name__}: {e}",
                                 node=request.address, log_tail="\n".join(sink.tail[-15:]) or None) from e
            build_seconds = time.perf_counter() - started
            engine_path = out_dir / ENGINE_NAME
            engine_path.write_bytes(plan)
            layer_path = out_dir / LAYERS_NAME
            source, skipped = _layer_info_from_inspector(trt, plan, layer_path)
            if source is None and sink.layer_listing:
                _layer_info_from_log(sink.layer_listing, layer_path)
                source = "build-log"
        metadata_ = {
            **facts,
            "tensorrt_rtx_version": trt.__version__,
            "strongly_typed": True,
            "precision": request.precision.name,
            "precision_via": "native" if request.native_precision
            else ("transform" if request.precision.name != "fp32" else "none"),
            "plan_header": read_header(bytes(plan[:64])).to_json(),
            "engine_bytes": len(plan),
            "layer_info": source,
            "layer_info_skipped": skipped,
            "timing_cache": "not used: deprecated no-op since RTX 1.2 that forces a GPU during AOT builds",
        }
        if facts["options"].get("weights"):
            metadata_["weights"] = facts["options"]["weights"]
        return BuildResult(
            engine_path=engine_path,
            log_path=log_path,
            builder=self.name,
            builder_version=trt.__version__,
            build_seconds=round(build_seconds, 3),
            layer_info_path=layer_path if source else None,
            metadata=metadata_,
            # no timing cache: RTX 1.2+ made the APIs no-ops (see the module docstring)
            timing_cache_read=None,
            timing_cache_written=None,
            timing_cache_path=None,
        )

    def _build_plan(self, trt, request: BuildRequest, sink: _LogSink) -> tuple[bytes, dict]:
        logger = _logger(trt)
        builder = trt.Builder(logger)
        # RTX only supports strongly typed networks ("TensorRT-RTX only supports strongly typed networks",
        # NVIDIA/TensorRT-RTX samples/helloWorld/python/hello_world.py); never an enum integer (TensorRT 11.0
        # renumbered NetworkDefinitionCreationFlag: STRONGLY_TYPED is 1 in the 10.x surfaces, 0 in 11.x).
        network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
        parser = trt.OnnxParser(network, logger)
        if not parser.parse_from_file(str(request.onnx_path)):
            errors = _parser_errors(parser)
            ops = {parser.get_error(i).node_operator() for i in range(parser.num_errors)}
            hint = ("ConvInteger/MatMulInteger/DynamicQuantizeLinear/QLinear* are onnxruntime-only "
                    "quantization ops; quantize with the int8-qdq transform (static Q/DQ) instead"
                    if ops & _ORT_ONLY_OPS else "see build.log for the parser's full output")
            raise BuildError(
                f"TensorRT-RTX {trt.__version__} ONNX parser rejected {request.onnx_path.name} "
                f"({len(errors)} error{'s' if len(errors) != 1 else ''}):\n  " + "\n  ".join(errors),
                node=request.address, hint=hint)

        inputs = {network.get_input(i).name: network.get_input(i) for i in range(network.num_inputs)}
        config = builder.create_builder_config()
        for profile_spec in request.profiles:
            profile = builder.create_optimization_profile()
            for name, (lo, opt, hi) in profile_spec.shapes.items():
                if name not in inputs:
                    raise BuildError(
                        f"profile {profile_spec.name!r} names input {name!r}, which the model does not have; "
                        f"its inputs: {', '.join(inputs)}", node=request.address)
                profile.set_shape(name, tuple(lo), tuple(opt), tuple(hi))
            config.add_optimization_profile(profile)

        conflicts = _shared_dim_conflicts(request.onnx_path, request.profiles)
        if conflicts:
            raise BuildError(
                "TensorRT treats input dims with the same name as one dim, but the profiles give them different "
                "sizes:\n  " + "\n  ".join(conflicts), node=request.address,
                hint="use equal sizes for those dims, or give the dims distinct names in the ONNX model")

        ccs = tuple(request.target.compute_capabilities)
        if ccs:
            members = [_cc_enum(trt, cc) for cc in ccs]
            config.num_compute_capabilities = len(members)
            for i, member in enumerate(members):
                config.set_compute_capability(member, i)
        applied = self._apply_options(trt, config, request)
        flags = weights_flags(trt.__version__, "tensorrt-rtx", request.target.weights)
        for name in flags:  # by name: RTX follows TensorRT 11's BuilderFlag numbering, never an integer here
            config.set_flag(getattr(trt.BuilderFlag, name))
        if flags:
            applied["weights"] = {"mode": request.target.weights, "stripped": "STRIP_PLAN" in flags,
                                  "flags": list(flags)}
        config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED

        plan = builder.build_serialized_network(network, config)
        if plan is None:
            no_driver = flags and any("CUDA_SUCCESS" in e for e in sink.errors)
            raise BuildError(
                "TensorRT-RTX build_serialized_network failed: " + ("; ".join(sink.errors) or "no error logged"),
                node=request.address, log_tail="\n".join(sink.tail[-15:]) or None,
                hint=(f"weights: {request.target.weights} (BuilderFlag {', '.join(flags)}) needs a CUDA driver on "
                      "the build runner with this TensorRT-RTX (measured with 1.7.1.116); build it on a runner with "
                      "an NVIDIA driver" if no_driver else None))
        io = [
            {"name": t.name, "mode": "input" if t.is_network_input else "output",
             "dtype": str(t.dtype).rsplit(".", 1)[-1], "shape": list(t.shape)}
            for t in [network.get_input(i) for i in range(network.num_inputs)]
            + [network.get_output(i) for i in range(network.num_outputs)]
        ]
        facts = {
            "compute_capabilities": list(ccs) or "default (RTX portability set: 8.0, 8.6, 8.9, 12.0 and later)",
            "profile_count": config.num_optimization_profiles,
            "profiles": [p.name for p in request.profiles],
            "io_tensors": io,
            "options": applied,
        }
        return bytes(memoryview(plan)), facts

    @staticmethod
    def _apply_options(trt, config, request: BuildRequest) -> dict:
        """Set what the options ask for, feature-testing each setter (Polygraphy's ``try_run`` pattern); return
        what was set."""
        options = request.options
        applied: dict = {}

        def need(attr: str, what: str) -> None:
            if not hasattr(config, attr):
                raise BuildError(f"TensorRT-RTX {trt.__version__} has no IBuilderConfig.{attr}; cannot set {what}",
                                 node=request.address, hint=f"remove {what} from the target's options")

        if options.optimization_level is not None:
            need("builder_optimization_level", "optimization_level")
            config.builder_optimization_level = int(options.optimization_level)
            applied["optimization_level"] = int(options.optimization_level)
        if options.tiling_level is not None:
            need("tiling_optimization_level", "tiling_level")
            config.tiling_optimization_level = getattr(trt.TilingOptimizationLevel, options.tiling_level.upper())
            applied["tiling_level"] = options.tiling_level
        if options.workspace_mib is not None:
            need("set_memory_pool_limit", "workspace_mib")
            config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(options.workspace_mib) << 20)
            applied["workspace_mib"] = int(options.workspace_mib)
        if options.strongly_typed is False:
            request.log("tensorrt-rtx: strongly_typed: false ignored; RTX networks are always strongly typed")
        if options.version_compatible:
            raise BuildError("TensorRT-RTX engines are not compatible across RTX releases",
                             node=request.address, hint="drop version_compatible from this target")
        return applied


builder = TensorRtxBuilder()
