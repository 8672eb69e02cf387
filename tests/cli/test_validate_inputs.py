"""validate and plan read the files a manifest names and refuse what a later step cannot take (issue 23), through
the real command line with the installed plugins: a model path that is no ONNX model or no regular file (23.8), a
manifest that is a FIFO (23.8: `plan` hung), a task output the model lacks (23.10), calibration without data, an
image folder without Pillow, an fp16 conversion of a float16 model (23.11). Each failed before the fix: validate
passed, or said "model file not found", or hung."""

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

REPO = Path(__file__).resolve().parents[2]
_TRACEBACK = "Traceback (most recent call last)"
ORT = "1.31"


def run(*args: str, cwd: Path, prelude: str = "", timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "ORCHESTRATE_CACHE": str(cwd / ".orchestrate"), "COLUMNS": "250"}
    env.pop("ORCHESTRATE_REGISTRY", None)
    code = f"{prelude}\nfrom orchestrator.cli import main\nmain()\n"
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=timeout)
    assert _TRACEBACK not in proc.stderr + proc.stdout, proc.stderr[-3000:]
    return proc


def _model(path: Path, outputs: tuple[str, ...] = ("y",), dtype: int = TensorProto.FLOAT) -> Path:
    np_type = np.float16 if dtype == TensorProto.FLOAT16 else np.float32
    w = numpy_helper.from_array(np.full((1,), 2.0, np_type), "w")
    x = helper.make_tensor_value_info("x", dtype, [1, 3, 8, 8])
    nodes = [helper.make_node("Mul", ["x", "w"], [name], name=f"mul_{name}") for name in outputs]
    outs = [helper.make_tensor_value_info(name, dtype, [1, 3, 8, 8]) for name in outputs]
    graph = helper.make_graph(nodes, "g", [x], outs, [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    return path


def manifest(folder: Path, source: str, *, model: str = "", precisions: str = "[fp32]") -> Path:
    path = folder / "m.yaml"
    path.write_text(f"""\
manifest_version: 1
project: inputs
registry: {{store: local, path: artifacts}}
models:
  - name: m
    version: "1"
    source: {{path: {source}}}
    inputs: {{x: {{shape: [1, 3, 8, 8]}}}}
    precisions: {precisions}
{model}targets:
  - {{name: cpu, builder: onnxruntime, builder_version: "{ORT}", device: cpu}}
""")
    return path


def refused(folder: Path, *expected: str, command: str = "validate") -> str:
    proc = run(command, "m.yaml", cwd=folder)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    for text in expected:
        assert text in proc.stderr, proc.stderr
    return proc.stderr


@pytest.mark.parametrize("kind", ["text", "png", "empty", "zero", "urandom", "fifo"])
def test_validate_and_plan_refuse_a_model_path_that_is_no_onnx_model(tmp_path, kind):
    path = tmp_path / f"model-{kind}.onnx"
    expected = {"text": "is not an ONNX model: it is text ('name,score')", "png": "is not an ONNX model: it is a PNG "
                "image", "empty": "is empty (0 bytes)", "zero": "is not a regular file (a character device)",
                "urandom": "is not a regular file (a character device)", "fifo": "is not a regular file (a FIFO)"}
    if kind == "text":
        path.write_text("name,score\nx,1\n")
    elif kind == "png":
        path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(100))
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path = Path(f"/dev/{kind}")
    manifest(tmp_path, str(path))
    for command in ("validate", "plan"):
        err = refused(tmp_path, f"m.yaml:7:20: models[0].source.path: model file {expected[kind]}: {path}",
                      command=command)
        assert "not found" not in err


@pytest.mark.parametrize("device", ["fifo", "/dev/zero"])
def test_plan_of_a_manifest_that_is_a_fifo_or_a_device_ends_with_the_reason(tmp_path, device):
    path = tmp_path / "m.yaml"
    if device == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(device)
    for command in ("plan", "validate"):
        proc = run(command, "m.yaml", cwd=tmp_path, timeout=60)  # before the fix: `plan` waited for a writer
        assert proc.returncode == 1, proc.stdout + proc.stderr
        kind = "a FIFO" if device == "fifo" else "a device or socket"
        assert f"m.yaml: the manifest is not a regular file ({kind})" in proc.stderr, proc.stderr


def test_a_task_without_output_on_a_model_with_seven_outputs_is_refused_at_validate(tmp_path):
    names = tuple(f"mask{i}" for i in range(7))
    _model(tmp_path / "seg.onnx", names)
    manifest(tmp_path, "seg.onnx", model="    task: {kind: segmentation}\n")
    refused(tmp_path, "m.yaml:10:11: models[0].task: task segmentation reads the model's only output, but the model "
                      f"has 7: {', '.join(names)}")
    manifest(tmp_path, "seg.onnx", model="    task: {kind: segmentation, output: zzz}\n")
    refused(tmp_path, "m.yaml:10:40: models[0].task.output: the model has no output 'zzz' (its outputs: "
                      f"{', '.join(names)})")
    manifest(tmp_path, "seg.onnx", model="    task: {kind: segmentation, output: mask6}\n")
    assert run("validate", "m.yaml", cwd=tmp_path).returncode == 0


def test_calibration_without_a_path_is_refused_with_the_fix(tmp_path):
    _model(tmp_path / "m.onnx")
    manifest(tmp_path, "m.onnx", precisions="[fp32, {name: int8, via: transform}]",
             model="    calibration: {samples: 4, seed: 0}\n")
    err = refused(tmp_path, "m.yaml:10:18: models[0].calibration: calibration names no path")
    assert "has none" not in err and "calibration: {path: data/calib, samples: 4}" in err


def test_image_calibration_without_pillow_is_refused_at_validate(tmp_path):
    _model(tmp_path / "m.onnx")
    (tmp_path / "calib").mkdir()
    (tmp_path / "calib" / "page0.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    manifest(tmp_path, "m.onnx", precisions="[fp32, {name: int8, via: transform}]",
             model="    calibration: {path: calib, samples: 1}\n")
    assert run("validate", "m.yaml", cwd=tmp_path).returncode == 0  # with Pillow (the test extra)
    proc = run("validate", "m.yaml", cwd=tmp_path, prelude="import sys\nsys.modules['PIL'] = None  # no Pillow")
    assert proc.returncode == 1
    assert re.search(r"m.yaml:10:25: models\[0\].calibration.path: calibration data \S+calib is a folder of "
                     r"images: reading them needs Pillow, which is not installed", proc.stderr), proc.stderr
    assert "pip install 'trt-orchestrator[images]'" in proc.stderr


def test_fp16_conversion_of_a_float16_model_is_refused_at_validate(tmp_path):
    _model(tmp_path / "half.onnx", dtype=TensorProto.FLOAT16)
    manifest(tmp_path, "half.onnx", precisions="[fp32, {name: fp16, via: transform}]")
    err = refused(tmp_path, "m.yaml:9:24: models[0].precisions[1]: model 'm' is float16 already (1 of its 1 float "
                            "initializers are float16): the fp16 conversion (via: transform, for target cpu)")
    assert "check_fp16_ready" not in err and "declare precisions: [fp32]" in err
    manifest(tmp_path, "half.onnx")
    assert run("validate", "m.yaml", cwd=tmp_path).returncode == 0
