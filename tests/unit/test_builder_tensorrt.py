"""The ``tensorrt`` builder driven against the surface-following stand-in (tests/unit/test_builder_trt_surface.py).

TensorRT cannot be installed here: the module's API shape is NVIDIA's (enums, classes, properties per release);
what it does (calibrate, time tactics, write caches) is scripted by the stand-in. tests/integration/
test_tensorrt_hw.py runs the real thing where a GPU and TensorRT exist.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from orchestrator.contracts.builder import BuildRequest, CalibrateRequest, OptimizationProfile
from orchestrator.core.fingerprint import GpuInfo, RunnerFingerprint
from orchestrator.core.model import BuilderOptions, DataSource, PrecisionSpec, Target
from orchestrator.errors import BuildError
from tests.unit.test_builder_trt_surface import fake_tensorrt, install
from trt_orchestrator_plugins._trt import timing_cache
from trt_orchestrator_plugins.builders import tensorrt as tensorrt_module
from trt_orchestrator_plugins.builders.tensorrt import builder

PROFILE = OptimizationProfile("default", {"x": ((1, 3, 8, 8), (2, 3, 8, 8), (4, 3, 8, 8))})
TACTIC = b"conv0/tactic-a\n"


def request(tmp_path: Path, version="10.13.3.9", precision="fp32", native=False, *, method="entropy",
            platform="linux/x86_64", calibration_cache=None, pinned=None, calibration=None, out="out",
            **options) -> BuildRequest:
    model = tmp_path / "m.onnx"
    model.write_bytes(b"onnx")  # the stand-in parser only needs the file
    t = Target(name="t", builder="tensorrt", builder_version=version, compute_capabilities=("8.9",),
               options=BuilderOptions(**options), platform=platform)
    return BuildRequest(address="m/fp32/default@sm89+trt10.13", build_key="k", onnx_path=model,
                        profiles=(PROFILE,), precision=PrecisionSpec(precision, calibration_method=method),
                        native_precision=native, target=t, options=t.options, out_dir=tmp_path / out,
                        cache_dir=tmp_path / "cache", calibration=calibration, log=lambda line: None,
                        calibration_cache=calibration_cache, timing_cache=pinned)


@pytest.fixture
def trt(monkeypatch):
    trt = fake_tensorrt("10.13.3.9")
    install(monkeypatch, tensorrt_module, trt)
    monkeypatch.setattr(tensorrt_module, "host_platform", lambda: "linux/x86_64")
    return trt


# --- timing caches ---------------------------------------------------------------------------------------------------
def test_shared_timing_cache_digests(trt, tmp_path: Path):
    first = builder.build(request(tmp_path))
    shared = timing_cache.cache_path(tmp_path / "cache", "8.9", "10.13.3.9")
    assert first.timing_cache_read is None
    assert first.timing_cache_written == timing_cache.digest(TACTIC) == timing_cache.digest_of_file(shared)
    assert first.timing_cache_path == shared
    assert first.metadata["timing_cache"] == {"mode": "shared", "pinned_from": None, "read": None,
                                              "written": timing_cache.digest(TACTIC), "changed": None}
    assert first.engine_path.read_bytes().startswith(b"ftrt")
    assert first.layer_info_path is not None and first.layer_info_path.is_file()
    second = builder.build(request(tmp_path, out="out2"))
    assert second.timing_cache_read == second.timing_cache_written == first.timing_cache_written
    assert "ERROR_ON_TIMING_CACHE_MISS" not in trt.configs[-1]._flags  # not pinned


def test_no_timing_cache(trt, tmp_path: Path):
    result = builder.build(request(tmp_path, timing_cache=False))
    assert (result.timing_cache_read, result.timing_cache_written, result.timing_cache_path) == (None, None, None)
    assert trt.configs[-1]._timing is None


def test_pinned_build_starts_from_exactly_that_file(trt, tmp_path: Path):
    published = tmp_path / "published.cache"
    published.write_bytes(TACTIC)
    shared = timing_cache.cache_path(tmp_path / "cache", "8.9", "10.13.3.9")
    shared.parent.mkdir(parents=True)
    shared.write_bytes(b"conv0/other\n")
    result = builder.build(request(tmp_path, pinned=published, timing_cache_pin=True))
    config = trt.configs[-1]
    assert "ERROR_ON_TIMING_CACHE_MISS" in config._flags
    assert config._timing._entries == {"conv0/tactic-a"}  # the pinned file, not the shared one
    assert result.timing_cache_read == result.timing_cache_written == timing_cache.digest(TACTIC)
    assert result.timing_cache_path == tmp_path / "out" / timing_cache.PINNED_WORK_FILE
    assert result.metadata["timing_cache"]["mode"] == "pinned" and result.metadata["timing_cache"]["changed"] is False
    assert shared.read_bytes() == b"conv0/other\n" and published.read_bytes() == TACTIC  # both left alone


def test_pinned_build_fails_naming_the_miss(trt, tmp_path: Path):
    published = tmp_path / "published.cache"
    published.write_bytes(b"conv9/else\n")
    with pytest.raises(BuildError) as e:
        builder.build(request(tmp_path, pinned=published, timing_cache_pin=True))
    assert e.value.message.startswith(
        "m/fp32/default@sm89+trt10.13: TensorRT 10.13.3.9 met a tactic missing from the pinned timing cache "
        "published.cache (ERROR_ON_TIMING_CACHE_MISS): [ERROR] [scripted] tactic conv0/tactic-a is not in the "
        "timing cache")
    assert "build once unpinned" in e.value.hint
    assert not (tmp_path / "out" / "engine.plan").exists()


def test_pinned_cache_of_another_gpu_is_refused(trt, tmp_path: Path):
    published = tmp_path / "published.cache"
    published.write_bytes(b"other-gpu\n")
    with pytest.raises(BuildError, match="TensorRT refused the pinned timing cache published.cache"):
        builder.build(request(tmp_path, pinned=published, timing_cache_pin=True))


def test_pinned_86_has_no_error_on_miss_and_reports_the_change(monkeypatch, tmp_path: Path):
    trt = fake_tensorrt("8.6.1")
    install(monkeypatch, tensorrt_module, trt)
    monkeypatch.setattr(tensorrt_module, "host_platform", lambda: "linux/x86_64")
    published = tmp_path / "published.cache"
    published.write_bytes(b"conv9/else\n")
    result = builder.build(request(tmp_path, "8.6.1", pinned=published, timing_cache_pin=True))
    assert "ERROR_ON_TIMING_CACHE_MISS" not in trt.configs[-1]._flags  # not in the 8.6.1 surface
    assert result.timing_cache_read == timing_cache.digest(b"conv9/else\n")
    assert result.timing_cache_written == timing_cache.digest(b"conv0/tactic-a\nconv9/else\n")
    assert result.metadata["timing_cache"]["changed"] is True
    assert "has no ERROR_ON_TIMING_CACHE_MISS" in result.metadata["notes"][0]


# --- extra options and platforms ---------------------------------------------------------------------------------
def test_extra_options_reach_the_config(trt, tmp_path: Path):
    builder.build(request(tmp_path, extra={"avg_timing_iterations": 4, "max_aux_streams": 1, "sparse_weights": True,
                                           "tf32": False, "max_num_tactics": 5}))
    config = trt.configs[-1]
    assert (config.avg_timing_iterations, config.max_aux_streams, config.max_num_tactics) == (4, 1, 5)
    assert "SPARSE_WEIGHTS" in config._flags and ("clear_flag", "TF32") in trt.calls


def test_cross_build_for_windows_sets_the_runtime_platform(trt, tmp_path: Path):
    result = builder.build(request(tmp_path, platform="windows/x86_64"))
    assert trt.configs[-1].runtime_platform is trt.RuntimePlatform.WINDOWS_AMD64
    assert result.layer_info_path is None  # a Windows engine is not deserialized on the Linux host
    assert result.metadata["platform"] == "windows/x86_64" and result.metadata["built_on"] == "linux/x86_64"


def test_native_build_sets_no_runtime_platform(trt, tmp_path: Path):
    builder.build(request(tmp_path))
    assert "runtime_platform" not in trt.configs[-1]._props


def _runner(os_name="linux", arch="x86_64", cc="8.9") -> RunnerFingerprint:
    return RunnerFingerprint(os=os_name, arch=arch, gpus=(GpuInfo(0, "gpu", cc, 1),))


@pytest.mark.parametrize("installed, runner, platform, expected", [
    ("10.13.3.9", _runner(), "linux/x86_64", None),
    ("10.13.3.9", _runner(), "windows/x86_64", None),
    ("10.1.0", _runner(), "windows/x86_64", "this runner is linux/x86_64, and TensorRT 10.1.0 cannot cross-build"),
    ("10.13.3.9", _runner(os_name="windows"), "linux/x86_64",
     "target 't' is for linux/x86_64, this runner is windows/x86_64; TensorRT engines are not portable across "
     "platforms"),
    ("10.13.3.9", _runner(arch="aarch64"), "linux/x86_64", "this runner is linux/aarch64"),
])
def test_available_refuses_another_platform(monkeypatch, installed, runner, platform, expected):
    monkeypatch.setattr(tensorrt_module, "installed_version", lambda: (installed, None))
    t = Target(name="t", builder="tensorrt", builder_version=installed, compute_capabilities=("8.9",),
               platform=platform)
    reason = builder.available(runner, t)
    if expected is None:
        assert reason is None
    else:
        assert expected in reason


def test_capabilities_come_from_the_plan_module():
    caps = builder.capabilities("10.13.3.9")
    assert caps.calibration_family == "tensorrt" and caps.supports_calibrator and caps.pins_timing_cache
    assert "max_num_tactics" in caps.extra_options and caps.platform_specific
    assert builder.capabilities("11.4.0.106").calibration_family is None


# --- native int8 calibration caches -------------------------------------------------------------------------------
def calibrate_request(tmp_path: Path, method="entropy", samples=3, path=None) -> CalibrateRequest:
    model = tmp_path / "m.onnx"
    model.write_bytes(b"onnx")
    return CalibrateRequest(key="ck", onnx_path=model, out_path=tmp_path / "calibration.cache",
                            precision=PrecisionSpec("int8", calibration_method=method),
                            calibration=DataSource(path=path, samples=samples, seed=3),
                            input_shapes={"x": (2, 3, 8, 8)}, input_dtypes={"x": "float32"}, log=lambda line: None)


def test_calibrate_feeds_the_data_and_writes_the_cache_tensorrt_hands_over(monkeypatch, tmp_path: Path):
    trt = fake_tensorrt("10.13.3.9")
    memory = install(monkeypatch, tensorrt_module, trt)
    facts = builder.calibrate(calibrate_request(tmp_path))
    assert (tmp_path / "calibration.cache").read_bytes() == b"TRT-101303-EntropyCalibration2\nx: 3c010a14\n"
    assert facts["calibrator"] == "IInt8EntropyCalibrator2" and facts["batches"] == 3
    assert facts["shapes"] == {"x": [2, 3, 8, 8]} and facts["header"] == "TRT-101303-EntropyCalibration2"
    config = trt.configs[-1]
    assert "INT8" in config._flags and config._calibration_profile is config._profiles[0]
    assert config._profiles[0]._shapes == {"x": ((2, 3, 8, 8),) * 3}
    # the uploads are the seeded samples, at the calibration shape, through one device buffer
    assert len(memory.uploads) == 3 and {ptr for ptr, _ in memory.uploads} == {memory.uploads[0][0]}
    expected = np.random.default_rng(3).random((2, 3, 8, 8), dtype=np.float32)
    np.testing.assert_array_equal(memory.uploads[0][1], expected)
    assert memory.freed == [memory.uploads[0][0]]
    assert len(trt.batches) == 3


def test_calibrate_minmax_and_its_header(monkeypatch, tmp_path: Path):
    install(monkeypatch, tensorrt_module, fake_tensorrt("8.6.1"))
    facts = builder.calibrate(calibrate_request(tmp_path, "minmax"))
    assert facts["calibrator"] == "IInt8MinMaxCalibrator" and facts["header"] == "TRT-8601-MinMaxCalibration"


def test_calibrate_refuses_percentile_and_11x(monkeypatch, tmp_path: Path):
    install(monkeypatch, tensorrt_module, fake_tensorrt("10.13.3.9"))
    with pytest.raises(BuildError, match="percentile is not a TensorRT calibrator"):
        builder.calibrate(calibrate_request(tmp_path, "percentile"))
    install(monkeypatch, tensorrt_module, fake_tensorrt("11.0.0.114"))
    with pytest.raises(BuildError, match=r"TensorRT 11.0.0.114 has no int8 calibrators \(removed in 11.0\)"):
        builder.calibrate(calibrate_request(tmp_path))


def test_calibrate_raises_the_data_error_not_a_tensorrt_one(monkeypatch, tmp_path: Path):
    install(monkeypatch, tensorrt_module, fake_tensorrt("10.13.3.9"))
    with pytest.raises(BuildError, match="calibration data .*nowhere does not exist"):
        builder.calibrate(calibrate_request(tmp_path, path=str(tmp_path / "nowhere")))
    assert not (tmp_path / "calibration.cache").exists()


def test_calibrate_names_inputs_without_a_shape(monkeypatch, tmp_path: Path):
    install(monkeypatch, tensorrt_module, fake_tensorrt("10.13.3.9", model_inputs={"x": (-1, 3, 8, 8),
                                                                                   "s": (-1, 2)}))
    with pytest.raises(BuildError, match=r"no calibration shape for inputs \['s'\] of m.onnx"):
        builder.calibrate(calibrate_request(tmp_path))


def test_build_reads_the_calibration_cache_and_never_the_data(trt, tmp_path: Path):
    cache = tmp_path / "calibration.cache"
    cache.write_bytes(b"TRT-101303-EntropyCalibration2\nx: 3c010a14\n")
    result = builder.build(request(tmp_path, precision="int8", native=True, calibration_cache=cache,
                                   calibration=DataSource(path=str(tmp_path / "nowhere"))))
    config = trt.configs[-1]
    assert "INT8" in config._flags and isinstance(config.int8_calibrator, trt.IInt8EntropyCalibrator2)
    assert config.int8_calibrator.read_calibration_cache() == cache.read_bytes()
    assert config.int8_calibrator.get_batch(["x"]) is None and trt.batches == []
    assert config._calibration_profile is config._profiles[0]
    assert result.metadata["calibration"]["header"] == "TRT-101303-EntropyCalibration2"
    assert result.metadata["calibration"]["source"] == "cache"


@pytest.mark.parametrize("header, method, message", [
    (b"TRT-8601-EntropyCalibration2", "entropy",
     r"written by TensorRT 8.6.1 \(TRT-8601-EntropyCalibration2\); TensorRT 10.13.3.9 reads only caches of its own"),
    (b"TRT-101303-MinMaxCalibration", "entropy",
     r"holds MinMaxCalibration scales \(TRT-101303-MinMaxCalibration\); calibration method 'entropy' reads "
     r"EntropyCalibration2"),
    (b"garbage", "entropy", r"is not a TensorRT calibration cache \(first line 'garbage'"),
])
def test_build_refuses_a_cache_tensorrt_would_not_read(trt, tmp_path: Path, header, method, message):
    cache = tmp_path / "calibration.cache"
    cache.write_bytes(header + b"\nx: 3c010a14\n")
    with pytest.raises(BuildError, match=message):
        builder.build(request(tmp_path, precision="int8", native=True, method=method, calibration_cache=cache))


def test_build_without_a_cache_calibrates_here(trt, tmp_path: Path):
    result = builder.build(request(tmp_path, precision="int8", native=True, calibration=DataSource(samples=2)))
    assert (tmp_path / "out" / "calibration.cache").read_bytes().startswith(b"TRT-101303-EntropyCalibration2")
    assert len(trt.batches) == 2 and result.metadata["calibration"]["source"] == "computed"


# --- the recorded version (issue 23.17) -------------------------------------------------------------------------

def test_the_recorded_version_is_the_module_s_completed_by_the_plan_header(monkeypatch, tmp_path: Path):
    """trt.__version__ of the 8.6.1 wheel is 3-part; the plan's own header carries the build number (8.6.1.6)."""
    install(monkeypatch, tensorrt_module, fake_tensorrt("8.6.1"))
    monkeypatch.setattr(tensorrt_module, "host_platform", lambda: "linux/x86_64")
    assert builder.build(request(tmp_path, "8.6.1.6", timing_cache=False)).builder_version == "8.6.1.6"


def test_a_loose_target_is_refused_at_build(trt, tmp_path: Path):
    with pytest.raises(BuildError, match=r"wants TensorRT 10\.13, which names no exact release; this runner's "
                                         r"TensorRT is 10\.13\.3\.9"):
        builder.build(request(tmp_path, "10.13"))
