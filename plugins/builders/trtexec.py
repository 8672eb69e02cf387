"""The ``trtexec`` builder: the same per-version plan as the ``tensorrt`` builder, spelled as trtexec flags.

``trtexec_command`` (pure) translates a ``_trt_config.BuildConfigPlan`` into a command line for that trtexec
version; ``parse_trtexec_output`` (pure) reads its log. Flag availability per version follows the option names
``samples/common/sampleOptions.cpp`` of NVIDIA/TensorRT parses at each tag (``_trt/trtexec_options.py``; the
READMEs are stale: they still show ``--int8``/``--workspace``) and NVIDIA's trtexec migration notes
(https://docs.nvidia.com/deeplearning/tensorrt/latest/api/migration/tensorrt-10x-to-11x-trtexec.html).

- ``options.extra`` (``_trt.extra_options.EXTRA_OPTIONS``, gated by trtexec's own option sets):
  ``avg_timing_iterations`` -> ``--avgTiming=N``, ``max_aux_streams`` -> ``--maxAuxStreams=N``,
  ``sparse_weights: true`` -> ``--sparsity=enable``, ``tf32: false`` -> ``--noTF32`` (all 8.6.1+),
  ``max_num_tactics`` -> ``--maxTactics=N`` (10.7+: absent from the v10.1.0 option table, present from v10.7.0).
  Any other key is refused.
- Timing caches: ``--timingCacheFile`` on the shared per-(GPU, version) file under its lock (trtexec reads and
  rewrites it); a pinned build (``request.timing_cache``) runs on a private copy of the pinned file with
  ``--errorOnTimingCacheMiss`` (10.0+; absent from trtexec 8.6.1) and fails naming the miss. Digests read/written
  are reported.
- Native int8 (8.6-10.x): ``--int8 --calib=<cache>`` with the calibrate node's cache (``--calib`` is in every
  option table up to v10.16, gone in 11.x). trtexec cannot compute a cache (without ``--calib`` its
  ``RndInt8Calibrator`` makes up random scales, and that calibrator is an entropy one: it reads only
  ``EntropyCalibration2`` caches). Its ``calibrate`` therefore delegates to the ``tensorrt`` builder (Python API)
  when ``tensorrt`` of trtexec's version is importable on the runner, and otherwise refuses, saying so.
- Platform: as the ``tensorrt`` builder; the linux/x86_64 -> windows/x86_64 cross-build passes
  ``--runtimePlatform=WindowsAMD64`` (10.2+ in the Python API; in the option tables from v10.7.0) and skips
  ``--exportLayerInfo`` (the engine cannot be deserialized on the host).
- Weights (``targets[].weights``): ``stripped`` -> ``--stripWeights`` (STRIP_PLAN + REFIT_IDENTICAL),
  ``refittable`` -> ``--refit --stripWeights`` (REFIT + STRIP_PLAN), both from v10.0.1; on 8.6 ``refittable`` is
  ``--refit`` alone and ``stripped`` is refused (no ``--stripWeights`` in the v8.6.1 option table).
- More than one optimization profile: ``--profile=<i>`` before each shapes triple (10.0+); trtexec 8.6 builds one
  profile only and is refused.

trtexec is found through the ``TRTEXEC`` environment variable (a path) or ``PATH``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
from orchestrator.core.versions import parse_version, same_release, same_version
from orchestrator.errors import BuildError
from trt_orchestrator_plugins._trt import calibration as _calibration
from trt_orchestrator_plugins._trt import compat as _compat
from trt_orchestrator_plugins._trt import config as _trt_config
from trt_orchestrator_plugins._trt import plan_header as _plan_header
from trt_orchestrator_plugins._trt import runner_checks as _runner_checks
from trt_orchestrator_plugins._trt import timing_cache
from trt_orchestrator_plugins.builders import tensorrt as _tensorrt_builder

ENGINE_FILE = "engine.plan"
LOG_FILE = "build.log"
LAYER_INFO_FILE = "layer_info.json"
LOG_TAIL_LINES = 40
# trtexec --tilingOptimizationLevel takes the level as an integer 0-3 (10.8+).
_TILING_INT = {"NONE": 0, "FAST": 1, "MODERATE": 2, "FULL": 3}
_HW_CLI = {"AMPERE_PLUS": "ampere+", "SAME_COMPUTE_CAPABILITY": "sameComputeCapability"}
_PRECISION_CLI = {"FP16": "--fp16", "BF16": "--bf16", "INT8": "--int8", "FP8": "--fp8"}
# RuntimePlatform member -> --runtimePlatform value (sampleOptions.cpp: "SameAsBuild" | "WindowsAMD64")
_RUNTIME_PLATFORM_CLI = {"WINDOWS_AMD64": "WindowsAMD64"}


def _dims(shape: tuple[int, ...]) -> str:
    return "x".join(str(int(d)) for d in shape)


def _shapes_flag(flag: str, profile: OptimizationProfile, which: int) -> str:
    spec = ",".join(f"{name}:{_dims(shapes[which])}" for name, shapes in profile.shapes.items())
    return f"--{flag}={spec}"


def _extra_flags(extra: tuple[tuple[str, Any], ...]) -> list[str]:
    """``options.extra`` as trtexec flags (the plan has gated every key by trtexec's version)."""
    out = []
    for key, value in extra:
        if key == "avg_timing_iterations":
            out.append(f"--avgTiming={int(value)}")
        elif key == "max_aux_streams":
            out.append(f"--maxAuxStreams={int(value)}")
        elif key == "max_num_tactics":
            out.append(f"--maxTactics={int(value)}")
        elif key == "sparse_weights":
            if value:
                out.append("--sparsity=enable")
        elif key == "tf32":
            if not value:
                out.append("--noTF32")
        else:  # EXTRA_OPTIONS and this table go together
            raise BuildError(f"extra option {key!r} has no trtexec spelling")
    return out


def trtexec_command(version: str, request: BuildRequest, *, executable: str = "trtexec",
                    timing_cache_file: Path | None = None, layer_info_file: Path | None = None,
                    engine_file: Path | None = None, host_platform: str | None = None) -> list[str]:
    """The trtexec command line that builds ``request`` with trtexec ``version`` (no inference run).

    ``timing_cache_file``: the file trtexec reads and rewrites (the shared cache, or a pinned build's private
    copy: ``request.timing_cache`` marks the build pinned); ``host_platform``: the build host (None: native)."""
    v = parse_version(version)
    plan = _trt_config.plan_build_config(version, "tensorrt", request.precision, request.native_precision,
                                         request.options, request.target, tool="trtexec",
                                         host_platform=host_platform,
                                         pinned_timing_cache=request.timing_cache is not None)
    if plan.calibrator and request.calibration_cache is None:
        raise BuildError("trtexec cannot calibrate int8 from data (--int8 without --calib uses placeholder "
                         "scales, which would publish an engine with meaningless accuracy)",
                         hint="give it the calibrate node's cache (--calib), or use precision via: transform (Q/DQ) "
                              "or the tensorrt builder")
    engine = engine_file or Path(request.out_dir) / ENGINE_FILE
    cmd = [executable, f"--onnx={request.onnx_path}", f"--saveEngine={engine}",
           # --skipInference exists from 8.6 on (8.6's --buildOnly is a deprecated alias, removed in 10.0).
           "--skipInference"]
    for name in plan.builder_flags:
        if name in _PRECISION_CLI:
            # plan_build_config already refused these on 11.x, where trtexec says "Unknown option".
            cmd.append(_PRECISION_CLI[name])
    if plan.strongly_typed and v < (11,):
        cmd.append("--stronglyTyped")  # 10.x opt-in; on 11.x a deprecated no-op (always strongly typed)
    if "VERSION_COMPATIBLE" in plan.builder_flags:
        cmd.append("--versionCompatible")
    if "EXCLUDE_LEAN_RUNTIME" in plan.builder_flags:
        cmd.append("--excludeLeanRuntime")
    # weights (plan.weights): --stripWeights is STRIP_PLAN with REFIT_IDENTICAL, "--stripWeights --refit" STRIP_PLAN
    # with REFIT (trtexec --help: "Default to latter, but you can switch to the former by enabling both
    # --stripWeights and --refit"); both from v10.0.1, --refit alone on 8.6 (the plan refused 8.6 + stripped)
    if "REFIT" in plan.builder_flags:
        cmd.append("--refit")
    if "STRIP_PLAN" in plan.builder_flags:
        cmd.append("--stripWeights")
    if plan.workspace_bytes is not None:
        mib = plan.workspace_bytes >> 20
        # 8.6 parses a plain number as MiB; 10.x accepts B/K/M/G suffixes (default unit still MiB).
        cmd.append(f"--memPoolSize=workspace:{mib}M" if v >= (10,) else f"--memPoolSize=workspace:{mib}")
    if len(request.profiles) > 1 and v < (10,):
        raise BuildError(f"trtexec {version} builds one optimization profile only (--profile arrived in 10.0); "
                         f"this cell has {len(request.profiles)}",
                         hint="use the tensorrt builder, one profile per profile set, or TensorRT >= 10.0")
    for i, profile in enumerate(request.profiles):
        # 10.0+: "Multiple --minShapes/--optShapes/--maxShapes without --profile are not allowed"
        if len(request.profiles) > 1:
            cmd.append(f"--profile={i}")
        cmd += [_shapes_flag("minShapes", profile, 0), _shapes_flag("optShapes", profile, 1),
                _shapes_flag("maxShapes", profile, 2)]
    if plan.use_timing_cache and timing_cache_file is not None:
        cmd.append(f"--timingCacheFile={timing_cache_file}")
        if "ERROR_ON_TIMING_CACHE_MISS" in plan.builder_flags:
            cmd.append("--errorOnTimingCacheMiss")
    if plan.optimization_level is not None:
        cmd.append(f"--builderOptimizationLevel={plan.optimization_level}")
    if plan.tiling_level is not None:
        cmd.append(f"--tilingOptimizationLevel={_TILING_INT[plan.tiling_level]}")
    if plan.hardware_compatibility_level is not None:
        cmd.append(f"--hardwareCompatibilityLevel={_HW_CLI[plan.hardware_compatibility_level]}")
    if plan.calibrator:
        cmd.append(f"--calib={request.calibration_cache}")
    if plan.runtime_platform is not None:
        cmd.append(f"--runtimePlatform={_RUNTIME_PLATFORM_CLI[plan.runtime_platform]}")
    cmd += _extra_flags(plan.extra)
    if plan.runtime_platform is None:
        layer_info = layer_info_file or Path(request.out_dir) / LAYER_INFO_FILE
        cmd.append(f"--exportLayerInfo={layer_info}")
    cmd.append("--profilingVerbosity=detailed")
    return cmd


# --------------------------------------------------------------------------------------------------------------
# Output parsing (sampleReporting.cpp layout; identical in 8.6.1 and 11.1)


@dataclass(frozen=True)
class MetricSummary:
    min: float
    max: float
    mean: float
    median: float
    percentiles: dict[float, float] = field(default_factory=dict)  # percentile -> ms


@dataclass(frozen=True)
class TrtexecReport:
    tensorrt_version: str | None
    build_seconds: float | None
    errors: tuple[str, ...]
    throughput_qps: float | None = None
    metrics: dict[str, MetricSummary] = field(default_factory=dict)  # "Latency", "GPU Compute Time", ...
    passed: bool | None = None  # the final "&&&& PASSED" / "&&&& FAILED" line


_LINE_PREFIX = re.compile(r"^(?:\[[^\]]*\]\s*)*")  # "[11/21/2026-10:00:00] [I] "
_VERSION_LINE = re.compile(r"TensorRT version:\s*([0-9][0-9.]*)")
# "[TensorRT v101303] [b9]": from 10.13.3 on the banner trtexec prints carries the build number
_BANNER = re.compile(r"\[TensorRT v(\d+)\](?:\s*\[b(\d+)\])?")
_BUILD_TIME = re.compile(r"Engine built in\s+([0-9.]+)\s*sec")
_THROUGHPUT = re.compile(r"^Throughput:\s*([0-9.eE+-]+)\s*qps")
_METRIC = re.compile(r"^(Latency|Enqueue Time|H2D Latency|GPU Compute Time|D2H Latency):\s*(.*)$")
_FIELD = re.compile(r"(min|max|mean|median|percentile\(([0-9.]+)%\))\s*=\s*([0-9.eE+-]+)\s*ms")


def banner_version(code: str, build: str | None = None) -> str:
    """``[TensorRT v8601]`` -> 8.6.1; ``[TensorRT v101300]`` -> 10.13.0 (major*10000 from 10.0; 8.x used *1000);
    with the build number the banner carries from 10.13.3 (``[TensorRT v101303] [b9]``) -> 10.13.3.9. Without
    one the version stays 3-part, which the version rule (``core.versions.same_version``) compares on 3 parts."""
    n = int(code)
    if n >= 10000:
        text = f"{n // 10000}.{n // 100 % 100}.{n % 100}"
    else:
        text = f"{n // 1000}.{n // 100 % 10}.{n % 100}"
    return f"{text}.{int(build)}" if build else text


def parse_trtexec_output(text: str) -> TrtexecReport:
    version = None
    build_seconds = None
    errors: list[str] = []
    throughput = None
    metrics: dict[str, MetricSummary] = {}
    passed = None
    for raw in text.splitlines():
        m = _BANNER.search(raw)
        if m and version is None:
            version = banner_version(m.group(1), m.group(2))
        if raw.startswith("&&&& PASSED"):
            passed = True
        elif raw.startswith("&&&& FAILED"):
            passed = False
        is_error = "[E]" in raw
        line = _LINE_PREFIX.sub("", raw).strip()
        if is_error or line.startswith("Error["):
            errors.append(line)
            continue
        if (m := _VERSION_LINE.search(line)):
            # the "TensorRT version:" line wins, unless the banner says the same release with its build number
            line_version = m.group(1).rstrip(".")
            if not (version and same_version(line_version, version)
                    and len(parse_version(version)) > len(parse_version(line_version))):
                version = line_version
        elif (m := _BUILD_TIME.search(line)):
            build_seconds = float(m.group(1))
        elif (m := _THROUGHPUT.match(line)):
            throughput = float(m.group(1))
        elif (m := _METRIC.match(line)):
            values: dict[str, float] = {}
            pct: dict[float, float] = {}
            for f in _FIELD.finditer(m.group(2)):
                if f.group(2) is not None:
                    pct[float(f.group(2))] = float(f.group(3))
                else:
                    values[f.group(1)] = float(f.group(3))
            if {"min", "max", "mean", "median"} <= set(values):
                metrics[m.group(1)] = MetricSummary(values["min"], values["max"], values["mean"],
                                                    values["median"], pct)
    return TrtexecReport(version, build_seconds, tuple(errors), throughput, metrics, passed)


# --------------------------------------------------------------------------------------------------------------


def exact_version(reported: str, target_version: str) -> str:
    """The release a runner's tool reported, completed with the target's further parts where the tool reports fewer
    (trtexec's banner before 10.13.3, ``trt.__version__`` before 10.8): only after ``same_release(target,
    reported)`` held, so the two agree on every part the tool carries. Names per-version files (timing caches)."""
    have, want = parse_version(reported), parse_version(target_version)
    return ".".join(str(p) for p in want) if len(want) > len(have) else reported


def locate_trtexec() -> tuple[str | None, str | None]:
    """(path, None) or (None, why not). ``TRTEXEC`` wins over PATH."""
    env = os.environ.get("TRTEXEC")
    if env:
        if os.path.isfile(env) and os.access(env, os.X_OK):
            return env, None
        return None, f"TRTEXEC={env} is not an executable file"
    found = shutil.which("trtexec")
    if found:
        return found, None
    return None, ("trtexec is not on PATH and TRTEXEC is not set (it ships with TensorRT's tar/deb packages, "
                  "e.g. /usr/src/tensorrt/bin/trtexec)")


def probe_version(executable: str) -> str | None:
    """trtexec's version from its banner (``--help`` prints ``[TensorRT v101300]``, and from 10.13.3
    ``[TensorRT v101303] [b9]``): major.minor.patch, with the build number where the banner has one."""
    try:
        proc = subprocess.run([executable, "--help"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_trtexec_output(proc.stdout + proc.stderr).tensorrt_version


class TrtexecBuilder:
    name = "trtexec"
    runtime = "tensorrt"  # trtexec writes plain TensorRT plans
    slug = "trtexec"
    # the recipe version (a build-key input): bump it in the change that makes this plugin build other bytes
    recipe = "1"

    def probe_target(self, fingerprint: RunnerFingerprint) -> Target | None:
        return probe_target(self, fingerprint)

    def capabilities(self, version: str) -> BuilderCapabilities:
        return _trt_config.capabilities(version, "tensorrt", tool="trtexec")

    def available(self, fingerprint: RunnerFingerprint, target: Target) -> str | None:
        exe, why = locate_trtexec()
        if exe is None:
            return why
        version = probe_version(exe)
        if version is None:
            return f"could not read the TensorRT version of {exe} (--help printed no [TensorRT vNNNN] banner)"
        # The version rule: compared on the parts both carry (the banner has a build number from 10.13.3 only);
        # the check happens again against the build log's version.
        why = _compat.builder_version_reason(target.name, target.builder_version, version, f"trtexec ({exe})")
        if why:
            return why
        return _runner_checks.build_runner_reason(fingerprint, target, target.builder_version, "trtexec")

    def build(self, request: BuildRequest) -> BuildResult:
        exe, why = locate_trtexec()
        if exe is None:
            raise BuildError(why or "trtexec not found", node=request.address)
        # The release trtexec itself reports, not the target's string: the target must name exactly that release,
        # and the shared timing cache is named after it (completed with the target's build number where the banner
        # has none: the two agree on every part the banner carries).
        reported = probe_version(exe)
        if reported is None:
            raise BuildError(f"could not read the TensorRT version of {exe} (--help printed no [TensorRT vNNNN] "
                             "banner)", node=request.address)
        why = _compat.builder_version_reason(request.target.name, request.target.builder_version, reported,
                                             f"trtexec ({exe})")
        if why:
            raise BuildError(why, node=request.address)
        version = exact_version(reported, request.target.builder_version)
        out_dir = Path(request.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        pinned = Path(request.timing_cache) if request.timing_cache is not None else None
        cache_file = None
        if request.options.timing_cache:
            if pinned is not None:
                if not pinned.is_file():
                    raise BuildError(f"the pinned timing cache {pinned} does not exist", node=request.address)
                # trtexec rewrites --timingCacheFile: it works on a private copy, the pinned file stays as published
                cache_file = out_dir / timing_cache.PINNED_WORK_FILE
                shutil.copyfile(pinned, cache_file)
            else:
                cache_file = timing_cache.cache_path(request.cache_dir, timing_cache.building_gpu_cc(), version)
                cache_file.parent.mkdir(parents=True, exist_ok=True)
        host = _tensorrt_builder.host_platform()
        cmd = trtexec_command(version, request, executable=exe, timing_cache_file=cache_file, host_platform=host)
        calibration = None
        if any(a.startswith("--calib=") for a in cmd) and request.calibration_cache is not None:
            if not Path(request.calibration_cache).is_file():
                raise BuildError(f"the calibration cache {request.calibration_cache} does not exist",
                                 node=request.address)
            data = Path(request.calibration_cache).read_bytes()
            header = _calibration.check_cache(data, version, request.precision.calibration_method, reader="trtexec")
            calibration = {"source": "cache", "cache": str(request.calibration_cache),
                           "digest": timing_cache.digest(data), "header": header.line}
        log_path = out_dir / LOG_FILE
        request.log(" ".join(cmd))
        started = time.perf_counter()
        # trtexec itself updates --timingCacheFile; concurrent trtexec builds sharing a cache file serialize on
        # the same lock the tensorrt builder uses (a pinned build's private copy needs none).
        read = written = None
        with _maybe_lock(cache_file if pinned is None else None):
            if cache_file is not None:
                read = timing_cache.digest_of_file(pinned if pinned is not None else cache_file)
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if cache_file is not None:
                written = timing_cache.digest_of_file(cache_file)
        seconds = time.perf_counter() - started
        output = proc.stdout + (("\n" + proc.stderr) if proc.stderr else "")
        log_path.write_text(" ".join(cmd) + "\n" + output)
        report = parse_trtexec_output(output)
        tail = "\n".join(output.splitlines()[-LOG_TAIL_LINES:])
        engine = out_dir / ENGINE_FILE
        if proc.returncode != 0 or not engine.exists():
            if pinned is not None and "--errorOnTimingCacheMiss" in cmd:
                raise timing_cache.miss_error(version, pinned, timing_cache.miss_lines(list(report.errors)),
                                              node=request.address, log_tail=tail, flag="--errorOnTimingCacheMiss")
            first = report.errors[0] if report.errors else f"exit status {proc.returncode}"
            raise BuildError(f"trtexec failed: {first}", node=request.address, log_tail=tail)
        used = report.tensorrt_version or reported
        recorded, contradiction = _plan_header.recorded_version(used, _plan_header.read_header_file(engine),
                                                                request.target.builder_version)
        if contradiction or not same_release(request.target.builder_version, recorded):
            raise BuildError(contradiction or f"trtexec built with TensorRT {recorded} but the target wants "
                             f"{request.target.builder_version}", node=request.address, log_tail=tail)
        layer_info = out_dir / LAYER_INFO_FILE
        facts = {"mode": "pinned" if pinned else ("shared" if cache_file else "off"),
                 "pinned_from": str(pinned) if pinned else None, "read": read, "written": written,
                 "changed": (read != written) if pinned else None}
        return BuildResult(
            engine_path=engine,
            log_path=log_path,
            builder=self.name,
            builder_version=recorded,
            build_seconds=report.build_seconds or seconds,
            layer_info_path=layer_info if layer_info.exists() else None,
            metadata={"command": cmd, "trtexec_version": report.tensorrt_version, "timing_cache": facts,
                      "calibration": calibration, "platform": request.target.platform, "built_on": host,
                      **({"weights": {"mode": request.target.weights, "stripped": "--stripWeights" in cmd,
                                      "flags": [a for a in cmd if a in ("--refit", "--stripWeights")]}}
                         if request.target.weights != "embedded" else {})},
            timing_cache_read=read,
            timing_cache_written=written,
            timing_cache_path=cache_file if written else None,
        )

    def calibrate(self, request: CalibrateRequest) -> dict[str, Any]:
        """trtexec reads native int8 calibration caches (``--calib``) but cannot compute one: the ``tensorrt``
        builder (TensorRT's Python API) of the same version computes it, here when ``tensorrt`` is importable (and,
        where trtexec is installed too, of trtexec's version); otherwise a BuildError saying so."""
        version, why = _tensorrt_builder.installed_version()
        if version is None:
            raise BuildError(
                "trtexec cannot compute an int8 calibration cache (it only reads one, --calib); the tensorrt builder "
                f"(TensorRT's Python API) of the same TensorRT version computes it, and it is not usable here: {why}",
                hint="install the tensorrt wheel of trtexec's version on this runner, let a runner that has it "
                     "publish the cache first, or use precision via: transform (Q/DQ)")
        exe, _ = locate_trtexec()
        trtexec_version = probe_version(exe) if exe else None
        if trtexec_version and not same_version(trtexec_version, version):
            raise BuildError(
                f"trtexec here is TensorRT {trtexec_version} but the importable tensorrt is {version}: a calibration "
                "cache is read only by the TensorRT version that wrote it",
                hint="install the tensorrt wheel of trtexec's exact version")
        request.log(f"trtexec cannot calibrate: computing the cache with the tensorrt builder (Python API, "
                    f"TensorRT {version})")
        facts = _tensorrt_builder.builder.calibrate(request)
        return {**facts, "computed_by": f"tensorrt builder (Python API) {version}, for trtexec"}


def _maybe_lock(cache_file: Path | None):
    if cache_file is None:
        return contextlib.nullcontext()
    return timing_cache.lock_for(cache_file)


builder = TrtexecBuilder()
