"""trtexec command lines per version, and parsing trtexec's log."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.contracts.builder import BuildRequest, OptimizationProfile
from orchestrator.core.model import BuilderOptions, PrecisionSpec, Target
from orchestrator.errors import BuildError
from trt_orchestrator_plugins.builders.trtexec import banner_version, parse_trtexec_output, trtexec_command

OUT = Path("/o")
DEFAULT = OptimizationProfile("default", {"x": ((1, 3, 224, 224), (4, 3, 224, 224), (8, 3, 224, 224))})
TWO_INPUTS = OptimizationProfile("big", {"x": ((1, 3, 64, 64), (1, 3, 640, 640), (1, 3, 960, 960)),
                                         "s": ((1, 2), (1, 2), (1, 2))})


def request(version, precision="fp32", native=False, profiles=(DEFAULT,), ccs=("8.9",), hw="none", **options):
    t = Target(name="t", builder="trtexec", builder_version=version, compute_capabilities=ccs,
               hardware_compatibility=hw, options=BuilderOptions(**options))
    return BuildRequest(address="m/fp16/default@sm89+trtexec10.13", build_key="k", onnx_path=Path("/m.onnx"),
                        profiles=profiles, precision=PrecisionSpec(precision), native_precision=native,
                        target=t, options=t.options, out_dir=OUT, cache_dir=Path("/c"))


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
    assert cmd == HEAD + ["--stronglyTyped"] + SHAPES + [
        "--minShapes=x:1x3x64x64,s:1x2", "--optShapes=x:1x3x640x640,s:1x2", "--maxShapes=x:1x3x960x960,s:1x2",
        "--hardwareCompatibilityLevel=sameComputeCapability"] + TAIL


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


# A sample written from the documented stdout layout (reference §6 / sampleReporting.cpp), not captured from a
# real run: TensorRT cannot be installed on these machines.
SAMPLE = """\
&&&& RUNNING TensorRT.trtexec [TensorRT v101300] [b9] # trtexec --onnx=/m.onnx --saveEngine=/o/engine.plan
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
&&&& PASSED TensorRT.trtexec [TensorRT v101300] [b9] # trtexec --onnx=/m.onnx
"""  # noqa: E501  (trtexec's long summary lines, verbatim)

FAILED = """\
&&&& RUNNING TensorRT.trtexec [TensorRT v110100] # trtexec --onnx=/m.onnx --fp16
[11/21/2026-10:00:00] [E] Unknown option: --fp16
&&&& FAILED TensorRT.trtexec [TensorRT v110100] # trtexec --onnx=/m.onnx --fp16
"""


def test_parse_sample_output():
    r = parse_trtexec_output(SAMPLE)
    assert r.tensorrt_version == "10.13.3"
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
    exe.write_text("#!/bin/sh\nfor i in $(seq 1 60); do echo \"[I] line $i\"; done\n"
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
