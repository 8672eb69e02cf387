"""What validate reads of the files a manifest names (issue 23): the model file is a regular file holding an ONNX
model (23.8), the outputs a task names are the model's (23.10), calibration has data and what reading it needs,
and a float16 model is not converted to fp16 again (23.11); a data path that is a FIFO is a finding, not an
error of `plan` without a place (23.7). Each reproduced its problem before the fix."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from orchestrator.errors import ManifestError
from orchestrator.manifest import load_manifest
from orchestrator.manifest.model_file import ModelFileError, read_model_file

from . import fakes
from .conftest import tiny_model

REPO = Path(__file__).parents[3]
PNG = REPO / ".cache" / "images" / "skimage" / "astronaut.png"


def manifest(source: str = "../models/tiny.onnx", *, model: str = "", precisions: str = "[fp32]",
             target: str = 'onnxruntime, builder_version: "1.31", device: cpu') -> str:
    return f"""\
manifest_version: 1
models:
  - name: m
    version: "1"
    source: {{path: {source}}}
    inputs: {{x: {{shape: [1, 3, 8, 8]}}}}
    precisions: {precisions}
{model}targets: [{{name: t, builder: {target}}}]
"""


def problems(load, text: str) -> list:
    with pytest.raises(ManifestError) as info:
        load(text)
    return info.value.problems


def multi_output(path: Path, names: list[str]) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 3, 8, 8]) for n in names]
    graph = helper.make_graph([helper.make_node("Identity", ["x"], [n], name=f"id_{n}") for n in names], "g",
                              [x], outs)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def half_model(path: Path) -> Path:
    """y = x * w with float16 weights and I/O: what onnxconverter-common calls "already converted"."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 3, 8, 8])
    w = numpy_helper.from_array(np.full((1,), 2.0, dtype=np.float16), "w")
    graph = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["y"], name="mul")], "g", [x], [y], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


# --- 23.8: a model path that names no ONNX model ---------------------------------------------------------------

def _hostile(kind: str, folder: Path) -> str:
    path = folder / f"hostile-{kind}"
    if kind == "text":
        path.write_text("hello, I am not a model\n")
    elif kind == "png":
        path.write_bytes(PNG.read_bytes() if PNG.is_file() else b"\x89PNG\r\n\x1a\n" + bytes(64))
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "fifo":
        if not path.exists():
            os.mkfifo(path)
    elif kind == "folder":
        path.mkdir(exist_ok=True)
    elif kind == "protobuf-without-graph":  # a valid ModelProto that holds nothing a build can use
        path.write_bytes(onnx.ModelProto(ir_version=9).SerializeToString())
    else:
        return f"/dev/{kind}"
    return str(path)


HOSTILE = {
    "text": "model file is not an ONNX model: it is text ('hello, I am not a model')",
    "png": "model file is not an ONNX model: it is a PNG image",
    "empty": "model file is empty (0 bytes)",
    "fifo": "model file is not a regular file (a FIFO)",
    "zero": "model file is not a regular file (a character device)",
    "urandom": "model file is not a regular file (a character device)",
    "folder": "model file is a folder, not a file",
    "protobuf-without-graph": "model file is not an ONNX model: it has no graph",
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_model_path_that_names_no_onnx_model_is_refused_with_the_reason(load, tmp_path, kind):
    # not in the session's shared models folder: the `digests` fixture reads every file there, and would block on
    # the FIFO for good
    path = _hostile(kind, tmp_path)
    (p,) = problems(load, manifest(path))
    assert p.path == "models[0].source.path" and (p.line, p.column) == (5, 20)
    assert p.message == f"{HOSTILE[kind]}: {path}"
    assert p.hint


def test_validate_never_blocks_on_a_fifo_model_or_reads_an_endless_device(repo_root, tmp_path):
    """In a child process under a deadline: a hang fails the test instead of stalling the suite."""
    fifo = _hostile("fifo", tmp_path)
    for source in (fifo, "/dev/zero", "/dev/urandom"):
        path = tmp_path / "m.yaml"
        path.write_text(manifest(source))
        code = ("import sys\nfrom orchestrator.errors import ManifestError\nfrom orchestrator.manifest import "
                "load_manifest\nfrom tests.unit.manifest import fakes\ntry:\n    load_manifest(sys.argv[1], "
                "capabilities=fakes.capabilities)\nexcept ManifestError as e:\n    print(e)\n")
        proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=30,
                              cwd=REPO)
        assert "is not a regular file" in proc.stdout, proc.stdout + proc.stderr


def test_read_model_file_reads_outputs_without_loading_weights(tmp_path):
    facts = read_model_file(str(multi_output(tmp_path / "m.onnx", ["a", "b", "c"])))
    assert (facts.inputs, facts.outputs, facts.float16, facts.external_data) == (("x",), ("a", "b", "c"), None,
                                                                                  False)
    with pytest.raises(ModelFileError, match="not found"):
        read_model_file(str(tmp_path / "none.onnx"))


def test_a_truncated_model_is_not_protobuf_at_a_byte(tmp_path):
    whole = tmp_path / "whole.onnx"
    multi_output(whole, ["a"])
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(whole.read_bytes()[:-7])
    with pytest.raises(ModelFileError) as info:
        read_model_file(str(cut))
    assert info.value.message.startswith("is not an ONNX model: its bytes are not ONNX's protobuf encoding (byte ")


def test_external_data_that_is_missing_is_a_finding_at_the_source(load, repo_root, tmp_path):
    folder = repo_root / "models" / "external"
    folder.mkdir(exist_ok=True)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])
    w = numpy_helper.from_array(np.ones((1, 3, 8, 8), dtype=np.float32), "w")
    model = helper.make_model(helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", [x], [y], [w]),
                              opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, folder / "ext.onnx", save_as_external_data=True, location="ext.data", size_threshold=0)
    assert read_model_file(str(folder / "ext.onnx")).external_data
    load(manifest("../models/external/ext.onnx"))
    (folder / "ext.data").unlink()
    (p,) = problems(load, manifest("../models/external/ext.onnx"))
    assert p.path == "models[0].source.path" and p.line == 5
    assert "external-data file 'ext.data' of tensor 'w' not found" in p.message


# --- 23.7: data paths plan cannot digest are findings with a place ----------------------------------------------

def test_a_fifo_as_calibration_or_parity_data_is_a_located_finding(load, repo_root, tmp_path):
    fifo = _hostile("fifo", tmp_path)
    text = manifest(precisions="[fp32, {name: int8, via: transform}]",
                    model=f"    calibration: {{path: {fifo}}}\n    gate: {{parity: {{data: {{path: {fifo}}}}}}}\n")
    found = {(p.path, p.line, p.message) for p in problems(load, text)}
    assert found == {
        ("models[0].calibration.path", 8, f"data path is not a regular file or a folder (a FIFO): {fifo}"),
        ("models[0].gate.parity.data.path", 9, f"data path is not a regular file or a folder (a FIFO): {fifo}")}


def test_a_fifo_inside_a_data_folder_is_a_located_finding(load, repo_root, tmp_path):
    folder = tmp_path / "calib"
    folder.mkdir()
    np.save(folder / "a.npy", np.zeros((1, 3, 8, 8), np.float32))
    os.mkfifo(folder / "b.npy")
    (p,) = problems(load, manifest(precisions="[fp32, {name: int8, via: transform}]",
                                   model=f"    calibration: {{path: {folder}}}\n"))
    assert (p.path, p.line) == ("models[0].calibration.path", 8)
    assert p.message == f"data path {folder} holds {folder / 'b.npy'}, which is not a regular file (a FIFO)"


# --- 23.10: the outputs a task reads ----------------------------------------------------------------------------

def test_a_task_without_output_on_a_model_with_several_is_refused_with_the_outputs(load, repo_root):
    names = [f"out{i}" for i in range(7)]
    multi_output(repo_root / "models" / "seven.onnx", names)
    (p,) = problems(load, manifest("../models/seven.onnx", model="    task: {kind: segmentation}\n"))
    assert (p.path, p.line, p.column) == ("models[0].task", 8, 11)
    assert p.message == f"task segmentation reads the model's only output, but the model has 7: {', '.join(names)}"
    assert p.hint == "set task.output to the one it judges"
    load(manifest("../models/seven.onnx", model="    task: {kind: segmentation, output: out3}\n"))


def test_a_task_output_the_model_does_not_have_is_refused_with_a_close_match(load, repo_root):
    multi_output(repo_root / "models" / "three.onnx", ["boxes", "scores", "labels"])
    (p,) = problems(load, manifest("../models/three.onnx", model="    task: {kind: segmentation, output: zzz}\n"))
    assert (p.path, p.line) == ("models[0].task.output", 8)
    assert p.message == "the model has no output 'zzz' (its outputs: boxes, scores, labels)"
    (p,) = problems(load, manifest("../models/three.onnx", model="    task: {kind: segmentation, output: score}\n"))
    assert p.hint == "did you mean 'scores'?"


def test_detection_outputs_named_by_options_are_checked_and_need_no_output(load, repo_root):
    multi_output(repo_root / "models" / "nms.onnx", ["boxes", "scores", "classes"])
    ok = "    task: {kind: detection, layout: boxes, boxes: boxes, scores: scores, classes: classes}\n"
    load(manifest("../models/nms.onnx", model=ok))
    (p,) = problems(load, manifest("../models/nms.onnx", model=ok.replace("classes: classes", "classes: cls")))
    assert (p.path, p.message) == ("models[0].task.classes",
                                   "the model has no output 'cls' (its outputs: boxes, scores, classes)")


def test_classifier_outputs_name_outputs_of_the_model(load):
    (p,) = problems(load, manifest(model="    classifier_outputs: {logits: 5}\n"))
    assert (p.path, p.line, p.column) == ("models[0].classifier_outputs.logits", 8, 26)
    assert p.message == "the model has no output 'logits' (its outputs: y)"


# --- 23.11: calibration data, what reading it needs, a float16 model --------------------------------------------

def test_calibration_without_a_path_says_so_at_the_calibration(load):
    text = manifest(precisions="[fp32, {name: int8, via: transform}]",
                    model="    calibration: {samples: 4, seed: 0}\n")
    (p,) = problems(load, text)
    assert (p.path, p.line) == ("models[0].calibration", 8)
    assert p.message == ("calibration names no path: int8 calibrate on real inputs, and samples: 4 without a path "
                         "would be random tensors")
    assert "calibration: {path: data/calib, samples: 4}" in p.hint


def _image_folder(folder: Path) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "page0.png").write_bytes(PNG.read_bytes() if PNG.is_file() else b"\x89PNG\r\n\x1a\n")
    return folder


def test_image_calibration_without_pillow_is_refused_at_validate(load, repo_root, tmp_path, monkeypatch):
    folder = _image_folder(tmp_path / "pictures")
    text = manifest(precisions="[fp32, {name: int8, via: transform}]", model=f"    calibration: {{path: {folder}}}\n")
    load(text)  # Pillow is installed here (the test extra)
    monkeypatch.setitem(sys.modules, "PIL", None)  # as if it were not: `import PIL` raises ImportError
    monkeypatch.delitem(sys.modules, "PIL.Image", raising=False)
    (p,) = problems(load, text)
    assert (p.path, p.line) == ("models[0].calibration.path", 8)
    assert p.message == (f"calibration data {folder} is a folder of images: reading them needs Pillow, which is not "
                         "installed")
    assert p.hint.startswith("pip install 'trt-orchestrator[images]'")
    np.save(folder / "a.npy", np.zeros((1, 3, 8, 8), np.float32))  # arrays are read first: no Pillow needed
    load(text)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_converting_a_float16_model_is_refused_with_the_fix(load, repo_root, precision):
    half_model(repo_root / "models" / "half.onnx")
    text = manifest("../models/half.onnx", precisions=f"[fp32, {{name: {precision}, via: transform}}]",
                    target='tensorrt-rtx, builder_version: "1.7.1.116", compute_capability: "8.9"')
    (p,) = problems(load, text)
    assert (p.path, p.line) == ("models[0].precisions[1]", 7)
    assert p.message == (f"model 'm' is float16 already (1 of its 1 float initializers are float16): the {precision} "
                         "conversion (via: transform, for target t) converts float32 models and refuses one "
                         "converted before")
    assert "declare precisions: [fp32]" in p.hint
    load(text.replace(f"[fp32, {{name: {precision}, via: transform}}]", "[fp32]"))


def test_a_float16_model_with_native_fp16_on_tensorrt_10_is_fine(load, repo_root):
    half_model(repo_root / "models" / "half.onnx")
    load(manifest("../models/half.onnx", precisions="[fp32, {name: fp16, via: native}]",
                  target='tensorrt, builder_version: "10.13.3.9", compute_capability: "8.9"'))


def test_a_cast_to_float16_or_float16_io_make_a_model_float16_as_the_converter_sees_it(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Cast", ["x"], ["h"], name="to_half", to=TensorProto.FLOAT16),
                               helper.make_node("Cast", ["h"], ["y"], name="back", to=TensorProto.FLOAT)],
                              "g", [x], [y])
    path = tmp_path / "cast.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert read_model_file(str(path)).float16 == "it casts to float16 (Cast node 'to_half')"
    half = helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [half],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert read_model_file(str(path)).float16 == "input 'x' is float16"
    tiny_model(path)
    assert read_model_file(str(path)).float16 is None


def test_min_quantized_share_only_on_quantized_precisions(load):
    (p,) = problems(load, manifest(precisions="[fp32, {name: fp16, via: transform, min_quantized_share: 0.5}]"))
    assert (p.path, p.message) == ("models[0].precisions[1].min_quantized_share",
                                   "fp16 quantizes nothing: min_quantized_share is for the int8 and fp8 Q/DQ "
                                   "transforms")


def test_a_deployments_copy_needs_none_of_its_files_and_a_file_that_is_there_is_still_checked(repo_root):
    """``absent_files_ok`` (``pull --build-on-miss``, issue 26.1): the model, calibration and parity data files
    need not exist where the manifest is read; one that exists is checked as always (a text file is no model)."""
    gone = "    calibration: {path: ../data/gone}\n    gate: {parity: {data: {path: ../data/gone-too}}}\n"
    path = repo_root / "manifests" / "deployed.yaml"
    path.write_text(manifest("../models/gone.onnx", model=gone, precisions="[fp32, int8]"), encoding="utf-8")

    def load(**kw):
        return load_manifest(path, capabilities=fakes.capabilities, builder_names=fakes.BUILDER_NAMES,
                             builder_slug=fakes.slug, **kw)

    with pytest.raises(ManifestError) as info:
        load()
    assert {p.message.split(":")[0] for p in info.value.problems} == {"model file not found", "data path not found"}
    loaded = load(absent_files_ok=True)
    assert loaded.models[0].source.path.endswith("gone.onnx")
    (repo_root / "models" / "text.onnx").write_text("not a model\n")
    path.write_text(manifest("../models/text.onnx", model=gone, precisions="[fp32, int8]"), encoding="utf-8")
    with pytest.raises(ManifestError) as info:
        load(absent_files_ok=True)
    assert [p.path for p in info.value.problems] == ["models[0].source.path"]
