"""core.upgrade (issue 26.2): how the runtimes' answers on the old and new stack classify an engine, the build-time
prediction from recorded builds, and re-targeting (pure, literal inputs)."""

from __future__ import annotations

import pytest

from orchestrator.core.model import Target
from orchestrator.core.upgrade import (
    BuildRecord,
    GpuAnswer,
    classify,
    duration_text,
    estimate_build,
    place_of,
    retarget,
)


def answer(gpu: str, old: bool, new: bool) -> GpuAnswer:
    return GpuAnswer(gpu, old, f"old {gpu} {'yes' if old else 'no'}", new, f"new {gpu} {'yes' if new else 'no'}")


@pytest.mark.parametrize(("answers", "status", "reason"), [
    ([answer("sm86", True, False)], "stops", "sm86: new sm86 no"),
    # stopping on one GPU of several is stopping: the first GPU where it stops decides the reason
    ([answer("sm86", True, True), answer("sm89", True, False)], "stops", "sm89: new sm89 no"),
    ([answer("sm86", True, True), answer("sm89", True, True)], "keeps", "sm86: new sm86 yes"),
    # a GPU it never loaded on does not make it stop
    ([answer("sm75", False, False), answer("sm86", True, True)], "keeps", "sm86: new sm86 yes"),
    ([answer("sm86", False, True)], "starts", "sm86: not on the old stack (old sm86 no); loads on the new one"),
    ([answer("sm86", False, False)], "never", "sm86: old sm86 no"),
    ([], "never", "judged on no GPU"),
])
def test_classify(answers, status, reason):
    assert classify(answers) == (status, reason)


def rec(model="det", precision="fp16", profile_set="default", builder="b", where="8.6", seconds=10.0, version="1"):
    return BuildRecord(model, precision, profile_set, builder, version, where, seconds)


def test_the_estimate_is_the_median_of_the_same_cells_records_first():
    records = [rec(seconds=10.0), rec(seconds=30.0, version="2"), rec(seconds=12.0, version="3"),
               rec(model="rec", seconds=500.0)]
    est = estimate_build("det", "fp16", "default", "b", "8.6", records)
    assert (est.seconds, est.records, est.basis) == (12.0, 3, "same cell")
    assert est.text() == "~12.0 s (3 records, same cell)"


def test_without_the_same_cell_the_same_builder_and_ccs_decide():
    records = [rec(model="rec", seconds=100.0), rec(model="cls", seconds=300.0),
               rec(model="det", where="8.9", seconds=7.0), rec(model="det", builder="other", seconds=1.0)]
    est = estimate_build("det", "fp16", "default", "b", "8.6", records)
    assert (est.seconds, est.records, est.basis) == (200.0, 2, "same builder and CCs")


def test_no_record_is_said():
    est = estimate_build("det", "fp16", "default", "b", "8.6", [rec(where="8.9"), rec(builder="c"),
                                                                 rec(seconds=0.0)])
    assert (est.seconds, est.records, est.basis, est.text()) == (None, 0, "no record", "no record")
    assert est.to_json() == {"seconds": None, "records": 0, "basis": "no record"}


def test_place_of():
    assert place_of(["8.9", "12.0", "8.6"], "none", "gpu") == "12.0,8.6,8.9"
    assert place_of([], "ampere_plus", "gpu") == "ampere_plus"
    assert place_of([], "none", "cpu") == "cpu"


def test_duration_text():
    assert [duration_text(s) for s in (3.25, 600, 7200)] == ["3.2 s", "10.0 min", "2.0 h"]


def test_retarget_moves_the_builder_version_and_names_the_new_stack():
    target = Target(name="l4", builder="b", builder_version="10.8.0.43", compute_capabilities=("8.9",),
                    serve="triton:25.01")
    moved = retarget(target, "10.14.1.48", "triton:26.03")
    assert (moved.builder_version, moved.serve, moved.name, moved.compute_capabilities) == \
        ("10.14.1.48", "triton:26.03", "l4", ("8.9",))
    # a runtime release (ort1.31): the version is given as such, no serving stack
    assert retarget(target, "10.14.1.48", None).serve is None
