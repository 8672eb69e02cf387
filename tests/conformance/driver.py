"""One release's conformance run, in its own process: ``python -m tests.conformance.driver`` with the environment
from ``tests.conformance.bindings.prepare(version)`` (the REAL binding module on ``TRT_CONFORMANCE_SITE``, stub
native libraries on ``LD_LIBRARY_PATH``). Prints one JSON object: the cases run, the violations, the deprecated
names used, the version gates as the real module and our planner each see them.

What it drives (our adapters, unchanged, against stand-ins of the real classes; tests/conformance/standins.py):
- ``_trt.config.plan_build_config`` over precisions x native x builder options x hardware compatibility levels
  (and a windows cross-build), each accepted plan applied with ``apply`` to a fresh ``IBuilderConfig`` stand-in;
- the ``tensorrt`` builder's ``build`` end to end (logger, Builder, create_network with the planned flags,
  OnnxParser, profiles, config, calibrator, timing cache shared and pinned, build_serialized_network, engine
  inspector), the parser-error path, and ``calibrate`` (the stand-in builder calls the calibrator's overrides the
  way TensorRT does);
- the ``tensorrt`` runtime's ``load`` / ``run`` / ``benchmark`` / ``close``;
- weights (issue 25): ``targets[].weights: stripped / refittable`` planned and applied (STRIP_PLAN, REFIT_IDENTICAL,
  REFIT as the release has them; 8.6 + stripped refused) and built by the ``tensorrt`` builder, and the runtime's
  ``refit``: Refitter, OnnxParserRefitter.refit_from_file (10.0+; 8.6: set_named_weights from the ONNX
  initializers), the missing-weights check, refit_cuda_engine, serialization with the weights; a missing weight, a
  failed parser refit and a failed refit_cuda_engine each refused with TensorRT's reason.

No GPU: ``trt_orchestrator_plugins._cuda.call`` / ``cudart`` are replaced at module level IN THIS PROCESS ONLY by a
fake CUDA runtime (``FakeCuda``: host memory for pinned buffers, counters for device pointers, streams, events);
the real ``_cuda`` classes (DeviceBuffer, PinnedBuffer, Stream, Event) run on top of it unchanged.
"""

from __future__ import annotations

import ctypes
import importlib
import itertools
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.contracts.builder import BuildRequest, CalibrateRequest, OptimizationProfile
from orchestrator.contracts.runtime import RuntimeOptions
from orchestrator.core.artifact import EngineDescriptor, EngineTarget
from orchestrator.core.model import BuilderOptions, PrecisionSpec, Target
from orchestrator.core.versions import parse_version
from orchestrator.errors import BuildError
from tests.conformance import surface as carried_surface
from tests.conformance.standins import BufferStandIn, Checker, ModuleProxy, Recorder, StandIn
from trt_orchestrator_plugins import _cuda
from trt_orchestrator_plugins._trt import apply as _trt_apply
from trt_orchestrator_plugins._trt import calibration as _calibration
from trt_orchestrator_plugins._trt import config as _trt_config
from trt_orchestrator_plugins._trt import extra_options as _extra_options
from trt_orchestrator_plugins._trt import runner_checks as _runner_checks
from trt_orchestrator_plugins.builders import tensorrt as tensorrt_builder
from trt_orchestrator_plugins.runtimes import tensorrt as tensorrt_runtime

# Names our adapters read inside ``try: ... except AttributeError`` / ``hasattr`` on purpose (feature probes); a
# read of one the release lacks is not a violation. Anything else missing is.
KNOWN_PROBES = frozenset({
    ("Builder", "platform_has_fast_fp16"),  # _trt/config.py apply: removed in 11.0
    ("ParserError", "node_name"),  # builders/tensorrt.py parser_errors: 8.6 has node() only
    ("ICudaEngine", "create_serialization_config"),  # _trt/refit.py: absent in 8.6 (serialize() there)
})
PRECISIONS = ("fp32", "fp16", "bf16", "int8", "fp8")
HW_LEVELS = ("none", "ampere_plus", "same_compute_capability")
OPTIONS: dict[str, BuilderOptions] = {
    "default": BuilderOptions(),
    "opt0": BuilderOptions(optimization_level=0),
    "opt5": BuilderOptions(optimization_level=5),
    **{f"tiling_{t}": BuilderOptions(tiling_level=t) for t in ("none", "fast", "moderate", "full")},  # type: ignore[arg-type]
    "workspace": BuilderOptions(workspace_mib=1024),
    "strongly_typed": BuilderOptions(strongly_typed=True),
    "weakly_typed": BuilderOptions(strongly_typed=False),
    "version_compatible": BuilderOptions(version_compatible=True),
    "vc_exclude_lean": BuilderOptions(version_compatible=True, exclude_lean_runtime=True),
    "no_timing_cache": BuilderOptions(timing_cache=False),
    **{f"extra_{k}": BuilderOptions(extra={k: v}) for k, v in (
        ("avg_timing_iterations", 2), ("max_aux_streams", 0), ("sparse_weights", True), ("tf32", False),
        ("max_num_tactics", 8))},
    "everything": BuilderOptions(optimization_level=4, tiling_level="moderate", workspace_mib=512,
                                 version_compatible=True, exclude_lean_runtime=True,
                                 extra={"avg_timing_iterations": 4, "max_aux_streams": 2, "sparse_weights": True,
                                        "tf32": False}),
}
PROFILES = (OptimizationProfile("a", {"x": ((1, 3, 8, 8), (2, 3, 8, 8), (4, 3, 8, 8))}),
            OptimizationProfile("b", {"x": ((1, 3, 16, 16), (2, 3, 16, 16), (4, 3, 16, 16))}))


class FakeCuda:
    """cuda-python's runtime as far as ``_cuda.call`` needs it: (cudaSuccess, result...) tuples."""

    class cudaError_t:  # noqa: N801 - cuda-python's spelling
        cudaSuccess = 0

    class cudaMemcpyKind:  # noqa: N801
        cudaMemcpyHostToDevice = 1
        cudaMemcpyDeviceToHost = 2

    class cudaDeviceAttr:  # noqa: N801
        cudaDevAttrComputeCapabilityMajor = 75
        cudaDevAttrComputeCapabilityMinor = 76

    class cudaStreamCaptureMode:  # noqa: N801
        cudaStreamCaptureModeThreadLocal = 1

    def __init__(self) -> None:
        self.host: dict[int, Any] = {}
        self.next = itertools.count(0x7000_0000, 0x1000)
        self.calls: list[str] = []

    def __call__(self, name: str, *args: Any) -> Any:
        self.calls.append(name)
        if name == "cudaMallocHost":
            buf = ctypes.create_string_buffer(int(args[0]))
            self.host[ctypes.addressof(buf)] = buf
            return ctypes.addressof(buf)
        if name == "cudaFreeHost":
            self.host.pop(int(args[0]), None)
            return None
        if name in ("cudaMalloc", "cudaStreamCreate", "cudaEventCreate", "cudaStreamEndCapture",
                    "cudaGraphInstantiate"):
            return next(self.next)
        if name == "cudaDeviceGetAttribute":
            return 8 if args[0] == self.cudaDeviceAttr.cudaDevAttrComputeCapabilityMajor else 9
        if name == "cudaEventElapsedTime":
            return 0.25
        return None


def install_fake_cuda() -> FakeCuda:
    fake = FakeCuda()
    _cuda.call = fake  # type: ignore[assignment]
    _cuda.cudart = lambda: fake  # type: ignore[assignment]
    return fake


def plan_bytes(version: str) -> bytes:
    """A plan whose header says ``version`` (plan_header.py's layout)."""
    parts = [p & 0xFF for p in (parse_version(version) + (0, 0, 0, 0))[:4]]
    return b"ftrt" + bytes(20) + bytes(parts) + bytes(36) + b"stand-in engine"


class World:
    """The stand-in objects of one release, scripted to act like a successful TensorRT."""

    def __init__(self, real: Any, rec: Recorder, *, parse_ok: bool = True, tensor_dtype: str = "FLOAT",
                 missing: tuple[str, ...] = (), refit_ok: bool = True, parser_refit_ok: bool = True):
        self.real, self.rec = real, rec
        self.chk = Checker(real, rec)
        self.v = parse_version(real.__version__)
        self.parse_ok = parse_ok
        self.tensor_dtype = tensor_dtype
        self.networks: list[tuple[int, StandIn]] = []
        self.configs: list[StandIn] = []
        self.calibrated: list[bytes] = []
        self.missing, self.refit_ok, self.parser_refit_ok = missing, refit_ok, parser_refit_ok
        factories = {"Builder": self.builder, "OnnxParser": self.parser, "Runtime": self.runtime,
                     "Refitter": self.refitter}
        if hasattr(real, "OnnxParserRefitter"):
            factories["OnnxParserRefitter"] = self.parser_refitter
        self.proxy = ModuleProxy(real, self.chk, factories)

    def s(self, cls: str, **kw: Any) -> StandIn:
        return StandIn(getattr(self.real, cls), self.chk, **kw)

    def _flag_bits(self, flags: int) -> None:
        known = 0
        for member in self.real.NetworkDefinitionCreationFlag.__members__.values():
            known |= 1 << int(member)
        if flags & ~known:
            self.rec.violation(f"create_network({flags:#x}): bits {flags & ~known:#x} are no "
                               "NetworkDefinitionCreationFlag of this release")

    def tensor(self) -> StandIn:
        return self.s("ITensor", values={"name": "x", "shape": (1, 3, 8, 8),
                                         "dtype": getattr(self.real.DataType, self.tensor_dtype)})

    def network(self, flags: int) -> StandIn:
        self._flag_bits(flags)

        def get_flag(flag: Any) -> bool:
            if self.v >= (11,):
                return False  # 11.x: STRONGLY_TYPED is deprecated and ignored (the network does not report it)
            return bool(flags & (1 << int(flag)))

        net = self.s("INetworkDefinition", values={"num_inputs": 1},
                     returns={"get_input": lambda i: self.tensor(), "get_flag": get_flag})
        self.networks.append((flags, net))
        return net

    def timing(self) -> StandIn:
        return self.s("ITimingCache", returns={"serialize": lambda: BufferStandIn(b"conv0/tactic\n"),
                                               "combine": True})

    def config(self) -> StandIn:
        cfg = self.s("IBuilderConfig", returns={"add_optimization_profile": 0,
                                                "create_timing_cache": lambda data: self.timing(),
                                                "get_timing_cache": lambda: self.timing(),
                                                "set_timing_cache": True})
        self.configs.append(cfg)
        return cfg

    def build_serialized(self, network: Any, config: Any) -> BufferStandIn:
        calibrator = config.sets.get("int8_calibrator") if isinstance(config, StandIn) else None
        if calibrator is not None:
            self.drive_calibrator(calibrator)
        return BufferStandIn(plan_bytes(self.real.__version__))

    def drive_calibrator(self, cal: Any) -> None:
        """What TensorRT does with an IInt8Calibrator: the overrides the trampoline calls, with its arguments."""
        if not isinstance(cal, self.real.IInt8Calibrator):
            self.rec.violation(f"int8_calibrator {type(cal).__name__} is not an IInt8Calibrator")
            return
        for name in ("get_batch_size", "get_batch", "read_calibration_cache", "write_calibration_cache"):
            if name not in type(cal).__dict__ and not any(name in vars(k) for k in type(cal).__mro__[:-3]):
                self.rec.violation(f"calibrator {type(cal).__name__} does not override {name}")
        if not isinstance(cal.get_batch_size(), int):
            self.rec.violation("get_batch_size() did not return an int")
        cached = cal.read_calibration_cache()
        if cached is not None:
            memoryview(cached)
            return
        while True:
            ptrs = cal.get_batch(["x"])
            if ptrs is None:
                break
            if not (isinstance(ptrs, list) and all(isinstance(p, int) for p in ptrs)):
                self.rec.violation(f"get_batch returned {ptrs!r}, not a list of device pointers")
                break
        code = (self.v[0] * 10000 + self.v[1] * 100 + self.v[2]) if self.v >= (10,) else (
            self.v[0] * 1000 + self.v[1] * 100 + self.v[2])
        _cls, algorithm, _m = _calibration.CALIBRATORS[
            "minmax" if isinstance(cal, getattr(self.real, "IInt8MinMaxCalibrator", ())) else "entropy"]
        data = f"TRT-{code}-{algorithm}\nx: 3c010a14\n".encode()
        self.calibrated.append(data)
        cal.write_calibration_cache(memoryview(data))

    # -- constructors of the module proxy --------------------------------------------------------------------
    def builder(self, logger: Any) -> StandIn:
        if not isinstance(logger, self.real.ILogger):
            self.rec.violation("Builder(logger): not an ILogger")
        return self.s("Builder", values={"platform_has_fast_fp16": True},
                      returns={"create_network": lambda flags=0: self.network(flags),
                               "create_builder_config": self.config,
                               "create_optimization_profile": lambda: self.s("IOptimizationProfile"),
                               "build_serialized_network": self.build_serialized})

    def parser(self, network: Any, logger: Any) -> StandIn:
        error = self.s("ParserError", returns={"desc": "unsupported op", "node": 3, "node_name": "conv0",
                                               "node_operator": "Conv"})
        return self.s("OnnxParser", values={"num_errors": 0 if self.parse_ok else 1},
                      returns={"parse_from_file": self.parse_ok, "get_error": lambda i: error})

    def engine(self) -> StandIn:
        names = ["x", "y"]
        return self.s("ICudaEngine", values={"num_io_tensors": 2, "num_optimization_profiles": 2,
                                             "device_memory_size": 4096, "device_memory_size_v2": 4096,
                                             "refittable": True},
                      returns={"get_tensor_name": lambda i: names[i],
                               "get_tensor_mode": lambda n: (self.real.TensorIOMode.INPUT if n == "x"
                                                             else self.real.TensorIOMode.OUTPUT),
                               "get_tensor_dtype": lambda n: self.real.DataType.FLOAT,
                               "create_execution_context": lambda *a, **k: self.context(),
                               "create_execution_context_without_device_memory": lambda: self.context(),
                               "create_engine_inspector": lambda: self.s(
                                   "EngineInspector", returns={"get_engine_information": "{\"Layers\": []}"}),
                               "create_serialization_config": lambda: self.s("ISerializationConfig"),
                               "serialize_with_config": lambda config: BufferStandIn(plan_bytes(self.real.__version__)),
                               "serialize": lambda: BufferStandIn(plan_bytes(self.real.__version__))})

    def context(self) -> StandIn:
        return self.s("IExecutionContext", returns={"get_tensor_shape": lambda n: (2, 3, 8, 8),
                                                    "infer_shapes": [], "set_input_shape": True,
                                                    "execute_async_v3": True, "set_optimization_profile_async": True})

    def runtime(self, logger: Any) -> StandIn:
        if not isinstance(logger, self.real.ILogger):
            self.rec.violation("Runtime(logger): not an ILogger")
        return self.s("Runtime", returns={"deserialize_cuda_engine": lambda data: self.engine()})

    def refitter(self, engine: Any, logger: Any) -> StandIn:
        return self.s("Refitter", returns={"get_missing_weights": list(self.missing),
                                           "refit_cuda_engine": self.refit_ok, "get_all_weights": ["w1"],
                                           "set_named_weights": True})

    def parser_refitter(self, refitter: Any, logger: Any) -> StandIn:
        error = self.s("ParserError", returns={"desc": "weights of w1 have another count"})
        return self.s("OnnxParserRefitter", values={"num_errors": 0 if self.parser_refit_ok else 1},
                      returns={"refit_from_file": self.parser_refit_ok, "get_error": lambda i: error})


class Run:
    def __init__(self, real: Any) -> None:
        self.real = real
        self.version = str(real.__version__)
        self.v = parse_version(self.version)
        self.rec = Recorder(allowed_missing=KNOWN_PROBES)
        self.cases: dict[str, int] = {}
        self.refusals: dict[str, str] = {}
        self.failures: list[str] = []

    def case(self, group: str) -> None:
        self.cases[group] = self.cases.get(group, 0) + 1

    def fail(self, text: str) -> None:
        self.rec.violation(text)

    def world(self, **kw: Any) -> World:
        w = World(self.real, self.rec, **kw)
        sys.modules["tensorrt"] = w.proxy  # what ``import tensorrt`` in the adapters returns
        return w

    # -- the config planner --------------------------------------------------------------------------------
    def planner(self) -> None:
        host = "linux/x86_64"
        for (oname, opts), precision, native, hw in itertools.product(OPTIONS.items(), PRECISIONS, (False, True),
                                                                        HW_LEVELS):
            target = Target(name="t", builder="tensorrt", builder_version=self.version,
                            compute_capabilities=() if hw != "none" else ("8.9",), hardware_compatibility=hw,
                            options=opts)
            label = f"{oname}/{precision}/{'native' if native else 'onnx'}/{hw}"
            for pinned in (False, True):
                if pinned and not opts.timing_cache:
                    continue
                try:
                    plan = _trt_config.plan_build_config(self.version, "tensorrt", PrecisionSpec(precision), native,
                                                         opts, target, tool="python", host_platform=host,
                                                         pinned_timing_cache=pinned)
                except BuildError as e:
                    self.refusals[label + ("/pinned" if pinned else "")] = e.message
                    self.case("planner refused")
                    continue
                self.apply_plan(plan, label)
        # the windows cross-build (RuntimePlatform, 10.2+)
        target = Target(name="w", builder="tensorrt", builder_version=self.version, compute_capabilities=("8.9",),
                        platform="windows/x86_64")
        try:
            plan = _trt_config.plan_build_config(self.version, "tensorrt", PrecisionSpec("fp32"), False,
                                                 BuilderOptions(), target, host_platform=host)
            self.apply_plan(plan, "cross-build windows")
        except BuildError as e:
            self.refusals["cross-build windows"] = e.message
            self.case("planner refused")

    def apply_plan(self, plan: _trt_config.BuildConfigPlan, label: str) -> None:
        w = self.world()
        logger = tensorrt_builder.make_logger(w.proxy, tensorrt_builder._LogLines(lambda line: None))
        builder = w.proxy.Builder(logger)
        try:
            flags = _trt_apply.network_flags_value(plan, w.proxy)
            network = builder.create_network(flags)
            config = builder.create_builder_config()
            calibrator = None
            if plan.calibrator:
                calibrator = tensorrt_builder.make_calibrator(w.proxy, plan.calibration_method or "entropy",
                                                              cache=b"")
            _trt_apply.apply(plan, w.proxy, builder, network, config, calibrator=calibrator)
        except BuildError as e:
            self.fail(f"apply({label}) raised BuildError on an accepted plan: {e.message}")
        self.case("planner applied")

    # -- version gates: our planner against the real surface ----------------------------------------------
    def gates(self) -> dict[str, Any]:
        real = self.real
        bf = real.BuilderFlag.__members__
        ncf = real.NetworkDefinitionCreationFlag.__members__
        hw = real.HardwareCompatibilityLevel.__members__
        target = Target(name="g", builder="tensorrt", builder_version=self.version, compute_capabilities=("8.9",))

        def plans(precision: str = "fp32", native: bool = False, hw_level: str = "none", **opts: Any) -> bool:
            t = Target(name="g", builder="tensorrt", builder_version=self.version,
                       compute_capabilities=() if hw_level != "none" else ("8.9",), hardware_compatibility=hw_level)  # type: ignore[arg-type]
            try:
                _trt_config.plan_build_config(self.version, "tensorrt", PrecisionSpec(precision), native,
                                              BuilderOptions(**opts), t)
            except BuildError:
                return False
            return True

        caps = _trt_config.capabilities(self.version, "tensorrt")
        st = ncf.get("STRONGLY_TYPED")
        st_doc = real.NetworkDefinitionCreationFlag.__doc__ or ""
        st_line = next((ln for ln in st_doc.split("\n\n") if ln.strip().startswith("STRONGLY_TYPED")), "")
        facts = {
            "bf16_flag": ("BF16" in bf, plans("bf16", True)),
            "fp16_flag": ("FP16" in bf, plans("fp16", True)),
            "int8_flag": ("INT8" in bf, plans("int8", True)),
            "entropy_calibrator": (hasattr(real, "IInt8EntropyCalibrator2"), caps.supports_calibrator),
            "minmax_calibrator": (hasattr(real, "IInt8MinMaxCalibrator"), caps.supports_calibrator),
            "int8_calibrator_property": ("int8_calibrator" in dir(real.IBuilderConfig), caps.supports_calibrator),
            "device_memory_size_v2": ("device_memory_size_v2" in dir(real.ICudaEngine),
                                      _trt_config.memory_api(self.version) == "device_memory_size_v2"),
            "device_memory_size (used < 10.1)": ("device_memory_size" in dir(real.ICudaEngine),
                                                 _trt_config.memory_api(self.version) == "device_memory_size"
                                                 or "device_memory_size" in dir(real.ICudaEngine)),
            "tiling_optimization_level": ("tiling_optimization_level" in dir(real.IBuilderConfig),
                                          plans(tiling_level="fast")),
            "SAME_COMPUTE_CAPABILITY": ("SAME_COMPUTE_CAPABILITY" in hw, plans(hw_level="same_compute_capability")),
            "AMPERE_PLUS": ("AMPERE_PLUS" in hw, plans(hw_level="ampere_plus")),
            "EXPLICIT_BATCH (planned < 10)": ("EXPLICIT_BATCH" in ncf, "EXPLICIT_BATCH" in ncf and (
                self.v >= (10,) or "EXPLICIT_BATCH" in _trt_config.plan_build_config(
                    self.version, "tensorrt", PrecisionSpec("fp32"), False, BuilderOptions(), target).network_flags)),
            "STRONGLY_TYPED opt-in": (st is not None, plans(strongly_typed=True)),
            "ERROR_ON_TIMING_CACHE_MISS": ("ERROR_ON_TIMING_CACHE_MISS" in bf, caps.pins_timing_cache),
            "runtime_platform": ("runtime_platform" in dir(real.IBuilderConfig),
                                 _runner_checks.cross_build_member("linux/x86_64", "windows/x86_64", self.v, "tensorrt")
                                 is not None),
            "max_num_tactics": ("max_num_tactics" in dir(real.IBuilderConfig),
                                "max_num_tactics" in _extra_options.extra_options(self.v, "python")),
            "platform_has_fast_fp16": ("platform_has_fast_fp16" in dir(real.Builder), self.v < (11,)),
            "create_execution_context_without_device_memory": (
                "create_execution_context_without_device_memory" in dir(real.ICudaEngine),
                _trt_config.memory_api(self.version) == "device_memory_size"
                or "create_execution_context_without_device_memory" in dir(real.ICudaEngine)),
        }
        for name, (surface, ours) in facts.items():
            self.case("version gates")
            if surface != ours:
                self.fail(f"version gate {name}: the real {self.version} module says {surface}, our planner {ours}")
        st_value = None if st is None else int(st)
        st_deprecated = "[DEPRECATED]" in st_line or "deprecated" in st_line.lower()
        expected = {8: (None, False), 10: (1, False), 11: (0, True)}[self.v[0]]
        if (st_value, st_deprecated) != expected:
            self.fail(f"STRONGLY_TYPED on {self.version}: value {st_value}, deprecated {st_deprecated}; the "
                      f"reference says {expected}")
        self.case("version gates")
        return {k: list(v) for k, v in facts.items()} | {"STRONGLY_TYPED": [st_value, st_deprecated]}

    # -- the tensorrt builder end to end --------------------------------------------------------------------
    def request(self, tmp: Path, out: str, precision: str = "fp32", native: bool = False, *, method: str = "entropy",
                profiles: tuple = PROFILES, pinned: Path | None = None, calibration_cache: Path | None = None,
                weights: str = "embedded", **opts: Any) -> BuildRequest:
        model = tmp / "m.onnx"
        model.write_bytes(b"onnx")
        t = Target(name="t", builder="tensorrt", builder_version=self.version, compute_capabilities=("8.9",),
                   options=BuilderOptions(**opts), weights=weights)  # type: ignore[arg-type]
        return BuildRequest(address=f"m/{precision}/default@sm89", build_key="k", onnx_path=model,
                            profiles=profiles, precision=PrecisionSpec(precision, calibration_method=method),  # type: ignore[arg-type]
                            native_precision=native, target=t, options=t.options, out_dir=tmp / out,
                            cache_dir=tmp / "cache", calibration=None, log=lambda line: None,
                            calibration_cache=calibration_cache, timing_cache=pinned)

    def builds(self, tmp: Path) -> None:
        b = tensorrt_builder.builder
        tensorrt_builder.host_platform = lambda: "linux/x86_64"  # type: ignore[assignment]
        cells: list[tuple[str, dict]] = [("fp32", {}), ("fp32 strongly typed", {"strongly_typed": True}),
                                         ("fp16 onnx", {"precision": "fp16"}),
                                         ("fp16 native", {"precision": "fp16", "native": True}),
                                         ("bf16 native", {"precision": "bf16", "native": True}),
                                         ("everything", {"optimization_level": 2, "workspace_mib": 64,
                                                         "version_compatible": True,
                                                         "extra": {"avg_timing_iterations": 2, "tf32": False}}),
                                         ("no timing cache", {"timing_cache": False}),
                                         ("one profile", {"profiles": PROFILES[:1]})]
        if self.v >= (10, 8):
            cells.append(("tiling", {"tiling_level": "full"}))
        for i, (name, kw) in enumerate(cells):
            w = self.world()
            try:
                result = b.build(self.request(tmp, f"b{i}", **kw))
            except BuildError as e:
                self.refusals[f"build {name}"] = e.message
                self.case("build refused")
                continue
            self.case("build")
            if not result.engine_path.read_bytes().startswith(b"ftrt"):
                self.fail(f"build {name}: the engine file is not the serialized plan")
            flags, _net = w.networks[0]
            plan_flags = result.metadata["config"]["network_flags"]
            if flags != sum(1 << int(getattr(self.real.NetworkDefinitionCreationFlag, f)) for f in plan_flags):
                self.fail(f"build {name}: create_network({flags}) is not the plan's {plan_flags}")
        # pinned timing cache
        pinned = tmp / "published.cache"
        pinned.write_bytes(b"conv0/tactic\n")
        self.world()
        try:
            b.build(self.request(tmp, "pinned", pinned=pinned, timing_cache_pin=True))
            self.case("build")
        except BuildError as e:
            self.fail(f"pinned build: {e.message}")
        # the parser's errors
        self.world(parse_ok=False)
        try:
            b.build(self.request(tmp, "parse-error"))
            self.fail("a parser that returns False did not fail the build")
        except BuildError as e:
            expected = "node #3" if self.v < (10,) else "node 'conv0'"
            if expected not in e.message:
                self.fail(f"parser error message {e.message!r} lacks {expected!r}")
            self.case("build parser error")
        # native int8: calibrating inside the build, and from a cache (<= 10.x)
        if self.v < (11,):
            for method in ("entropy", "minmax"):
                w = self.world()
                try:
                    r = b.build(self.request(tmp, f"int8-{method}", "int8", True, method=method))
                    self.case("build int8 calibrated")
                except BuildError as e:
                    self.fail(f"int8 {method} build: {e.message}")
                    continue
                if not w.calibrated:
                    self.fail(f"int8 {method} build: TensorRT's calibration never wrote a cache")
                cache = tmp / f"{method}.cache"
                cache.write_bytes(w.calibrated[-1])
                self.world()
                try:
                    b.build(self.request(tmp, f"int8-{method}-cached", "int8", True, method=method,
                                         calibration_cache=cache))
                    self.case("build int8 from cache")
                except BuildError as e:
                    self.fail(f"int8 {method} build from its cache: {e.message}")
                del r
        # calibrate()
        for method in ("entropy", "minmax"):
            self.world()
            req = CalibrateRequest(key="c", onnx_path=tmp / "m.onnx", out_path=tmp / f"cal-{method}.cache",
                                   precision=PrecisionSpec("int8", calibration_method=method), calibration=None,  # type: ignore[arg-type]
                                   input_shapes={"x": (1, 3, 8, 8)}, input_dtypes={}, log=lambda line: None)
            try:
                facts = b.calibrate(req)
                self.case("calibrate")
                if _calibration.read_header(req.out_path.read_bytes()) is None:
                    self.fail(f"calibrate {method}: no cache written")
                del facts
            except BuildError as e:
                if self.v >= (11,) and "removed in 11.0" in e.message:
                    self.case("calibrate refused (11.x)")
                else:
                    self.fail(f"calibrate {method}: {e.message}")

    # -- weights: strip and refit (issue 25) -----------------------------------------------------------------
    def weights(self, tmp: Path) -> None:
        flags = {"stripped": ("STRIP_PLAN", "REFIT_IDENTICAL"),
                 "refittable": ("REFIT", "STRIP_PLAN") if self.v >= (10,) else ("REFIT",)}
        caps = _trt_config.capabilities(self.version, "tensorrt")
        for mode, want in flags.items():
            target = Target(name="w", builder="tensorrt", builder_version=self.version, compute_capabilities=("8.9",),
                            weights=mode)  # type: ignore[arg-type]
            try:
                plan = _trt_config.plan_build_config(self.version, "tensorrt", PrecisionSpec("fp32"), False,
                                                     BuilderOptions(), target)
            except BuildError as e:
                self.refusals[f"weights {mode}"] = e.message
                self.case("weights refused")
                if mode in caps.weights_modes:
                    self.fail(f"weights {mode}: planning refused what capabilities offer: {e.message}")
                continue
            if mode not in caps.weights_modes:
                self.fail(f"weights {mode}: planned, yet capabilities do not offer it")
            got = tuple(f for f in plan.builder_flags if f in ("STRIP_PLAN", "REFIT", "REFIT_IDENTICAL"))
            if got != want:
                self.fail(f"weights {mode}: builder flags {got}, expected {want}")
            self.apply_plan(plan, f"weights {mode}")
            self.case("weights planned")
            w = self.world()
            try:
                result = tensorrt_builder.builder.build(self.request(tmp, f"w-{mode}", weights=mode))
            except BuildError as e:
                self.fail(f"build with weights {mode}: {e.message}")
                continue
            if not any(c == "IBuilderConfig.set_flag" for c in w.rec.calls):
                self.fail(f"build with weights {mode}: no BuilderFlag was set")
            if result.metadata.get("weights", {}).get("flags") != list(want):
                self.fail(f"build with weights {mode}: metadata {result.metadata.get('weights')}")
            self.case("weights built")
        self.refits(tmp)

    def refits(self, tmp: Path) -> None:
        import onnx
        from onnx import TensorProto, helper, numpy_helper

        from orchestrator.contracts.runtime import RefitRequest
        from orchestrator.errors import GateError

        rt = tensorrt_runtime.runtime
        rt.import_module = lambda: sys.modules["tensorrt"]  # type: ignore[method-assign]
        blob = tmp / "blob"
        blob.mkdir(exist_ok=True)
        w1 = numpy_helper.from_array(np.ones((2, 3), np.float32), "w1")
        graph = helper.make_graph([helper.make_node("MatMul", ["x", "w1"], ["y"])], "g",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])], [w1])
        onnx.save(helper.make_model(graph), str(blob / "model.onnx"))
        engine_file = tmp / "stripped.plan"
        engine_file.write_bytes(plan_bytes(self.version))
        desc = EngineDescriptor("m/fp32/default@sm89", "fp32", "tensorrt", self.version, "tensorrt",
                                EngineTarget("t", ("8.9",)))
        cases = [("refit", {}, None), ("missing weights", {"missing": ("conv.w",)}, "not in model.onnx: conv.w"),
                 ("refit_cuda_engine fails", {"refit_ok": False}, "refit_cuda_engine() failed")]
        if self.v >= (10,):
            cases.append(("parser refit fails", {"parser_refit_ok": False},
                          "refit_from_file(model.onnx) failed: weights of w1 have another count"))
        for label, kw, error in cases:
            w = self.world(**kw)
            out = tmp / f"refitted-{label.replace(' ', '-')}.plan"
            try:
                result = rt.refit(RefitRequest(engine_path=engine_file, engine=desc, weights=blob, out_path=out,
                                               keep_refittable=True))
            except GateError as e:
                if error is None or error not in e.message:
                    self.fail(f"refit ({label}): {e.message}")
                elif out.exists():
                    self.fail(f"refit ({label}) failed but wrote {out.name}")
                else:
                    self.case("refit refused")
                continue
            if error is not None:
                self.fail(f"refit ({label}) did not fail (expected {error!r})")
                continue
            calls = set(w.rec.calls)
            need = {"Refitter()", "Refitter.get_missing_weights", "Refitter.refit_cuda_engine"}
            need |= ({"OnnxParserRefitter()", "OnnxParserRefitter.refit_from_file", "ICudaEngine.serialize_with_config",
                      "ISerializationConfig.clear_flag"} if self.v >= (10,) else
                     {"Refitter.get_all_weights", "Refitter.set_named_weights", "ICudaEngine.serialize"})
            if need - calls:
                self.fail(f"refit ({label}) never called {sorted(need - calls)}")
            how = "OnnxParserRefitter.refit_from_file" if self.v >= (10,) else \
                "Refitter.set_named_weights from the ONNX initializers"
            if result.facts.get("how") != how or not out.read_bytes().startswith(b"ftrt"):
                self.fail(f"refit ({label}): {result.facts}")
            self.case("refit")

    # -- the tensorrt runtime -------------------------------------------------------------------------------
    def runtime(self, tmp: Path) -> None:
        rt = tensorrt_runtime.runtime
        rt.import_module = lambda: sys.modules["tensorrt"]  # type: ignore[method-assign]
        engine_file = tmp / "engine.plan"
        engine_file.write_bytes(plan_bytes(self.version))
        for vc, profile in ((False, 0), (True, 1)):
            self.world()
            desc = EngineDescriptor("m/fp32/default@sm89", "fp32", "tensorrt", self.version, "tensorrt",
                                    EngineTarget("t", ("8.9",), version_compatible=vc))
            try:
                session = rt.load(engine_file, desc, RuntimeOptions(profile_index=profile, device="cuda"))
                out = session.run({"x": np.ones((2, 3, 8, 8), np.float32)})
                if set(out) != {"y"} or out["y"].shape != (2, 3, 8, 8):
                    self.fail(f"run returned {({k: v.shape for k, v in out.items()})}")
                fake = _cuda.call
                before = len(getattr(fake, "calls", ()))
                timing = session.benchmark({"x": np.ones((2, 3, 8, 8), np.float32)}, warmup=1, iterations=3,
                                           time_budget_s=None)
                calls = list(getattr(fake, "calls", ()))[before:]
                if len(timing.compute_ms) != 3:
                    self.fail(f"benchmark timed {len(timing.compute_ms)} iterations, not 3")
                # the device series replays one captured enqueue (trtexec --useCudaGraph), launched once per run
                if timing.extra.get("cuda_graph") != "replayed" or timing.clock != "cuda_graph":
                    self.fail(f"benchmark did not replay a CUDA graph: {timing.clock}, {timing.extra}")
                elif calls and (calls.count("cudaStreamBeginCapture") != 1 or calls.count("cudaGraphLaunch") != 4):
                    self.fail(f"CUDA graph captured {calls.count('cudaStreamBeginCapture')} time(s), launched "
                              f"{calls.count('cudaGraphLaunch')} time(s) (1 and warm-up + iterations = 4 expected)")
                session.close()
                self.case("runtime load/run/benchmark/close")
            except Exception as e:  # noqa: BLE001 - any failure is a finding
                self.fail(f"runtime (version_compatible={vc}): {type(e).__name__}: {e}")


def selftest(real: Any) -> list[str]:
    """Deliberate misuses of the stand-ins; each must come back as a violation (tests/conformance/
    test_real_bindings.py asserts which). Shows the checks can fail."""
    rec = Recorder(allowed_missing=KNOWN_PROBES)
    w = World(real, rec)
    logger = tensorrt_builder.make_logger(w.proxy, tensorrt_builder._LogLines(lambda line: None))
    builder = w.proxy.Builder(logger)
    config = builder.create_builder_config()
    network = builder.create_network(0)
    misuses: list[Any] = [
        lambda: config.no_such_setting,  # an attribute the real class lacks
        lambda: config.set_flag(1),  # an int where a BuilderFlag is required
        lambda: config.set_flag(real.MemoryPoolType.WORKSPACE),  # a member of the wrong real enum
        lambda: config.set_memory_pool_limit(real.MemoryPoolType.WORKSPACE),  # an argument short
        lambda: builder.create_network(0, 1),  # an argument too many
        lambda: setattr(config, "num_optimization_profiles", 2),  # a read-only property
        lambda: setattr(config, "builder_optimization_level", "3"),  # a property set with the wrong type
        lambda: setattr(config, "set_flag", 1),  # a method assigned as if it were a property
        lambda: str(network.get_flag),  # a method read as a value
        lambda: w.proxy.Builder("not a logger"),  # a constructor's argument type
        lambda: builder.create_network(1 << 40),  # bits that are no NetworkDefinitionCreationFlag
    ]
    for misuse in misuses:
        try:
            misuse()
        except AttributeError:
            pass
    return rec.violations


def main() -> None:
    site = os.environ["TRT_CONFORMANCE_SITE"]
    sys.path.insert(0, site)
    started = time.perf_counter()
    real = importlib.import_module(os.environ["TRT_CONFORMANCE_MODULE"])
    if not str(real.__file__).startswith(site):
        raise SystemExit(f"imported {real.__file__}, not the wheel under {site}")
    want = os.environ["TRT_CONFORMANCE_VERSION"]
    if parse_version(str(real.__version__))[:3] != parse_version(want)[:3]:
        raise SystemExit(f"the wheel says {real.__version__}, expected {want}")
    if sys.argv[1:] == ["selftest"]:
        print(json.dumps({"version": str(real.__version__), "violations": selftest(real)}))
        return
    carried = carried_surface.compare(real, want)  # before anything is patched onto the module
    cuda = install_fake_cuda()
    run = Run(real)
    gates: dict[str, Any] = {}
    with warnings.catch_warnings(), tempfile.TemporaryDirectory() as tmp:
        warnings.simplefilter("ignore", DeprecationWarning)
        gates = run.gates()
        run.planner()
        run.builds(Path(tmp))
        run.runtime(Path(tmp))
        run.weights(Path(tmp))
    print(json.dumps({"version": str(real.__version__), "module": str(real.__file__), "cases": run.cases,
                      "violations": run.rec.violations, "deprecated": sorted(set(run.rec.deprecated)),
                      "used": sorted(set(run.rec.calls)), "refusals": run.refusals, "gates": gates,
                      "cuda_calls": sorted(set(cuda.calls)), "surface": carried,
                      "seconds": round(time.perf_counter() - started, 2)}))


if __name__ == "__main__":
    main()
