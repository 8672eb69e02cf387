"""Executor scheduling features with injected steps: GPU nodes one at a time (real worker processes), CPU nodes
side by side, ``dir_salt`` (one node, several result dirs) and ``always_run`` (redo a node whose result exists)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import cast

from orchestrator.core.graph import Node
from orchestrator.core.resolve import topological_order
from orchestrator.run.executor import Executor, RunSummary, StepOutcome, StepTask
from orchestrator.run.workspace import Workspace, read_result

# -- steps (top level: worker processes unpickle them by name) -------------------------------------------------

def _mark(folder: Path, name: str, what: str) -> float:
    now = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process of this machine
    (folder / f"{name}.{what}").write_text(repr(now))
    return now


def step_rendezvous(task: StepTask) -> StepOutcome:
    """Announces its start, then waits (up to ``wait`` s) for its peer to be running at the same time."""
    payload = cast(dict, task.payload)
    shared, peer, wait = Path(payload["shared"]), payload["peer"], payload["wait"]
    me = str(task.node.address)
    start = _mark(shared, me, "start")
    saw_peer = False
    deadline = start + wait
    while time.monotonic() < deadline:
        if (shared / f"{peer}.start").exists() and not (shared / f"{peer}.end").exists():
            saw_peer = True
            break
        time.sleep(0.01)
    if saw_peer:
        time.sleep(0.2)  # let the peer see this one too before ending
    end = _mark(shared, me, "end")
    (task.out_dir / "out.txt").write_text(me)
    return StepOutcome(files=("out.txt",), data={"start": start, "end": end, "saw_peer": saw_peer})


def step_count(task: StepTask) -> StepOutcome:
    """Appends its node id to a calls file; output depends on the node only."""
    with open(cast(dict, task.payload)["calls"], "a") as f:
        f.write(task.node.id + "\n")
    (task.out_dir / "out.bin").write_bytes(task.node.id.encode())
    return StepOutcome(files=("out.bin",), data={"node": task.node.id})


# -- helpers ---------------------------------------------------------------------------------------------------

def _independent(*names: str) -> dict[str, Node]:
    return {f"build:{n}": Node(f"build:{n}", "build", (), f"key-{n}", address=n) for n in names}


def _run(ex: Executor, nodes: dict[str, Node], selected: set[str] | None = None) -> RunSummary:
    return ex.run(nodes, topological_order(nodes), set(nodes) if selected is None else selected)


def _status(summary: RunSummary) -> dict[str, str]:
    return {r.node: r.status for r in summary.reports}


def _rendezvous_run(tmp_path: Path, names: tuple[str, str], *, gpu: set[str], wait: float) -> dict[str, dict]:
    shared = tmp_path / "shared"
    shared.mkdir()
    nodes = _independent(*names)
    peer = {names[0]: names[1], names[1]: names[0]}
    ex = Executor(Workspace(tmp_path / "ws"), {"build": step_rendezvous},
                  lambda node: ({"shared": str(shared), "peer": peer[str(node.address)], "wait": wait}, None),
                  jobs=2, needs_gpu=lambda node: node.address in gpu, in_process=False)
    summary = _run(ex, nodes)
    assert summary.ok, summary.to_json()
    assert set(_status(summary).values()) == {"done"}
    return {r.node.split(":", 1)[1]: r.data for r in summary.reports}


# -- GPU serialization -----------------------------------------------------------------------------------------

def test_gpu_nodes_never_overlap_even_with_a_free_worker(tmp_path):
    data = _rendezvous_run(tmp_path, ("g1", "g2"), gpu={"g1", "g2"}, wait=1.5)
    first, second = sorted(data.values(), key=lambda d: d["start"])
    assert first["end"] <= second["start"], data  # one after the other, never both on the device
    assert not first["saw_peer"] and not second["saw_peer"], data


def test_cpu_nodes_run_side_by_side(tmp_path):
    """The same step without the GPU flag: both workers hold a node at once (each saw the other running), so the
    test above would notice an executor that let GPU nodes overlap."""
    data = _rendezvous_run(tmp_path, ("c1", "c2"), gpu=set(), wait=60)
    assert data["c1"]["saw_peer"] and data["c2"]["saw_peer"], data
    first, second = sorted(data.values(), key=lambda d: d["start"])
    assert second["start"] < first["end"], data


def test_a_cpu_node_runs_beside_a_gpu_node(tmp_path):
    data = _rendezvous_run(tmp_path, ("gpu", "cpu"), gpu={"gpu"}, wait=60)
    assert data["gpu"]["saw_peer"] and data["cpu"]["saw_peer"], data


# -- dir_salt --------------------------------------------------------------------------------------------------

def _counting(tmp_path: Path, **options) -> Executor:
    calls = tmp_path / "calls.txt"
    return Executor(Workspace(tmp_path / "ws"), {"build": step_count, "publish": step_count},
                    lambda node: ({"calls": str(calls)}, None), jobs=1, in_process=True, **options)


def _calls(tmp_path: Path) -> list[str]:
    p = tmp_path / "calls.txt"
    lines = p.read_text().splitlines() if p.exists() else []
    p.unlink(missing_ok=True)
    return lines


def test_each_salt_has_its_own_node_dir_and_reuses_it(tmp_path):
    nodes = _independent("a")
    node = nodes["build:a"]
    ws = Workspace(tmp_path / "ws")

    first = _run(_counting(tmp_path, dir_salt=lambda n: "registry-1"), nodes)
    assert _status(first) == {"build:a": "done"}
    second = _run(_counting(tmp_path, dir_salt=lambda n: "registry-2"), nodes)
    assert _status(second) == {"build:a": "done"}  # another salt: not the first run's result
    assert _calls(tmp_path) == ["build:a", "build:a"]

    dir1, dir2 = ws.node_dir(node, "registry-1"), ws.node_dir(node, "registry-2")
    assert dir1 != dir2
    assert first.reports[0].dir == str(dir1) and second.reports[0].dir == str(dir2)
    assert read_result(dir1) is not None and read_result(dir2) is not None
    assert not ws.node_dir(node).exists()  # the unsalted dir was never used

    again = _run(_counting(tmp_path, dir_salt=lambda n: "registry-1"), nodes)
    assert _status(again) == {"build:a": "cached"}
    assert again.reports[0].dir == str(dir1)
    assert _calls(tmp_path) == []


def test_a_dependency_outside_the_selection_is_read_from_its_salted_dir(tmp_path):
    nodes = {"build:a": Node("build:a", "build", (), "key-a", address="a"),
             "publish:a": Node("publish:a", "publish", ("build:a",), "key-a", address="a")}
    salt = {"build": "", "publish": "registry-1"}
    assert _run(_counting(tmp_path, dir_salt=lambda n: salt[n.kind]), nodes).ok
    _calls(tmp_path)
    # only the publish node selected: its dependency's result is found where the build's salt puts it
    summary = _run(_counting(tmp_path, dir_salt=lambda n: salt[n.kind]), nodes, {"publish:a"})
    assert _status(summary) == {"publish:a": "cached"}
    salt["build"] = "elsewhere"  # the build's result is not in that dir: nothing to make the publish from
    summary = _run(_counting(tmp_path, dir_salt=lambda n: salt[n.kind]), nodes, {"publish:a"})
    assert _status(summary) == {"publish:a": "skipped"}
    assert summary.reports[0].reason == "build:a has no result on this runner"
    assert _calls(tmp_path) == []


# -- always_run ------------------------------------------------------------------------------------------------

def test_always_run_redoes_a_node_whose_result_exists(tmp_path):
    nodes = _independent("a", "b")
    assert _status(_run(_counting(tmp_path), nodes)) == {"build:a": "done", "build:b": "done"}
    assert sorted(_calls(tmp_path)) == ["build:a", "build:b"]
    result_file = Workspace(tmp_path / "ws").node_dir(nodes["build:a"]) / "result.json"
    before = result_file.stat().st_mtime_ns

    cached = _run(_counting(tmp_path, always_run=lambda n: False), nodes)
    assert _status(cached) == {"build:a": "cached", "build:b": "cached"}
    assert _calls(tmp_path) == []

    time.sleep(0.01)
    forced = _run(_counting(tmp_path, always_run=lambda n: n.id == "build:a"), nodes)
    assert _status(forced) == {"build:a": "done", "build:b": "cached"}
    assert _calls(tmp_path) == ["build:a"]
    assert result_file.stat().st_mtime_ns > before  # the result was written anew
    assert json.loads(result_file.read_text())["data"] == {"node": "build:a"}

    # without always_run the redone result is reused again
    assert _status(_run(_counting(tmp_path), nodes)) == {"build:a": "cached", "build:b": "cached"}
    assert _calls(tmp_path) == []
