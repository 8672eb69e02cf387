"""The built-in task metrics on synthetic arrays: classification top-1/top-5, CTC greedy decoding and string
metrics, text-detection masks, components and box recall; and their registration as entry points."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from orchestrator import plugins
from orchestrator.contracts.task import TaskMetric, threshold_metric
from orchestrator.core.model import (
    DataSource,
    GateSettings,
    InputSpec,
    Model,
    ParityGate,
    SourceModel,
    TaskSpec,
    Tolerance,
)
from orchestrator.errors import GateError
from orchestrator.gates import gate_cases, run_parity
from orchestrator.gates.verdict import ParityVerdict
from trt_orchestrator_plugins.tasks.classification import classification
from trt_orchestrator_plugins.tasks.ctc import ctc, greedy_decode, levenshtein, normalized_edit_distance
from trt_orchestrator_plugins.tasks.text_detection import box_iou, component_boxes, text_detection


def samples(name: str, *arrays: np.ndarray) -> list[dict[str, np.ndarray]]:
    return [{name: a} for a in arrays]


# --- registration -------------------------------------------------------------------------------------------


def test_builtins_register_through_the_entry_point_group():
    assert {"classification", "ctc", "text-detection", "detection", "segmentation"} <= set(plugins.names(plugins.TASKS))
    for kind in ("classification", "ctc", "text-detection", "detection", "segmentation"):
        plugin = plugins.task(kind)
        assert isinstance(plugin, TaskMetric) and plugin.name == kind and plugin.metrics


def test_unknown_task_kind_names_the_close_match():
    with pytest.raises(Exception) as e:
        plugins.task("clasification")
    assert "did you mean 'classification'" in str(e.value.hint) and plugins.TASKS in str(e.value)


def test_threshold_names_map_to_metrics():
    assert threshold_metric("min_box_recall") == ("min", "box_recall")
    assert threshold_metric("max_top1_disagreement") == ("max", "top1_disagreement")
    assert threshold_metric("box_recall") is None and threshold_metric("min_") is None


def test_task_thresholds_resolve_model_then_precision():
    gate = ParityGate(task={"min_box_recall": 0.9, "min_mask_iou": 0.8},
                      task_by_precision={"int8": {"min_box_recall": 0.7}})
    assert gate.task_thresholds("fp16") == {"min_box_recall": 0.9, "min_mask_iou": 0.8}
    assert gate.task_thresholds("int8") == {"min_box_recall": 0.7, "min_mask_iou": 0.8}


# --- classification -----------------------------------------------------------------------------------------


def test_classification_identical_outputs_agree():
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(6, 10)).astype(np.float32)
    out = classification.evaluate(samples("p", ref[:3], ref[3:]), samples("p", ref[:3], ref[3:]),
                                  TaskSpec("classification"))
    assert out == {"top1_disagreement": 0.0, "top1_agreement": 1.0, "top5_agreement": 1.0}


def test_classification_counts_rows_whose_top1_moved():
    ref = np.array([[3.0, 2, 1, 0], [0, 1, 2, 3], [1, 3, 2, 0], [2, 1, 0, 3]])
    eng = ref.copy()
    eng[0] = [2, 3, 1, 0]  # top-1 swapped with the runner-up: top-1 differs, the top set (k=4 here) is the same
    out = classification.evaluate(samples("p", ref), samples("p", eng), TaskSpec("classification", output="p"))
    assert out["top1_disagreement"] == pytest.approx(0.25)
    assert out["top5_agreement"] == pytest.approx(1.0)  # k capped at C = 4


def test_classification_top5_agreement_is_set_overlap():
    ref = np.arange(10, dtype=np.float64)[None]  # top-5: 9 8 7 6 5
    eng = ref.copy()
    eng[0, 5] = -1.0  # 5 drops out; 4 comes in
    out = classification.evaluate(samples("p", ref), samples("p", eng), TaskSpec("classification"))
    assert out["top1_disagreement"] == 0.0 and out["top5_agreement"] == pytest.approx(0.8)


def test_classification_accuracy_against_labels():
    ref = np.eye(4)
    eng = np.eye(4)[[0, 1, 3, 3]]
    out = classification.evaluate(samples("p", ref), samples("p", eng), TaskSpec("classification"),
                                  labels=[0, 1, 2, 0])
    assert out["accuracy"] == pytest.approx(0.5) and out["reference_accuracy"] == pytest.approx(0.75)


def test_classification_names_a_wrong_layout_and_a_missing_output():
    with pytest.raises(GateError, match=r"output 'p' has shape \[2, 3, 4\]; the task needs \[N, C\]"):
        classification.evaluate(samples("p", np.zeros((2, 3, 4))), samples("p", np.zeros((2, 3, 4))),
                                TaskSpec("classification"))
    with pytest.raises(GateError, match="the model has no output 'logits' \\(outputs: p\\)"):
        classification.evaluate(samples("p", np.zeros((2, 3))), samples("p", np.zeros((2, 3))),
                                TaskSpec("classification", output="logits"))
    two = [{"a": np.zeros((1, 2)), "b": np.zeros((1, 2))}]
    with pytest.raises(GateError, match="has 2 outputs"):
        classification.evaluate(two, two, TaskSpec("classification"))


# --- ctc ----------------------------------------------------------------------------------------------------


def one_hot_steps(indices: list[list[int]], classes: int) -> np.ndarray:
    out = np.zeros((len(indices), len(indices[0]), classes), dtype=np.float32)
    for n, row in enumerate(indices):
        out[n, np.arange(len(row)), row] = 1.0
    return out


def test_levenshtein():
    assert levenshtein("kitten", "sitting") == 3
    assert levenshtein("", "abc") == 3 and levenshtein("abc", "abc") == 0
    assert normalized_edit_distance("abcd", "abxd") == pytest.approx(0.25)
    assert normalized_edit_distance("", "") == 0.0


def test_greedy_decode_collapses_repeats_and_drops_blanks():
    scores = one_hot_steps([[1, 1, 0, 1, 2, 2, 0, 0, 3]], 4)
    assert greedy_decode(scores, blank=0) == [(1, 1, 2, 3)]
    assert greedy_decode(scores, blank=3) == [(1, 0, 1, 2, 0)]


def test_ctc_decodes_through_a_charset_with_ppocr_space(tmp_path):
    charset = tmp_path / "keys.txt"
    charset.write_text("a\nb\nc\n")  # 3 characters + PP-OCR's appended space + blank = 5 classes
    ref = one_hot_steps([[1, 0, 2, 4, 3], [3, 3, 0, 3, 0]], 5)
    eng = one_hot_steps([[1, 0, 2, 4, 3], [3, 0, 0, 3, 1]], 5)
    spec = TaskSpec("ctc", options={"charset": str(charset)})
    assert ctc.decode(ref, spec) == [tuple("ab c"), tuple("cc")]
    out = ctc.evaluate(samples("x", ref), samples("x", eng), spec, labels=["ab c", "cca"])
    assert out["text_accuracy"] == pytest.approx(0.5)
    assert out["norm_edit_distance"] == pytest.approx((0 + 1 / 3) / 2)  # "cc" vs "cca"
    assert out["label_text_accuracy"] == pytest.approx(1.0)
    assert out["reference_label_text_accuracy"] == pytest.approx(0.5)


def test_ctc_without_charset_compares_class_sequences():
    ref = one_hot_steps([[1, 2, 3]], 4)
    out = ctc.evaluate(samples("x", ref), samples("x", one_hot_steps([[1, 2, 2]], 4)), TaskSpec("ctc"))
    assert out == {"text_accuracy": 0.0, "norm_edit_distance": pytest.approx(1 / 3)}


def test_ctc_charset_of_the_wrong_size_is_named(tmp_path):
    charset = tmp_path / "keys.txt"
    charset.write_text("a\nb\n")
    scores = one_hot_steps([[1, 2]], 7)
    with pytest.raises(GateError, match=r"charset .*keys.txt has 2 characters; the output has 7 classes"):
        ctc.evaluate(samples("x", scores), samples("x", scores), TaskSpec("ctc", options={"charset": str(charset)}))
    with pytest.raises(GateError, match="cannot read charset"):
        ctc.evaluate(samples("x", scores), samples("x", scores),
                     TaskSpec("ctc", options={"charset": str(tmp_path / "missing.txt")}))


# --- text detection -----------------------------------------------------------------------------------------


def test_components_are_8_connected_runs():
    mask = np.zeros((8, 10), dtype=bool)
    mask[1:3, 1:4] = True  # a block
    mask[3, 4] = True  # touches the block diagonally: same component
    mask[6, 0:10] = True  # a line
    mask[0, 8] = True  # a single pixel
    boxes = {tuple(b) for b in component_boxes(mask).tolist()}
    assert boxes == {(1, 1, 4, 5), (6, 0, 7, 10), (0, 8, 1, 9)}
    assert {tuple(b) for b in component_boxes(mask, min_side=2).tolist()} == {(1, 1, 4, 5)}
    assert component_boxes(np.zeros((4, 4), bool)).shape == (0, 4)


def test_components_join_a_u_shape():
    mask = np.zeros((5, 5), dtype=bool)
    mask[0:5, 0] = mask[0:5, 4] = mask[4, :] = True  # two arms joined only at the bottom row
    assert component_boxes(mask).tolist() == [[0, 0, 5, 5]]


def test_box_iou():
    a = np.array([[0, 0, 2, 2]])
    b = np.array([[0, 0, 2, 2], [1, 1, 3, 3], [5, 5, 6, 6]])
    assert box_iou(a, b).tolist() == [[1.0, pytest.approx(1 / 7), 0.0]]


def det_map(boxes: list[tuple[int, int, int, int]], shape=(32, 48)) -> np.ndarray:
    out = np.full((1, 1, *shape), 0.05, dtype=np.float32)
    for y0, x0, y1, x1 in boxes:
        out[0, 0, y0:y1, x0:x1] = 0.9
    return out


def test_text_detection_identical_maps():
    ref = det_map([(2, 2, 8, 20), (12, 4, 18, 40)])
    out = text_detection.evaluate(samples("sigmoid_0.tmp_0", ref), samples("sigmoid_0.tmp_0", ref.copy()),
                                  TaskSpec("text-detection"))
    assert out == {"mask_iou": 1.0, "box_recall": 1.0, "box_precision": 1.0, "reference_boxes": 2.0,
                   "engine_boxes": 2.0}


def test_text_detection_a_lost_and_a_shifted_box():
    ref = det_map([(2, 2, 8, 20), (12, 4, 18, 40), (22, 2, 28, 12)])
    # first box identical, second shifted by half its width (IoU < 0.5), third lost
    eng = det_map([(2, 2, 8, 20), (12, 22, 18, 58)])
    out = text_detection.evaluate(samples("m", ref), samples("m", eng), TaskSpec("text-detection"))
    assert out["box_recall"] == pytest.approx(1 / 3)
    assert out["box_precision"] == pytest.approx(1 / 2)
    assert 0.0 < out["mask_iou"] < 1.0


def test_text_detection_threshold_option_moves_the_mask():
    ref = det_map([(2, 2, 8, 20)])
    eng = ref.copy()
    eng[0, 0, 2:8, 2:11] = 0.4  # half the box drops under 0.5, stays above 0.3
    spec = lambda t: TaskSpec("text-detection", options={"threshold": t})  # noqa: E731
    assert text_detection.evaluate(samples("m", ref), samples("m", eng), spec(0.3))["mask_iou"] == 1.0
    out = text_detection.evaluate(samples("m", ref), samples("m", eng), spec(0.5))
    assert out["mask_iou"] == pytest.approx(0.5) and out["box_recall"] == pytest.approx(1.0)  # IoU 0.5 recalls


def test_text_detection_empty_reference_is_full_recall():
    empty = det_map([])
    out = text_detection.evaluate(samples("m", empty), samples("m", empty), TaskSpec("text-detection"))
    assert out["mask_iou"] == 1.0 and out["box_recall"] == 1.0 and out["reference_boxes"] == 0.0


def test_text_detection_needs_one_channel():
    two = np.zeros((1, 2, 4, 4))
    with pytest.raises(GateError, match="has 2 channels"):
        text_detection.evaluate(samples("m", two), samples("m", two), TaskSpec("text-detection"))
    with pytest.raises(GateError, match="option 'threshold' must be a number"):
        text_detection.evaluate(samples("m", det_map([])), samples("m", det_map([])),
                                TaskSpec("text-detection", options={"threshold": "high"}))


# --- in the parity gate (in-test sessions) ------------------------------------------------------------------

class Scores:
    """logits = x * k + b with column 0 lifted by ``lift`` (moves the top-1 of rows where it is close)."""

    input_names = ("x",)
    output_names = ("logits",)
    tf32 = False

    def __init__(self, lift=0.0, b=0.0):
        self.lift, self.b = lift, b

    def run(self, inputs):
        y = inputs["x"].astype(np.float64) + self.b
        y[:, 0] += self.lift
        return {"logits": y}

    def close(self):
        pass


def classifier(**parity) -> Model:
    gate = GateSettings(parity=replace(ParityGate(data=DataSource(samples=4, seed=3)), **parity))
    return Model(name="cls", version="1", source=SourceModel("/m.onnx"), inputs=(InputSpec("x", (8, 5)),),
                 constraints=(), precisions=(), profile_sets={}, calibration=None, gate=gate,
                 task=TaskSpec("classification", output="logits"))


def test_the_gate_records_task_metrics_and_round_trips():
    model = classifier(task={"max_top1_disagreement": 0.0})
    v = run_parity(model, Scores(b=1e-6), Scores(), gate_cases(model, "default"), "fp32", classification)
    case = v.cases[0]
    assert v.status == "passed" and case.task.metrics["top1_disagreement"] == 0.0
    assert case.task.thresholds == {"max_top1_disagreement": 0.0}
    assert ParityVerdict.from_json(v.to_json()) == v


def test_a_violated_task_threshold_fails_with_metric_value_and_bound():
    loose = {"tolerances": {"fp32": Tolerance(atol=1.0, rtol=0.0, min_cosine=0.5, max_rel_l2=1.0)}}
    model = classifier(task={"max_top1_disagreement": 0.05}, **loose)
    v = run_parity(model, Scores(lift=0.5), Scores(), gate_cases(model, "default"), "fp32", classification)
    assert all(o.status == "passed" for o in v.cases[0].outputs)  # the tensors pass loose tolerances
    assert v.status == "failed"
    assert len(v.reasons) == 1
    assert re.fullmatch(r"min\+opt\+max/task classification: top1_disagreement 0\.\d+ > max_top1_disagreement "
                        r"0\.05", v.reasons[0]), v.reasons


def test_per_precision_thresholds_override_the_model_ones():
    model = classifier(task={"max_top1_disagreement": 0.0}, task_by_precision={"int8": {"max_top1_disagreement": 1}},
                       tolerances={"int8": Tolerance(atol=1.0, rtol=0.0, min_cosine=0.5, max_rel_l2=1.0)})
    cases = gate_cases(model, "default")
    assert run_parity(model, Scores(lift=0.5), Scores(), cases, "int8", classification).status == "passed"


def test_tensor_false_reports_tolerance_failures_without_failing():
    model = classifier(tensor=False, task={"max_top1_disagreement": 0.0})
    v = run_parity(model, Scores(b=0.5), Scores(), gate_cases(model, "default"), "fp32", classification)
    case = v.cases[0]
    assert case.outputs[0].status == "failed" and not case.tensor_gated  # reported...
    assert v.status == "passed" and v.reasons == ()  # ...not gated: a constant shift keeps every top-1
    assert v.to_json()["cases"][0]["tensor_gated"] is False


def test_thresholds_must_name_a_metric_and_need_a_task():
    model = classifier(task={"min_map50": 0.5})
    with pytest.raises(GateError, match="gate.parity.task.min_map50 names no metric of task 'classification'") as e:
        run_parity(model, Scores(), Scores(), gate_cases(model, "default"), "fp32", classification)
    assert "top1_disagreement" in str(e.value.hint)
    bare = replace(classifier(task={"min_top5_agreement": 0.9}), task=None)
    with pytest.raises(GateError, match="sets min_top5_agreement but the model declares no task"):
        run_parity(bare, Scores(), Scores(), gate_cases(bare, "default"), "fp32")


def test_a_labels_threshold_without_labels_is_a_note():
    model = classifier(task={"min_accuracy": 0.9})
    v = run_parity(model, Scores(), Scores(), gate_cases(model, "default"), "fp32", classification)
    assert v.status == "passed" and v.cases[0].task.notes == ("min_accuracy: accuracy was not computed "
                                                              "(it needs labels); not checked",)
