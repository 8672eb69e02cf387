"""Per-version build configuration plans (pure), applying them to a stand-in module, and timing-cache files."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator.core.fingerprint import GpuInfo, RunnerFingerprint
from orchestrator.core.model import BuilderOptions, PrecisionSpec, Target
from orchestrator.errors import BuildError
from tests.unit.test_builder_trt_surface import RELEASES, SURFACES, FakeConfig, fake_tensorrt
from trt_orchestrator_plugins._trt import apply as trt_apply
from trt_orchestrator_plugins._trt import config as cfg
from trt_orchestrator_plugins._trt import extra_options, runner_checks, timing_cache


def target(version="10.13.3.9", ccs=("8.9",), hw="none", builder="tensorrt", platform="linux/x86_64",
           **options) -> Target:
    return Target(name="t", builder=builder, builder_version=version, compute_capabilities=ccs,
                  hardware_compatibility=hw, options=BuilderOptions(**options), platform=platform)


def plan(version, precision="fp32", native=False, flavour="tensorrt", ccs=("8.9",), hw="none", *, method="entropy",
         tool="python", host=None, platform="linux/x86_64", pinned=False, **options):
    t = target(version, ccs, hw, platform=platform, **options)
    return cfg.plan_build_config(version, flavour, PrecisionSpec(precision, calibration_method=method), native,
                                 t.options, t, tool=tool, host_platform=host, pinned_timing_cache=pinned)


# --- 8.6 ------------------------------------------------------------------------------------------------------
def test_86_fp16_native():
    p = plan("8.6.1.6", "fp16", native=True, workspace_mib=2048)
    assert p.network_flags == ("EXPLICIT_BATCH",)
    assert p.builder_flags == ("FP16",)
    assert not p.calibrator
    assert p.workspace_bytes == 2048 << 20
    assert p.memory_api == "device_memory_size"
    assert p.use_timing_cache and p.notes == ()


def test_86_int8_native_uses_calibrator_without_deprecation_note():
    p = plan("8.6.1.6", "int8", native=True)
    assert p.builder_flags == ("INT8",) and p.calibrator and p.notes == ()


def test_86_fp16_onnx_still_needs_the_flag_weakly_typed():
    p = plan("8.6.1.6", "fp16", native=False)
    assert p.network_flags == ("EXPLICIT_BATCH",) and p.builder_flags == ("FP16",)


def test_86_refuses_strongly_typed_bf16_same_cc_and_tiling():
    with pytest.raises(BuildError, match="STRONGLY_TYPED arrived in 9.1"):
        plan("8.6.1.6", strongly_typed=True)
    with pytest.raises(BuildError, match="BF16 was added in TensorRT 10.0"):
        plan("8.6.1.6", "bf16", native=True)
    with pytest.raises(BuildError, match="added in 10.9"):
        plan("8.6.1.6", hw="same_compute_capability", ccs=())
    with pytest.raises(BuildError, match="added in 10.8"):
        plan("8.6.1.6", tiling_level="fast")


def test_86_hardware_compatible_and_version_compatible():
    p = plan("8.6.1.6", hw="ampere_plus", ccs=(), version_compatible=True, exclude_lean_runtime=True)
    assert p.builder_flags == ("VERSION_COMPATIBLE", "EXCLUDE_LEAN_RUNTIME")
    assert p.hardware_compatibility_level == "AMPERE_PLUS"


# --- 10.8 -----------------------------------------------------------------------------------------------------
def test_108_bf16_native_tiling_opt_level():
    p = plan("10.8.0.43", "bf16", native=True, tiling_level="moderate", optimization_level=5)
    assert p.network_flags == ()
    assert p.builder_flags == ("BF16",)
    assert p.tiling_level == "MODERATE" and p.optimization_level == 5
    assert p.memory_api == "device_memory_size_v2"
    assert p.notes == ()  # weak typing deprecated only from 10.12


def test_108_int8_calibrator_is_deprecated_since_101():
    p = plan("10.8.0.43", "int8", native=True)
    assert p.builder_flags == ("INT8",) and p.calibrator
    assert p.notes == ("implicit INT8 calibration (IInt8EntropyCalibrator2) is deprecated since TensorRT 10.1 "
                       "and removed in 11.0; prefer Q/DQ (precision via: transform)",)


def test_108_via_transform_is_strongly_typed_without_flags():
    p = plan("10.8.0.43", "int8", native=False)
    assert p.network_flags == ("STRONGLY_TYPED",) and p.builder_flags == () and not p.calibrator


def test_108_has_no_same_compute_capability():
    with pytest.raises(BuildError, match="SAME_COMPUTE_CAPABILITY"):
        plan("10.8.0.43", hw="same_compute_capability")


# --- 10.13 ----------------------------------------------------------------------------------------------------
def test_1013_fp16_native_is_deprecated():
    p = plan("10.13.3.9", "fp16", native=True)
    assert p.network_flags == () and p.builder_flags == ("FP16",)
    assert p.notes == ("BuilderFlag.FP16 is deprecated since TensorRT 10.12 (weak typing); TensorRT 11.0 "
                       "removes it",)


def test_1013_strongly_typed_option_and_same_cc():
    p = plan("10.13.3.9", strongly_typed=True, hw="same_compute_capability")
    assert p.network_flags == ("STRONGLY_TYPED",)
    assert p.hardware_compatibility_level == "SAME_COMPUTE_CAPABILITY"


def test_1013_strongly_typed_conflicts_with_native_precision():
    with pytest.raises(BuildError, match="strongly typed network ignores precision builder flags"):
        plan("10.13.3.9", "fp16", native=True, strongly_typed=True)


def test_exclude_lean_runtime_alone_is_a_note():
    p = plan("10.13.3.9", exclude_lean_runtime=True)
    assert p.builder_flags == ()
    assert p.notes == ("exclude_lean_runtime is ignored unless version_compatible is set",)


# --- 11.1 -----------------------------------------------------------------------------------------------------
def test_111_always_strongly_typed():
    p = plan("11.1.0.4", "fp16", native=False, version_compatible=True)
    assert p.network_flags == ("STRONGLY_TYPED",)
    assert p.builder_flags == ("VERSION_COMPATIBLE",)
    assert not p.calibrator and p.memory_api == "device_memory_size_v2"


def test_111_refuses_native_fp16_with_the_documented_message():
    with pytest.raises(BuildError) as e:
        plan("11.1.0.4", "fp16", native=True)
    assert e.value.message == ("TensorRT 11.0 removed BuilderFlag.FP16; build from an fp16-converted ONNX "
                               "(precision via: transform)")
    with pytest.raises(BuildError, match="removed BuilderFlag.INT8 and the int8 calibrators"):
        plan("11.1.0.4", "int8", native=True)


# --- RTX 1.7 --------------------------------------------------------------------------------------------------
def test_rtx_17_plan():
    p = plan("1.7.1.116", "fp16", native=False, flavour="tensorrt-rtx", ccs=("8.6", "8.9", "12.0"))
    assert p.network_flags == ("STRONGLY_TYPED",) and p.builder_flags == ()
    assert p.compute_capabilities == ("SM86", "SM89", "SM120")
    assert not p.use_timing_cache  # deprecated no-op from RTX 1.2, and it would force a GPU
    assert p.memory_api == "device_memory_size_v2"


def test_rtx_refuses_native_precision_and_version_compatible():
    with pytest.raises(BuildError, match="TensorRT-RTX has no precision builder flags"):
        plan("1.7.1.116", "fp16", native=True, flavour="tensorrt-rtx")
    with pytest.raises(BuildError, match="not compatible across RTX releases"):
        plan("1.7.1.116", flavour="tensorrt-rtx", version_compatible=True)


def test_opt_level_out_of_range():
    with pytest.raises(BuildError, match="outside 0-5"):
        plan("10.13.3.9", optimization_level=7)


# --- capabilities ---------------------------------------------------------------------------------------------
def test_capabilities_per_version():
    c86 = cfg.capabilities("8.6.1.6")
    assert c86.native == {"fp16", "int8"} and c86.via_transform == {"fp16", "int8"}
    assert c86.supports_calibrator and c86.needs_gpu
    assert c86.target_kinds == {"compute_capability", "hardware_compatible"}
    c10 = cfg.capabilities("10.13.3.9")
    assert c10.native == {"fp16", "bf16", "int8"} and c10.via_transform == {"fp16", "bf16", "int8", "fp8"}
    assert "Q/DQ" in c10.native_missing_reason["fp8"]
    c11 = cfg.capabilities("11.1.0.4")
    assert c11.native == frozenset() and not c11.supports_calibrator
    assert c11.native_missing_reason["fp16"].startswith("TensorRT 11.0 removed BuilderFlag.FP16")
    assert c11.can("fp16") and c11.can("int8")
    trtexec10 = cfg.capabilities("10.13.3.9", tool="trtexec")
    # trtexec builds native int8 from the calibrate node's cache (--calib) but cannot compute one
    assert trtexec10.native == {"fp16", "bf16", "int8"} and not trtexec10.supports_calibrator
    assert trtexec10.calibration_family == "tensorrt"


# --- apply against a stand-in module (enum values resolved by name at apply time) -------------------------------
class _Enum:
    def __init__(self, **members):
        self.__dict__.update(members)


def fake_trt(version="11.1.0.4"):
    # 11.x numbering: STRONGLY_TYPED is 0 and 1 means PREFER_JIT_PYTHON_PLUGINS (the 11.x surfaces in
    # tests/conformance/data).
    return SimpleNamespace(
        __name__="tensorrt", __version__=version,
        NetworkDefinitionCreationFlag=_Enum(STRONGLY_TYPED=0, PREFER_JIT_PYTHON_PLUGINS=1),
        BuilderFlag=_Enum(VERSION_COMPATIBLE=12, EXCLUDE_LEAN_RUNTIME=13),
        MemoryPoolType=_Enum(WORKSPACE="WS"),
        HardwareCompatibilityLevel=_Enum(AMPERE_PLUS="AP"),
        TilingOptimizationLevel=_Enum(FAST="TF"),
        ProfilingVerbosity=_Enum(DETAILED="DET"),
    )


class _Config:
    def __init__(self):
        self.flags, self.pools = [], {}

    def set_flag(self, f):
        self.flags.append(f)

    def set_memory_pool_limit(self, pool, n):
        self.pools[pool] = n


def test_apply_resolves_names_at_apply_time():
    p = plan("11.1.0.4", version_compatible=True, exclude_lean_runtime=True, hw="ampere_plus", ccs=(),
             workspace_mib=64, optimization_level=4, tiling_level="fast")
    trt = fake_trt()
    assert trt_apply.network_flags_value(p, trt) == 1 << 0
    config = _Config()
    lines = trt_apply.apply(p, trt, SimpleNamespace(), SimpleNamespace(), config)
    assert config.flags == [12, 13]
    assert config.pools == {"WS": 64 << 20}
    assert config.builder_optimization_level == 4
    assert config.hardware_compatibility_level == "AP"
    assert config.tiling_optimization_level == "TF"
    assert config.profiling_verbosity == "DET"
    assert "builder flags: VERSION_COMPATIBLE, EXCLUDE_LEAN_RUNTIME" in lines[-1]


def test_apply_names_a_missing_enum_member():
    p = plan("10.13.3.9", "fp16", native=True)
    with pytest.raises(BuildError, match=r"has no BuilderFlag.FP16"):
        trt_apply.apply(p, fake_trt("10.13.3.9"), SimpleNamespace(), SimpleNamespace(), _Config())


def test_apply_int8_needs_a_calibrator():
    p = plan("10.13.3.9", "int8", native=True)
    trt = fake_trt("10.13.3.9")
    trt.BuilderFlag.INT8 = 3
    with pytest.raises(BuildError, match="needs a calibrator"):
        trt_apply.apply(p, trt, SimpleNamespace(), SimpleNamespace(), _Config())
    config = _Config()
    trt_apply.apply(p, trt, SimpleNamespace(), SimpleNamespace(), config, calibrator="CAL")
    assert config.int8_calibrator == "CAL" and config.flags == [3]


# --- build runner checks ----------------------------------------------------------------------------------------
def fp(cc="8.9", os_name="linux", arch="x86_64", l4t=None):
    gpus = (GpuInfo(0, "gpu", cc, 1),) if cc else ()
    return RunnerFingerprint(os=os_name, arch=arch, gpus=gpus, l4t=l4t)


@pytest.mark.parametrize("runner_cc, tgt, installed, expected", [
    ("8.9", target(), "10.13.3.9", None),
    ("8.9", target(), None, "TensorRT is not installed"),
    ("8.9", target(), "10.13.3.8", "wants TensorRT 10.13.3.9, this runner's TensorRT is 10.13.3.8"),
    ("8.9", target(), "10.13.3", None),  # a 3-part module version builds its 4-part target (issue 13 rule)
    (None, target(), "10.13.3.9", "need an NVIDIA GPU"),
    ("8.6", target(), "10.13.3.9", "is for compute capability 8.9, this runner's GPU is 8.6"),
    ("8.6", target(ccs=(), hw="ampere_plus"), "10.13.3.9", None),
    ("7.5", target(ccs=(), hw="ampere_plus"), "10.13.3.9", "must be built on Ampere or newer"),
    ("8.9", target(ccs=("8.6", "8.9")), "10.13.3.9", "targets one compute capability"),
])
def test_build_runner_reason(runner_cc, tgt, installed, expected):
    reason = runner_checks.build_runner_reason(fp(runner_cc), tgt, installed)
    if expected is None:
        assert reason is None
    else:
        assert expected in reason


# --- timing cache files (bytes only; the TensorRT combine step is injected) ----------------------------------
def test_cache_path_is_keyed_per_cc_and_version(tmp_path: Path):
    assert timing_cache.cache_path(tmp_path, "8.9", "10.13.3.9") == \
        tmp_path / "timing-cache" / "sm89-trt10.13.3.9.cache"
    assert timing_cache.cache_path(tmp_path, "8.6", "10.13.3.9") != \
        timing_cache.cache_path(tmp_path, "8.9", "10.13.3.9")


def test_merge_and_save_combines_with_previous(tmp_path: Path):
    path = timing_cache.cache_path(tmp_path, "8.9", "10.13.3.9")
    assert timing_cache.load(path) == b""
    seen = []

    def combine_with(new: bytes):
        def merge(prev: bytes) -> bytes:
            seen.append(prev)
            return prev + new
        return merge

    timing_cache.merge_and_save(path, combine_with(b"A"))
    timing_cache.merge_and_save(path, combine_with(b"B"))
    assert seen == [b"", b"A"]
    assert timing_cache.load(path) == b"AB"
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name, path.name + ".lock"]  # no temp left


def test_failed_merge_leaves_the_old_file(tmp_path: Path):
    path = tmp_path / "c.cache"
    timing_cache.write_atomic(path, b"old")

    def boom(prev: bytes) -> bytes:
        raise RuntimeError("combine failed")

    with pytest.raises(RuntimeError):
        timing_cache.merge_and_save(path, boom)
    assert path.read_bytes() == b"old"


def test_write_atomic_cleans_its_temp_file_on_failure(tmp_path: Path, monkeypatch):
    path = tmp_path / "c.cache"
    path.write_bytes(b"old")

    def fail_replace(src, dst):
        raise OSError("disk full")

    from orchestrator import atomic  # the timing cache writes through the core's atomic writer

    monkeypatch.setattr(atomic.os, "replace", fail_replace)
    with pytest.raises(OSError):
        timing_cache.write_atomic(path, b"new")
    assert path.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["c.cache"]


def test_concurrent_merges_lose_nothing(tmp_path: Path):
    path = tmp_path / "c.cache"

    def add(tag: bytes):
        timing_cache.merge_and_save(path, lambda prev: prev + tag)

    threads = [threading.Thread(target=add, args=(bytes([65 + i]),)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(path.read_bytes()) == list(range(65, 73))


# --- issue 12: capabilities per builder version (reads / extra / platform / calibration / pin) -----------------
@pytest.mark.parametrize("version, tool, extras, family, pins", [
    ("8.6.1.6", "python", {"avg_timing_iterations", "max_aux_streams", "sparse_weights", "tf32"}, "tensorrt", False),
    ("8.6.1.6", "trtexec", {"avg_timing_iterations", "max_aux_streams", "sparse_weights", "tf32"}, "tensorrt", False),
    ("10.1.0", "python", {"avg_timing_iterations", "max_aux_streams", "sparse_weights", "tf32"}, "tensorrt", True),
    ("10.4.0", "python", {"avg_timing_iterations", "max_aux_streams", "sparse_weights", "tf32", "max_num_tactics"},
     "tensorrt", True),
    ("10.4.0", "trtexec", {"avg_timing_iterations", "max_aux_streams", "sparse_weights", "tf32"}, "tensorrt", True),
    ("10.7.0", "trtexec", {"avg_timing_iterations", "max_aux_streams", "sparse_weights", "tf32", "max_num_tactics"},
     "tensorrt", True),
    ("11.1.0.4", "python", {"avg_timing_iterations", "max_aux_streams", "sparse_weights", "tf32", "max_num_tactics"},
     None, True),
])
def test_capabilities_issue12_fields(version, tool, extras, family, pins):
    caps = cfg.capabilities(version, tool=tool)
    assert caps.reads_options == {"optimization_level", "tiling_level", "workspace_mib", "strongly_typed",
                                  "version_compatible", "exclude_lean_runtime", "timing_cache", "timing_cache_pin",
                                  "extra"}
    assert "ort_optimization" not in caps.reads_options
    assert set(caps.extra_options) == extras and all(caps.extra_options.values())
    assert caps.platform_specific is True  # support matrix: engines do not move between Linux and Windows
    assert caps.calibration_family == family
    assert caps.pins_timing_cache is pins
    assert caps.supports_calibrator is (tool == "python" and family is not None)


def test_rtx_flavour_capabilities_read_three_options_and_are_portable():
    caps = cfg.capabilities("1.7.1.116", "tensorrt-rtx")
    assert caps.reads_options == {"optimization_level", "tiling_level", "workspace_mib"}
    assert caps.extra_options == {} and caps.platform_specific is False
    assert caps.calibration_family is None and caps.pins_timing_cache is False


# --- extra options: plan, gating, values -----------------------------------------------------------------------
def test_extra_options_are_planned_sorted_and_type_checked():
    p = plan("10.13.3.9", extra={"tf32": False, "avg_timing_iterations": 4, "sparse_weights": True,
                                 "max_aux_streams": 0, "max_num_tactics": 8})
    assert p.extra == (("avg_timing_iterations", 4), ("max_aux_streams", 0), ("max_num_tactics", 8),
                       ("sparse_weights", True), ("tf32", False))
    assert p.to_json()["extra"] == dict(p.extra)
    with pytest.raises(BuildError, match="extra option 'avg_timing_iterations' takes an integer, not True"):
        plan("10.13.3.9", extra={"avg_timing_iterations": True})
    with pytest.raises(BuildError, match="extra option 'avg_timing_iterations' must be >= 1, not 0"):
        plan("10.13.3.9", extra={"avg_timing_iterations": 0})
    with pytest.raises(BuildError, match="extra option 'sparse_weights' takes true or false, not 'yes'"):
        plan("10.13.3.9", extra={"sparse_weights": "yes"})


def test_extra_options_are_gated_per_version_and_front_end():
    with pytest.raises(BuildError) as e:
        plan("10.1.0", extra={"max_num_tactics": 4})
    assert e.value.message == "TensorRT 10.1.0 (Python API) does not apply extra option 'max_num_tactics' (from 10.4)"
    assert "avg_timing_iterations: int >= 1" in e.value.hint
    assert plan("10.4.0", extra={"max_num_tactics": 4}).extra == (("max_num_tactics", 4),)
    with pytest.raises(BuildError, match=r"TensorRT 10.4.0 \(trtexec\) does not apply extra option "
                                         r"'max_num_tactics' \(from 10.7\)"):
        plan("10.4.0", tool="trtexec", extra={"max_num_tactics": 4})
    with pytest.raises(BuildError, match="does not apply extra option 'builder_optimization_level'"):
        plan("10.13.3.9", extra={"builder_optimization_level": 3})  # first-class: optimization_level
    with pytest.raises(BuildError, match="TensorRT-RTX 1.7.1.116 applies no extra options; got \\['x'\\]"):
        plan("1.7.1.116", flavour="tensorrt-rtx", extra={"x": 1})


_API = {"avg_timing_iterations": ("property", "avg_timing_iterations"),
        "max_aux_streams": ("property", "max_aux_streams"),
        "max_num_tactics": ("property", "max_num_tactics"),
        "sparse_weights": ("flag", "SPARSE_WEIGHTS"),
        "tf32": ("flag", "TF32")}


@pytest.mark.parametrize("release", RELEASES)
def test_every_extra_option_offered_exists_in_that_release_surface(release):
    """The Python API names behind each extra key exist (settable) in every dumped release offering the key, and
    a key not offered on a release is really absent from it (the gate is not looser or stricter than the surface,
    except where the reference dates it between two dumps)."""
    surface = SURFACES[release]
    config = surface["classes"]["IBuilderConfig"]
    offered = extra_options.extra_options(release, "python")
    assert set(_API) == set(extra_options.EXTRA_OPTIONS)
    for key, (kind, name) in _API.items():
        present = (config["properties"].get(name, {}).get("settable", False) if kind == "property"
                   else name in surface["enums"]["BuilderFlag"] and "clear_flag" in config["methods"])
        if key in offered:
            assert present, (release, key)
        else:
            assert not present, (release, key)


@pytest.mark.parametrize("release", RELEASES)
def test_pin_and_cross_build_names_exist_where_used(release):
    surface = SURFACES[release]
    v = tuple(int(x) for x in release.split("."))
    has_flag = "ERROR_ON_TIMING_CACHE_MISS" in surface["enums"]["BuilderFlag"]
    assert cfg.capabilities(release).pins_timing_cache is has_flag
    has_platform = ("runtime_platform" in surface["classes"]["IBuilderConfig"]["properties"]
                    and "WINDOWS_AMD64" in surface["enums"].get("RuntimePlatform", {}))
    cross = runner_checks.cross_build_member("linux/x86_64", "windows/x86_64", v, "tensorrt")
    assert (cross is not None) is has_platform
    calibrators = {"IInt8EntropyCalibrator2", "IInt8MinMaxCalibrator"} <= set(surface["classes"])
    assert (cfg.capabilities(release).calibration_family == "tensorrt") is calibrators


# --- apply against the surface-following stand-in ----------------------------------------------------------------
def test_apply_sets_extras_cross_build_and_pin_on_the_real_surface():
    trt = fake_tensorrt("10.13.3.9")
    p = plan("10.13.3.9", host="linux/x86_64", platform="windows/x86_64", pinned=True,
             extra={"avg_timing_iterations": 4, "max_aux_streams": 2, "max_num_tactics": 16, "sparse_weights": True,
                    "tf32": False})
    assert p.runtime_platform == "WINDOWS_AMD64" and "ERROR_ON_TIMING_CACHE_MISS" in p.builder_flags
    config = FakeConfig(trt)
    config.set_flag(trt.BuilderFlag.TF32)  # TensorRT's default
    lines = trt_apply.apply(p, trt, SimpleNamespace(), SimpleNamespace(), config)
    assert config._flags == {"ERROR_ON_TIMING_CACHE_MISS", "SPARSE_WEIGHTS"}
    assert (config.avg_timing_iterations, config.max_aux_streams, config.max_num_tactics) == (4, 2, 16)
    assert config.runtime_platform is trt.RuntimePlatform.WINDOWS_AMD64
    assert config.profiling_verbosity is trt.ProfilingVerbosity.DETAILED
    assert ("clear_flag", "TF32") in trt.calls
    assert "extra options: avg_timing_iterations=4, max_aux_streams=2, max_num_tactics=16, sparse_weights=True, " \
           "tf32=False" in lines
    assert any(line.startswith("cross-build: runtime_platform = RuntimePlatform.WINDOWS_AMD64") for line in lines)


def test_apply_on_a_release_without_the_attribute_names_it():
    trt = fake_tensorrt("8.6.1.6")
    p = replace(plan("8.6.1.6"), extra=(("max_num_tactics", 3),))  # a plan 8.6 would never get
    with pytest.raises(BuildError, match=r"this TensorRT cannot set extra option max_num_tactics "
                                         r"\(FakeConfig.max_num_tactics is missing\)"):
        trt_apply.apply(p, trt, SimpleNamespace(), SimpleNamespace(), FakeConfig(trt))
    p = replace(plan("8.6.1.6"), runtime_platform="WINDOWS_AMD64")
    with pytest.raises(BuildError, match="has no RuntimePlatform.WINDOWS_AMD64"):
        trt_apply.apply(p, trt, SimpleNamespace(), SimpleNamespace(), FakeConfig(trt))


# --- timing-cache pin in the plan --------------------------------------------------------------------------------
def test_pinned_plan_sets_error_on_miss_from_10_0_only():
    assert "ERROR_ON_TIMING_CACHE_MISS" in plan("10.0.1", pinned=True).builder_flags
    p86 = plan("8.6.1.6", pinned=True)
    assert "ERROR_ON_TIMING_CACHE_MISS" not in p86.builder_flags and p86.timing_cache_pinned
    assert p86.notes == ("TensorRT 8.6.1.6 has no ERROR_ON_TIMING_CACHE_MISS (added in 10.0): the build starts from "
                         "the pinned timing cache but times any tactic it lacks instead of failing",)
    assert "ERROR_ON_TIMING_CACHE_MISS" not in plan("10.13.3.9").builder_flags
    with pytest.raises(BuildError, match="the target's timing cache is off"):
        plan("10.13.3.9", pinned=True, timing_cache=False)
    with pytest.raises(BuildError, match="TensorRT-RTX keeps no timing cache"):
        plan("1.7.1.116", flavour="tensorrt-rtx", pinned=True)


# --- platforms -------------------------------------------------------------------------------------------------------
def test_cross_build_to_windows_from_linux_x86_64_only_from_10_2():
    assert plan("10.2.0", host="linux/x86_64", platform="windows/x86_64").runtime_platform == "WINDOWS_AMD64"
    assert plan("10.13.3.9", host="linux/x86_64").runtime_platform is None  # native build
    with pytest.raises(BuildError) as e:
        plan("10.1.0", host="linux/x86_64", platform="windows/x86_64")
    assert e.value.message == ("target 't' is for windows/x86_64; this runner is linux/x86_64, and TensorRT 10.1.0 "
                               "cannot cross-build for it (RuntimePlatform arrived in TensorRT 10.2): build on "
                               "windows/x86_64")
    with pytest.raises(BuildError, match="target 't' is for linux/x86_64, this runner is linux/aarch64; TensorRT "
                                         "engines are not portable across platforms"):
        plan("10.13.3.9", host="linux/aarch64")
    with pytest.raises(BuildError, match="must exclude the lean runtime"):
        plan("10.13.3.9", host="linux/x86_64", platform="windows/x86_64", version_compatible=True)
    p = plan("10.13.3.9", host="linux/x86_64", platform="windows/x86_64", version_compatible=True,
             exclude_lean_runtime=True)
    assert p.builder_flags == ("VERSION_COMPATIBLE", "EXCLUDE_LEAN_RUNTIME") and p.runtime_platform


@pytest.mark.parametrize("runner, tgt, version, expected", [
    (fp(), target(), "10.13.3.9", None),
    (fp(), target(platform="windows/x86_64"), "10.13.3.9", None),  # the documented cross-build
    (fp(os_name="Linux", arch="AMD64"), target(), "10.13.3.9", None),  # spelled as platform.machine() may
    (fp(), target("10.1.0", platform="windows/x86_64"), "10.1.0", "RuntimePlatform arrived in TensorRT 10.2"),
    (fp(os_name="windows"), target(), "10.13.3.9",
     "target 't' is for linux/x86_64, this runner is windows/x86_64; TensorRT engines are not portable"),
    (fp(arch="aarch64"), target(platform="windows/x86_64"), "10.13.3.9", "this runner is linux/aarch64"),
    (fp(arch="aarch64", l4t="36.4"), target(platform="linux/aarch64/l4t36.3"), "10.13.3.9",
     "target 't' is for linux/aarch64/l4t36.3, this runner is linux/aarch64/l4t36.4"),
])
def test_build_runner_reason_checks_the_platform(runner, tgt, version, expected):
    reason = runner_checks.build_runner_reason(runner, tgt, version)
    if expected is None:
        assert reason is None
    else:
        assert expected in reason


# --- native int8 methods ---------------------------------------------------------------------------------------------
def test_native_int8_calibration_methods():
    assert plan("10.13.3.9", "int8", native=True).calibration_method == "entropy"
    assert plan("10.13.3.9", "int8", native=True, method="minmax").calibration_method == "minmax"
    with pytest.raises(BuildError) as e:
        plan("10.13.3.9", "int8", native=True, method="percentile")
    assert e.value.message.startswith("percentile is not a TensorRT calibrator")
    assert "precision via: transform" in e.value.hint
    with pytest.raises(BuildError, match="trtexec reads only entropy calibration caches"):
        plan("10.13.3.9", "int8", native=True, method="minmax", tool="trtexec")
    assert plan("10.13.3.9", "int8", native=False, method="percentile").calibration_method is None  # Q/DQ route


def test_a_jetson_host_builds_its_own_l4t_target_natively():
    # the builder sees platform.system()/machine() only; the L4T release is the runner check's (fingerprint) job
    assert plan("10.13.3.9", host="linux/aarch64", platform="linux/aarch64/l4t36.4").runtime_platform is None
    with pytest.raises(BuildError, match="this runner is linux/x86_64"):
        plan("10.13.3.9", host="linux/x86_64", platform="linux/aarch64/l4t36.4")
