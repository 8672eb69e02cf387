"""trtexec command lines per version, and parsing trtexec's log."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.contracts.builder import BuildRequest, CalibrateRequest, OptimizationProfile
from orchestrator.core.model import BuilderOptions, DataSource, PrecisionSpec, Target
from orchestrator.errors import BuildError
from tests.unit.test_builder_trt_surface import TRTEXEC_OPTIONS, fake_tensorrt, install, trtexec_tag_version
from trt_orchestrator_plugins._trt import extra_options, timing_cache
from trt_orchestrator_plugins.builders import tensorrt as tensorrt_module
from trt_orchestrator_plugins.builders.trtexec import banner_version, parse_trtexec_output, trtexec_command
from trt_orchestrator_plugins.builders.trtexec import builder as trtexec_builder

OUT = Path("/o")
DEFAULT = OptimizationProfile("default", {"x": ((1, 3, 224, 224), (4, 3, 224, 224), (8, 3, 224, 224))})
TWO_INPUTS = OptimizationProfile("big", {"x": ((1, 3, 64, 64), (1, 3, 640, 640), (1, 3, 960, 960)),
                                         "s": ((1, 2), (1, 2), (1, 2))})


def request(version, precision="fp32", native=False, profiles=(DEFAULT,), ccs=("8.9",), hw="none", *,
            method="entropy", platform="linux/x86_64", calibration_cache=None, pinned_cache=None, out_dir=OUT,
            cache_dir=Path("/c"), **options):
    t = Target(name="t", builder="trtexec", builder_version=version, compute_capabilities=ccs,
               hardware_compatibility=hw, options=BuilderOptions(**options), platform=platform)
    return BuildRequest(address="m/fp16/default@sm89+trtexec10.13", build_key="k", onnx_path=Path("/m.onnx"),
                        profiles=profiles, precision=PrecisionSpec(precision, calibration_method=method),
                        native_precision=native, target=t, options=t.options, out_dir=out_dir, cache_dir=cache_dir,
                        calibration_cache=calibration_cache, timing_cache=pinned_cache, log=lambda line: None)


HEAD = ["trtexec", "--onnx=/m.onnx", "--saveEngine=/o/engine.plan", "--skipInference"]
SHAPES = ["--minShapes=x:1x3x224x224", "--optShapes=x:4x3x224x224", "--maxShapes=x:8x3x224x224"]
TAIL = ["--exportLayerInfo=/o/layer_info.json", "--profilingVerbosity=detailed"]


def test_86_fp16_workspace_in_plain_mib():
    cmd = trtexec_command("8.6.1.6", request("8.6.1.6", "fp16", native=True, workspace_mib=1024),
                          timing_cache_file=Path("/c/tc.cache"))
    assert cmd == HEAD + ["--fp16", "--memPoolSize=workspace:1024"] + SHAPES + \
        ["--timingCacheFile=/c/tc.cache"] + TAIL


def test_86_fp16_converted_onnx_still_passes_fp16_but_never_strongly_typed():
    cmd = trtexec_command("8.6.1.6", request("8.6.1.6", "fp16", native=False))
    assert "--fp16" in cmd and "--stronglyTyped" not in cmd


def test_86_version_and_hardware_compatible():
    cmd = trtexec_command("8.6.1.6", request("8.6.1.6", ccs=(), hw="ampere_plus", version_compatible=True,
                                             exclude_lean_runtime=True, optimization_level=5))
    assert cmd == HEAD + ["--versionCompatible", "--excludeLeanRuntime"] + SHAPES + \
        ["--builderOptimizationLevel=5", "--hardwareCompatibilityLevel=ampere+"] + TAIL


def test_108_tiling_and_workspace_suffix():
    cmd = trtexec_command("10.8.0.43", request("10.8.0.43", "bf16", native=True, tiling_level="full",
                                               workspace_mib=512))
    assert cmd == HEAD + ["--bf16", "--memPoolSize=workspace:512M"] + SHAPES + \
        ["--tilingOptimizationLevel=3"] + TAIL


def test_1013_strongly_typed_and_same_cc_and_two_profiles():
    cmd = trtexec_command("10.13.3.9", request("10.13.3.9", "fp16", native=False, hw="same_compute_capability",
                                               profiles=(DEFAULT, TWO_INPUTS)))
    # "Multiple --minShapes/--optShapes/--maxShapes without --profile are not allowed" (10.0+)
    assert cmd == HEAD + ["--stronglyTyped", "--profile=0"] + SHAPES + [
        "--profile=1", "--minShapes=x:1x3x64x64,s:1x2", "--optShapes=x:1x3x640x640,s:1x2",
        "--maxShapes=x:1x3x960x960,s:1x2", "--hardwareCompatibilityLevel=sameComputeCapability"] + TAIL


def test_86_builds_one_profile_only():
    with pytest.raises(BuildError, match=r"trtexec 8.6.1.6 builds one optimization profile only \(--profile "
                                         r"arrived in 10.0\); this cell has 2"):
        trtexec_command("8.6.1.6", request("8.6.1.6", profiles=(DEFAULT, TWO_INPUTS)))


def test_1013_refuses_int8_calibration():
    with pytest.raises(BuildError, match="trtexec cannot calibrate int8"):
        trtexec_command("10.13.3.9", request("10.13.3.9", "int8", native=True))


def test_111_omits_stronglytyped_and_refuses_precision_flags():
    cmd = trtexec_command("11.1.0.4", request("11.1.0.4", "fp16", native=False, version_compatible=True))
    assert cmd == HEAD + ["--versionCompatible"] + SHAPES + TAIL
    with pytest.raises(BuildError) as e:
        trtexec_command("11.1.0.4", request("11.1.0.4", "fp16", native=True))
    assert e.value.message.startswith("TensorRT 11.0 removed BuilderFlag.FP16")


def test_no_timing_cache_flag_when_disabled():
    cmd = trtexec_command("10.13.3.9", request("10.13.3.9", timing_cache=False),
                          timing_cache_file=Path("/c/tc.cache"))
    assert not any(a.startswith("--timingCacheFile") for a in cmd)


def test_banner_versions():
    assert banner_version("8601") == "8.6.1"
    assert banner_version("101300") == "10.13.0"
    assert banner_version("110100") == "11.1.0"
    assert banner_version("101303", "9") == "10.13.3.9"  # [TensorRT v101303] [b9]: the build number, 10.13.3+


def test_banner_build_number_read_and_kept_3_part_without_one():
    assert parse_trtexec_output("&&&& RUNNING TensorRT.trtexec [TensorRT v101303] [b9] # trtexec\n"
                                ).tensorrt_version == "10.13.3.9"
    assert parse_trtexec_output("&&&& RUNNING TensorRT.trtexec [TensorRT v101000] # trtexec\n"
                                ).tensorrt_version == "10.10.0"
    assert parse_trtexec_output("&&&& RUNNING TensorRT.trtexec [TensorRT v8601] # trtexec\n"
                                ).tensorrt_version == "8.6.1"
    # a version line naming another release than the banner wins (it is the library's own)
    assert parse_trtexec_output("[TensorRT v101303] [b9]\n[I] TensorRT version: 10.13.2\n"
                                ).tensorrt_version == "10.13.2"


# A sample written from the documented stdout layout (samples/common/sampleReporting.cpp of NVIDIA/TensorRT), not
# captured from a real run: TensorRT cannot be installed on these machines.
SAMPLE = """\
&&&& RUNNING TensorRT.trtexec [TensorRT v101303] [b9] # trtexec --onnx=/m.onnx --saveEngine=/o/engine.plan
[11/21/2026-10:00:00] [I] === Model Options ===
[11/21/2026-10:00:00] [I] TensorRT version: 10.13.3
[11/21/2026-10:00:01] [W] [TRT] onnxOpImporters.cpp:123: Weight conversion warning
[11/21/2026-10:00:09] [I] Engine built in 8.51234 sec.
[11/21/2026-10:00:20] [I] === Performance summary ===
[11/21/2026-10:00:20] [I] Throughput: 1234.56 qps
[11/21/2026-10:00:20] [I] Latency: min = 0.80 ms, max = 1.60 ms, mean = 0.91 ms, median = 0.90 ms, percentile(90%) = 1.01 ms, percentile(95%) = 1.10 ms, percentile(99%) = 1.40 ms
[11/21/2026-10:00:20] [I] Enqueue Time: min = 0.02 ms, max = 0.10 ms, mean = 0.03 ms, median = 0.03 ms, percentile(90%) = 0.04 ms, percentile(95%) = 0.05 ms, percentile(99%) = 0.08 ms
[11/21/2026-10:00:20] [I] H2D Latency: min = 0.05 ms, max = 0.09 ms, mean = 0.06 ms, median = 0.06 ms, percentile(90%) = 0.07 ms, percentile(95%) = 0.07 ms, percentile(99%) = 0.08 ms
[11/21/2026-10:00:20] [I] GPU Compute Time: min = 0.70 ms, max = 1.50 ms, mean = 0.80 ms, median = 0.79 ms, percentile(90%) = 0.90 ms, percentile(95%) = 0.95 ms, percentile(99%) = 1.20 ms
[11/21/2026-10:00:20] [I] D2H Latency: min = 0.01 ms, max = 0.03 ms, mean = 0.02 ms, median = 0.02 ms, percentile(90%) = 0.02 ms, percentile(95%) = 0.03 ms, percentile(99%) = 0.03 ms
[11/21/2026-10:00:20] [I] Total Host Walltime: 3.00 s
[11/21/2026-10:00:20] [I] Total GPU Compute Time: 2.40 s
&&&& PASSED TensorRT.trtexec [TensorRT v101303] [b9] # trtexec --onnx=/m.onnx
"""  # noqa: E501  (trtexec's long summary lines, verbatim)

FAILED = """\
&&&& RUNNING TensorRT.trtexec [TensorRT v110100] # trtexec --onnx=/m.onnx --fp16
[11/21/2026-10:00:00] [E] Unknown option: --fp16
&&&& FAILED TensorRT.trtexec [TensorRT v110100] # trtexec --onnx=/m.onnx --fp16
"""


def test_parse_sample_output():
    r = parse_trtexec_output(SAMPLE)
    assert r.tensorrt_version == "10.13.3.9"  # the banner's build number (10.13.3+) completes the 3-part line
    assert r.build_seconds == pytest.approx(8.51234)
    assert r.errors == () and r.passed is True
    assert r.throughput_qps == pytest.approx(1234.56)
    assert set(r.metrics) == {"Latency", "Enqueue Time", "H2D Latency", "GPU Compute Time", "D2H Latency"}
    lat = r.metrics["Latency"]
    assert (lat.min, lat.max, lat.mean, lat.median) == (0.80, 1.60, 0.91, 0.90)
    assert lat.percentiles == {90.0: 1.01, 95.0: 1.10, 99.0: 1.40}
    assert r.metrics["GPU Compute Time"].percentiles[99.0] == 1.20


def test_parse_failure_output():
    r = parse_trtexec_output(FAILED)
    assert r.tensorrt_version == "11.1.0"
    assert r.passed is False
    assert r.errors == ("Unknown option: --fp16",)
    assert r.metrics == {} and r.throughput_qps is None


def test_failed_trtexec_raises_with_the_last_40_log_lines(tmp_path: Path, monkeypatch):
    # A stand-in executable that fails the way trtexec does; it produces no engine, so nothing is faked.
    exe = tmp_path / "trtexec"
    exe.write_text("#!/bin/sh\necho '&&&& RUNNING TensorRT.trtexec [TensorRT v101303] [b9] # trtexec'\n"
                   "for i in $(seq 1 60); do echo \"[I] line $i\"; done\n"
                   "echo '[01/01/2026-00:00:00] [E] Error[4]: [network.cpp::validate] broken'\nexit 1\n")
    exe.chmod(0o755)
    monkeypatch.setenv("TRTEXEC", str(exe))
    from trt_orchestrator_plugins.builders.trtexec import builder

    req = request("10.13.3.9", timing_cache=False)
    req = BuildRequest(**{**req.__dict__, "out_dir": tmp_path / "out"})
    with pytest.raises(BuildError) as e:
        builder.build(req)
    assert "trtexec failed: Error[4]: [network.cpp::validate] broken" in e.value.message
    tail = e.value.log_tail.splitlines()
    assert len(tail) == 40 and tail[0] == "[I] line 22" and tail[-1].endswith("broken")
    assert (tmp_path / "out" / "build.log").exists()


def test_available_says_why_trtexec_is_missing(monkeypatch, tmp_path: Path):
    from orchestrator.core.fingerprint import RunnerFingerprint
    from trt_orchestrator_plugins.builders.trtexec import builder

    monkeypatch.setenv("TRTEXEC", str(tmp_path / "nope"))
    t = request("10.13.3.9").target
    assert builder.available(RunnerFingerprint(os="linux", arch="x86_64"), t) == \
        f"TRTEXEC={tmp_path / 'nope'} is not an executable file"
    monkeypatch.delenv("TRTEXEC")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert builder.available(RunnerFingerprint(os="linux", arch="x86_64"), t).startswith(
        "trtexec is not on PATH and TRTEXEC is not set")


# --- issue 12 --------------------------------------------------------------------------------------------------------
EXTRA_ALL = {"avg_timing_iterations": 4, "max_aux_streams": 2, "sparse_weights": True, "tf32": False,
             "max_num_tactics": 8}


def test_extra_options_as_trtexec_flags():
    cmd = trtexec_command("10.13.3.9", request("10.13.3.9", extra=EXTRA_ALL))
    assert cmd == HEAD + SHAPES + ["--avgTiming=4", "--maxAuxStreams=2", "--maxTactics=8", "--sparsity=enable",
                                   "--noTF32"] + TAIL
    # TensorRT's defaults spell nothing (but stay key inputs)
    cmd = trtexec_command("10.13.3.9", request("10.13.3.9", extra={"sparse_weights": False, "tf32": True}))
    assert cmd == HEAD + SHAPES + TAIL


def test_extra_options_are_gated_by_trtexec_version():
    with pytest.raises(BuildError, match=r"TensorRT 10.1.0 \(trtexec\) does not apply extra option 'max_num_tactics' "
                                         r"\(from 10.7\)"):
        trtexec_command("10.1.0", request("10.1.0", extra={"max_num_tactics": 8}))
    cmd = trtexec_command("8.6.1.6", request("8.6.1.6", extra={"avg_timing_iterations": 2}))
    assert "--avgTiming=2" in cmd


def _everything(version: str) -> list[list[str]]:
    """Command lines using every feature trtexec ``version`` offers (one per exclusive mode)."""
    v = tuple(int(x) for x in version.split("."))
    extra = {k: EXTRA_ALL[k] for k in extra_options.extra_options(version, "trtexec")}
    profiles = (DEFAULT, TWO_INPUTS) if v >= (10,) else (DEFAULT,)
    options = dict(extra=extra, workspace_mib=256, optimization_level=4, version_compatible=True,
                   exclude_lean_runtime=True)
    if v >= (10, 8):
        options["tiling_level"] = "fast"
    hw = "same_compute_capability" if v >= (10, 9) else "ampere_plus"
    cmds = [trtexec_command(version, request(version, profiles=profiles, hw=hw, ccs=(), pinned_cache=Path("/p"),
                                             **options), timing_cache_file=Path("/w"))]
    if v < (11,):  # native precisions and --calib exist up to 10.x
        cmds.append(trtexec_command(version, request(version, "int8", native=True, calibration_cache=Path("/k"))))
        cmds.append(trtexec_command(version, request(version, "fp16", native=True)))
    if v >= (10,) and v < (11,):
        cmds.append(trtexec_command(version, request(version, "bf16", native=True)))
        cmds.append(trtexec_command(version, request(version, "fp16", native=False)))  # --stronglyTyped
    if v >= (10, 2):
        cmds.append(trtexec_command(version, request(version, platform="windows/x86_64"),
                                    host_platform="linux/x86_64"))
    return cmds


@pytest.mark.parametrize("tag", sorted(TRTEXEC_OPTIONS))
def test_every_flag_emitted_is_in_that_trtexec_option_table(tag):
    """Against the options trtexec's sampleOptions.cpp parses at each OSS tag (an unknown option is a failed run)."""
    version = trtexec_tag_version(tag)
    known = set(TRTEXEC_OPTIONS[tag])
    emitted = {arg.split("=", 1)[0] for cmd in _everything(version) for arg in cmd[1:]}
    assert emitted <= known, sorted(emitted - known)
    # and each gate opens no later than the option exists (features the table has are used where offered)
    if "--errorOnTimingCacheMiss" in known:
        assert "--errorOnTimingCacheMiss" in emitted
    if "--runtimePlatform" in known:
        assert "--runtimePlatform" in emitted
    if "--maxTactics" in known:
        assert "--maxTactics" in emitted


def test_pinned_timing_cache_errors_on_miss_from_10_0():
    cmd = trtexec_command("10.13.3.9", request("10.13.3.9", pinned_cache=Path("/pub/tc.cache")),
                          timing_cache_file=Path("/o/work.cache"))
    assert cmd == HEAD + SHAPES + ["--timingCacheFile=/o/work.cache", "--errorOnTimingCacheMiss"] + TAIL
    cmd = trtexec_command("8.6.1.6", request("8.6.1.6", pinned_cache=Path("/pub/tc.cache")),
                          timing_cache_file=Path("/o/work.cache"))
    assert "--timingCacheFile=/o/work.cache" in cmd and "--errorOnTimingCacheMiss" not in cmd


def test_native_int8_reads_the_calibration_cache():
    cmd = trtexec_command("10.13.3.9", request("10.13.3.9", "int8", native=True, calibration_cache=Path("/k/c.cache")))
    assert cmd == HEAD + ["--int8"] + SHAPES + ["--calib=/k/c.cache"] + TAIL
    with pytest.raises(BuildError, match="trtexec reads only entropy calibration caches"):
        trtexec_command("10.13.3.9", request("10.13.3.9", "int8", native=True, method="minmax",
                                             calibration_cache=Path("/k/c.cache")))
    with pytest.raises(BuildError, match="percentile is not a TensorRT calibrator"):
        trtexec_command("10.13.3.9", request("10.13.3.9", "int8", native=True, method="percentile",
                                             calibration_cache=Path("/k/c.cache")))
    with pytest.raises(BuildError, match="TensorRT 11.0 removed BuilderFlag.INT8 and the int8 calibrators"):
        trtexec_command("11.1.0.4", request("11.1.0.4", "int8", native=True, calibration_cache=Path("/k/c.cache")))


def test_cross_build_for_windows():
    cmd = trtexec_command("10.13.3.9", request("10.13.3.9", platform="windows/x86_64"), host_platform="linux/x86_64")
    # no --exportLayerInfo: a Windows engine cannot be deserialized on the Linux host
    assert cmd == HEAD + SHAPES + ["--runtimePlatform=WindowsAMD64", "--profilingVerbosity=detailed"]
    with pytest.raises(BuildError, match="RuntimePlatform arrived in TensorRT 10.2"):
        trtexec_command("10.1.0", request("10.1.0", platform="windows/x86_64"), host_platform="linux/x86_64")
    assert trtexec_command("10.13.3.9", request("10.13.3.9"), host_platform="linux/x86_64") == HEAD + SHAPES + TAIL


def test_trtexec_capabilities():
    caps = trtexec_builder.capabilities("10.13.3.9")
    assert caps.extra_options == extra_options.extra_options("10.13.3.9", "trtexec")
    assert caps.calibration_family == "tensorrt" and not caps.supports_calibrator and "int8" in caps.native
    assert caps.pins_timing_cache and caps.platform_specific
    assert not trtexec_builder.capabilities("8.6.1.6").pins_timing_cache  # no --errorOnTimingCacheMiss in 8.6.1
    assert trtexec_builder.capabilities("11.1.0.4").calibration_family is None  # --calib gone in 11.x


# A stand-in trtexec (scripted, unit tests only): it parses the flags the builder passes, treats the timing cache as
# one tactic name per line, fails under --errorOnTimingCacheMiss when "conv0/tactic-a" is missing (with a message of
# our making: the real text is not known here), else adds the tactic and writes a placeholder engine.
STAND_IN = r"""#!/bin/sh
engine=""; cache=""; strict=0
for a in "$@"; do
  case "$a" in
    --saveEngine=*) engine="${a#--saveEngine=}";;
    --timingCacheFile=*) cache="${a#--timingCacheFile=}";;
    --errorOnTimingCacheMiss) strict=1;;
  esac
done
echo "&&&& RUNNING TensorRT.trtexec [TensorRT v101303] # trtexec"
echo "[11/21/2026-10:00:00] [I] TensorRT version: 10.13.3"
if [ -n "$cache" ] && ! grep -qx "conv0/tactic-a" "$cache" 2>/dev/null; then
  if [ "$strict" = 1 ]; then
    echo "[11/21/2026-10:00:01] [E] Error[4]: scripted: tactic conv0/tactic-a missing from the timing cache"
    echo "&&&& FAILED TensorRT.trtexec [TensorRT v101303] # trtexec"
    exit 1
  fi
  echo "conv0/tactic-a" >> "$cache"
fi
printf 'ftrt-placeholder' > "$engine"
echo "[11/21/2026-10:00:02] [I] Engine built in 1.5 sec."
echo "&&&& PASSED TensorRT.trtexec [TensorRT v101303] # trtexec"
"""


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch):
    exe = tmp_path / "bin" / "trtexec"
    exe.parent.mkdir()
    exe.write_text(STAND_IN)
    exe.chmod(0o755)
    monkeypatch.setenv("TRTEXEC", str(exe))
    monkeypatch.setattr(timing_cache, "building_gpu_cc", lambda: "8.9")
    return exe


def test_shared_timing_cache_digests_read_and_written(stand_in, tmp_path: Path):
    req = request("10.13.3.9", out_dir=tmp_path / "out", cache_dir=tmp_path / "cache")
    first = trtexec_builder.build(req)
    shared = timing_cache.cache_path(tmp_path / "cache", "8.9", "10.13.3.9")
    assert first.timing_cache_read is None  # no cache yet
    assert first.timing_cache_written == timing_cache.digest(b"conv0/tactic-a\n") == timing_cache.digest_of_file(shared)
    assert first.timing_cache_path == shared
    assert first.metadata["timing_cache"]["mode"] == "shared"
    second = trtexec_builder.build(request("10.13.3.9", out_dir=tmp_path / "out2", cache_dir=tmp_path / "cache"))
    assert second.timing_cache_read == second.timing_cache_written == first.timing_cache_written


def test_pinned_build_starts_from_exactly_that_file_and_leaves_it(stand_in, tmp_path: Path):
    published = tmp_path / "published.cache"
    published.write_bytes(b"conv0/tactic-a\n")
    shared = timing_cache.cache_path(tmp_path / "cache", "8.9", "10.13.3.9")
    shared.parent.mkdir(parents=True)
    shared.write_bytes(b"something-else\n")
    result = trtexec_builder.build(request("10.13.3.9", out_dir=tmp_path / "out", cache_dir=tmp_path / "cache",
                                           pinned_cache=published))
    work = tmp_path / "out" / timing_cache.PINNED_WORK_FILE
    assert f"--timingCacheFile={work}" in result.metadata["command"]
    assert "--errorOnTimingCacheMiss" in result.metadata["command"]
    assert result.timing_cache_read == result.timing_cache_written == timing_cache.digest(b"conv0/tactic-a\n")
    assert result.timing_cache_path == work and result.metadata["timing_cache"]["changed"] is False
    assert published.read_bytes() == b"conv0/tactic-a\n" and shared.read_bytes() == b"something-else\n"


def test_pinned_build_fails_naming_the_miss(stand_in, tmp_path: Path):
    published = tmp_path / "published.cache"
    published.write_bytes(b"conv9/other\n")
    with pytest.raises(BuildError) as e:
        trtexec_builder.build(request("10.13.3.9", out_dir=tmp_path / "out", cache_dir=tmp_path / "cache",
                                      pinned_cache=published))
    assert e.value.message.startswith(
        "m/fp16/default@sm89+trtexec10.13: TensorRT 10.13.3.9 met a tactic missing from the pinned timing cache "
        "published.cache (--errorOnTimingCacheMiss): Error[4]: scripted: tactic conv0/tactic-a missing from the "
        "timing cache")
    assert "build once unpinned" in e.value.hint
    assert published.read_bytes() == b"conv9/other\n"


def test_no_timing_cache_reports_none(stand_in, tmp_path: Path):
    result = trtexec_builder.build(request("10.13.3.9", out_dir=tmp_path / "out", cache_dir=tmp_path / "cache",
                                           timing_cache=False))
    assert (result.timing_cache_read, result.timing_cache_written, result.timing_cache_path) == (None, None, None)


def test_native_int8_build_checks_the_cache_header(stand_in, tmp_path: Path):
    cache = tmp_path / "calibration.cache"
    cache.write_bytes(b"TRT-101303-EntropyCalibration2\nx: 3c010a14\n")
    result = trtexec_builder.build(request("10.13.3.9", "int8", native=True, out_dir=tmp_path / "out",
                                           cache_dir=tmp_path / "cache", calibration_cache=cache))
    assert f"--calib={cache}" in result.metadata["command"] and "--int8" in result.metadata["command"]
    assert result.metadata["calibration"]["header"] == "TRT-101303-EntropyCalibration2"
    cache.write_bytes(b"TRT-8601-EntropyCalibration2\nx: 3c010a14\n")
    with pytest.raises(BuildError, match=r"written by TensorRT 8.6.1 \(TRT-8601-EntropyCalibration2\); trtexec "
                                         r"10.13.3.9 reads only caches of its own version"):
        trtexec_builder.build(request("10.13.3.9", "int8", native=True, out_dir=tmp_path / "out2",
                                      cache_dir=tmp_path / "cache", calibration_cache=cache))


def _calibrate_request(tmp_path: Path) -> CalibrateRequest:
    model = tmp_path / "m.onnx"
    model.write_bytes(b"onnx")  # the stand-in parser only needs the file to exist
    return CalibrateRequest(key="ck", onnx_path=model, out_path=tmp_path / "calibration.cache",
                            precision=PrecisionSpec("int8"), calibration=DataSource(samples=3, seed=1),
                            input_shapes={"x": (1, 3, 8, 8)}, input_dtypes={"x": "float32"}, log=lambda line: None)


def test_calibrate_refuses_without_the_python_api(monkeypatch, tmp_path: Path):
    why = "TensorRT (tensorrt) is not installed: its wheels come only from NVIDIA's index"
    monkeypatch.setattr(tensorrt_module, "installed_version", lambda: (None, why))
    with pytest.raises(BuildError) as e:
        trtexec_builder.calibrate(_calibrate_request(tmp_path))
    assert e.value.message.startswith("trtexec cannot compute an int8 calibration cache (it only reads one, --calib); "
                                      "the tensorrt builder (TensorRT's Python API) of the same TensorRT version "
                                      "computes it, and it is not usable here: TensorRT (tensorrt) is not installed")
    assert "publish the cache first" in e.value.hint


def test_calibrate_delegates_to_the_tensorrt_builder(monkeypatch, stand_in, tmp_path: Path):
    trt = fake_tensorrt("10.13.3.9", model_inputs={"x": (-1, 3, 8, 8)})
    install(monkeypatch, tensorrt_module, trt)
    facts = trtexec_builder.calibrate(_calibrate_request(tmp_path))
    assert facts["computed_by"] == "tensorrt builder (Python API) 10.13.3.9, for trtexec"
    assert facts["header"] == "TRT-101303-EntropyCalibration2" and facts["batches"] == 3
    assert (tmp_path / "calibration.cache").read_bytes().startswith(b"TRT-101303-EntropyCalibration2\n")


def test_calibrate_refuses_a_python_api_of_another_version(monkeypatch, stand_in, tmp_path: Path):
    install(monkeypatch, tensorrt_module, fake_tensorrt("10.12.0.36"))
    with pytest.raises(BuildError, match="trtexec here is TensorRT 10.13.3 but the importable tensorrt is 10.12.0.36"):
        trtexec_builder.calibrate(_calibrate_request(tmp_path))
