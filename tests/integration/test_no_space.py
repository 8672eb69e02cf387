"""A full disk, for real (issue 23.9): a 1 MiB tmpfs as the place an onnxruntime build, a transform or an atomic
write puts its file. Each says "no space left on <folder> (N MiB free)" — onnxruntime itself reports only
"INVALID_PROTOBUF : Protobuf serialization failed" — and leaves no partial file behind.

Mounting needs root (CI runs the tests as root); elsewhere these tests skip and say why."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from orchestrator.atomic import write_bytes_atomic, write_json_atomic
from orchestrator.contracts.builder import BuildRequest, TransformRequest
from orchestrator.core.model import BuilderOptions, DataSource, PrecisionSpec, Target
from orchestrator.errors import NoSpaceError, OrchestratorError

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (pip install 'trt-orchestrator[ort]')")

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SHAPE = (1, 3, 32, 32)


@pytest.fixture
def full_disk(tmp_path: Path):
    """A folder on a 1 MiB tmpfs, unmounted after the test."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs the tests as root)")
    mount = tmp_path / "tiny-fs"
    mount.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True,
                          text=True, check=False)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip() or proc.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, check=False)


@pytest.fixture(scope="module")
def big_model(tmp_path_factory) -> Path:
    """One Conv with 3 MiB of weights (256 filters of 3x32x32): more than the tmpfs holds in any precision's file
    but int8's, whose quantizer first writes the float model it prepares."""
    path = tmp_path_factory.mktemp("model") / "big.onnx"
    w = numpy_helper.from_array(np.random.default_rng(0).normal(0, 0.1, (256, 3, 32, 32)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], name="conv")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256, 1, 1])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    return path


def _no_space(error: BaseException, folder: Path) -> None:
    assert isinstance(error, NoSpaceError), f"{type(error).__name__}: {error}"
    assert re.match(rf"^no space left on {re.escape(str(folder))} \(\d+ MiB free\)", error.message), error.message
    assert isinstance(error, OSError) and error.errno == 28  # still an OSError, for code that handles those


def test_an_onnxruntime_build_on_a_full_disk_says_no_space_left(full_disk, big_model):
    from trt_orchestrator_plugins.builders.onnxruntime import builder

    target = Target(name="cpu", builder="onnxruntime", builder_version=".".join(ort.__version__.split(".")[:2]),
                    device="cpu", options=BuilderOptions())
    out = full_disk / "engine"
    with pytest.raises(OrchestratorError) as info:
        builder.build(BuildRequest(address="big/fp32@cpu", build_key="k", onnx_path=big_model, profiles=(),
                                   precision=PrecisionSpec("fp32"), native_precision=False, target=target,
                                   options=target.options, out_dir=out, cache_dir=full_disk / "cache",
                                   log=lambda line: None))
    _no_space(info.value, out)
    assert info.value.message.endswith("while writing the optimized model (about 3 MiB)")
    assert "Protobuf" not in str(info.value)
    assert list(out.iterdir()) == []  # the partial engine is gone


@pytest.mark.parametrize("kind", ["fp16", "int8"])
def test_a_transform_on_a_full_disk_says_no_space_left(full_disk, big_model, kind):
    pytest.importorskip("onnxconverter_common", reason="pip install 'trt-orchestrator[transforms]'")
    from trt_orchestrator_plugins.transforms.float16 import fp16
    from trt_orchestrator_plugins.transforms.int8_qdq import int8_qdq

    plugin = fp16 if kind == "fp16" else int8_qdq
    out = full_disk / kind / "model.onnx"
    with pytest.raises(OrchestratorError) as info:
        plugin.run(TransformRequest(kind=plugin.kind, key="k", onnx_path=big_model, out_path=out,
                                    precision=PrecisionSpec(kind, via="transform", calibration_method="minmax"),
                                    calibration=DataSource(samples=1), input_shapes={"x": SHAPE},
                                    input_dtypes={"x": "float32"}, log=lambda line: None))
    _no_space(info.value, out.parent)
    assert [p.name for p in out.parent.rglob("*")] == []  # nothing half-written stays


def test_an_atomic_write_on_a_full_disk_says_no_space_left_and_leaves_no_temp_file(full_disk):
    with pytest.raises(NoSpaceError) as info:
        write_bytes_atomic(full_disk / "big.bin", b"\0" * (2 * 1024 * 1024))
    _no_space(info.value, full_disk)
    with pytest.raises(OSError):  # what callers that catch OSError still catch
        write_json_atomic(full_disk / "big.json", ["x" * 1024] * 2048)
    assert list(full_disk.iterdir()) == []


def test_build_on_a_full_work_disk_names_it_through_the_command_line(full_disk, big_model, tmp_path):
    """`orchestrate build` with its work directory on the full tmpfs: the cell fails with the reason, no
    traceback, no Protobuf message."""
    manifest = tmp_path / "m.yaml"
    manifest.write_text(f"""\
manifest_version: 1
project: full
registry: {{store: local, path: {tmp_path / 'artifacts'}}}
models:
  - {{name: big, version: "1", source: {{path: {big_model}}}, inputs: {{x: {{shape: {list(SHAPE)}}}}}}}
targets:
  - {{name: cpu, builder: onnxruntime, builder_version: "{'.'.join(ort.__version__.split('.')[:2])}", device: cpu}}
""")
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "build", str(manifest), "--cache-dir",
                           str(full_disk)], capture_output=True, text=True, cwd=REPO, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "Traceback" not in out and "Protobuf" not in out, out
    assert re.search(r"no space left on \S*tiny-fs\S* \(\d+ MiB free\)", out), out
