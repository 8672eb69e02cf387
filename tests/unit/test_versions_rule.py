"""Issue 13 defect 2: ONE version rule, ``core.versions.same_version`` -- versions compare on the parts both
sides carry -- used wherever a target's builder version meets an installed one (the runner checks of the
builders, trtexec's banner) and by the TensorRT engine-compatibility rule (exact release, on the common parts)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from orchestrator.core.artifact import EngineDescriptor
from orchestrator.core.fingerprint import GpuInfo, InstalledRuntime, RunnerFingerprint
from orchestrator.core.model import Target
from orchestrator.core.versions import common_parts, same_version
from trt_orchestrator_plugins._trt.compat import builder_version_reason, check_rtx, check_tensorrt
from trt_orchestrator_plugins.builders import tensorrt_rtx
from trt_orchestrator_plugins.builders.trtexec import builder as trtexec_builder


@pytest.mark.parametrize(("a", "b", "same"), [
    ("8.6.1", "8.6.1.6", True),            # 8.6.1 wheel's __version__ vs the release a target names
    ("10.7.0", "10.7.0.23", True),         # 3-part __version__ up to 10.7
    ("10.3.0.26", "10.3.0", True),
    ("10.13.3.9", "10.13.3.9", True),
    ("10.13.3.9", "10.13.3.10", False),    # both carry the build number: it must agree
    ("10.13.3", "10.13.2.6", False),
    ("8.6.1", "8.6.10", False),            # parts compare as numbers, not as text prefixes
    ("10.1", "10.13.3.9", False),
    ("1.7.1.116", "1.7", True),
    ("10.13.3.9+cu13", "10.13.3.9", True),
    ("", "10.13.3.9", False),
    (None, "8.6.1", False),
    ("abc", "abc", False),                 # unreadable is never the same
])
def test_the_rule(a, b, same):
    assert same_version(a, b) is same
    assert same_version(b, a) is same


def test_common_parts():
    assert common_parts((8, 6, 1), (8, 6, 1, 6)) == 3
    assert common_parts((), (1,)) == 0


def test_runner_check_accepts_the_installed_3_part_module_version():
    """The defect: targets say 8.6.1.6 / 10.3.0.26, the installed module says 8.6.1 / 10.3.0."""
    assert builder_version_reason("t4", "8.6.1.6", "8.6.1") is None
    assert builder_version_reason("t4", "10.3.0.26", "10.3.0") is None
    why = builder_version_reason("t4", "10.13.3.10", "10.13.3.9")
    assert why is not None
    assert "wants TensorRT 10.13.3.10" in why and "is 10.13.3.9" in why and "parts both versions carry" in why
    assert builder_version_reason("t4", "10.13.3.9", None) == "TensorRT is not installed"


def _runner(cc: str, **runtimes: str) -> RunnerFingerprint:
    return RunnerFingerprint(os="linux", arch="x86_64", gpus=(GpuInfo(0, "gpu", cc, 24000),),
                             runtimes={k.replace("_", "-"): InstalledRuntime(v) for k, v in runtimes.items()})


def _engine(builder: str, version: str, ccs: tuple[str, ...], vc: bool = False) -> EngineDescriptor:
    meta = {"address": "m/fp16/default@x", "precision": "fp16", "builder": {"name": builder, "version": version},
            "target": {"compute_capabilities": list(ccs), "hardware_compatibility": "none", "device": "gpu",
                       "version_compatible": vc}}
    return EngineDescriptor.from_json(meta, runtime="tensorrt-rtx" if builder == "tensorrt-rtx" else "tensorrt")


def test_engine_compat_still_needs_the_exact_release_on_the_common_parts():
    # an 8.6.1.6 engine on a runner whose module says 8.6.1: the same release
    assert check_tensorrt(_engine("tensorrt", "8.6.1.6", ("8.6",)), _runner("8.6", tensorrt="8.6.1")).ok
    # another build of the same patch release: refused
    no = check_tensorrt(_engine("tensorrt", "10.13.3.9", ("8.6",)), _runner("8.6", tensorrt="10.13.3.10"))
    assert not no.ok and "down to the build number" in no.reason
    # another patch release: refused, even where the runner's version has 3 parts
    assert not check_tensorrt(_engine("tensorrt", "10.7.0.23", ("8.6",)), _runner("8.6", tensorrt="10.8.0")).ok
    # version compatible: newer same-major ok, older refused (compared on the common parts)
    assert check_tensorrt(_engine("tensorrt", "10.7.0.23", ("8.6",), vc=True), _runner("8.6", tensorrt="10.8.0")).ok
    assert not check_tensorrt(_engine("tensorrt", "10.8.0.43", ("8.6",), vc=True),
                              _runner("8.6", tensorrt="10.7.0")).ok
    # RTX: same release (major.minor.patch), builds need not agree
    assert check_rtx(_engine("tensorrt-rtx", "1.7.1.116", ("8.6",)), _runner("8.6", tensorrt_rtx="1.7.1")).ok
    assert not check_rtx(_engine("tensorrt-rtx", "1.7.1.116", ("8.6",)), _runner("8.6", tensorrt_rtx="1.6.0.1")).ok


def test_rtx_builder_uses_the_rule():
    assert tensorrt_rtx._version_matches("1.7.1", "1.7.1.116")
    assert not tensorrt_rtx._version_matches("1.7.1.116", "1.7")  # a loose target names no release (issue 23.17)
    assert not tensorrt_rtx._version_matches("1.7.1.116", "1.7.1.117")


def _fake_trtexec(tmp_path: Path, banner: str) -> Path:
    exe = tmp_path / "trtexec"
    exe.write_text(f"#!/bin/sh\necho '&&&& RUNNING TensorRT.trtexec {banner} # trtexec --help'\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


@pytest.mark.skipif(os.name != "posix", reason="the fake trtexec is a shell script")
@pytest.mark.parametrize(("banner", "wanted", "version_ok"), [
    ("[TensorRT v101303] [b9]", "10.13.3.9", True),
    ("[TensorRT v101303] [b9]", "10.13.3.10", False),   # the banner's build number is read and compared
    ("[TensorRT v101000]", "10.10.0.31", True),         # no build number before 10.13.3: 3 parts compared
    ("[TensorRT v101000]", "10.9.0.34", False),
])
def test_trtexec_available_compares_its_banner_by_the_rule(tmp_path, monkeypatch, banner, wanted, version_ok):
    monkeypatch.setenv("TRTEXEC", str(_fake_trtexec(tmp_path, banner)))
    target = Target(name="l4", builder="trtexec", builder_version=wanted, compute_capabilities=("8.9",))
    no_gpu = RunnerFingerprint(os="linux", arch="x86_64")
    why = trtexec_builder.available(no_gpu, target)
    assert why is not None  # no GPU here either way
    if version_ok:
        assert "NVIDIA GPU" in why, why
    else:
        assert f"wants TensorRT {wanted}" in why and "parts both versions carry" in why, why
