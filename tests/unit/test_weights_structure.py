"""The graph digest ``~ refit`` plans from (``weights_file.structure``, issue 25.4), on real ONNX files written with
onnx: new weight values in the same graph keep it, and every change to structure, shapes, dtypes, names or attributes
moves it. A shape constant (an int64 Reshape target) is structure, not a weight: TensorRT reads shape tensors at
build time and cannot refit them, so changing one is a rebuild."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from orchestrator.weights_file import structure

SHAPE = np.array([0, -1], dtype=np.int64)  # keep the batch, flatten the rest


def _model(path: Path, *, seed: int = 0, hidden: int = 128, shape: np.ndarray = SHAPE, w1_name: str = "w1",
           dtype: type = np.float32, alpha: float = 0.1, extra_node: bool = False) -> Path:
    """x [N, 64] -> MatMul(64 x hidden) + b1 -> LeakyRelu -> Reshape(shape) -> y; ``seed`` draws the weights."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.normal(0, 0.2, (64, hidden)).astype(dtype), w1_name),
             numpy_helper.from_array(rng.normal(0, 0.1, (hidden,)).astype(dtype), "b1"),
             numpy_helper.from_array(shape, "shape")]
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    nodes = [helper.make_node("MatMul", ["x", w1_name], ["h"], name="fc1"),
             helper.make_node("Add", ["h", "b1"], ["hb"], name="bias1"),
             helper.make_node("LeakyRelu", ["hb"], ["r"], name="act", alpha=alpha),
             helper.make_node("Reshape", ["r", "shape"], ["y" if not extra_node else "y0"], name="reshape")]
    if extra_node:
        nodes.append(helper.make_node("Relu", ["y0"], ["y"], name="relu"))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", elem, ["N", 64])],
                              [helper.make_tensor_value_info("y", elem, ["N", "M"])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def test_new_weights_keep_the_graph_digest_and_name_what_moved(tmp_path):
    base = structure(_model(tmp_path / "a.onnx"))
    tuned = structure(_model(tmp_path / "b.onnx", seed=5))
    assert tuned.graph == base.graph
    assert {k for k in base.initializers if base.initializers[k] != tuned.initializers[k]} == {"w1", "b1"}
    # the weights are what a refit can replace: the shape constant is not among them
    assert sorted(base.initializers) == ["b1", "w1"]


def test_every_structural_change_moves_the_graph_digest(tmp_path):
    base = structure(_model(tmp_path / "a.onnx")).graph
    changed = {
        "a shape constant": _model(tmp_path / "shape.onnx", shape=np.array([-1, 64], dtype=np.int64)),
        "a renamed initializer": _model(tmp_path / "name.onnx", w1_name="w1_renamed"),
        "another dtype": _model(tmp_path / "dtype.onnx", dtype=np.float16),
        "other weight dims": _model(tmp_path / "dims.onnx", hidden=256),
        "an attribute": _model(tmp_path / "attr.onnx", alpha=0.2),
        "a node": _model(tmp_path / "node.onnx", extra_node=True),
    }
    moved = {what: path for what, path in changed.items() if structure(path).graph == base}
    assert moved == {}, f"kept the graph digest (planned as a refit): {sorted(moved)}"
