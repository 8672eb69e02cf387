"""Hardening item (issue 11): the benchmark gate must not bind outputs by the model's *declared* shape.

A real ONNX whose declared output rank is wrong (``y`` declared ``[N, 10, 1]``, computed ``[N, 10]`` through a
Reshape whose target length shape inference cannot see) runs fine in onnxruntime (``session.run`` only logs a
warning), but a pre-allocated output bound through IOBinding is checked against the declaration ("Invalid rank
for output: y Got: 2 Expected: 3"). The gate lets onnxruntime allocate such outputs instead.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from orchestrator.contracts.runtime import RuntimeOptions  # noqa: E402
from orchestrator.core.artifact import EngineDescriptor, EngineTarget  # noqa: E402
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
from trt_orchestrator_plugins.runtimes.onnxruntime import runtime  # noqa: E402

pytestmark = pytest.mark.integration


def wrong_rank_model(path: Path) -> Path:
    """x[N,3,2,2] -> Flatten -> Gemm(10) -> Reshape to [0, -1] whose target length is computed at run time (a
    Slice ending at 2 + (m - m), m from the input), so nothing infers the output rank; ``y`` is declared
    [N, 10, 1] and comes out [N, 10]."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((10, 12)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([0, -1, 1, 1], np.int64), "target"),
             numpy_helper.from_array(np.array([0], np.int64), "start"),
             numpy_helper.from_array(np.array([2], np.int64), "two")]
    nodes = [
        helper.make_node("Flatten", ["x"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", "w"], ["logits"], transB=1),
        helper.make_node("ReduceMin", ["x"], ["m"], keepdims=0),
        helper.make_node("Cast", ["m"], ["m_int"], to=TensorProto.INT64),
        helper.make_node("Sub", ["m_int", "m_int"], ["zero"]),
        helper.make_node("Add", ["two", "zero"], ["end"]),
        helper.make_node("Slice", ["target", "start", "end"], ["shape"]),
        helper.make_node("Reshape", ["logits", "shape"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "wrong_rank",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10, 1])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)  # a valid model: the declaration is just wrong
    onnx.save(model, str(path))
    return path


def tiny(source: Path) -> Model:
    return Model(
        name="wrong-rank", version="1", source=SourceModel(str(source)),
        inputs=(InputSpec("x", ("N", 3, 2, 2), profiles={
            "default": ProfileShapes((1, 3, 2, 2), (4, 3, 2, 2), (8, 3, 2, 2))}),),
        constraints=(), precisions=(PrecisionSpec("fp32"),), profile_sets={"default": ("default",)},
        calibration=None, gate=GateSettings(parity=ParityGate(data=DataSource(samples=1, seed=0))))


ENGINE = EngineDescriptor(address="wrong-rank/fp32/default@cpu+ort1.31", precision="fp32", builder="onnxruntime",
                          builder_version="1.31.1", runtime="onnxruntime", target=EngineTarget("cpu", device="cpu"))


def test_the_model_runs_in_onnxruntime_but_its_declared_output_rank_is_wrong(tmp_path):
    path = wrong_rank_model(tmp_path / "wrong_rank.onnx")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert session.get_outputs()[0].shape == ["N", 10, 1]
    (y,) = session.run(None, {"x": np.ones((4, 3, 2, 2), np.float32)})
    assert y.shape == (4, 10)


def test_benchmark_gate_times_a_model_whose_declared_output_rank_is_wrong(tmp_path):
    path = wrong_rank_model(tmp_path / "wrong_rank.onnx")
    model = tiny(path)
    settings = BenchmarkGate(warmup=2, iterations=10, shapes=("opt", "max"))
    session = runtime.load(path, ENGINE, RuntimeOptions())
    try:
        verdict = run_benchmark(session, benchmark_inputs(model, "default", settings.shapes), settings)
        parity = run_parity(model, session, session, gate_cases(model, "default"), "fp32")
    finally:
        session.close()
    assert verdict.status == "passed", verdict.reasons
    assert [s.label for s in verdict.shapes] == ["opt", "max"]
    for shape in verdict.shapes:
        assert shape.compute.count >= 10 and shape.end_to_end is not None
        assert shape.extra["outputs"].startswith("allocated by onnxruntime")
    assert parity.status == "passed"


def test_outputs_stay_preallocated_when_the_declaration_is_right(tiny_onnx):
    path = tiny_onnx("declared_right")
    model = tiny(path)
    model = Model(**{**model.__dict__, "inputs": (InputSpec("x", ("N", 3, "H", "W"), profiles={
        "default": ProfileShapes((1, 3, 8, 8), (2, 3, 8, 8), (4, 3, 8, 8))}),)})
    settings = BenchmarkGate(warmup=1, iterations=5)
    session = runtime.load(path, ENGINE, RuntimeOptions())
    try:
        verdict = run_benchmark(session, benchmark_inputs(model, "default", settings.shapes), settings)
    finally:
        session.close()
    assert verdict.status == "passed", verdict.reasons
    assert verdict.shapes[0].extra["outputs"] == "preallocated"
