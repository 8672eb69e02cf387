"""Stand-ins for ``tensorrt`` built from NVIDIA's real binding surfaces, and the check that they still are.

TensorRT cannot be installed here, so the ``tensorrt``/``trtexec`` builder paths are driven against a fake module.
The fake is not invented: its enums (member names and values), classes, methods and properties come from
``test_builder_trt_surface.json``, a subset of the surfaces dumped from the real binding wheels, which the
repository carries (tests/conformance/data/surface_<release>.json.gz, 8.6.1 ... 11.4; tests/conformance checks
each against NVIDIA's real module of that release). Every attribute our code touches on
a stand-in is checked against that version's surface: reading a method or property the release lacks raises
AttributeError (as the real binding does), setting a read-only or absent property raises AttributeError, and an
enum-typed property only takes a member of that enum. ``test_fixture_is_the_real_surface`` re-extracts the subset
from those dumps and fails on any drift.

What the fake *does* (calibrating, timing, writing caches) is scripted for the tests and stated as such in each
test; only the API shape is NVIDIA's.
"""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conformance import surface as carried_surface
from trt_orchestrator_plugins import _cuda
from trt_orchestrator_plugins._trt import timing_cache, trtexec_options

FIXTURE = Path(__file__).with_name("test_builder_trt_surface.json")

CLASSES = ("IBuilderConfig", "Builder", "INetworkDefinition", "ITensor", "OnnxParser", "ParserError",
           "IOptimizationProfile", "ITimingCache", "IInt8Calibrator", "IInt8EntropyCalibrator2",
           "IInt8MinMaxCalibrator", "ILogger", "Runtime", "ICudaEngine", "EngineInspector", "IHostMemory")
ENUMS = ("BuilderFlag", "NetworkDefinitionCreationFlag", "MemoryPoolType", "ProfilingVerbosity", "RuntimePlatform",
         "HardwareCompatibilityLevel", "TilingOptimizationLevel", "CalibrationAlgoType", "LayerInformationFormat",
         "DataType")


def extract_subset(surface: dict) -> dict:
    """The part of one release's surface the stand-ins use: names only (and enum values, property types)."""
    classes = {}
    for name in CLASSES:
        cls = surface["classes"].get(name)
        if cls is None:
            continue
        # the network's layer factories (add_*) and private names are of no use to a builder stand-in
        skip = ("_", "add_") if name == "INetworkDefinition" else ("_",)
        classes[name] = {
            "methods": sorted(m for m in cls.get("methods", {}) if not m.startswith(skip)),
            "properties": {p: {"settable": bool(v.get("settable")), "type": str(v.get("type", "")).rsplit(".", 1)[-1]}
                           for p, v in sorted(cls.get("properties", {}).items())},
        }
    enums = {name: {m: int(v["value"]) for m, v in sorted(surface["enums"][name]["members"].items())}
             for name in ENUMS if name in surface["enums"]}
    return {"version": surface["version"], "classes": classes, "enums": enums}


# every trtexec option the trtexec builder may emit
TRTEXEC_USED = ("--onnx", "--saveEngine", "--skipInference", "--fp16", "--bf16", "--int8", "--fp8", "--stronglyTyped",
                "--versionCompatible", "--excludeLeanRuntime", "--memPoolSize", "--profile", "--minShapes",
                "--optShapes", "--maxShapes", "--timingCacheFile", "--errorOnTimingCacheMiss",
                "--builderOptimizationLevel", "--tilingOptimizationLevel", "--hardwareCompatibilityLevel", "--calib",
                "--runtimePlatform", "--avgTiming", "--maxAuxStreams", "--maxTactics", "--sparsity", "--noTF32",
                "--exportLayerInfo", "--profilingVerbosity")


def trtexec_subset(options: dict[str, frozenset[str]]) -> dict[str, list[str]]:
    """Per OSS tag, which of ``TRTEXEC_USED`` trtexec accepts."""
    return {tag: sorted(set(TRTEXEC_USED) & set(names)) for tag, names in options.items()}


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


def load_fixture() -> dict[str, dict]:
    return json.loads(FIXTURE.read_text())


SURFACES = load_fixture()
RELEASES = sorted(SURFACES, key=_version_key)
# the project's own table (plugins/_trt/trtexec_options.py; tests/conformance checks it equals the reference)
TRTEXEC_OPTIONS: dict[str, list[str]] = trtexec_subset(dict(trtexec_options.OPTIONS))


def trtexec_tag_version(tag: str) -> str:
    """``v10.16`` -> ``10.16.0``; ``v8.6.1`` -> ``8.6.1``."""
    parts = tag.lstrip("v").split(".")
    return ".".join((parts + ["0", "0"])[:3])


def surface_for(version: str) -> dict:
    """The dumped release a version string belongs to: same major.minor (10.13.3.9 -> 10.13.3.9; 8.6.1.6 -> 8.6.1)."""
    want = _version_key(version)[:2]
    found = [r for r in RELEASES if _version_key(r)[:2] == want]
    if not found:
        raise LookupError(f"no dumped surface for TensorRT {version} (have {RELEASES})")
    return SURFACES[found[-1]]


def _extracted() -> dict[str, dict]:
    return {v: extract_subset(carried_surface.load(v)) for v in carried_surface.carried_versions()}


def test_fixture_is_the_real_surface():
    """Every carried release is in the fixture, each exactly its extracted subset (the data is in the tree)."""
    extracted = _extracted()
    assert len(extracted) >= 11 and extracted == SURFACES


def write_fixture() -> None:  # pragma: no cover - how the fixtures were made (python -c "...write_fixture()")
    out = _extracted()
    lines = [f"{json.dumps(v)}: {json.dumps(out[v], sort_keys=True, separators=(',', ':'))}"
             for v in sorted(out, key=_version_key)]  # one release per line: diffs name the release
    FIXTURE.write_text("{\n" + ",\n".join(lines) + "\n}\n")


# ---------------------------------------------------------------------------------------------------------------
# the stand-in module


class _Checked:
    """Attribute access checked against one class of one release's surface."""

    _surface_class = ""

    def __init__(self, trt: FakeTensorRT) -> None:
        object.__setattr__(self, "_trt", trt)
        object.__setattr__(self, "_props", {})

    def _spec(self) -> dict:
        return self._trt._surface["classes"][self._surface_class]

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("_"):
            return object.__getattribute__(self, name)
        spec = object.__getattribute__(self, "_spec")()
        if name in spec["properties"]:
            props = object.__getattribute__(self, "_props")
            if name in props:
                return props[name]
            return object.__getattribute__(self, name)
        if name in spec["methods"]:
            return object.__getattribute__(self, name)
        version = object.__getattribute__(self, "_trt").__version__
        raise AttributeError(f"'{self._surface_class}' of TensorRT {version} has no attribute '{name}'")

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):  # the stand-in's own bookkeeping
            object.__setattr__(self, name, value)
            return
        spec = self._spec()
        prop = spec["properties"].get(name)
        if prop is None or not prop["settable"]:
            raise AttributeError(f"can't set '{self._surface_class}.{name}' on TensorRT {self._trt.__version__}")
        typed = getattr(self._trt, prop["type"], None)  # an enum or a class of the module: pybind checks it
        if isinstance(typed, type) and not isinstance(value, typed):
            raise TypeError(f"{self._surface_class}.{name} takes a {prop['type']}, not {value!r}")
        self._props[name] = value
        self._trt.calls.append(("set", f"{self._surface_class}.{name}", value))


class FakeTimingCache(_Checked):
    """Serialized form (scripted): one tactic key per line."""

    _surface_class = "ITimingCache"

    def __init__(self, trt: FakeTensorRT, data: bytes) -> None:
        super().__init__(trt)
        object.__setattr__(self, "_entries", set(filter(None, bytes(data).decode().splitlines())))

    def combine(self, other: FakeTimingCache, ignore_mismatch: bool) -> bool:
        self._entries |= other._entries
        return True

    def serialize(self) -> bytes:
        return "".join(f"{e}\n" for e in sorted(self._entries)).encode()


class FakeConfig(_Checked):
    _surface_class = "IBuilderConfig"

    def __init__(self, trt: FakeTensorRT) -> None:
        super().__init__(trt)
        object.__setattr__(self, "_flags", set())
        object.__setattr__(self, "_profiles", [])
        object.__setattr__(self, "_timing", None)
        object.__setattr__(self, "_calibration_profile", None)

    def set_flag(self, flag: Any) -> None:
        assert isinstance(flag, self._trt.BuilderFlag), flag
        self._flags.add(flag.name)
        self._trt.calls.append(("set_flag", flag.name))

    def clear_flag(self, flag: Any) -> None:
        assert isinstance(flag, self._trt.BuilderFlag), flag
        self._flags.discard(flag.name)
        self._trt.calls.append(("clear_flag", flag.name))

    def get_flag(self, flag: Any) -> bool:
        return flag.name in self._flags

    def set_memory_pool_limit(self, pool: Any, size: int) -> None:
        assert isinstance(pool, self._trt.MemoryPoolType)
        self._trt.calls.append(("set_memory_pool_limit", pool.name, size))

    def add_optimization_profile(self, profile: Any) -> int:
        self._profiles.append(profile)
        return len(self._profiles) - 1

    def set_calibration_profile(self, profile: Any) -> bool:
        object.__setattr__(self, "_calibration_profile", profile)
        return True

    def create_timing_cache(self, data: bytes) -> FakeTimingCache:
        return FakeTimingCache(self._trt, data)

    def set_timing_cache(self, cache: FakeTimingCache, ignore_mismatch: bool) -> bool:
        assert isinstance(ignore_mismatch, bool)
        if "other-gpu" in cache._entries and not ignore_mismatch:
            return False  # scripted: a cache of another device is refused without ignore_mismatch
        object.__setattr__(self, "_timing", cache)
        return True

    def get_timing_cache(self) -> FakeTimingCache:
        return self._timing


class FakeProfile(_Checked):
    _surface_class = "IOptimizationProfile"

    def __init__(self, trt: FakeTensorRT) -> None:
        super().__init__(trt)
        object.__setattr__(self, "_shapes", {})

    def set_shape(self, name: str, mn: tuple, opt: tuple, mx: tuple) -> None:
        self._shapes[name] = (tuple(mn), tuple(opt), tuple(mx))


class FakeTensor(_Checked):
    _surface_class = "ITensor"

    def __init__(self, trt: FakeTensorRT, name: str, shape: tuple[int, ...]) -> None:
        super().__init__(trt)
        self._props.update(name=name, shape=shape, dtype=trt.DataType.FLOAT)


class FakeNetwork(_Checked):
    _surface_class = "INetworkDefinition"

    def __init__(self, trt: FakeTensorRT, flags: int) -> None:
        super().__init__(trt)
        object.__setattr__(self, "_creation_flags", flags)
        object.__setattr__(self, "_inputs", [])
        self._props["num_inputs"] = 0

    def get_input(self, i: int) -> FakeTensor:
        return self._inputs[i]


class FakeParser(_Checked):
    _surface_class = "OnnxParser"

    def __init__(self, trt: FakeTensorRT, network: FakeNetwork, logger: Any) -> None:
        super().__init__(trt)
        object.__setattr__(self, "_network", network)
        self._props["num_errors"] = 0

    def parse_from_file(self, path: str) -> bool:
        """Scripted: the network gets the inputs the test declared (``trt.model_inputs``)."""
        if not Path(path).is_file():
            return False
        for name, shape in self._trt.model_inputs.items():
            self._network._inputs.append(FakeTensor(self._trt, name, shape))
        self._network._props["num_inputs"] = len(self._network._inputs)
        return True


class FakeBuilder(_Checked):
    _surface_class = "Builder"

    def __init__(self, trt: FakeTensorRT, logger: Any) -> None:
        super().__init__(trt)
        object.__setattr__(self, "_logger", logger)
        trt.builders.append(self)

    def create_network(self, flags: int = 0) -> FakeNetwork:
        return FakeNetwork(self._trt, flags)

    def create_builder_config(self) -> FakeConfig:
        config = FakeConfig(self._trt)
        self._trt.configs.append(config)
        return config

    def create_optimization_profile(self) -> FakeProfile:
        return FakeProfile(self._trt)

    def build_serialized_network(self, network: FakeNetwork, config: FakeConfig) -> bytes | None:
        """Scripted behaviour, in TensorRT's order: calibrate (or read the calibrator's cache), then time tactics
        against the timing cache (``trt.tactics``; a missing one is an error under ERROR_ON_TIMING_CACHE_MISS)."""
        trt = self._trt
        sev = trt.ILogger.Severity
        calibrator = config._props.get("int8_calibrator")
        if calibrator is not None:
            algorithm = ("EntropyCalibration2" if isinstance(calibrator, trt.IInt8EntropyCalibrator2)
                         else "MinMaxCalibration")
            header = f"TRT-{trt.version_code}-{algorithm}"
            cache = calibrator.read_calibration_cache()
            if cache is not None and bytes(cache).split(b"\n", 1)[0].decode() != header:
                self._logger.log(sev.ERROR, "Calibration table does not match calibrator algorithm type")
                cache = None
            if cache is None:
                names = [t.name for t in network._inputs]
                while (ptrs := calibrator.get_batch(names)) is not None:
                    trt.batches.append(list(ptrs))
                if not trt.batches:
                    self._logger.log(sev.ERROR, "Calibration failure occurred with no scaling factors detected.")
                    return None
                calibrator.write_calibration_cache(memoryview(f"{header}\nx: 3c010a14\n".encode()))
        if config._timing is not None:
            for tactic in trt.tactics:
                if tactic not in config._timing._entries:
                    if "ERROR_ON_TIMING_CACHE_MISS" in config._flags:
                        self._logger.log(sev.ERROR, f"[scripted] tactic {tactic} is not in the timing cache "
                                                   "(ERROR_ON_TIMING_CACHE_MISS)")
                        return None
                    config._timing._entries.add(tactic)
        # a plan header as TensorRT writes it: magic, serialization version 0, the version at bytes 24..27 (a
        # module that reports 3 parts is release build 6 here, as 8.6.1.6)
        parts = [int(p) for p in trt.__version__.split(".")[:4]] + [6]
        return b"ftrt" + bytes(20) + bytes(p & 0xFF for p in parts[:4]) + bytes(36)


class FakeInspector(_Checked):
    _surface_class = "EngineInspector"

    def get_engine_information(self, fmt: Any) -> str:
        return json.dumps({"Layers": ["scripted"]})


class FakeEngine(_Checked):
    _surface_class = "ICudaEngine"

    def create_engine_inspector(self) -> FakeInspector:
        return FakeInspector(self._trt)


class FakeRuntime(_Checked):
    _surface_class = "Runtime"

    def __init__(self, trt: FakeTensorRT, logger: Any) -> None:
        super().__init__(trt)

    def deserialize_cuda_engine(self, data: Any) -> FakeEngine:
        return FakeEngine(self._trt)


def _enum(name: str, members: dict[str, int]) -> type[enum.IntEnum]:
    return enum.IntEnum(name, members)  # type: ignore[return-value]


class FakeTensorRT:
    """A ``tensorrt`` module of one release: the surface's enums and classes, scripted behaviour."""

    def __init__(self, version: str, *, model_inputs: dict[str, tuple[int, ...]] | None = None,
                 tactics: tuple[str, ...] = ("conv0/tactic-a",)) -> None:
        self.__name__ = "tensorrt"
        self.__version__ = version
        self._surface = surface_for(version)
        v = _version_key(version)
        self.version_code = (v[0] * 10000 if v[0] >= 10 else v[0] * 1000) + v[1] * 100 + v[2]
        self.model_inputs = model_inputs or {"x": (-1, 3, 8, 8)}
        self.tactics = tactics
        self.calls: list[tuple] = []
        self.builders: list[FakeBuilder] = []
        self.configs: list[FakeConfig] = []
        self.batches: list[list[int]] = []
        for name, members in self._surface["enums"].items():
            setattr(self, name, _enum(name, members))
        classes = self._surface["classes"]
        trt = self
        self.Builder = lambda logger: FakeBuilder(trt, logger)
        self.OnnxParser = lambda network, logger: FakeParser(trt, network, logger)
        self.Runtime = lambda logger: FakeRuntime(trt, logger)
        severity = _enum("Severity", {"INTERNAL_ERROR": 0, "ERROR": 1, "WARNING": 2, "INFO": 3, "VERBOSE": 4})
        self.ILogger = type("ILogger", (), {"Severity": severity, "__init__": lambda self: None})
        if "IInt8Calibrator" in classes:  # gone in 11.0 (pyInt8.cpp deleted)
            base = type("IInt8Calibrator", (), {"__init__": lambda self: None})
            self.IInt8Calibrator = base
            for name in ("IInt8EntropyCalibrator2", "IInt8MinMaxCalibrator"):  # bases: [IInt8Calibrator]
                setattr(self, name, type(name, (base,), {"__init__": lambda self: None}))

    def nptype(self, dtype: Any) -> type:
        return {"FLOAT": np.float32, "HALF": np.float16, "INT32": np.int32, "INT8": np.int8,
                "BOOL": np.bool_}[dtype.name]


def fake_tensorrt(version: str, **kwargs: Any) -> FakeTensorRT:
    return FakeTensorRT(version, **kwargs)


class FakeDeviceMemory:
    """Stands in for ``_cuda.DeviceBuffer`` / ``copy_htod``: records what was uploaded (no GPU here)."""

    def __init__(self) -> None:
        self.uploads: list[tuple[int, np.ndarray]] = []
        self.freed: list[int] = []
        self.next_ptr = 0x1000
        memory = self

        class Buffer:
            def __init__(self, nbytes: int) -> None:
                self.nbytes = nbytes
                self.ptr = memory.next_ptr
                memory.next_ptr += max(nbytes, 1) + 0x100

            def free(self) -> None:
                memory.freed.append(self.ptr)

        self.DeviceBuffer = Buffer

    def copy_htod(self, ptr: int, array: np.ndarray) -> None:
        self.uploads.append((ptr, np.array(array)))


def install(monkeypatch: pytest.MonkeyPatch, module: Any, trt: FakeTensorRT, *,
            cc: str = "8.9") -> FakeDeviceMemory:
    """Make ``module`` (builders.tensorrt) import ``trt`` and use fake device memory and GPU CC."""
    memory = FakeDeviceMemory()
    monkeypatch.setattr(module, "import_tensorrt", lambda: trt)
    monkeypatch.setattr(_cuda, "DeviceBuffer", memory.DeviceBuffer)
    monkeypatch.setattr(_cuda, "copy_htod", memory.copy_htod)
    monkeypatch.setattr(timing_cache, "building_gpu_cc", lambda: cc)
    return memory


# --- the stand-ins follow the surfaces -----------------------------------------------------------------------------


def test_properties_and_enums_follow_each_release():
    old, new = fake_tensorrt("8.6.1.6"), fake_tensorrt("10.13.3.9")
    config86, config1013 = FakeConfig(old), FakeConfig(new)
    with pytest.raises(AttributeError, match="IBuilderConfig' of TensorRT 8.6.1.6 has no attribute 'runtime_platform'"):
        config86.runtime_platform  # noqa: B018 - added in 10.2 (absent from the 8.6.1 and 10.1.0 dumps)
    with pytest.raises(AttributeError, match="can't set 'IBuilderConfig.max_num_tactics'"):
        config86.max_num_tactics = 3
    config1013.runtime_platform = new.RuntimePlatform.WINDOWS_AMD64
    with pytest.raises(TypeError, match="takes a RuntimePlatform"):
        config1013.runtime_platform = 1
    assert not hasattr(old.BuilderFlag, "ERROR_ON_TIMING_CACHE_MISS") and \
        hasattr(new.BuilderFlag, "ERROR_ON_TIMING_CACHE_MISS")
    # 11.0 renumbered BuilderFlag (compare the 10.16 and 11.0 surfaces): the stand-in carries each release's own values
    assert int(fake_tensorrt("10.16.1.11").BuilderFlag.VERSION_COMPATIBLE) != \
        int(fake_tensorrt("11.0.0.114").BuilderFlag.VERSION_COMPATIBLE)
    assert not hasattr(fake_tensorrt("11.0.0.114"), "IInt8EntropyCalibrator2")


def test_surface_for_picks_the_release_of_that_minor():
    assert surface_for("8.6.1.6")["version"] == "8.6.1"
    assert surface_for("10.13.3.9")["version"] == "10.13.3.9"
    with pytest.raises(LookupError, match="no dumped surface for TensorRT 10.5.0"):
        surface_for("10.5.0")

