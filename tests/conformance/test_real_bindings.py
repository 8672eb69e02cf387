"""Conformance of our TensorRT adapters to NVIDIA's REAL Python bindings, release by release.

For each release in ``bindings.RELEASES`` the binding wheel is fetched from PyPI once (``.cache/trt-bindings/``),
stub native libraries are compiled for it (``bindings.py``), and ``tests/conformance/driver.py`` runs in its own
subprocess with the real module importable: it drives ``_trt.config`` (plan + apply over precisions x options x
hardware levels), the ``tensorrt`` builder (build, int8 calibration, timing caches, parser errors, calibrate) and the
``tensorrt`` runtime (load, run, benchmark, close) against stand-ins that check every attribute, call, argument and
property set against the real classes, compares each version gate of our planner with the real surface, and
compares the surface the repository carries for that release (tests/conformance/data) with the real module. The
releases run in parallel (one process each). Every violation is listed in the failure message.

Needs: PyPI reachable on the first run (the wheels are ~1 MB each, reused afterwards), ``nm``/``readelf``/
``c++filt`` (binutils) and a C compiler (``cc``); a missing one fails the test, naming it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.conformance import bindings, surface

TIMEOUT_S = 300


def _run(version: str, *args: str) -> dict[str, Any]:
    try:
        env = {**os.environ, **bindings.prepare(version)}
    except bindings.BindingsUnavailable as e:
        return {"error": f"could not prepare the {version} bindings: {e}"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(bindings.ROOT), os.environ.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-m", "tests.conformance.driver", *args], cwd=bindings.ROOT, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    if proc.returncode != 0:
        return {"error": f"driver for {version} exited {proc.returncode}:\n{proc.stderr[-4000:]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def results() -> dict[str, dict[str, Any]]:
    with ThreadPoolExecutor(max_workers=max(2, min(len(bindings.RELEASES), (os.cpu_count() or 2) * 2))) as pool:
        return dict(zip(bindings.RELEASES, pool.map(_run, bindings.RELEASES), strict=True))


@pytest.mark.parametrize("version", bindings.RELEASES)
def test_adapters_conform_to_the_real_bindings(results: dict[str, dict[str, Any]], version: str):
    r = results[version]
    assert "error" not in r, r.get("error")
    assert r["module"].startswith(str(bindings.CACHE / version)), r["module"]
    cases = r["cases"]
    major = int(version.split(".")[0])
    # the paths really ran (a driver that silently skipped them would pass with zero violations)
    assert cases.get("planner applied", 0) >= 200 and cases.get("version gates", 0) == 19, cases
    assert cases.get("build", 0) >= 7 and cases.get("build parser error") == 1, cases
    assert cases.get("runtime load/run/benchmark/close") == 2, cases
    if major < 11:
        assert cases.get("build int8 calibrated") == 2 and cases.get("build int8 from cache") == 2, cases
        assert cases.get("calibrate") == 2, cases
    else:
        assert cases.get("calibrate refused (11.x)") == 2, cases
    assert {"cudaMalloc", "cudaMemcpyAsync", "cudaEventElapsedTime", "cudaStreamCreate"} <= set(r["cuda_calls"])
    assert not r["violations"], (f"{len(r['violations'])} violations of the real TensorRT {version} API:\n"
                                 + "\n".join(r["violations"]))


@pytest.mark.parametrize("version", bindings.RELEASES)
def test_version_gates_match_the_real_module(results: dict[str, dict[str, Any]], version: str):
    r = results[version]
    assert "error" not in r, r.get("error")
    gates = r["gates"]
    v = tuple(int(p) for p in version.split("."))
    expect = {
        "bf16_flag": (10,) <= v < (11,),
        "device_memory_size_v2": v >= (10, 1),
        "tiling_optimization_level": v >= (10, 8),
        "SAME_COMPUTE_CAPABILITY": v >= (10, 9),
        "fp16_flag": v < (11,), "int8_flag": v < (11,), "entropy_calibrator": v < (11,),
    }
    for name, present in expect.items():
        surface, ours = gates[name]
        assert surface == present == ours, f"{name} on {version}: real {surface}, planner {ours}, expected {present}"
    assert gates["EXPLICIT_BATCH (planned < 10)"][0] == (v < (11,))
    assert gates["device_memory_size (used < 10.1)"][0] == (v < (11,))
    assert gates["STRONGLY_TYPED"] == {8: [None, False], 10: [1, False], 11: [0, True]}[v[0]]


def test_every_carried_surface_is_a_conformance_release():
    """Each release whose binding surface the repository carries is driven, and nothing else (no release is left
    out of the run while its data sits in tests/conformance/data, nor run without its data)."""
    assert surface.carried_versions() and sorted(bindings.RELEASES) == surface.carried_versions()


@pytest.mark.parametrize("version", bindings.RELEASES)
def test_carried_surface_is_the_real_module(results: dict[str, dict[str, Any]], version: str):
    r = results[version]
    assert "error" not in r, r.get("error")
    s = r["surface"]
    assert s["carried"] and s["classes"] > 100 and s["enums"] > 40, s
    assert not s["differences"], (f"tests/conformance/data/surface_{version}.json.gz differs from the real "
                                  f"{version} module:\n" + "\n".join(s["differences"][:50]))


def test_standins_catch_violations():
    """A deliberately wrong use of each kind is recorded (run against the real 10.13.3.9 classes)."""
    r = _run("10.13.3.9", "selftest")
    assert "error" not in r, r.get("error")
    found = "\n".join(r["violations"])
    for expected in ("IBuilderConfig.no_such_setting does not exist",
                     "IBuilderConfig.set_flag(int) matches no signature",
                     "IBuilderConfig.set_flag(MemoryPoolType) matches no signature",
                     "IBuilderConfig.set_memory_pool_limit(MemoryPoolType) matches no signature",
                     "Builder.create_network(int, int) matches no signature",
                     "IBuilderConfig.num_optimization_profiles is read-only",
                     "IBuilderConfig.builder_optimization_level = '3': the setter takes int",
                     "IBuilderConfig.set_flag = 1: not a property (a method)",
                     "INetworkDefinition.get_flag is a method but was used as a value",
                     "Builder(str) matches no signature",
                     "are no NetworkDefinitionCreationFlag"):
        assert expected in found, f"not caught: {expected!r}\n{found}"
    assert len(r["violations"]) == 12, found  # Builder("not a logger") is caught twice: signature and factory


def test_a_changed_surface_is_caught():
    """The comparison can fail: a method gone, an enum value moved, a property made read-only are each named."""
    carried = surface.shape_of_carried(surface.load("10.13.3.9"))
    real = json.loads(json.dumps(carried))
    real["classes"]["IBuilderConfig"]["methods"].remove("set_flag")
    real["enums"]["BuilderFlag"]["FP16"] += 1
    real["classes"]["IBuilderConfig"]["properties"]["builder_optimization_level"] = False
    found = surface.differences(carried, real)
    assert found == ["enum BuilderFlag: carried " + str(carried["enums"]["BuilderFlag"]) + ", real "
                     + str(real["enums"]["BuilderFlag"]),
                     "IBuilderConfig.set_flag(): only carried",
                     "IBuilderConfig.builder_optimization_level: carried settable=True, real settable=False"], found


@pytest.mark.parametrize("version", bindings.RELEASES)
def test_weights_strip_and_refit_conform_on_every_release(results: dict[str, dict[str, Any]], version: str):
    """issue 25: ``weights: stripped`` (STRIP_PLAN + REFIT_IDENTICAL) and ``refittable`` (REFIT, + STRIP_PLAN from
    10.0) are planned, applied and built against the real BuilderFlag of every release >= 10.0, and stripped is
    refused on 8.6 (no STRIP_PLAN in its surface); the runtime's refit drives Refitter, OnnxParserRefitter.
    refit_from_file (8.6: set_named_weights), the missing-weights check, refit_cuda_engine and the serialization, and
    refuses a missing weight, a failed refit_cuda_engine and (10.0+) a failed parser refit."""
    r = results[version]
    assert "error" not in r, r.get("error")
    cases = r["cases"]
    if version.startswith("8."):
        assert cases.get("weights refused") == 1 and "no BuilderFlag.STRIP_PLAN" in r["refusals"]["weights stripped"]
        assert cases.get("weights planned") == cases.get("weights built") == 1, cases
        assert cases.get("refit") == 1 and cases.get("refit refused") == 2, cases
    else:
        assert cases.get("weights refused") is None and "weights stripped" not in r["refusals"], r["refusals"]
        assert cases.get("weights planned") == cases.get("weights built") == 2, cases
        assert cases.get("refit") == 1 and cases.get("refit refused") == 3, cases
    assert not r["violations"], "\n".join(r["violations"])
    used = set(r["used"])
    assert {"Refitter()", "Refitter.get_missing_weights", "Refitter.refit_cuda_engine"} <= used
    if not version.startswith("8."):
        assert {"OnnxParserRefitter()", "OnnxParserRefitter.refit_from_file", "ICudaEngine.serialize_with_config"} \
            <= used
