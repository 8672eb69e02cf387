"""The ``tensorrt`` builder: TensorRT 8.6 / 10.x / 11.x through its Python API, on a GPU runner.

Thin by design: every per-version decision lives in ``_trt_config`` (pure, unit-tested); this module only
drives the real API in the documented order (shared/reference/tensorrt-api.md §2-§4): Builder -> network with
the planned creation flags -> OnnxParser -> optimization profiles -> config via ``_trt_config.apply`` ->
(int8 entropy calibrator on <= 10.x) -> timing cache -> ``build_serialized_network`` -> engine inspector JSON.
TensorRT proper cannot be installed on the project's CI machines, so this path runs only on GPU runners with
TensorRT; tests/integration/test_tensorrt_hw.py exercises it there and skips, naming what is missing, elsewhere.
"""

from __future__ import annotations

import glob
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.contracts.builder import (
    BuilderCapabilities,
    BuildRequest,
    BuildResult,
    OptimizationProfile,
    probe_target,
)
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.model import DataSource, Target
from orchestrator.errors import BuildError
from trt_orchestrator_plugins import _cuda
from trt_orchestrator_plugins._trt import config as _trt_config
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
# int8 calibration data (TensorRT <= 10.x; IInt8EntropyCalibrator2 deprecated in 10.1, removed in 11.0)


def calibration_batches(source: DataSource | None, shapes: dict[str, tuple[int, ...]],
                        dtypes: dict[str, np.dtype]) -> list[dict[str, np.ndarray]]:
    """Calibration samples: ``.npz`` files (one array per input name) or ``.npy`` files (one-input models) under
    ``source.path``; seeded random tensors of ``shapes`` when there is no path."""
    if source is None or source.path is None:
        seed = source.seed if source else 0
        count = source.samples if source else 8
        rng = np.random.default_rng(seed)
        return [{n: rng.standard_normal(s).astype(dtypes[n]) for n, s in shapes.items()} for _ in range(count)]
    if source.preprocess is not None:
        raise BuildError("image-folder calibration data is not read by the tensorrt builder's calibrator",
                         hint="give npy/npz files, or use precision via: transform (Q/DQ calibration)")
    path = Path(source.path)
    files = sorted(glob.glob(str(path / "*.np[yz]"))) if path.is_dir() else [str(path)]
    batches: list[dict[str, np.ndarray]] = []
    for f in files:
        if f.endswith(".npz"):
            with np.load(f) as z:
                missing = set(shapes) - set(z.files)
                if missing:
                    raise BuildError(f"calibration file {f} lacks inputs {sorted(missing)}")
                batches.append({n: z[n].astype(dtypes[n]) for n in shapes})
        else:
            if len(shapes) != 1:
                raise BuildError(f"calibration file {f} is .npy but the model has inputs {sorted(shapes)}; "
                                 "use .npz with one array per input")
            (name,) = shapes
            batches.append({name: np.load(f).astype(dtypes[name])})
        if len(batches) >= source.samples:
            break
    if not batches:
        raise BuildError(f"no .npy/.npz calibration files under {path}")
    return batches


def make_entropy_calibrator(trt: Any, batches: list[dict[str, np.ndarray]], cache_file: Path) -> Any:
    """An ``IInt8EntropyCalibrator2`` feeding ``batches`` from device buffers, caching scales in ``cache_file``."""
    class _EntropyCalibrator(trt.IInt8EntropyCalibrator2):
        def __init__(self) -> None:
            trt.IInt8EntropyCalibrator2.__init__(self)
            self.index = 0
            first = batches[0]
            self.buffers = {n: _cuda.DeviceBuffer(a.nbytes) for n, a in first.items()}

        def get_batch_size(self) -> int:
            return 1  # explicit-batch networks: the batch is in the tensors' shapes

        def get_batch(self, names: list[str]) -> list[int] | None:
            if self.index >= len(batches):
                return None
            batch = batches[self.index]
            self.index += 1
            for n in names:
                arr = np.ascontiguousarray(batch[n])
                if arr.nbytes > self.buffers[n].nbytes:
                    raise BuildError(f"calibration sample for {n!r} is larger than the first sample")
                _cuda.copy_htod(self.buffers[n].ptr, arr)
            return [self.buffers[n].ptr for n in names]

        def read_calibration_cache(self) -> bytes | None:
            return cache_file.read_bytes() if cache_file.exists() else None

        def write_calibration_cache(self, cache: Any) -> None:
            timing_cache.write_atomic(cache_file, bytes(cache))

        def free(self) -> None:
            for b in self.buffers.values():
                b.free()

    return _EntropyCalibrator()


# --------------------------------------------------------------------------------------------------------------


def _dtype_map(trt: Any, network: Any) -> dict[str, np.dtype]:
    out = {}
    for i in range(network.num_inputs):
        t = network.get_input(i)
        out[t.name] = np.dtype(trt.nptype(t.dtype))
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


class TensorRTBuilder:
    name = "tensorrt"
    runtime = "tensorrt"
    slug = "trt"

    def probe_target(self, fingerprint: RunnerFingerprint) -> Target | None:
        return probe_target(self, fingerprint)

    def capabilities(self, version: str) -> BuilderCapabilities:
        return _trt_config.capabilities(version, "tensorrt")

    def available(self, fingerprint: RunnerFingerprint, target: Target) -> str | None:
        version, why = installed_version()
        if version is None:
            return why
        return _trt_config.build_runner_reason(fingerprint, target, version)

    def build(self, request: BuildRequest) -> BuildResult:
        trt = import_tensorrt()
        version = str(trt.__version__)
        plan = _trt_config.plan_build_config(version, "tensorrt", request.precision, request.native_precision,
                                             request.options, request.target)
        out_dir = Path(request.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        log = _LogLines(request.log)
        log_path = out_dir / LOG_FILE
        try:
            return self._build(trt, version, plan, request, out_dir, log)
        finally:
            log.save(log_path)

    def _build(self, trt: Any, version: str, plan: _trt_config.BuildConfigPlan, request: BuildRequest,
               out_dir: Path, log: _LogLines) -> BuildResult:
        logger = make_logger(trt, log)
        log(f"TensorRT {version}: building {request.address} from {request.onnx_path}")
        builder = trt.Builder(logger)
        network = builder.create_network(_trt_config.network_flags_value(plan, trt))
        parser = trt.OnnxParser(network, logger)
        if not parser.parse_from_file(str(request.onnx_path)):
            errors = parser_errors(parser)
            for e in errors:
                log(f"[parser] {e}")
            raise BuildError(f"the TensorRT {version} ONNX parser rejected {request.onnx_path}: "
                             + "; ".join(errors[:5]), node=request.address, log_tail=log.tail())
        config = builder.create_builder_config()
        made_profiles = _add_profiles(builder, config, request.profiles)

        calibrator = None
        if plan.calibrator:
            dtypes = _dtype_map(trt, network)
            shapes = {n: opt for n, (_mn, opt, _mx) in request.profiles[0].shapes.items()} if request.profiles \
                else {network.get_input(i).name: tuple(network.get_input(i).shape) for i in range(network.num_inputs)}
            batches = calibration_batches(request.calibration, shapes, dtypes)
            calibrator = make_entropy_calibrator(trt, batches, out_dir / CALIBRATION_CACHE_FILE)
        try:
            for line in _trt_config.apply(plan, trt, builder, network, config, calibrator=calibrator):
                log(line)
            if calibrator is not None and made_profiles:
                try:  # dynamic shapes: calibrate at the first profile (deprecated 10.1 with the calibrators)
                    config.set_calibration_profile(made_profiles[0])
                except AttributeError:
                    pass

            cache_file = None
            if plan.use_timing_cache:
                cc = timing_cache.building_gpu_cc()
                cache_file = timing_cache.cache_path(request.cache_dir, cc, version)
                cache = config.create_timing_cache(timing_cache.load(cache_file))
                config.set_timing_cache(cache, False)
                log(f"timing cache: {cache_file}")

            started = time.perf_counter()
            serialized = builder.build_serialized_network(network, config)
            seconds = time.perf_counter() - started
        finally:
            if calibrator is not None:
                calibrator.free()
        if serialized is None:
            raise BuildError(f"TensorRT {version} build_serialized_network returned None",
                             node=request.address, log_tail=log.tail())
        engine_path = out_dir / ENGINE_FILE
        timing_cache.write_atomic(engine_path, bytes(memoryview(serialized)))
        log(f"engine written: {engine_path} ({engine_path.stat().st_size} bytes) in {seconds:.1f} s")
        if cache_file is not None:
            timing_cache.merge_and_save(cache_file, _timing_cache_merge(config))

        layer_info = self._write_layer_info(trt, logger, serialized, out_dir / LAYER_INFO_FILE, log)
        return BuildResult(
            engine_path=engine_path,
            log_path=out_dir / LOG_FILE,
            builder=self.name,
            builder_version=version,
            build_seconds=seconds,
            layer_info_path=layer_info,
            metadata={"config": plan.to_json(), "profiles": [p.name for p in request.profiles],
                      "notes": list(plan.notes)},
        )

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
