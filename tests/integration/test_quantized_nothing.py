"""int8-qdq for real (onnxruntime's quantizer) on models it has nothing, or too little, to quantize (issue 23.18):
the transform fails naming the model and the counts instead of reporting success for a float graph that would be
built and published as int8."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from orchestrator.contracts.builder import TransformRequest
from orchestrator.core.model import DataSource, PrecisionSpec
from orchestrator.errors import BuildError
from trt_orchestrator_plugins.transforms.int8_qdq import int8_qdq

pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (pip install 'trt-orchestrator[ort]')")

pytestmark = pytest.mark.integration

SHAPE = (1, 3, 8, 8)


def _save(path: Path, nodes: list, inits: list) -> Path:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(SHAPE))], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    return path


def _int8(src: Path, out: Path, share: float | None = None) -> dict:
    return int8_qdq.run(TransformRequest(
        kind="int8-qdq", key="k", onnx_path=src, out_path=out,
        precision=PrecisionSpec("int8", via="transform", calibration_method="minmax", min_quantized_share=share),
        calibration=DataSource(samples=2), input_shapes={"x": SHAPE}, input_dtypes={"x": "float32"},
        log=lambda line: None))


def test_int8_qdq_of_a_model_with_nothing_to_quantize_fails_naming_it(tmp_path):
    """Sigmoid(x) * 2 + Relu: no Conv/Gemm/MatMul. onnxruntime's quantize_static returns without error and writes
    the float graph back (0 Q / 0 DQ nodes); before the check that was an int8 transform's success."""
    two = numpy_helper.from_array(np.full(SHAPE, 2.0, np.float32), "two")
    src = _save(tmp_path / "elementwise.onnx", [helper.make_node("Sigmoid", ["x"], ["s"]),
                                                helper.make_node("Mul", ["s", "two"], ["m"]),
                                                helper.make_node("Relu", ["m"], ["y"])], [two])
    with pytest.raises(BuildError) as info:
        _int8(src, tmp_path / "out" / "model.onnx")
    assert info.value.message.startswith("int8-qdq of elementwise.onnx quantized nothing: the model has no "
                                         "Conv/ConvTranspose/Gemm/MatMul node to quantize (0 QuantizeLinear / 0 "
                                         "DequantizeLinear nodes)")


def test_int8_qdq_reports_what_it_quantized(tmp_path):
    """A 1x1 Conv: onnxruntime quantizes it (1 of 1); the facts say so, and a share of 1.0 is met. (onnxruntime
    quantizes every Conv it is given, even one whose weights are computed: a graph it leaves partly quantized is
    written by hand in tests/unit/test_qdq_check.py.)"""
    w = numpy_helper.from_array(np.full((3, 3, 1, 1), 0.1, np.float32), "w")
    src = _save(tmp_path / "conv.onnx", [helper.make_node("Conv", ["x", "w"], ["y"], name="conv")], [w])
    facts = _int8(src, tmp_path / "one" / "model.onnx", share=1.0)
    assert (facts["quantized_nodes"], facts["eligible_nodes"], facts["quantized_share"]) == (1, 1, 1.0)
    assert facts["quantize_nodes"] >= 1 and facts["dequantize_nodes"] >= 2
