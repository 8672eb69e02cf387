"""The check both Q/DQ transforms run on what they wrote (issue 23.18): a quantizer that quantized nothing, or less
than the share asked, fails naming the model and the counts. Over written ONNX graphs (ModelOpt, which makes fp8
Q/DQ graphs, is not installed in the test environment; tests/integration/test_quantized_nothing.py runs int8-qdq
for real)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from orchestrator.contracts.builder import TransformRequest
from orchestrator.core.model import DataSource, PrecisionSpec
from orchestrator.errors import BuildError
from trt_orchestrator_plugins._onnx.qdq import count_quantized, require_quantized


def _conv_net(path: Path, *, quantized: int, convs: int = 2) -> Path:
    """``convs`` 1x1 Convs in a chain; the first ``quantized`` read their input and weight through fp8
    DequantizeLinear nodes (what ModelOpt writes), the rest read them as they are."""
    nodes, inits = [], [numpy_helper.from_array(np.float32(0.5), "scale"),
                        helper.make_tensor("zero", TensorProto.FLOAT8E4M3FN, [], [0.0])]
    previous = "x"
    for i in range(convs):
        inits.append(numpy_helper.from_array(np.ones((3, 3, 1, 1), np.float32), f"w{i}"))
        data, weight = previous, f"w{i}"
        if i < quantized:
            nodes += [helper.make_node("QuantizeLinear", [previous, "scale", "zero"], [f"q{i}"], name=f"q{i}"),
                      helper.make_node("DequantizeLinear", [f"q{i}", "scale", "zero"], [f"dq{i}"], name=f"dq{i}"),
                      helper.make_node("QuantizeLinear", [f"w{i}", "scale", "zero"], [f"qw{i}"], name=f"qw{i}"),
                      helper.make_node("DequantizeLinear", [f"qw{i}", "scale", "zero"], [f"dqw{i}"],
                                       name=f"dqw{i}")]
            data, weight = f"dq{i}", f"dqw{i}"
        nodes.append(helper.make_node("Conv", [data, weight], [f"c{i}"], name=f"conv{i}"))
        previous = f"c{i}"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info(previous, TensorProto.FLOAT, [1, 3, 4, 4])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9), path)
    return path


def test_the_count_of_a_partly_quantized_graph(tmp_path):
    count = count_quantized(_conv_net(tmp_path / "m.onnx", quantized=1, convs=4))
    assert (count.eligible, count.quantized, count.quantize_nodes, count.dequantize_nodes) == (4, 1, 2, 2)
    assert count.share == 0.25 and count.unquantized == ("conv1", "conv2", "conv3")


def test_a_graph_with_no_qdq_is_quantized_nothing_whatever_the_share(tmp_path):
    path = _conv_net(tmp_path / "cnn.onnx", quantized=0)
    with pytest.raises(BuildError) as info:
        require_quantized(path, what="fp8-qdq (ModelOpt) of cnn.onnx", min_share=0.0)
    assert info.value.message == ("fp8-qdq (ModelOpt) of cnn.onnx quantized nothing: none of its 2 "
                                  "Conv/ConvTranspose/Gemm/MatMul nodes reads a DequantizeLinear output "
                                  "(0 QuantizeLinear / 0 DequantizeLinear nodes); unquantized: conv0, conv1")
    assert "drop the precision" in info.value.hint


def test_less_than_the_share_asked_fails_and_the_share_is_reported(tmp_path):
    path = _conv_net(tmp_path / "half.onnx", quantized=1)
    assert require_quantized(path, what="x", min_share=0.5).share == 0.5
    with pytest.raises(BuildError) as info:
        require_quantized(path, what="fp8-qdq (ModelOpt) of half.onnx", min_share=0.75)
    assert info.value.message.startswith("fp8-qdq (ModelOpt) of half.onnx quantized 1 of its 2 "
                                         "Conv/ConvTranspose/Gemm/MatMul nodes (50%), less than the 75% asked")
    assert "min_quantized_share" in info.value.hint


def test_a_graph_without_quantizable_ops_is_quantized_nothing(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])])
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(BuildError, match="quantized nothing: the model has no Conv/ConvTranspose/Gemm/MatMul node"):
        require_quantized(path, what="int8-qdq of relu.onnx", min_share=0.5)


def _fake_modelopt(monkeypatch, write) -> None:
    """``modelopt.onnx.quantization.quantize`` standing in for ModelOpt (not installed here): ``write(input,
    output_path)`` makes its output. Only the fp8 transform's use of the shared check is under test."""
    def quantize(onnx_path, *, output_path, **_):
        write(Path(onnx_path), Path(output_path))

    module = types.ModuleType("modelopt.onnx.quantization")
    module.quantize = quantize
    for name in ("modelopt", "modelopt.onnx"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "modelopt.onnx.quantization", module)


def _fp8(src: Path, out: Path, share: float | None = None) -> dict:
    from trt_orchestrator_plugins.transforms.fp8_modelopt import fp8_modelopt

    return fp8_modelopt.run(TransformRequest(
        kind="fp8-qdq", key="k", onnx_path=src, out_path=out,
        precision=PrecisionSpec("fp8", via="transform", min_quantized_share=share), calibration=DataSource(samples=1),
        input_shapes={"x": (1, 3, 4, 4)}, input_dtypes={"x": "float32"}, log=lambda line: None))


def test_the_fp8_transform_fails_when_modelopt_quantized_nothing(tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime", reason="the transform loads its output in onnxruntime")
    src = _conv_net(tmp_path / "cnn.onnx", quantized=0)
    _fake_modelopt(monkeypatch, lambda i, o: o.write_bytes(i.read_bytes()))  # "success", nothing quantized
    with pytest.raises(BuildError, match=r"^fp8-qdq \(ModelOpt\) of cnn.onnx quantized nothing"):
        _fp8(src, tmp_path / "out" / "model.onnx")


def test_the_fp8_transform_takes_the_share_from_the_precision(tmp_path, monkeypatch):
    src = _conv_net(tmp_path / "cnn.onnx", quantized=0, convs=4)
    _fake_modelopt(monkeypatch, lambda i, o: _conv_net(o, quantized=1, convs=4))  # 1 of 4: 25%
    # onnxruntime has no fp8 Conv kernel: its load check of the output is not what is tested here
    monkeypatch.setattr("trt_orchestrator_plugins.transforms.fp8_modelopt.check_loadable", lambda *a, **k: None)
    facts = _fp8(src, tmp_path / "a" / "model.onnx")  # the default, 0.25
    assert (facts["quantized_nodes"], facts["eligible_nodes"], facts["quantized_share"]) == (1, 4, 0.25)
    with pytest.raises(BuildError, match="quantized 1 of its 4 .* less than the 30% asked"):
        _fp8(src, tmp_path / "b" / "model.onnx", share=0.3)
