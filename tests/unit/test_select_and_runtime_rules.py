"""Can artifact X run on runner Y, and why not: each runtime plugin's own rules (``_trt.compat`` for TensorRT
and TensorRT-RTX, the onnxruntime runtime's), table-driven through the plugins as ``pull`` reaches them; and the
one ranking in ``core.select``."""

from __future__ import annotations

import pytest

from orchestrator import plugins
from orchestrator.core.artifact import EngineDescriptor
from orchestrator.core.fingerprint import GpuInfo, InstalledRuntime, RunnerFingerprint
from orchestrator.core.select import rank_candidates
from orchestrator.core.versions import parse_cc, parse_version
from orchestrator.errors import PluginError
from trt_orchestrator_plugins._trt.compat import RTX_HOPPER_REASON


def runner(cc=None, trt=None, rtx=None, ort=None, providers=()):
    gpus = (GpuInfo(0, "gpu", cc, 24000),) if cc else ()
    runtimes = {}
    if trt:
        runtimes["tensorrt"] = InstalledRuntime(trt)
    if rtx:
        runtimes["tensorrt-rtx"] = InstalledRuntime(rtx)
    if ort:
        runtimes["onnxruntime"] = InstalledRuntime(ort, tuple(providers) or ("CPUExecutionProvider",))
    return RunnerFingerprint(os="linux", arch="x86_64", gpus=gpus, runtimes=runtimes)


def meta(builder, version, ccs=(), hw="none", device="gpu", vc=False, address="m/fp16/default@x"):
    return {"address": address, "precision": "fp16", "builder": {"name": builder, "version": version},
            "target": {"compute_capabilities": list(ccs), "hardware_compatibility": hw, "device": device,
                       "version_compatible": vc}}


def check(metadata, fp):
    """As pull judges a published artifact: its builder names the runtime, that runtime decides."""
    engine = EngineDescriptor.from_json(metadata, runtime=plugins.runtime_name_of(metadata["builder"]["name"]))
    return plugins.runtime_for(engine).can_run(engine, fp)


TRT = "10.13.3.9"
CASES = [
    # (id, metadata, runner, ok, reason substring or exact)
    ("trt exact", meta("tensorrt", TRT, ["8.9"]), runner("8.9", trt=TRT), True, "exact compute capability"),
    ("trtexec exact", meta("trtexec", TRT, ["8.9"]), runner("8.9", trt=TRT), True, "exact TensorRT version"),
    ("trt no gpu", meta("tensorrt", TRT, ["8.9"]), runner(None, trt=TRT), False,
     "a TensorRT engine needs an NVIDIA GPU; this runner has none"),
    ("trt other cc", meta("tensorrt", TRT, ["8.9"]), runner("8.6", trt=TRT), False,
     "built for compute capability 8.9; this GPU is 8.6"),
    ("trt not installed", meta("tensorrt", TRT, ["8.9"]), runner("8.9"), False,
     "pip install 'trt-orchestrator[tensorrt]'"),
    ("trt build number differs", meta("tensorrt", TRT, ["8.9"]), runner("8.9", trt="10.13.3.8"), False,
     "exact version that built it (down to the build number)"),
    ("trt newer not vc", meta("tensorrt", TRT, ["8.9"]), runner("8.9", trt="10.14.1.48"), False,
     "unless built version compatible"),
    ("ampere+ on 8.6", meta("tensorrt", TRT, [], hw="ampere_plus"), runner("8.6", trt=TRT), True, "Ampere+"),
    ("ampere+ on 12.0", meta("tensorrt", TRT, [], hw="ampere_plus"), runner("12.0", trt=TRT), True, "Ampere+"),
    ("ampere+ on 7.5", meta("tensorrt", TRT, [], hw="ampere_plus"), runner("7.5", trt=TRT), False,
     "need compute capability >= 8.0; this GPU is 7.5"),
    ("same-cc on same", meta("tensorrt", TRT, ["8.6"], hw="same_compute_capability"), runner("8.6", trt=TRT), True,
     "same-compute-capability"),
    ("same-cc on other", meta("tensorrt", TRT, ["8.6"], hw="same_compute_capability"), runner("8.9", trt=TRT),
     False, "built same-compute-capability for 8.6; this GPU is 8.9"),
    ("vc newer minor", meta("tensorrt", TRT, ["8.9"], vc=True), runner("8.9", trt="10.14.1.48"), True,
     "newer TensorRT runtime"),
    ("vc older", meta("tensorrt", TRT, ["8.9"], vc=True), runner("8.9", trt="10.8.0.43"), False,
     "cannot run on the older runtime 10.8.0.43"),
    ("vc 8.6 -> 10", meta("tensorrt", "8.6.1.6", ["8.9"], vc=True), runner("8.9", trt=TRT), True, "newer"),
    ("vc 10 -> 11", meta("tensorrt", TRT, ["8.9"], vc=True), runner("8.9", trt="11.1.0.4"), True, "newer"),
    ("vc 8 -> 11", meta("tensorrt", "8.6.1.6", ["8.9"], vc=True), runner("8.9", trt="11.1.0.4"), False,
     "a TensorRT 8 engine cannot run with a TensorRT 11 runtime"),
    ("rtx on 8.9", meta("tensorrt-rtx", "1.7.1.116", ["8.6", "8.9", "12.0"]), runner("8.9", rtx="1.7.1.116"), True,
     "CC list holds this GPU"),
    ("rtx on H100", meta("tensorrt-rtx", "1.7.1.116", ["8.6", "8.9", "12.0"]), runner("9.0", rtx="1.7.1.116"),
     False, RTX_HOPPER_REASON),
    ("rtx cc not in list", meta("tensorrt-rtx", "1.7.1.116", ["8.6", "8.9"]), runner("12.0", rtx="1.7.1.116"),
     False, "built for compute capabilities 8.6, 8.9; this GPU is 12.0"),
    ("rtx other release", meta("tensorrt-rtx", "1.7.1.116", ["8.9"]), runner("8.9", rtx="1.6.0.20"), False,
     "same RTX release (major.minor.patch)"),
    ("rtx same release other build", meta("tensorrt-rtx", "1.7.1.116", ["8.9"]), runner("8.9", rtx="1.7.1.120"),
     True, "same RTX release"),
    ("rtx not installed", meta("tensorrt-rtx", "1.7.1.116", ["8.9"]), runner("8.9"), False,
     "pip install 'trt-orchestrator[rtx]'"),
    ("rtx no gpu", meta("tensorrt-rtx", "1.7.1.116", ["8.9"]), runner(None, rtx="1.7.1.116"), False,
     "needs an NVIDIA GPU"),
    ("ort cpu anywhere", meta("onnxruntime", "1.23.2", device="cpu"), runner(None, ort="1.23.0"), True, "CPU"),
    ("ort cpu no ort", meta("onnxruntime", "1.23.2", device="cpu"), runner(None), False,
     "pip install 'trt-orchestrator[ort]'"),
    ("ort minor differs", meta("onnxruntime", "1.23.2", device="cpu"), runner(None, ort="1.22.1"), False,
     "built for onnxruntime 1.23, this runner has 1.22.1 (major.minor must match)"),
    ("ort cuda no gpu", meta("onnxruntime", "1.23.2", device="cuda"), runner(None, ort="1.23.2"), False,
     "needs an NVIDIA GPU"),
    ("ort cuda no EP", meta("onnxruntime", "1.23.2", device="cuda"),
     runner("8.9", ort="1.23.2", providers=["CPUExecutionProvider"]), False, "needs the CUDAExecutionProvider"),
    ("ort cuda ok", meta("onnxruntime", "1.23.2", device="cuda"),
     runner("8.9", ort="1.23.2", providers=["CUDAExecutionProvider", "CPUExecutionProvider"]), True, "CUDA"),
]


@pytest.mark.parametrize("name, metadata, fp, ok, reason", CASES, ids=[c[0] for c in CASES])
def test_rules(name, metadata, fp, ok, reason):
    verdict = check(metadata, fp)
    assert verdict.ok is ok, verdict.reason
    assert reason in verdict.reason


def test_an_engine_of_an_unknown_builder_is_refused_by_name():
    with pytest.raises(PluginError, match="'openvino'.*no such plugin installed"):
        check(meta("openvino", "2025.1"), runner("8.9"))


def test_rtx_hopper_message_is_exact():
    v = check(meta("tensorrt-rtx", "1.7.1.116", ["8.9"]), runner("9.0", rtx="1.7.1.116"))
    assert v.reason == ("TensorRT-RTX runtimes do not support compute capability 9.0 (Hopper); RTX engines run "
                        "on 8.0, 8.6, 8.9, 12.x")


def test_ranks_prefer_exact_then_compatible():
    fp = runner("8.9", trt=TRT, rtx="1.7.1.116", ort="1.23.2",
                providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    ranks = {name: check(m, fp).rank for name, m in {
        "exact": meta("tensorrt", TRT, ["8.9"]),
        "exact-newer-vc": meta("tensorrt", "10.12.0.36", ["8.9"], vc=True),
        "ampere": meta("tensorrt", TRT, [], hw="ampere_plus"),
        "rtx": meta("tensorrt-rtx", "1.7.1.116", ["8.9"]),
        "ort-cuda": meta("onnxruntime", "1.23.2", device="cuda"),
        "ort-cpu": meta("onnxruntime", "1.23.2", device="cpu"),
    }.items()}
    assert sorted(ranks, key=ranks.get) == ["exact", "exact-newer-vc", "ampere", "rtx", "ort-cuda", "ort-cpu"]


def test_rank_candidates_picks_best_and_lists_rejections():
    fp = runner("8.6", trt=TRT, rtx="1.7.1.116")
    candidates = [
        ("a", meta("tensorrt", TRT, ["8.9"])),
        ("b", meta("tensorrt", TRT, [], hw="ampere_plus")),
        ("c", meta("tensorrt", TRT, ["8.6"])),
        ("d", meta("tensorrt-rtx", "1.6.0.20", ["8.6"])),
    ]
    ranking = rank_candidates(candidates, lambda m: check(m, fp))
    assert ranking.best.id == "c" and ranking.best.compat.rank == 0
    assert [r[0] for r in ranking.rejected] == ["a", "d"]
    assert "this GPU is 8.6" in ranking.rejected[0][1]
    assert [c.id for c in ranking.runners_up] == ["b"]
    assert ranking.explanations()[-1][0] == "b" and "also compatible, ranked lower" in ranking.explanations()[-1][1]


def test_rank_candidates_none_fit():
    ranking = rank_candidates([("m@rtx", meta("tensorrt-rtx", "1.7.1.116", ["8.9"]))],
                              lambda m: check(m, runner("9.0", rtx="1.7.1.116")))
    assert ranking.best is None
    assert ranking.rejected == (("m@rtx", RTX_HOPPER_REASON),)


def test_rank_ties_keep_input_order():
    fp = runner("8.9", trt=TRT)
    ranking = rank_candidates([("first", meta("tensorrt", TRT, ["8.9"])), ("second", meta("tensorrt", TRT, ["8.9"]))],
                              lambda m: check(m, fp))
    assert ranking.best.id == "first" and [c.id for c in ranking.runners_up] == ["second"]


@pytest.mark.parametrize("text, expected", [("8.6", (8, 6)), ("sm86", (8, 6)), ("SM120", (12, 0)),
                                            ("120", (12, 0)), ("12.1", (12, 1)), ("x", None)])
def test_parse_cc(text, expected):
    assert parse_cc(text) == expected


def test_parse_version():
    assert parse_version("10.13.3.9") == (10, 13, 3, 9)
    assert parse_version("1.7.1.116+cu13") == (1, 7, 1, 116)
    assert parse_version("1.23.2.post1") == (1, 23, 2)
    assert parse_version(None) == ()
