"""Per-version build configuration plans (pure), applying them to a stand-in module, and timing-cache files."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator.core.model import BuilderOptions, PrecisionSpec, Target
from orchestrator.errors import BuildError
from trt_orchestrator_plugins._trt import config as cfg
from trt_orchestrator_plugins._trt import timing_cache


def target(version="10.13.3.9", ccs=("8.9",), hw="none", builder="tensorrt", **options) -> Target:
    return Target(name="t", builder=builder, builder_version=version, compute_capabilities=ccs,
                  hardware_compatibility=hw, options=BuilderOptions(**options))


def plan(version, precision="fp32", native=False, flavour="tensorrt", ccs=("8.9",), hw="none", **options):
    t = target(version, ccs, hw, **options)
    return cfg.plan_build_config(version, flavour, PrecisionSpec(precision), native, t.options, t)


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
    trtexec10 = cfg.capabilities("10.13.3.9", calibrator=False)
    assert trtexec10.native == {"fp16", "bf16"} and not trtexec10.supports_calibrator


# --- apply against a stand-in module (enum values resolved by name at apply time) -------------------------------
class _Enum:
    def __init__(self, **members):
        self.__dict__.update(members)


def fake_trt(version="11.1.0.4"):
    # 11.x numbering: STRONGLY_TYPED is 0 and 1 means PREFER_JIT_PYTHON_PLUGINS (reference §0).
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
    assert cfg.network_flags_value(p, trt) == 1 << 0
    config = _Config()
    lines = cfg.apply(p, trt, SimpleNamespace(), SimpleNamespace(), config)
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
        cfg.apply(p, fake_trt("10.13.3.9"), SimpleNamespace(), SimpleNamespace(), _Config())


def test_apply_int8_needs_a_calibrator():
    p = plan("10.13.3.9", "int8", native=True)
    trt = fake_trt("10.13.3.9")
    trt.BuilderFlag.INT8 = 3
    with pytest.raises(BuildError, match="needs a calibrator"):
        cfg.apply(p, trt, SimpleNamespace(), SimpleNamespace(), _Config())
    config = _Config()
    cfg.apply(p, trt, SimpleNamespace(), SimpleNamespace(), config, calibrator="CAL")
    assert config.int8_calibrator == "CAL" and config.flags == [3]


# --- build runner checks ----------------------------------------------------------------------------------------
def fp(cc="8.9"):
    from orchestrator.core.fingerprint import GpuInfo, RunnerFingerprint

    gpus = (GpuInfo(0, "gpu", cc, 1),) if cc else ()
    return RunnerFingerprint(os="linux", arch="x86_64", gpus=gpus)


@pytest.mark.parametrize("runner_cc, tgt, installed, expected", [
    ("8.9", target(), "10.13.3.9", None),
    ("8.9", target(), None, "TensorRT is not installed"),
    ("8.9", target(), "10.13.3.8", "wants TensorRT 10.13.3.9, this runner has 10.13.3.8"),
    (None, target(), "10.13.3.9", "need an NVIDIA GPU"),
    ("8.6", target(), "10.13.3.9", "is for compute capability 8.9, this runner's GPU is 8.6"),
    ("8.6", target(ccs=(), hw="ampere_plus"), "10.13.3.9", None),
    ("7.5", target(ccs=(), hw="ampere_plus"), "10.13.3.9", "must be built on Ampere or newer"),
    ("8.9", target(ccs=("8.6", "8.9")), "10.13.3.9", "targets one compute capability"),
])
def test_build_runner_reason(runner_cc, tgt, installed, expected):
    reason = cfg.build_runner_reason(fp(runner_cc), tgt, installed)
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
