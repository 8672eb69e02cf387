"""Real ONNX models for the weights tests (issue 25): a small MLP whose weights onnxruntime's optimizer keeps as they
are (MatMul + Add fuse into Gemm on the same tensors), the same graph with other weights, a structural change, and
a demo model with its initializers perturbed (``perturbed_copy``), all written with onnx."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def mlp(path: Path, *, seed: int = 0, hidden: int = 128, version_tag: str = "") -> Path:
    """x [N, 64] -> MatMul(64 x hidden) + b -> Relu -> MatMul(hidden x 16) + b -> y [N, 16]; two weights of >= 1 KiB
    (they go into the weights blob's weights.bin), two small biases (they stay in its model.onnx)."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.normal(0, 0.2, (64, hidden)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.1, (hidden,)).astype(np.float32), "b1"),
             numpy_helper.from_array(rng.normal(0, 0.2, (hidden, 16)).astype(np.float32), "w2"),
             numpy_helper.from_array(rng.normal(0, 0.1, (16,)).astype(np.float32), "b2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             helper.make_node("Add", ["h", "b1"], ["hb"], name="bias1"),
             helper.make_node("Relu", ["hb"], ["r"], name="relu1"),
             helper.make_node("MatMul", ["r", "w2"], ["o"], name="fc2"),
             helper.make_node("Add", ["o", "b2"], ["y"], name="bias2")]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tests")
    model.ir_version = 8
    if version_tag:
        model.doc_string = version_tag
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def perturbed_copy(src: Path, dest: Path, *, seed: int = 1, scale: float = 0.01, every: int = 1) -> tuple[Path, int]:
    """``src`` with the values of every ``every``-th float initializer scaled by (1 + ``scale`` times Gaussian noise),
    element by element: names, shapes, dtypes, signs and the graph unchanged (a fine-tuned model's new weights; a
    BatchNorm variance stays positive). Returns the path and how many initializers changed."""
    model = onnx.load(str(src))
    rng = np.random.default_rng(seed)
    changed = 0
    for i, tensor in enumerate(model.graph.initializer):
        if tensor.data_type != TensorProto.FLOAT or i % every:
            continue
        values = numpy_helper.to_array(tensor)
        if values.size == 0:
            continue
        moved = (values * (1 + scale * rng.standard_normal(values.shape))).astype(np.float32)
        if np.array_equal(moved, values):  # all zeros: nothing a relative change can move
            continue
        tensor.CopyFrom(numpy_helper.from_array(moved, tensor.name))
        changed += 1
    onnx.save(model, str(dest))
    return dest, changed


def renamed_initializer_copy(src: Path, dest: Path) -> Path:
    """``src`` with its first initializer renamed (a structural change: names are part of the graph)."""
    model = onnx.load(str(src))
    old = model.graph.initializer[0].name
    new = old + "_renamed"
    model.graph.initializer[0].name = new
    for node in model.graph.node:
        node.input[:] = [new if name == old else name for name in node.input]
    onnx.save(model, str(dest))
    return dest
