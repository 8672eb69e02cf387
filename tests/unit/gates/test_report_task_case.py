"""The report's task-metric summary stands for the verdict (issue 23, point 12): the failing case, else the one
nearest to its threshold, never a passing case picked by its position."""

from __future__ import annotations

from orchestrator.cli.render.report import cell_summary, report_json


def _case(label: str, accuracy: float, status: str = "passed") -> dict:
    reasons = [f"text_accuracy {accuracy:.4g} < min_text_accuracy 0.9"] if status == "failed" else []
    return {"label": label, "status": status, "outputs": [],
            "task": {"kind": "ctc", "status": status, "metrics": {"text_accuracy": accuracy, "norm_edit_distance": 0.0},
                     "thresholds": {"min_text_accuracy": 0.9}, "reasons": reasons}}


def _cell(*cases: dict) -> dict:
    status = "failed" if any(c["status"] == "failed" for c in cases) else "passed"
    return {"address": "ocr-rec/fp16/default@cpu+ort1.31", "model": "ocr-rec", "precision": "fp16",
            "target": "cpu+ort1.31", "status": status, "parity": {"status": status, "cases": list(cases)}}


def test_the_failing_case_is_what_the_summary_shows():
    cell = _cell(_case("min", 1.0), _case("opt", 0.875, "failed"), _case("max", 0.95))
    s = cell_summary(cell)
    assert (s["task"]["text_accuracy"], s["task_case"]) == (0.875, "opt")
    (shown,) = report_json([cell])["summary"]
    assert shown["task"]["text_accuracy"] == 0.875


def test_without_a_failure_the_case_nearest_its_threshold():
    s = cell_summary(_cell(_case("min", 1.0), _case("opt", 0.92), _case("max", 0.97)))
    assert (s["task"]["text_accuracy"], s["task_case"]) == (0.92, "opt")


def test_nan_is_the_worst():
    s = cell_summary(_cell(_case("min", 0.99), _case("opt", float("nan")), _case("max", 0.97)))
    assert s["task_case"] == "opt"
