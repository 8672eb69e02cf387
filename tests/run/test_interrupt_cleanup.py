"""Ctrl-C leaves no temporary dir behind, wherever in the scheduler's loop it lands (issue 22.5: the demo's
Ctrl-C test once found a temp folder left under load). A KeyboardInterrupt is raised at each point of the loop
where a node's temp dir exists but is not yet, or no longer, tracked as running: after the dir is made and before
its work is handed to a worker (here: the "start" event; in-process: the step itself), and while a finished
node's dir is being moved into place."""

from __future__ import annotations

import pytest

from orchestrator.core.graph import Node
from orchestrator.run import executor as executor_module
from orchestrator.run.executor import Executor, StepOutcome, StepTask, Workspace


def _nodes() -> dict[str, Node]:
    return {"build:a": Node("build:a", "build", (), "key-a", address="a"),
            "build:b": Node("build:b", "build", (), "key-b", address="b")}


def step_writes(task: StepTask) -> StepOutcome:
    (task.out_dir / "engine.bin").write_bytes(b"x" * 1024)
    return StepOutcome(files=("engine.bin",))


def step_interrupted(task: StepTask) -> StepOutcome:
    (task.out_dir / "partial.bin").write_bytes(b"x" * 1024)
    raise KeyboardInterrupt  # Ctrl-C while an in-process step writes into its temp dir


def _left(ws: Workspace) -> list[str]:
    return sorted(p.name for p in ws.tmp.iterdir())


@pytest.mark.parametrize("in_process", [True, False], ids=["in-process", "pool"])
def test_ctrl_c_between_making_a_temp_dir_and_starting_its_work_removes_it(tmp_path, in_process):
    ws = Workspace(tmp_path / "ws")

    def on_event(event, node, report):
        if event == "start":
            raise KeyboardInterrupt

    ex = Executor(ws, {"build": step_writes}, lambda node: (None, None), jobs=2, in_process=in_process,
                  on_event=on_event)
    summary = ex.run(_nodes(), ["build:a", "build:b"], set(_nodes()))
    assert summary.interrupted
    assert _left(ws) == []


def test_ctrl_c_inside_an_in_process_step_removes_its_temp_dir(tmp_path):
    ws = Workspace(tmp_path / "ws")
    ex = Executor(ws, {"build": step_interrupted}, lambda node: (None, None), in_process=True)
    summary = ex.run(_nodes(), ["build:a", "build:b"], set(_nodes()))
    assert summary.interrupted
    assert _left(ws) == []


def test_ctrl_c_while_a_finished_node_is_moved_into_place_removes_its_temp_dir(tmp_path, monkeypatch):
    ws = Workspace(tmp_path / "ws")
    real = executor_module.Executor._install

    def interrupted_install(self, node, tmp, final, result, run_id):
        if node.id == "build:b":
            raise KeyboardInterrupt  # after result.json was written into the temp dir, before the rename
        return real(self, node, tmp, final, result, run_id)

    monkeypatch.setattr(executor_module.Executor, "_install", interrupted_install)
    ex = Executor(ws, {"build": step_writes}, lambda node: (None, None), jobs=1, in_process=True)
    summary = ex.run(_nodes(), ["build:a", "build:b"], set(_nodes()))
    assert summary.interrupted
    assert _left(ws) == []
    assert (ws.node_dir(_nodes()["build:a"]) / "result.json").is_file()  # finished work is kept
    assert not ws.node_dir(_nodes()["build:b"]).exists()
