"""Issue 23.17: TensorRT-family targets name one release exactly, and an engine is recorded with the release the
tool itself reported.

A TensorRT engine loads only on the release that built it, down to the build number; a TensorRT-RTX engine only on
its RTX release. So `validate` refuses ``builder_version: "10.13"`` (three releases: 10.13.0.35, 10.13.2.6,
10.13.3.9) with its place and the known releases it could mean; the runner checks never accept a looser target
against an installed release; the trtexec builder records trtexec's own version (its banner, completed with the
build number from the engine's plan header) and names the shared timing cache after it; and an engine whose record
names no exact release is not taken for a runner's release. Real plugins throughout; trtexec is a scripted
stand-in (TensorRT cannot be installed here) that prints trtexec's banner and writes a plan header.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest

from orchestrator.contracts.builder import BuildRequest, OptimizationProfile
from orchestrator.core import versions
from orchestrator.core.artifact import EngineDescriptor
from orchestrator.core.fingerprint import GpuInfo, InstalledRuntime, RunnerFingerprint
from orchestrator.core.model import BuilderOptions, PrecisionSpec, Target
from orchestrator.errors import BuildError
from trt_orchestrator_plugins._trt import compat, timing_cache
from trt_orchestrator_plugins.builders.trtexec import builder as trtexec_builder

from .test_cli import MANIFEST, _model, run

LOOSE = MANIFEST.replace("registry: {store: local, path: artifacts}", """\
  - {name: l4, builder: tensorrt, builder_version: "10.13", compute_capability: "8.9"}
  - {name: a10, builder: trtexec, builder_version: "10", compute_capability: "8.6"}
  - {name: desk, builder: tensorrt-rtx, builder_version: "1.7", compute_capability: "8.9"}
registry: {store: local, path: artifacts}""")


def test_validate_refuses_a_loose_tensorrt_version_with_the_known_releases(tmp_path):
    _model(tmp_path / "tiny.onnx")
    (tmp_path / "m.yaml").write_text(LOOSE)
    proc = run("validate", "m.yaml", cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    err = proc.stderr
    assert ("m.yaml:24:52: targets[2].builder_version: builder_version '10.13' is not an exact TensorRT release: an "
            "engine loads only on the exact release that built it (down to the build number)") in err, err
    assert "known 10.13 releases: 10.13.0.35, 10.13.2.6, 10.13.3.9" in err
    assert "m.yaml:25:52: targets[3].builder_version: builder_version '10' is not an exact TensorRT release" in err
    assert "10.8.0.43" in err and "10.16.1.11" in err  # the 10.x releases it knows
    assert "m.yaml:26:58: targets[4].builder_version: builder_version '1.7' is not an exact TensorRT-RTX " \
           "release" in err
    assert "known 1.7 releases: 1.7.1.116" in err
    # the exact releases validate
    exact = LOOSE.replace('"10.13"', '"10.13.3.9"').replace('"10",', '"10.16.1.11",').replace('"1.7"', '"1.7.1.116"')
    (tmp_path / "m.yaml").write_text(exact)
    proc = run("validate", "m.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


def test_serve_with_a_3_part_stack_needs_the_exact_release_beside_it(tmp_path):
    _model(tmp_path / "tiny.onnx")
    served = MANIFEST.replace("registry: {store: local, path: artifacts}", """\
  - {name: triton, builder: tensorrt, serve: "triton:24.06", compute_capability: "8.0"}
registry: {store: local, path: artifacts}""")
    (tmp_path / "m.yaml").write_text(served)
    proc = run("validate", "m.yaml", cwd=tmp_path)
    assert proc.returncode == 1
    assert ("targets[2].serve: builder_version '10.0.1' is not an exact TensorRT release" in proc.stderr
            and "serve: triton:24.06 ships TensorRT 10.0.1" in proc.stderr and "10.0.1.6" in proc.stderr), proc.stderr
    (tmp_path / "m.yaml").write_text(served.replace('serve: "triton:24.06",',
                                                    'serve: "triton:24.06", builder_version: "10.0.1.6",'))
    assert run("validate", "m.yaml", cwd=tmp_path).returncode == 0


def test_the_runner_checks_never_take_a_loose_target_for_an_installed_release():
    assert versions.same_release("10.13.3.9", "10.13.3.9") and versions.same_release("10.7.0.23", "10.7.0")
    assert not versions.same_release("10.13", "10.13.3.9") and not versions.same_release("10", "10.16.1.11")
    why = compat.builder_version_reason("l4", "10.13", "10.13.3.9")
    assert why is not None and "names no exact release" in why and 'builder_version: "10.13.3.9"' in why
    assert compat.builder_version_reason("l4", "10.13.3.9", "10.13.0.35") is not None


def _runner(trt: str) -> RunnerFingerprint:
    return RunnerFingerprint(os="linux", arch="x86_64", gpus=(GpuInfo(0, "L4", "8.9", 24000),),
                             runtimes={"tensorrt": InstalledRuntime(trt)})


def _engine(recorded: str) -> EngineDescriptor:
    meta = {"address": "m/fp32/default@sm89+trt10.13", "precision": "fp32",
            "builder": {"name": "trtexec", "version": recorded},
            "target": {"compute_capabilities": ["8.9"], "hardware_compatibility": "none", "device": "gpu"}}
    return EngineDescriptor.from_json(meta, runtime="tensorrt")


def test_an_engine_recorded_with_a_loose_version_is_not_taken_for_the_runner_release():
    """The defect's consequence: an engine recorded "10.13" (really 10.13.3.9) was accepted on 10.13.0.35."""
    no = compat.check_tensorrt(_engine("10.13"), _runner("10.13.0.35"))
    assert not no.ok and "names no exact release" in no.reason
    assert not compat.check_tensorrt(_engine("10"), _runner("10.16.1.11")).ok
    assert compat.check_tensorrt(_engine("10.13.3.9"), _runner("10.13.3.9")).ok
    assert not compat.check_tensorrt(_engine("10.13.3.9"), _runner("10.13.0.35")).ok


# -- the trtexec builder records what trtexec reports ------------------------------------------------------------

def _stand_in(tmp_path: Path, banner: str, header: tuple[int, int, int, int]) -> Path:
    """A scripted trtexec: prints ``banner`` (as trtexec's first line does) and, when building, writes a plan whose
    header carries ``header`` as its version bytes (24..27) and adds one line to the timing cache it is given."""
    exe = tmp_path / "bin" / "trtexec"
    exe.parent.mkdir(parents=True, exist_ok=True)
    plan = b"ftrt" + struct.pack("<I", 0) + bytes(16) + bytes(header) + bytes(36)
    exe.write_text(f"""#!{sys.executable}
import sys
args = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
print("&&&& RUNNING TensorRT.trtexec {banner} # trtexec")
if "--saveEngine" in args:
    open(args["--saveEngine"], "wb").write({plan!r})
    if "--timingCacheFile" in args:
        open(args["--timingCacheFile"], "a").write("tactic\\n")
    print("[I] Engine built in 0.5 sec.")
print("&&&& PASSED TensorRT.trtexec {banner} # trtexec")
""")
    exe.chmod(0o755)
    return exe


def _request(tmp_path: Path, version: str) -> BuildRequest:
    target = Target(name="l4", builder="trtexec", builder_version=version, compute_capabilities=("8.9",))
    profile = OptimizationProfile("default", {"x": ((1, 3, 8, 8), (2, 3, 8, 8), (4, 3, 8, 8))})
    return BuildRequest(address="m/fp32/default@sm89+trtexec10.13", build_key="k", onnx_path=tmp_path / "m.onnx",
                        profiles=(profile,), precision=PrecisionSpec("fp32"), native_precision=False, target=target,
                        options=BuilderOptions(), out_dir=tmp_path / "out", cache_dir=tmp_path / "cache",
                        log=lambda line: None)


@pytest.fixture
def on_l4(monkeypatch):
    monkeypatch.setattr(timing_cache, "building_gpu_cc", lambda: "8.9")


@pytest.mark.parametrize("loose", ["10.13", "10"])
def test_trtexec_refuses_a_loose_target_naming_what_it_is(tmp_path, monkeypatch, on_l4, loose):
    """Before: a 10.13.3.9 trtexec built a "10.13" (or "10") target and recorded the engine as "10.13"."""
    monkeypatch.setenv("TRTEXEC", str(_stand_in(tmp_path, "[TensorRT v101303] [b9]", (10, 13, 3, 9))))
    with pytest.raises(BuildError) as e:
        trtexec_builder.build(_request(tmp_path, loose))
    assert f"wants TensorRT {loose}, which names no exact release" in e.value.message
    assert 'builder_version: "10.13.3.9"' in e.value.message
    assert not (tmp_path / "cache").exists()  # no timing cache named after the loose string


def test_trtexec_records_its_own_version_completed_by_the_plan_header(tmp_path, monkeypatch, on_l4):
    # trtexec before 10.13.3 prints no build number: the engine's own header supplies it
    monkeypatch.setenv("TRTEXEC", str(_stand_in(tmp_path, "[TensorRT v100800]", (10, 8, 0, 43))))
    result = trtexec_builder.build(_request(tmp_path, "10.8.0.43"))
    assert result.builder_version == "10.8.0.43" and result.metadata["trtexec_version"] == "10.8.0"
    assert result.timing_cache_path == timing_cache.cache_path(tmp_path / "cache", "8.9", "10.8.0.43")


def test_trtexec_refuses_an_engine_whose_header_contradicts_it(tmp_path, monkeypatch, on_l4):
    monkeypatch.setenv("TRTEXEC", str(_stand_in(tmp_path, "[TensorRT v101303] [b9]", (10, 13, 0, 35))))
    with pytest.raises(BuildError, match=r"plan header says it was built by TensorRT 10\.13\.0\.35, but the builder "
                                         r"reported 10\.13\.3\.9"):
        trtexec_builder.build(_request(tmp_path, "10.13.3.9"))


def test_trtexec_refuses_another_build_of_the_target_release(tmp_path, monkeypatch, on_l4):
    # the banner has no build number, the header has: 10.8.0.44 is not the 10.8.0.43 the target names
    monkeypatch.setenv("TRTEXEC", str(_stand_in(tmp_path, "[TensorRT v100800]", (10, 8, 0, 44))))
    with pytest.raises(BuildError, match=r"trtexec built with TensorRT 10\.8\.0\.44 but the target wants 10\.8\.0\.43"):
        trtexec_builder.build(_request(tmp_path, "10.8.0.43"))
