"""Every flag ``builders/trtexec.py`` emits, for a matrix of cells per release, is an option that release's trtexec
parses (``_trt/trtexec_options.py``: sampleOptions.cpp per OSS tag); multi-profile cells use ``--profile=i`` before
each shapes triple on >= 10.0 and are refused on 8.6. Pure: no TensorRT, no subprocess."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from orchestrator.contracts.builder import BuildRequest, OptimizationProfile
from orchestrator.core.model import BuilderOptions, PrecisionSpec, Target
from orchestrator.errors import BuildError
from tests.conformance.bindings import RELEASES
from trt_orchestrator_plugins._trt import trtexec_options
from trt_orchestrator_plugins.builders.trtexec import trtexec_command

# trtexec's option names per OSS tag, as carried by the repository (tests/conformance/data/README.md says how they
# were read from samples/common/sampleOptions.cpp at each tag)
CARRIED = Path(__file__).resolve().parent / "data" / "trtexec_options.json"
ONE = (OptimizationProfile("a", {"x": ((1, 3, 8, 8), (2, 3, 8, 8), (4, 3, 8, 8))}),)
TWO = ONE + (OptimizationProfile("b", {"x": ((1, 3, 16, 16), (2, 3, 16, 16), (4, 3, 16, 16))}),)
OPTIONS = {
    "default": {}, "opt": {"optimization_level": 5}, "tiling": {"tiling_level": "full"}, "ws": {"workspace_mib": 256},
    "strong": {"strongly_typed": True}, "vc": {"version_compatible": True, "exclude_lean_runtime": True},
    "nocache": {"timing_cache": False},
    "extra": {"extra": {"avg_timing_iterations": 2, "max_aux_streams": 1, "sparse_weights": True, "tf32": False}},
    "tactics": {"extra": {"max_num_tactics": 4}},
}


def _request(tmp: Path, version: str, precision: str, native: bool, hw: str, opts: dict, profiles: tuple,
             pinned: bool, platform: str = "linux/x86_64", weights: str = "embedded") -> BuildRequest:
    t = Target(name="t", builder="trtexec", builder_version=version,
               compute_capabilities=() if hw != "none" else ("8.9",), hardware_compatibility=hw,  # type: ignore[arg-type]
               options=BuilderOptions(**opts, timing_cache_pin=pinned), platform=platform,
               weights=weights)  # type: ignore[arg-type]
    return BuildRequest(address="m", build_key="k", onnx_path=tmp / "m.onnx", profiles=profiles,
                        precision=PrecisionSpec(precision), native_precision=native, target=t, options=t.options,
                        out_dir=tmp / "out", cache_dir=tmp / "cache", calibration=None, log=lambda line: None,
                        calibration_cache=tmp / "cal.cache" if precision == "int8" and native else None,
                        timing_cache=tmp / "pinned.cache" if pinned else None)


def _cells(version: str, tmp: Path):
    for precision, native, hw, (oname, opts), profiles, pinned in itertools.product(
            ("fp32", "fp16", "bf16", "int8", "fp8"), (False, True), ("none", "ampere_plus", "same_compute_capability"),
            OPTIONS.items(), (ONE, TWO), (False, True)):
        if pinned and not opts.get("timing_cache", True):
            continue
        yield (f"{precision}/{'native' if native else 'onnx'}/{hw}/{oname}/{len(profiles)}p{'/pinned' * pinned}",
               _request(tmp, version, precision, native, hw, opts, profiles, pinned))
    yield "cross-build windows", _request(tmp, version, "fp32", False, "none", {}, ONE, False, "windows/x86_64")
    for weights, precision in itertools.product(("stripped", "refittable"), ("fp32", "fp16")):
        yield (f"weights {weights} {precision}",
               _request(tmp, version, precision, False, "none", {}, ONE, False, weights=weights))


@pytest.mark.parametrize("version", RELEASES)
def test_every_emitted_flag_is_in_that_release_option_set(version: str, tmp_path: Path):
    known = trtexec_options.options_for(version)
    tag = trtexec_options.tag_for(version)
    bad: list[str] = []
    built = refused = 0
    for label, req in _cells(version, tmp_path):
        try:
            cmd = trtexec_command(version, req, timing_cache_file=tmp_path / "tc.cache",
                                  host_platform="linux/x86_64")
        except BuildError:
            refused += 1  # the planner's refusals are checked against the real bindings (test_real_bindings.py)
            continue
        built += 1
        for arg in cmd[1:]:
            flag = arg.split("=", 1)[0]
            if flag not in known:
                bad.append(f"{label}: {flag} is not a trtexec {tag} option ({arg})")
        shape_flags = [a.split("=", 1)[0] for a in cmd if a.startswith(("--profile=", "--minShapes=", "--optShapes=",
                                                                           "--maxShapes="))]
        if len(req.profiles) > 1:
            if version.startswith("8."):
                bad.append(f"{label}: trtexec 8.6 builds one profile, yet a {len(req.profiles)}-profile cell ran")
            want = []
            for i in range(len(req.profiles)):
                want += ["--profile", "--minShapes", "--optShapes", "--maxShapes"]
            profile_values = [a for a in cmd if a.startswith("--profile=")]
            if shape_flags != want or profile_values != [f"--profile={i}" for i in range(len(req.profiles))]:
                bad.append(f"{label}: profiles spelled {shape_flags} {profile_values}")
        elif shape_flags != ["--minShapes", "--optShapes", "--maxShapes"]:
            bad.append(f"{label}: one profile spelled {shape_flags}")
    assert built > 0
    assert not bad, f"{len(bad)} trtexec flag violations for {version} ({tag}):\n" + "\n".join(sorted(set(bad)))


def test_multi_profile_refused_on_86(tmp_path: Path):
    req = _request(tmp_path, "8.6.1", "fp32", False, "none", {}, TWO, False)
    with pytest.raises(BuildError, match="one optimization profile"):
        trtexec_command("8.6.1", req)


def test_table_tags_and_a_violation_is_caught():
    assert trtexec_options.tag_for("11.4.0.106") == "v11.1"
    assert trtexec_options.tag_for("10.9.0.34") == "v10.9.0"
    assert "--tilingOptimizationLevel" not in trtexec_options.options_for("10.1.0")
    assert "--fp16" not in trtexec_options.options_for("11.0.0.114")
    assert "--bf16" not in trtexec_options.options_for("8.6.1")
    assert "--profile" in trtexec_options.options_for("10.0.1")


def test_table_is_the_carried_option_lists():
    """The builder's table (plugins/_trt/trtexec_options.py) is the option lists the repository carries, tag for
    tag; runs on every clone (the data is in the tree)."""
    carried = json.loads(CARRIED.read_text())
    assert carried["sources"] and set(carried["sources"]) == set(carried["tags"])
    assert {t: frozenset(v) for t, v in carried["tags"].items()} == trtexec_options.OPTIONS


@pytest.mark.parametrize("version", RELEASES)
def test_weights_modes_spell_trtexec_flags(version: str, tmp_path: Path):
    """``weights: stripped`` is ``--stripWeights`` (STRIP_PLAN with REFIT_IDENTICAL), ``refittable`` is ``--refit``
    with ``--stripWeights`` from 10.0 (STRIP_PLAN with REFIT); 8.6 has no --stripWeights: stripped is refused there and
    refittable is --refit alone; embedded sets neither."""
    def flags(weights: str) -> list[str]:
        cmd = trtexec_command(version, _request(tmp_path, version, "fp32", False, "none", {}, ONE, False,
                                                weights=weights))
        return [a for a in cmd if a in ("--refit", "--stripWeights")]

    assert flags("embedded") == []
    if version.startswith("8."):
        with pytest.raises(BuildError, match="no BuilderFlag.STRIP_PLAN"):
            flags("stripped")
        assert flags("refittable") == ["--refit"]
    else:
        assert flags("stripped") == ["--stripWeights"]
        assert flags("refittable") == ["--refit", "--stripWeights"]
