"""Plan headers: a REAL TensorRT-RTX engine built here (AOT, no GPU needed) and a synthetic ``ftrt`` header."""

from __future__ import annotations

import struct

import pytest

from trt_orchestrator_plugins._trt import plan_header
from trt_orchestrator_plugins._trt.plan_header import HEADER_BYTES, PlanHeader, read_header

_FLAVOUR = {"tensorrt": "tensorrt", "trtexec": "tensorrt", "tensorrt-rtx": "tensorrt-rtx"}


def check_header(header, meta):
    """As the runtimes call it: their own flavour, the version the metadata records (ONNX engines: no header)."""
    flavour = _FLAVOUR.get(meta["builder"]["name"])
    return plan_header.check_header(header, flavour, meta["builder"]["version"]) if flavour else None


def _tiny_onnx() -> bytes:
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu0")], "tiny", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


@pytest.fixture(scope="module")
def rtx_plan() -> tuple[bytes, str]:
    try:
        import tensorrt_rtx as trt
    except (ImportError, OSError) as e:
        pytest.skip(f"TensorRT-RTX (tensorrt_rtx) is not installed: pip install 'trt-orchestrator[rtx]' ({e})")
    logger = trt.Logger(trt.Logger.ERROR)
    builder = trt.Builder(logger)
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    parser = trt.OnnxParser(network, logger)
    assert parser.parse(_tiny_onnx()), [parser.get_error(i).desc() for i in range(parser.num_errors)]
    config = builder.create_builder_config()
    config.num_compute_capabilities = 1
    config.set_compute_capability(trt.ComputeCapability.SM86, 0)
    profile = builder.create_optimization_profile()
    profile.set_shape("x", (1, 4), (2, 4), (8, 4))
    config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, config)
    assert plan is not None
    return bytes(plan), trt.__version__


def rtx_meta(version: str) -> dict:
    return {"builder": {"name": "tensorrt-rtx", "version": version},
            "target": {"compute_capabilities": ["8.6"], "hardware_compatibility": "none", "device": "gpu"}}


def test_real_rtx_plan_header(rtx_plan):
    data, version = rtx_plan
    header = read_header(data[:HEADER_BYTES])
    assert header.flavour == "tensorrt-rtx"
    assert header.magic == b"vtrt"
    assert header.serialization_version == 0
    # bytes 24..27 are major, minor, patch, build (one byte each, build modulo 256)
    expected = tuple(int(p) for p in version.split(".")[:4])
    assert header.version == tuple(p & 0xFF for p in expected)
    assert check_header(header, rtx_meta(version)) is None


def test_real_rtx_plan_rejected_as_another_release_or_flavour(rtx_plan):
    data, version = rtx_plan
    header = read_header(data[:HEADER_BYTES])
    assert check_header(header, rtx_meta("1.6.0.20")) == (
        f"the plan header says it was built by TensorRT-RTX {header.version_text}, but its metadata says 1.6.0.20")
    trt_meta = {"builder": {"name": "tensorrt", "version": "10.13.3.9"}}
    assert check_header(header, trt_meta) == \
        "metadata says a TensorRT engine but the plan header is a TensorRT-RTX plan"


def synthetic_ftrt(version=(10, 13, 3, 9), serialization=0) -> bytes:
    # uint32[0] = 0x74727466 little-endian ("ftrt"), uint32[1] = serialization version, bytes 24..27 = version
    head = struct.pack("<II", 0x74727466, serialization) + bytes(16) + bytes(version)
    return head + bytes(HEADER_BYTES - len(head))


def test_synthetic_tensorrt_header():
    header = read_header(synthetic_ftrt())
    assert header == PlanHeader("tensorrt", b"ftrt", 0, (10, 13, 3, 9))
    meta = {"builder": {"name": "tensorrt", "version": "10.13.3.9"}}
    assert check_header(header, meta) is None
    assert check_header(header, {"builder": {"name": "trtexec", "version": "10.13.3.9"}}) is None
    assert check_header(header, {"builder": {"name": "tensorrt", "version": "10.13.3.8"}}) == (
        "the plan header says it was built by TensorRT 10.13.3.9, but its metadata says 10.13.3.8")


def test_unknown_bytes_and_serialization_version():
    junk = read_header(b"PK\x03\x04" + bytes(60))
    assert junk.flavour == "unknown" and junk.version is None
    assert check_header(junk, {"builder": {"name": "tensorrt", "version": "10.13.3.9"}}) == \
        "the file is not a TensorRT plan: it starts with b'PK\\x03\\x04', expected b'ftrt'"
    assert check_header(junk, {"builder": {"name": "onnxruntime", "version": "1.23.2"}}) is None
    odd = read_header(synthetic_ftrt(serialization=7))
    assert check_header(odd, {"builder": {"name": "tensorrt", "version": "10.13.3.9"}}) == \
        "unknown TensorRT plan serialization version 7 (only 0 is documented)"


def test_short_input_never_raises():
    assert read_header(b"ft") == PlanHeader("unknown", b"ft", None, None)
    assert read_header(b"ftrt\0\0\0\0").version is None


def test_three_part_metadata_version_compares_three_fields():
    header = read_header(synthetic_ftrt((1, 7, 1, 116)).replace(b"ftrt", b"vtrt", 1))
    assert check_header(header, {"builder": {"name": "tensorrt-rtx", "version": "1.7.1"}}) is None


# -- issue 27.1: the layout measured on TensorRT-RTX 1.7 plans built here ----------------------------------------

def _rtx17_header(size: int, cc_bits: int, version=(1, 7, 1, 116)) -> bytes:
    import struct

    data = bytearray(64)
    data[0:4] = b"vtrt"
    struct.pack_into("<Q", data, 16, size)
    data[24:28] = bytes(version)
    data[28:32] = b"vtrt"
    struct.pack_into("<Q", data, 32, cc_bits)
    return bytes(data)


def test_measured_layout_reads_rtx17_size_and_compute_capabilities():
    from trt_orchestrator_plugins._trt.plan_header import measured_layout, read_header

    head = _rtx17_header(8147260, 0x18)
    layout = measured_layout(read_header(head), head)
    assert (layout.plan_size, layout.compute_capabilities, layout.why_unknown) == (8147260, ("8.9", "12.0"), None)
    head = _rtx17_header(1, 0b100001)
    assert measured_layout(read_header(head), head).compute_capabilities == ("7.5", "12.1")


def test_measured_layout_stays_unknown_where_it_was_not_measured():
    from trt_orchestrator_plugins._trt.plan_header import measured_layout, read_header

    other_release = _rtx17_header(100, 0x4, version=(1, 5, 0, 114))
    layout = measured_layout(read_header(other_release), other_release)
    assert layout.compute_capabilities is None and layout.plan_size is None and "1.7" in layout.why_unknown
    unknown_bits = _rtx17_header(100, 0x40)
    assert measured_layout(read_header(unknown_bits), unknown_bits).compute_capabilities is None
    trt = bytearray(_rtx17_header(100, 0x4, version=(10, 13, 3, 9)))
    trt[0:4] = b"ftrt"
    layout = measured_layout(read_header(bytes(trt)), bytes(trt))
    assert layout.compute_capabilities is None and "not documented" in layout.why_unknown
