"""The gates against real onnxruntime: a generated conv classifier, its fp16 conversion and a broken copy."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from orchestrator.contracts.runtime import Runtime, RuntimeOptions  # noqa: E402
from orchestrator.core.artifact import EngineDescriptor, EngineTarget  # noqa: E402
from orchestrator.core.fingerprint import InstalledRuntime, RunnerFingerprint  # noqa: E402
from orchestrator.core.model import (  # noqa: E402
    BenchmarkGate,
    DataSource,
    GateSettings,
    InputSpec,
    Model,
    ParityGate,
    PrecisionSpec,
    ProfileShapes,
    SourceModel,
)
from orchestrator.gates import gate_cases, run_benchmark, run_parity  # noqa: E402
from orchestrator.gates.inputs import benchmark_inputs  # noqa: E402
from orchestrator.gates.verdict import BenchmarkVerdict, ParityVerdict  # noqa: E402
from trt_orchestrator_plugins.runtimes.onnxruntime import runtime  # noqa: E402

pytestmark = pytest.mark.integration


def classifier(scale: float = 1.0) -> onnx.ModelProto:
    """x[N,3,32,32] -> Conv 3x3 (8) -> Relu -> Conv 3x3 stride 2 (16) -> Relu -> GAP -> Flatten -> Gemm
    -> logits[N,10]."""
    rng = np.random.default_rng(1234)
    w1 = (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
    b1 = (rng.standard_normal(8) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float32)
    b2 = (rng.standard_normal(16) * 0.1).astype(np.float32)
    w3 = (rng.standard_normal((10, 16)) * 0.5).astype(np.float32)
    b3 = (rng.standard_normal(10) * 0.1).astype(np.float32)
    inits = [numpy_helper.from_array(a * np.float32(scale), n)
             for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"), (w3, "w3"), (b3, "b3"))]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "tiny_classifier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    from onnxconverter_common import float16

    root = tmp_path_factory.mktemp("models")
    paths = {"source": root / "tiny.onnx", "fp16": root / "tiny_fp16.onnx", "broken": root / "tiny_broken.onnx",
             "fp32": root / "tiny_ort_fp32.onnx"}
    onnx.save(classifier(), paths["source"])
    onnx.save(float16.convert_float_to_float16(classifier(), keep_io_types=True), paths["fp16"])
    onnx.save(classifier(scale=1.1), paths["broken"])
    # The fp32 "engine": the onnxruntime builder's output, an ORT-optimised copy of the source.
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.optimized_model_filepath = str(paths["fp32"])
    ort.InferenceSession(str(paths["source"]), so, providers=["CPUExecutionProvider"])
    return paths


def tiny_model(source: Path, **gate) -> Model:
    return Model(
        name="tiny", version="1", source=SourceModel(str(source)),
        inputs=(InputSpec("x", ("N", 3, 32, 32), profiles={
            "default": ProfileShapes((1, 3, 32, 32), (4, 3, 32, 32), (8, 3, 32, 32))}),),
        constraints=(), precisions=(PrecisionSpec("fp32"), PrecisionSpec("fp16")),
        profile_sets={"default": ("default",)}, calibration=None,
        gate=GateSettings(parity=ParityGate(data=DataSource(samples=2, seed=3)), **gate),
        classifier_outputs={"logits": 3})


META = EngineDescriptor(address="tiny/fp32/default@cpu+ort1.31", precision="fp32", builder="onnxruntime",
                        builder_version="1.31.1", runtime="onnxruntime", target=EngineTarget("cpu", device="cpu"))


def load(path: Path):
    return runtime.load(path, META, RuntimeOptions())


def parity(models, engine: str, precision: str) -> ParityVerdict:
    model = tiny_model(models["source"])
    ref, eng = load(models["source"]), load(models[engine])
    try:
        return run_parity(model, eng, ref, gate_cases(model, "default"), precision)
    finally:
        ref.close()
        eng.close()


def test_plugin_satisfies_the_runtime_protocol():
    assert isinstance(runtime, Runtime) and runtime.name == "onnxruntime"


def _meta(device: str, version: str = "1.31.1") -> EngineDescriptor:
    return replace(META, builder_version=version, target=EngineTarget("t", device=device))


def _why_not(engine: EngineDescriptor, fp: RunnerFingerprint) -> str | None:
    compat = runtime.can_run(engine, fp)
    return None if compat.ok else compat.reason


def test_can_run_decides_from_metadata_and_fingerprint():
    cpu_only = RunnerFingerprint(os="linux", arch="x86_64", runtimes={
        "onnxruntime": InstalledRuntime("1.31.1", ("CPUExecutionProvider",))})
    assert _why_not(_meta("cpu"), cpu_only) is None
    assert _why_not(_meta("cuda"), cpu_only) == ("an onnxruntime CUDA engine needs an NVIDIA GPU; "
                                                 "this runner has none")
    gpu = RunnerFingerprint.parse_gpu_spec("sm90", cpu_only)
    assert "CUDAExecutionProvider" in _why_not(_meta("cuda"), gpu)
    assert _why_not(_meta("cpu"), RunnerFingerprint(os="linux", arch="x86_64")).startswith(
        "onnxruntime is not installed")
    # an engine optimized by another onnxruntime release is not run here (major.minor must match)
    assert "major.minor must match" in _why_not(_meta("cpu", version="1.30.0"), cpu_only)


def test_fp32_optimised_engine_passes_tight_fp32_tolerances(models):
    verdict = parity(models, "fp32", "fp32")
    assert verdict.status == "passed", verdict.reasons
    assert [c.label for c in verdict.cases] == ["min", "opt", "max"]
    assert [c.input_shapes["x"][0] for c in verdict.cases] == [1, 4, 8]
    for case in verdict.cases:
        (out,) = case.outputs
        assert out.tolerance.source == "default:fp32"
        # within the fp32 tolerance on any CPU; how far within is the CPU's kernels' business (issue 22.5)
        assert out.status == "passed" and out.violations == 0
        assert out.topk == 3 and out.topk_agreement == 1.0 and out.top1_agreement == 1.0


def test_fp16_conversion_passes_fp16_tolerances_but_not_fp32(models):
    verdict = parity(models, "fp16", "fp16")
    assert verdict.status == "passed", verdict.reasons
    # The same engine judged as fp32 must fail: the fp16 rounding is visible at 1e-4/1e-3. How large it is depends
    # on the CPU's kernels (issue 22.5); the relation does not: each output fails the fp32 tolerance exactly when
    # it has elements beyond it, and those are the elements that fp16 rounding moved.
    strict = parity(models, "fp16", "fp32")
    assert strict.status == "failed"
    for fp16_case, fp32_case in zip(verdict.cases, strict.cases):
        for loose, tight in zip(fp16_case.outputs, fp32_case.outputs):
            assert (tight.status == "failed") == (tight.violations > 0 or tight.rel_l2 > tight.tolerance.max_rel_l2
                                                  or (tight.cosine_gated and tight.cosine < tight.tolerance.min_cosine))


def test_broken_weights_fail_parity_with_the_numbers(models):
    verdict = parity(models, "broken", "fp16")
    assert verdict.status == "failed"
    out = verdict.cases[1].outputs[0]
    assert out.max_abs_error > 0.05 and out.violation_fraction > 0.5
    assert len(out.worst) == 5 and out.worst[0].tolerance_ratio > 1
    assert out.worst[0].index[0] in (0, 1) and len(out.worst[0].index) == 3  # (sample, row, class)
    assert any("violate |a-b| <= 0.01 + 0.01*|b|" in r for r in verdict.reasons)
    data = json.loads(json.dumps(verdict.to_json()))
    assert data["status"] == "failed" and data["cases"][1]["label"] == "opt"
    assert data["cases"][1]["outputs"][0]["tolerance"]["atol"] == 0.01
    assert ParityVerdict.from_json(data).to_json() == data


def bench(models, settings: BenchmarkGate, baseline=None) -> BenchmarkVerdict:
    model = tiny_model(models["source"])
    session = load(models["fp32"])
    try:
        return run_benchmark(session, benchmark_inputs(model, "default", settings.shapes), settings, baseline)
    finally:
        session.close()


def test_benchmark_on_cpu_gives_sane_stats(models):
    verdict = bench(models, BenchmarkGate(warmup=3, iterations=30, shapes=("opt", "max")))
    assert verdict.status == "passed", verdict.reasons
    opt = verdict.shape("opt")
    assert opt.batch == 4 and opt.input_shapes == {"x": (4, 3, 32, 32)} and opt.clock == "perf_counter_ns"
    for stats in (opt.compute, opt.end_to_end):
        assert stats.count == 30
        assert 0 < stats.min_ms <= stats.p50_ms <= stats.p95_ms <= stats.p99_ms <= stats.max_ms
        assert stats.throughput_per_s == pytest.approx(4 * 1000 / stats.mean_ms)
    assert verdict.shape("max").batch == 8
    assert len(opt.compute_samples_ms) == 30


def test_benchmark_time_budget(models):
    verdict = bench(models, BenchmarkGate(warmup=1, iterations=1, time_budget_s=0.05))
    assert verdict.shape("opt").compute.count >= 1


def test_benchmark_absolute_thresholds_fail(models):
    verdict = bench(models, BenchmarkGate(warmup=1, iterations=5, max_p95_ms=1e-6, min_throughput=1e12))
    assert verdict.status == "failed"
    assert any("end-to-end p95" in r and "> max_p95_ms 1e-06 ms" in r for r in verdict.reasons)
    assert any("< min_throughput 1e+12/s" in r for r in verdict.reasons)


def test_benchmark_regression_against_baseline(models):
    settings = BenchmarkGate(warmup=1, iterations=10, max_regression_pct=10.0)
    current = bench(models, settings)
    fast = json.loads(json.dumps(current.to_json()))
    for key in ("compute", "end_to_end"):
        fast["shapes"][0][key]["p50_ms"] = 1e-4  # a baseline that was impossibly fast
    slower = bench(models, settings, baseline=fast)
    assert slower.status == "failed"
    assert any("slower than the baseline 0.000 ms (allowed 10%)" in r for r in slower.reasons)
    slow = json.loads(json.dumps(current.to_json()))
    for key in ("compute", "end_to_end"):
        slow["shapes"][0][key]["p50_ms"] = 1e6
    faster = bench(models, settings, baseline=BenchmarkVerdict.from_json(slow))
    assert faster.status == "passed" and faster.shape("opt").regression_pct < 0
