"""The executor with injected steps: order, reuse, invalidation, keep-going, atomicity, worker processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.core.graph import Node
from orchestrator.core.resolve import topological_order
from orchestrator.run.executor import Executor, StepOutcome, StepTask
from orchestrator.run.workspace import Workspace, clean_stale_tmp, read_result


def _graph() -> dict[str, Node]:
    nodes = [
        Node("prepare:m", "prepare", (), "k-prep", model="m"),
        Node("transform:m/fp16", "transform", ("prepare:m",), "k-tr", model="m", transform_kind="fp16"),
        Node("build:a", "build", ("prepare:m",), "k-a", address="a", model="m"),
        Node("build:b", "build", ("transform:m/fp16",), "k-b", address="b", model="m"),
        Node("build:c", "build", ("transform:m/fp16",), "k-c", address="c", model="m"),
    ]
    return {n.id: n for n in nodes}


def step_write(task: StepTask) -> StepOutcome:
    """Writes one file whose content depends on the node and its dependencies' outputs."""
    calls = Path(task.payload["calls"])
    with open(calls, "a") as f:
        f.write(task.node.id + "\n")
    if task.node.id in task.payload.get("fail", ()):
        return StepOutcome(status="failed", reason="planned failure")
    (task.out_dir / "out.bin").write_bytes(task.node.id.encode() * 10)
    return StepOutcome(files=("out.bin",), data={"node": task.node.id})


def _executor(tmp_path: Path, *, fail=(), keep_going=False, in_process=True, skip=()) -> Executor:
    calls = tmp_path / "calls.txt"

    def prepare_task(node):
        if node.id in skip:
            return None, StepOutcome(status="skipped", reason="this runner cannot build it")
        return {"calls": str(calls), "fail": tuple(fail)}, None

    steps = {k: step_write for k in ("prepare", "transform", "build")}
    return Executor(Workspace(tmp_path / "ws"), steps, prepare_task, jobs=2, keep_going=keep_going,
                    in_process=in_process)


def _calls(tmp_path: Path) -> list[str]:
    p = tmp_path / "calls.txt"
    lines = p.read_text().splitlines() if p.exists() else []
    p.unlink(missing_ok=True)
    return lines


def _run(ex: Executor, nodes):
    return ex.run(nodes, topological_order(nodes), set(nodes))


def test_runs_every_node_once_in_dependency_order(tmp_path):
    nodes = _graph()
    summary = _run(_executor(tmp_path), nodes)
    assert summary.ok
    calls = _calls(tmp_path)
    assert sorted(calls) == sorted(nodes)
    assert calls.index("prepare:m") < calls.index("transform:m/fp16") < calls.index("build:b")
    assert {r.status for r in summary.reports} == {"done"}


def test_second_run_redoes_nothing(tmp_path):
    nodes = _graph()
    _run(_executor(tmp_path), nodes)
    _calls(tmp_path)
    summary = _run(_executor(tmp_path), nodes)
    assert _calls(tmp_path) == []
    assert {r.status for r in summary.reports} == {"cached"}


def test_deleting_one_output_redoes_only_that_node(tmp_path):
    nodes = _graph()
    ex = _executor(tmp_path)
    _run(ex, nodes)
    _calls(tmp_path)
    (ex.workspace.node_dir(nodes["build:b"]) / "out.bin").unlink()
    _run(_executor(tmp_path), nodes)
    assert _calls(tmp_path) == ["build:b"]


def test_a_changed_dependency_result_invalidates_its_dependents_only(tmp_path):
    nodes = _graph()
    ex = _executor(tmp_path)
    _run(ex, nodes)
    _calls(tmp_path)
    # the transform's recorded result changes (as when it is redone and gives another output): the builds made
    # from it no longer match what they recorded and are redone; build:a, made from prepare only, is not.
    result_file = ex.workspace.node_dir(nodes["transform:m/fp16"]) / "result.json"
    data = json.loads(result_file.read_text())
    data["data"]["node"] = "changed"  # a different result -> a different fingerprint for dependents
    result_file.write_text(json.dumps(data))
    _run(_executor(tmp_path), nodes)
    assert sorted(_calls(tmp_path)) == ["build:b", "build:c"]


def test_failure_stops_unrelated_work_without_keep_going(tmp_path):
    nodes = _graph()
    summary = _run(_executor(tmp_path, fail=("transform:m/fp16",)), nodes)
    status = {r.node: r.status for r in summary.reports}
    assert status["transform:m/fp16"] == "failed"
    assert status["build:b"] == "skipped" and status["build:c"] == "skipped"
    assert not summary.ok
    assert not any(p.name.startswith("k-tr") for p in (tmp_path / "ws" / "nodes").rglob("*"))


def test_keep_going_builds_unrelated_nodes(tmp_path):
    nodes = _graph()
    summary = _run(_executor(tmp_path, fail=("transform:m/fp16",), keep_going=True), nodes)
    status = {r.node: r.status for r in summary.reports}
    assert status["build:a"] == "done"
    assert status["build:b"] == "skipped"
    assert "transform:m/fp16 failed" in {r.node: r.reason for r in summary.reports}["build:b"]


def test_a_node_this_runner_cannot_build_is_skipped_with_its_reason(tmp_path):
    nodes = _graph()
    summary = _run(_executor(tmp_path, skip=("build:c",)), nodes)
    report = {r.node: r for r in summary.reports}["build:c"]
    assert report.status == "skipped"
    assert report.reason == "this runner cannot build it"
    assert summary.ok


def test_failed_node_leaves_no_output_and_no_temp(tmp_path):
    nodes = _graph()
    ex = _executor(tmp_path, fail=("build:a",), keep_going=True)
    _run(ex, nodes)
    assert read_result(ex.workspace.node_dir(nodes["build:a"])) is None
    assert not ex.workspace.node_dir(nodes["build:a"]).exists()
    assert list(ex.workspace.tmp.iterdir()) == []


def test_stale_temp_dirs_of_dead_runs_are_removed(tmp_path):
    ws = Workspace(tmp_path / "ws")
    stale = ws.tmp / "999999999-build-abc-1"
    stale.mkdir(parents=True)
    (stale / "engine.plan").write_bytes(b"half")
    assert clean_stale_tmp(ws) == 1
    assert not stale.exists()


def test_worker_processes_give_the_same_results(tmp_path):
    nodes = _graph()
    summary = _run(_executor(tmp_path, in_process=False), nodes)
    assert summary.ok, summary.to_json()
    assert sorted(_calls(tmp_path)) == sorted(nodes)
    summary = _run(_executor(tmp_path, in_process=False), nodes)
    assert {r.status for r in summary.reports} == {"cached"}


@pytest.mark.parametrize("in_process", [True, False])
def test_summary_json_shape(tmp_path, in_process):
    nodes = _graph()
    data = _run(_executor(tmp_path, in_process=in_process), nodes).to_json()
    assert data["format_version"] == 1 and data["ok"] is True
    assert data["counts"] == {"done": 5}
    assert {n["node"] for n in data["nodes"]} == set(nodes)


def step_busy(task: StepTask) -> StepOutcome:
    """Holds its worker for ~0.4 s of computation (no sleeping: the scheduler's ticks must pass meanwhile)."""
    import time

    end = time.monotonic() + 0.4
    while time.monotonic() < end:
        sum(range(10_000))
    (task.out_dir / "out.bin").write_bytes(b"x")
    return StepOutcome(files=("out.bin",))


def test_never_more_nodes_in_flight_than_jobs(tmp_path):
    nodes = {f"build:{i}": Node(f"build:{i}", "build", (), f"k{i}", address=str(i)) for i in range(6)}
    in_flight = {"now": 0, "max": 0}

    def on_event(event, node, report):
        in_flight["now"] += 1 if event == "start" else -1 if report and report.status == "done" else 0
        in_flight["max"] = max(in_flight["max"], in_flight["now"])

    ex = Executor(Workspace(tmp_path / "ws"), {"build": step_busy}, lambda node: (None, None), jobs=2,
                  on_event=on_event)
    summary = ex.run(nodes, topological_order(nodes), set(nodes))
    assert summary.ok
    assert in_flight["max"] == 2
