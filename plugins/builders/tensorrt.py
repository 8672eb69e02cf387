"""The ``tensorrt`` builder: TensorRT 8.6 / 10.x / 11.x through its Python API, on a GPU runner.

Thin by design: every per-version decision lives in ``_trt_config`` (pure, unit-tested); this module only
drives the real API in the order NVIDIA's samples use (NVIDIA/TensorRT samples/python/
introductory_parser_samples/onnx_resnet50.py, samples/python/common.py): Builder -> network with
the planned creation flags -> OnnxParser -> optimization profiles -> config via ``_trt_apply.apply`` ->
(int8 calibrator on <= 10.x) -> timing cache -> ``build_serialized_network`` -> engine inspector JSON.
TensorRT proper cannot be installed on the project's CI machines, so this path runs only on GPU runners with
TensorRT; tests/integration/test_tensorrt_hw.py exercises it there and skips, naming what is missing, elsewhere;
tests/unit/test_builder_tensorrt.py drives it against stand-ins built to the dumped binding surfaces.

- ``options.extra``: the mapping to config calls is ``_trt.extra_options.EXTRA_OPTIONS`` (``avg_timing_iterations`` ->
  ``config.avg_timing_iterations``, ``max_aux_streams`` -> ``config.max_aux_streams``, ``sparse_weights: true``
  -> ``BuilderFlag.SPARSE_WEIGHTS``, ``tf32: false`` -> ``clear_flag(BuilderFlag.TF32)``, ``max_num_tactics`` ->
  ``config.max_num_tactics`` from 10.4); any other key is refused (at validate, and again at build).
- Timing caches: without a pin, the shared per-(GPU, version) cache under ``cache_dir`` (lock, combine, atomic
  save: ``_trt.timing_cache``); with ``request.timing_cache`` (a pinned build) exactly that file, with
  ``ERROR_ON_TIMING_CACHE_MISS`` from 10.0, on a private copy; the shared cache is left alone. The result carries
  the digests read and written and the file written.
- Native int8 (8.6-10.x): ``calibrate(CalibrateRequest)`` builds once with an ``IInt8EntropyCalibrator2`` /
  ``IInt8MinMaxCalibrator`` fed from ``_onnx.data.iter_samples`` at ``request.input_shapes`` (device buffers via
  ``_cuda``) and writes the cache TensorRT hands to ``write_calibration_cache``; a build given
  ``request.calibration_cache`` reads it (header checked: same version, same algorithm) with a calibrator that
  never reads data. ``percentile`` is not a TensorRT calibrator and is refused.
- Platform: ``available`` refuses a runner of another platform than the target's, except the documented
  cross-build linux/x86_64 -> windows/x86_64 (10.2+), which sets ``config.runtime_platform =
  RuntimePlatform.WINDOWS_AMD64`` (no layer info then: the engine cannot be deserialized on the host).
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.contracts.builder import (
    BuilderCapabilities,
    BuildRequest,
    BuildResult,
    CalibrateRequest,
    OptimizationProfile,
    probe_target,
)
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.model import Target
from orchestrator.core.platform import platform_text
from orchestrator.core.versions import parse_version
from orchestrator.errors import BuildError
from trt_orchestrator_plugins import _cuda
from trt_orchestrator_plugins._onnx.data import iter_samples
from trt_orchestrator_plugins._trt import apply as _trt_apply
from trt_orchestrator_plugins._trt import calibration as _calibration
from trt_orchestrator_plugins._trt import compat as _compat
from trt_orchestrator_plugins._trt import config as _trt_config
from trt_orchestrator_plugins._trt import plan_header as _plan_header
from trt_orchestrator_plugins._trt import runner_checks as _runner_checks
from trt_orchestrator_plugins._trt import timing_cache

ENGINE_FILE = "engine.plan"
LOG_FILE = "build.log"
LAYER_INFO_FILE = "layer_info.json"
CALIBRATION_CACHE_FILE = "calibration.cache"
LOG_TAIL_LINES = 40
NOT_INSTALLED = "TensorRT (tensorrt) is not installed: its wheels come only from NVIDIA's index"


def import_tensorrt() -> Any:
    """``import tensorrt`` or BuildError saying why not (a bindings wheel without libnvinfer raises OSError)."""
    try:
        import tensorrt  # noqa: PLC0415 - heavy, imported only when building
    except (ImportError, OSError) as e:
        raise BuildError(f"{NOT_INSTALLED} ({type(e).__name__}: {e})",
                         hint="pip install 'trt-orchestrator[tensorrt]' on a GPU runner that can reach "
                              "NVIDIA's index") from e
    return tensorrt


def installed_version() -> tuple[str | None, str | None]:
    """(version, None) when ``tensorrt`` imports, else (None, why not)."""
    try:
        trt = import_tensorrt()
    except BuildError as e:
        return None, e.message
    return str(trt.__version__), None


class _LogLines:
    """Collects TensorRT's log and the builder's own lines; the tail goes into BuildError."""

    def __init__(self, echo: Callable[[str], None]):
        self.lines: list[str] = []
        self.echo = echo

    def __call__(self, line: str) -> None:
        self.lines.append(line)
        self.echo(line)

    def tail(self, n: int = LOG_TAIL_LINES) -> str:
        return "\n".join(self.lines[-n:])

    def save(self, path: Path) -> None:
        path.write_text("\n".join(self.lines) + "\n")


def make_logger(trt: Any, sink: _LogLines, severity: str = "INFO") -> Any:
    """An ``ILogger`` subclass that forwards every message to ``sink`` (TensorRT's own log is the build log)."""
    threshold = getattr(trt.ILogger.Severity, severity)

    class _Logger(trt.ILogger):
        def __init__(self) -> None:
            trt.ILogger.__init__(self)

        def log(self, sev: Any, msg: str) -> None:
            if int(sev) <= int(threshold):
                sink(f"[{getattr(sev, 'name', sev)}] {msg}")

    return _Logger()


def parser_errors(parser: Any) -> list[str]:
    """Every ONNX parser error, with node name/operator on >= 10.0 (``node_name``/``node_operator``) and node
    index on 8.6, where those methods do not exist."""
    out = []
    for i in range(parser.num_errors):
        err = parser.get_error(i)
        where = []
        try:
            where.append(f"node {err.node_name()!r}")
            where.append(f"op {err.node_operator()}")
        except AttributeError:  # 8.6: ParserError has node() (an index) but no node_name/node_operator
            where.append(f"node #{err.node()}")
        out.append(f"{', '.join(where)}: {err.desc()} [{err.code()}]")
    return out


# --------------------------------------------------------------------------------------------------------------
# int8 calibrators (TensorRT <= 10.x; deprecated in 10.1, removed in 11.0)


def make_calibrator(trt: Any, method: str, *, samples: Iterable[dict] | None = None, cache: bytes | None = None,
                    on_cache: Callable[[bytes], None] | None = None) -> Any:
    """A TensorRT calibrator of ``method``'s class (``IInt8EntropyCalibrator2`` / ``IInt8MinMaxCalibrator``).

    With ``cache`` it only reads: ``read_calibration_cache`` returns those bytes and ``get_batch`` returns None
    (no data is ever read). Otherwise it feeds ``samples`` (input name -> array) through device buffers and hands
    the cache TensorRT writes to ``on_cache``. A Python error inside a callback cannot cross TensorRT's C++ frames
    intact, so it is kept in ``error`` and raised by the builder after the build returns."""
    class_name, _algorithm, _member = _calibration.calibrator_for(method)
    base = getattr(trt, class_name, None)
    if base is None:
        raise BuildError(f"this TensorRT {getattr(trt, '__version__', '?')} has no {class_name} (the int8 calibrators "
                         "were removed in 11.0)", hint="use precision via: transform (Q/DQ)")
    feed = iter(samples) if samples is not None and cache is None else iter(())

    class _Calibrator(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            base.__init__(self)
            self.buffers: dict[str, Any] = {}
            self.batches = 0
            self.error: BuildError | None = None
            self.class_name = class_name

        def get_batch_size(self) -> int:
            return 1  # explicit-batch networks: the batch is in the tensors' shapes

        def get_batch(self, names: list[str]) -> list[int] | None:
            if cache is not None or self.error is not None:
                return None
            try:
                sample = next(feed)
            except StopIteration:
                return None
            except Exception as e:  # the data reader's error, kept for the builder to raise
                self.error = e if isinstance(e, BuildError) else BuildError(
                    f"reading calibration data failed: {type(e).__name__}: {e}")
                return None
            try:
                for n in names:
                    if n not in sample:
                        raise BuildError(f"the calibration data has no input {n!r} (it has {sorted(sample)})")
                    arr = np.ascontiguousarray(sample[n])
                    buf = self.buffers.get(n)
                    if buf is None:
                        buf = self.buffers[n] = _cuda.DeviceBuffer(arr.nbytes)
                    elif arr.nbytes > buf.nbytes:
                        raise BuildError(f"calibration sample {self.batches} for {n!r} is larger than the first; "
                                         "every sample must have the calibration shape")
                    _cuda.copy_htod(buf.ptr, arr)
            except (BuildError, _cuda.CudaCallError, _cuda.CudaUnavailable) as e:
                self.error = e if isinstance(e, BuildError) else BuildError(f"calibration batch upload failed: {e}")
                return None
            self.batches += 1
            return [self.buffers[n].ptr for n in names]

        def read_calibration_cache(self) -> bytes | None:
            return cache

        def write_calibration_cache(self, data: Any) -> None:
            if on_cache is not None:
                on_cache(bytes(data))

        def free(self) -> None:
            for b in self.buffers.values():
                b.free()
            self.buffers = {}

    return _Calibrator()


def _dtype_names(trt: Any, network: Any) -> dict[str, str]:
    """Input name -> numpy dtype name, from the network (``trt.nptype``)."""
    out = {}
    for i in range(network.num_inputs):
        t = network.get_input(i)
        out[t.name] = np.dtype(trt.nptype(t.dtype)).name
    return out


def _add_profiles(builder: Any, config: Any, profiles: tuple[OptimizationProfile, ...]) -> list[Any]:
    made = []
    for prof in profiles:
        p = builder.create_optimization_profile()
        for name, (mn, opt, mx) in prof.shapes.items():
            p.set_shape(name, tuple(mn), tuple(opt), tuple(mx))
        if config.add_optimization_profile(p) < 0:
            raise BuildError(f"TensorRT rejected optimization profile {prof.name!r}: {prof.shapes}")
        made.append(p)
    return made


def _timing_cache_merge(config: Any) -> Callable[[bytes], bytes]:
    """Polygraphy's save step: combine what is on disk into this build's cache (ignore_mismatch=True)."""

    def merge(previous: bytes) -> bytes:
        cache = config.get_timing_cache()
        if previous:
            prev = config.create_timing_cache(previous)
            cache.combine(prev, True)
        return bytes(memoryview(cache.serialize()))

    return merge


def host_platform() -> str:
    """This machine's platform as the fingerprint spells it (``platform.system()``, ``platform.machine()``)."""
    return platform_text(platform.system(), platform.machine())


def _network(trt: Any, builder: Any, flags: int, onnx_path: Path, logger: Any, log: _LogLines, version: str,
             node: str | None) -> tuple[Any, Any]:
    """The parsed network and its parser (which owns the weights: keep it alive until the build is done)."""
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = parser_errors(parser)
        for e in errors:
            log(f"[parser] {e}")
        raise BuildError(f"the TensorRT {version} ONNX parser rejected {onnx_path}: " + "; ".join(errors[:5]),
                         node=node, log_tail=log.tail())
    return network, parser


class _TimingCache:
    """One build's timing cache: where it starts (the shared file, or the pinned one) and what it leaves."""

    def __init__(self, request: BuildRequest, plan: _trt_config.BuildConfigPlan, version: str, out_dir: Path):
        self.pinned = Path(request.timing_cache) if plan.timing_cache_pinned and request.timing_cache else None
        self.shared: Path | None = None
        self.read: str | None = None
        self.written: str | None = None
        self.path: Path | None = None
        self.changed = False
        if not plan.use_timing_cache:
            return
        if self.pinned is not None:
            if not self.pinned.is_file():
                raise BuildError(f"the pinned timing cache {self.pinned} does not exist", node=request.address)
            self.path = out_dir / timing_cache.PINNED_WORK_FILE
        else:
            self.shared = timing_cache.cache_path(request.cache_dir, timing_cache.building_gpu_cc(), version)

    def start(self, config: Any, log: _LogLines, node: str) -> None:
        if self.pinned is not None:
            data = self.pinned.read_bytes()
            self.read = timing_cache.digest(data) if data else None
            cache = config.create_timing_cache(data)
            # ignore_mismatch=False: a pinned cache measured on another device or TensorRT build is refused
            if config.set_timing_cache(cache, False) is False:
                raise BuildError(f"TensorRT refused the pinned timing cache {self.pinned.name} (set_timing_cache "
                                 "returned False: it was measured on another GPU or TensorRT version)", node=node,
                                 log_tail=log.tail(),
                                 hint="pin the cache published for this GPU and TensorRT version, or unpin")
            log(f"timing cache: pinned {self.pinned} ({self.read or 'empty'})")
        elif self.shared is not None:
            data = timing_cache.load(self.shared)
            self.read = timing_cache.digest(data) if data else None
            cache = config.create_timing_cache(data)
            config.set_timing_cache(cache, False)
            log(f"timing cache: {self.shared} ({self.read or 'new'})")

    def finish(self, config: Any, log: _LogLines) -> None:
        """After a successful build: save what the build left (private copy when pinned, merged shared file)."""
        if self.pinned is not None and self.path is not None:
            data = bytes(memoryview(config.get_timing_cache().serialize()))
            timing_cache.write_atomic(self.path, data)
            self.written = timing_cache.digest(data)
            self.changed = self.written != self.read
            if self.changed:
                log("note: the timing cache after this pinned build differs from the pinned one (new entries on "
                    "versions without ERROR_ON_TIMING_CACHE_MISS, or a re-serialization); recorded as written")
        elif self.shared is not None:
            merged = timing_cache.merge_and_save(self.shared, _timing_cache_merge(config))
            self.written = timing_cache.digest(merged)
            self.path = self.shared

    def facts(self) -> dict[str, Any]:
        return {"mode": "pinned" if self.pinned else ("shared" if self.shared else "off"),
                "pinned_from": str(self.pinned) if self.pinned else None, "read": self.read,
                "written": self.written, "changed": self.changed if self.pinned else None}


class TensorRTBuilder:
    name = "tensorrt"
    runtime = "tensorrt"
    slug = "trt"
    # the recipe version (a build-key input): bump it in the change that makes this plugin build other bytes
    recipe = "1"

    def probe_target(self, fingerprint: RunnerFingerprint) -> Target | None:
        return probe_target(self, fingerprint)

    def capabilities(self, version: str) -> BuilderCapabilities:
        return _trt_config.capabilities(version, "tensorrt", tool="python")

    def available(self, fingerprint: RunnerFingerprint, target: Target) -> str | None:
        """The installed version must be the target's; the runner's platform (``fingerprint.platform``) the
        target's, or linux/x86_64 for windows/x86_64 targets from 10.2 (cross-build); a GPU of the target's CC."""
        version, why = installed_version()
        if version is None:
            return why
        return _runner_checks.build_runner_reason(fingerprint, target, version)

    def build(self, request: BuildRequest) -> BuildResult:
        trt = import_tensorrt()
        version = str(trt.__version__)
        why = _compat.builder_version_reason(request.target.name, request.target.builder_version, version)
        if why:
            raise BuildError(why, node=request.address)
        plan = _trt_config.plan_build_config(version, "tensorrt", request.precision, request.native_precision,
                                             request.options, request.target, tool="python",
                                             host_platform=host_platform(),
                                             pinned_timing_cache=request.timing_cache is not None)
        out_dir = Path(request.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        log = _LogLines(request.log)
        log_path = out_dir / LOG_FILE
        try:
            return self._build(trt, version, plan, request, out_dir, log)
        finally:
            log.save(log_path)

    def _calibrator_for_build(self, trt: Any, version: str, plan: _trt_config.BuildConfigPlan,
                              request: BuildRequest, network: Any, out_dir: Path, log: _LogLines) -> tuple[Any, dict]:
        """The int8 calibrator of a native int8 build: reading ``request.calibration_cache`` (the calibrate node's;
        no data is read), or, without one, calibrating here from ``request.calibration``."""
        method = plan.calibration_method or "entropy"
        if request.calibration_cache is not None:
            path = Path(request.calibration_cache)
            if not path.is_file():
                raise BuildError(f"the calibration cache {path} does not exist", node=request.address)
            data = path.read_bytes()
            header = _calibration.check_cache(data, version, method)
            log(f"int8 scales read from calibration cache {path} ({header.line}); no calibration data is read")
            facts = {"source": "cache", "cache": str(path), "digest": timing_cache.digest(data),
                     "header": header.line}
            return make_calibrator(trt, method, cache=data), facts
        shapes = ({n: tuple(opt) for n, (_mn, opt, _mx) in request.profiles[0].shapes.items()} if request.profiles
                  else {network.get_input(i).name: tuple(network.get_input(i).shape)
                        for i in range(network.num_inputs)})
        cache_file = out_dir / CALIBRATION_CACHE_FILE
        log(f"no calibration cache given: calibrating here ({method}) at {shapes}, cache -> {cache_file}")
        samples = iter_samples(request.calibration, shapes, _dtype_names(trt, network))
        calibrator = make_calibrator(trt, method, samples=samples,
                                     on_cache=lambda data: timing_cache.write_atomic(cache_file, data))
        return calibrator, {"source": "computed", "cache": str(cache_file)}

    def _build(self, trt: Any, version: str, plan: _trt_config.BuildConfigPlan, request: BuildRequest,
               out_dir: Path, log: _LogLines) -> BuildResult:
        logger = make_logger(trt, log)
        log(f"TensorRT {version}: building {request.address} from {request.onnx_path}")
        builder = trt.Builder(logger)
        network, _parser = _network(trt, builder, _trt_apply.network_flags_value(plan, trt),
                                    Path(request.onnx_path), logger, log, version, request.address)
        config = builder.create_builder_config()
        made_profiles = _add_profiles(builder, config, request.profiles)

        calibrator, calibration = None, None
        if plan.calibrator:
            calibrator, calibration = self._calibrator_for_build(trt, version, plan, request, network, out_dir, log)
        cache = _TimingCache(request, plan, version, out_dir)
        try:
            for line in _trt_apply.apply(plan, trt, builder, network, config, calibrator=calibrator):
                log(line)
            if calibrator is not None and made_profiles:
                try:  # dynamic shapes: calibrate at the first profile (deprecated 10.1 with the calibrators)
                    config.set_calibration_profile(made_profiles[0])
                except AttributeError:
                    pass
            cache.start(config, log, request.address)
            started = time.perf_counter()
            serialized = builder.build_serialized_network(network, config)
            seconds = time.perf_counter() - started
        finally:
            if calibrator is not None:
                calibrator.free()
        if calibrator is not None and calibrator.error is not None:
            raise calibrator.error
        if serialized is None:
            if cache.pinned is not None and "ERROR_ON_TIMING_CACHE_MISS" in plan.builder_flags:
                errors = [line for line in log.lines if line.startswith(("[ERROR]", "[INTERNAL_ERROR]"))]
                raise timing_cache.miss_error(version, cache.pinned, timing_cache.miss_lines(errors),
                                              node=request.address, log_tail=log.tail(),
                                              flag="ERROR_ON_TIMING_CACHE_MISS")
            raise BuildError(f"TensorRT {version} build_serialized_network returned None",
                             node=request.address, log_tail=log.tail())
        engine_path = out_dir / ENGINE_FILE
        data = bytes(memoryview(serialized))
        # recorded: trt.__version__, with the build number from the plan's own header where the module reports
        # only major.minor.patch (the 8.6.1 and 10.0-10.7 wheels)
        recorded, contradiction = _plan_header.recorded_version(
            version, _plan_header.read_header(data[:_plan_header.HEADER_BYTES]), request.target.builder_version)
        if contradiction:
            raise BuildError(contradiction, node=request.address, log_tail=log.tail())
        timing_cache.write_atomic(engine_path, data)
        log(f"engine written: {engine_path} ({engine_path.stat().st_size} bytes) in {seconds:.1f} s")
        cache.finish(config, log)

        if plan.runtime_platform is not None:
            log(f"no layer info: a {request.target.platform} engine cannot be deserialized on this host")
            layer_info = None
        else:
            layer_info = self._write_layer_info(trt, logger, serialized, out_dir / LAYER_INFO_FILE, log)
        return BuildResult(
            engine_path=engine_path,
            log_path=out_dir / LOG_FILE,
            builder=self.name,
            builder_version=recorded,
            build_seconds=seconds,
            layer_info_path=layer_info,
            metadata={"config": plan.to_json(), "profiles": [p.name for p in request.profiles],
                      "notes": list(plan.notes), "timing_cache": cache.facts(), "calibration": calibration,
                      "platform": request.target.platform, "built_on": host_platform(),
                      **({"weights": plan.weights_json()} if plan.weights_json() else {})},
            timing_cache_read=cache.read,
            timing_cache_written=cache.written,
            timing_cache_path=cache.path,
        )

    def calibrate(self, request: CalibrateRequest) -> dict[str, Any]:
        """Compute a native int8 calibration cache: build once with the INT8 flag and the method's calibrator over
        ``iter_samples`` at ``request.input_shapes`` (one optimization profile pinned to them, which is also the
        calibration profile); write the cache TensorRT hands to ``write_calibration_cache`` to ``request.out_path``.
        The engine of that build is discarded."""
        trt = import_tensorrt()
        version = str(trt.__version__)
        v = parse_version(version)
        method = request.precision.calibration_method
        class_name, algorithm, _member = _calibration.calibrator_for(method)
        if v >= (11,):
            raise BuildError(f"TensorRT {version} has no int8 calibrators (removed in 11.0): no native calibration "
                             "cache can be computed", hint="use precision via: transform (Q/DQ)")
        log = _LogLines(request.log)
        logger = make_logger(trt, log)
        builder = trt.Builder(logger)
        # 8.6: explicit batch (the ONNX parser needs it); 10.x: weakly typed (a strongly typed network ignores INT8)
        flags = 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH) if v < (10,) else 0
        network, _parser = _network(trt, builder, flags, Path(request.onnx_path), logger, log, version, None)
        inputs = [network.get_input(i) for i in range(network.num_inputs)]
        missing = [t.name for t in inputs if t.name not in request.input_shapes]
        if missing:
            raise BuildError(f"no calibration shape for inputs {missing} of {Path(request.onnx_path).name} (given: "
                             f"{sorted(request.input_shapes)})")
        shapes = {t.name: tuple(int(d) for d in request.input_shapes[t.name]) for t in inputs}
        network_dtypes = _dtype_names(trt, network)
        dtypes = {n: request.input_dtypes.get(n) or network_dtypes[n] for n in shapes}
        config = builder.create_builder_config()
        config.set_flag(trt.BuilderFlag.INT8)
        profile = builder.create_optimization_profile()
        for name, shape in shapes.items():
            profile.set_shape(name, shape, shape, shape)
        if config.add_optimization_profile(profile) < 0:
            raise BuildError(f"TensorRT rejected the calibration shapes {shapes}")
        written: list[bytes] = []
        calibrator = make_calibrator(trt, method, samples=iter_samples(request.calibration, shapes, dtypes),
                                     on_cache=written.append)
        config.int8_calibrator = calibrator
        config.set_calibration_profile(profile)
        log(f"TensorRT {version}: calibrating {Path(request.onnx_path).name} with {class_name} at {shapes}")
        try:
            started = time.perf_counter()
            serialized = builder.build_serialized_network(network, config)
            seconds = time.perf_counter() - started
        finally:
            calibrator.free()
        if calibrator.error is not None:
            raise calibrator.error
        if not written:
            raise BuildError(f"TensorRT {version} handed no calibration cache to write_calibration_cache "
                             f"({calibrator.batches} batches fed)", log_tail=log.tail())
        data = written[-1]
        header = _calibration.read_header(data)
        if header is None or header.algorithm != algorithm:
            raise BuildError(f"TensorRT {version} wrote a calibration cache without the expected "
                             f"TRT-<version>-{algorithm} header: {data[:60]!r}", log_tail=log.tail())
        timing_cache.write_atomic(Path(request.out_path), data)
        if serialized is None:
            log("warning: the calibration build's engine failed after calibrating; the cache is kept")
        log(f"calibration cache written: {request.out_path} ({header.line}, {len(data)} bytes, "
            f"{calibrator.batches} batches, {seconds:.1f} s)")
        return {"calibrator": class_name, "method": method, "header": header.line, "tensorrt_version": version,
                "batches": calibrator.batches, "shapes": {n: list(s) for n, s in shapes.items()},
                "cache_bytes": len(data), "seconds": round(seconds, 3)}

    @staticmethod
    def _write_layer_info(trt: Any, logger: Any, serialized: Any, path: Path, log: _LogLines) -> Path | None:
        """Engine inspector JSON (profiling verbosity DETAILED was set by the plan)."""
        engine = trt.Runtime(logger).deserialize_cuda_engine(serialized)
        if engine is None:
            log("warning: could not deserialize the new engine for the inspector; no layer info")
            return None
        inspector = engine.create_engine_inspector()
        text = inspector.get_engine_information(trt.LayerInformationFormat.JSON)
        try:
            json.loads(text)
        except ValueError:
            log("warning: the engine inspector returned non-JSON text; saved as is")
        path.write_text(text)
        return path


builder = TensorRTBuilder()
