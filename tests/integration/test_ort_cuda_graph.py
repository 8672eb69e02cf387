"""The onnxruntime runtime's CUDA path (issue 24): the device series replayed as a CUDA graph onnxruntime captured,
the eager fallback when it refuses (said in the timing record), and the helpers both rely on.

The helpers are pure and run everywhere; the sessions need onnxruntime-gpu, a CUDA GPU and cuda-python, torch or
CuPy, and skip with the reason where those are missing (run on a lent GPU: bench/NOTES-gpu.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trt_orchestrator_plugins.runtimes._ort_cuda import device_backend, fixed_dims, replay_mismatch


def test_symbolic_dims_are_fixed_to_the_shape_unless_one_name_takes_two_values():
    dims = {"x": ["batch", 3, "height", "width"], "scale": ["batch", 1]}
    feeds = {"x": np.zeros((2, 3, 48, 192), np.float32), "scale": np.zeros((2, 1), np.float32)}
    assert fixed_dims(dims, feeds) == {"batch": 2, "height": 48, "width": 192}
    # PP-OCR's cls names its dynamic H and W alike: fixing that name would make the session refuse 48x192
    same = {"x": ["p2o.DynamicDimension.0", 3, "p2o.DynamicDimension.1", "p2o.DynamicDimension.1"]}
    assert fixed_dims(same, {"x": np.zeros((8, 3, 48, 192), np.float32)}) == {"p2o.DynamicDimension.0": 8}


def test_a_replay_that_left_poison_or_garbage_is_refused():
    ref = np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4)
    assert replay_mismatch(ref + 1e-4, ref) is None  # another cuDNN algorithm's rounding
    unwritten = ref.copy()
    unwritten[1, 2] = np.nan
    assert replay_mismatch(unwritten, ref) == "has elements the replay never wrote"
    assert replay_mismatch(ref[::-1].copy(), ref).startswith("differs from the plain session's by")
    assert replay_mismatch(np.array([1, 2]), np.array([1, 3])) == "differs from the plain session's"


def _cuda_or_skip():
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("onnxruntime here has no CUDAExecutionProvider (onnxruntime-gpu on a CUDA GPU runs this)")
    if device_backend() is None:
        pytest.skip("no CUDA device buffers here: cuda-python, torch or CuPy with a GPU runs this")
    return ort


def _engine():
    from orchestrator.core.artifact import EngineDescriptor, EngineTarget

    return EngineDescriptor(address="tiny/fp32/default@cuda+ort", precision="fp32", builder="onnxruntime",
                            builder_version="1.31", runtime="onnxruntime", target=EngineTarget("cuda", device="cuda"))


def test_the_device_series_replays_a_captured_cuda_graph(tiny_onnx):
    _cuda_or_skip()
    from orchestrator.contracts.runtime import RuntimeOptions
    from trt_orchestrator_plugins.runtimes.onnxruntime import runtime

    session = runtime.load(Path(tiny_onnx("graph")), _engine(), RuntimeOptions(device="cuda"))
    try:
        x = np.random.default_rng(0).random((2, 3, 32, 32), dtype=np.float32)
        timing = session.benchmark({"x": x}, warmup=3, iterations=20, time_budget_s=None)
        assert timing.clock == "cuda_graph" and timing.extra["cuda_graph"] == "replayed", timing.extra
        assert len(timing.compute_ms) == 20 and len(timing.end_to_end_ms) == 20
        again = session.benchmark({"x": x}, warmup=1, iterations=5, time_budget_s=None)  # the next block
        assert again.clock == "cuda_graph" and len(session._cuda.graphs) == 1  # captured once per shape
    finally:
        session.close()


def test_a_graph_onnxruntime_refuses_is_timed_eagerly_and_says_why(tiny_onnx, tmp_path):
    _cuda_or_skip()
    import onnx
    from onnx import TensorProto, helper

    from orchestrator.contracts.runtime import RuntimeOptions
    from trt_orchestrator_plugins.runtimes.onnxruntime import runtime

    # control flow (If) cannot be captured: onnxruntime refuses enable_cuda_graph for the session
    branch = lambda name, k: helper.make_graph(  # noqa: E731
        [helper.make_node("Mul", ["x", f"k{name}"], [f"y{name}"])], name, [],
        [helper.make_tensor_value_info(f"y{name}", TensorProto.FLOAT, None)],
        [helper.make_tensor(f"k{name}", TensorProto.FLOAT, [], [k])])
    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), helper.make_node("Greater", ["s", "zero"], ["c"]),
         helper.make_node("If", ["c"], ["y"], then_branch=branch("a", 2.0), else_branch=branch("b", 3.0))],
        "ctl", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])])
    path = tmp_path / "ctl.onnx"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what onnxruntime >= 1.14 reads (onnx 1.23 writes IR 14 by default; ORT 1.31 reads <= 13)
    onnx.save(model, path)
    session = runtime.load(path, _engine(), RuntimeOptions(device="cuda"))
    try:
        timing = session.benchmark({"x": np.ones((2, 4), np.float32)}, warmup=1, iterations=5, time_budget_s=None)
        assert timing.clock == "cuda_event" and len(timing.compute_ms) == 5
        assert timing.extra["cuda_graph"].startswith("refused, timed eagerly: "), timing.extra
    finally:
        session.close()
