"""Label readers of the task plugins (gate.parity.data.labels) and the dataset's labels in gate cases."""

from __future__ import annotations

import json

import numpy as np
import pytest

from orchestrator.core.model import (
    DataSource,
    GateSettings,
    InputSpec,
    Model,
    ProfileShapes,
    SourceModel,
    TaskSpec,
)
from orchestrator.errors import GateError
from orchestrator.gates.inputs import gate_cases
from trt_orchestrator_plugins.tasks._labels import read_answers
from trt_orchestrator_plugins.tasks.classification import classification
from trt_orchestrator_plugins.tasks.ctc import ctc
from trt_orchestrator_plugins.tasks.detection import detection

IMAGES = [("a.jpg", (100, 50)), ("b.png", (200, 100))]


def test_json_and_tab_separated_answers(tmp_path):
    (tmp_path / "l.json").write_text(json.dumps({"b.png": 3, "dir/a.jpg": 1, "extra.jpg": 9}))
    assert read_answers(str(tmp_path / "l.json"), IMAGES) == [1, 3]
    (tmp_path / "rec_gt.txt").write_text("train/a.jpg\thello world\nb.png\t\u4e2d\u6587\n\n")
    assert read_answers(str(tmp_path / "rec_gt.txt"), IMAGES) == ["hello world", "\u4e2d\u6587"]
    assert ctc.read_labels(str(tmp_path / "rec_gt.txt"), IMAGES, (48, 320)) == ["hello world", "\u4e2d\u6587"]
    assert classification.read_labels(str(tmp_path / "l.json"), IMAGES, (224, 224)) == [1, 3]


def test_malformed_labels_name_the_place(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("a.jpg\t1\nb.png 2\n")
    with pytest.raises(GateError, match=r"bad.txt:2: expected 'name<TAB>label', found 'b.png 2'"):
        read_answers(str(bad), IMAGES)
    twice = tmp_path / "twice.txt"
    twice.write_text("a.jpg\t1\nx/a.jpg\t2\n")
    with pytest.raises(GateError, match=r"twice.txt:2: 'a.jpg' is labelled twice"):
        read_answers(str(twice), IMAGES)
    partial = tmp_path / "p.json"
    partial.write_text(json.dumps({"a.jpg": 0}))
    with pytest.raises(GateError, match=r"no label for 1 of the 2 images \(b.png\)"):
        read_answers(str(partial), IMAGES)
    broken = tmp_path / "broken.json"
    broken.write_text('{"a.jpg": 0,\n')
    with pytest.raises(GateError, match=r"broken.json:2: not JSON"):
        read_answers(str(broken), IMAGES)
    (tmp_path / "words.json").write_text(json.dumps({"a.jpg": "cat", "b.png": 1}))
    with pytest.raises(GateError, match=r"a.jpg: the class 'cat' is not an index"):
        classification.read_labels(str(tmp_path / "words.json"), IMAGES, (224, 224))


def test_detection_labels_are_scaled_to_the_model_input(tmp_path):
    coco = {"images": [{"id": 1, "file_name": "a.jpg", "width": 100, "height": 50},
                       {"id": 2, "file_name": "b.png", "width": 200, "height": 100}],
            "categories": [{"id": 1, "name": "person"}, {"id": 3, "name": "car"}],
            "annotations": [{"id": 10, "image_id": 1, "category_id": 3, "bbox": [10, 5, 20, 10], "iscrowd": 0},
                            {"id": 11, "image_id": 2, "category_id": 1, "bbox": [0, 0, 200, 100], "iscrowd": 0}]}
    (tmp_path / "coco.json").write_text(json.dumps(coco))
    boxes = detection.read_labels(str(tmp_path / "coco.json"), IMAGES, (640, 640))  # (height, width)
    # a.jpg 100x50 -> 640x640: x * 6.4, y * 12.8; category 3 is the second id: class 1
    assert boxes[0] == [pytest.approx((64.0, 64.0, 192.0, 192.0, 1))]
    assert boxes[1] == [pytest.approx((0.0, 0.0, 640.0, 640.0, 0))]
    yolo = tmp_path / "yolo"
    yolo.mkdir()
    (yolo / "a.txt").write_text("2 0.5 0.5 0.2 0.4\n")  # normalised: scaling to the input needs no image size
    boxes = detection.read_labels(str(yolo), IMAGES, (320, 640))
    assert boxes[0] == [pytest.approx((256.0, 96.0, 384.0, 224.0, 2))] and boxes[1] == []


def _image_model(tmp_path, labels, task="classification"):
    from PIL import Image

    folder = tmp_path / "images"
    folder.mkdir()
    for i, name in enumerate(("a.png", "b.png", "c.png", "d.png")):
        Image.fromarray(np.full((8 + i, 10, 3), 40 * i, dtype=np.uint8)).save(folder / name)
    inputs = (InputSpec("x", ("N", 3, 4, 4), profiles={"default": ProfileShapes((1, 3, 4, 4), (2, 3, 4, 4),
                                                                                 (2, 3, 4, 4))}),)
    data = DataSource(path=str(folder), samples=2, labels=str(labels) if labels else None)
    return Model(name="m", version="1", source=SourceModel("/m.onnx"), inputs=inputs, constraints=(),
                 precisions=(), profile_sets={}, calibration=None, gate=GateSettings(), task=TaskSpec(task)), data


def test_gate_cases_carry_each_row_label_in_order(tmp_path):
    labels = tmp_path / "l.json"
    labels.write_text(json.dumps({"a.png": 0, "b.png": 1, "c.png": 2, "d.png": 3}))
    model, data = _image_model(tmp_path, labels)
    (case,) = gate_cases(model, "default", data, read_labels=classification.read_labels)
    assert [s["x"].shape for s in case.samples] == [(2, 3, 4, 4), (2, 3, 4, 4)]
    assert case.labels == (0, 1, 2, 3)  # the rows of both samples, in file order


def test_labels_without_a_reader_or_on_arrays_are_refused(tmp_path):
    labels = tmp_path / "l.json"
    labels.write_text("{}")
    model, data = _image_model(tmp_path, labels, task="segmentation")
    with pytest.raises(GateError, match="task 'segmentation' reads no labels"):
        gate_cases(model, "default", data, read_labels=None)
