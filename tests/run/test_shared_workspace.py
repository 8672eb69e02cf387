"""One cache dir, several runs (hardening item: two processes sharing ``--cache-dir`` crashed). Unit-level
companions of tests/integration/test_cache_dir_sharing.py: what completion does when another run finished the
node first, and whose temporary dirs a cleaner may remove (a run's claim is a lock, not a pid: in two containers
on one cache volume the other run's pid means nothing)."""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
from pathlib import Path
from typing import cast

from orchestrator.core.graph import Node
from orchestrator.core.resolve import topological_order
from orchestrator.run.executor import Executor, StepOutcome, StepTask
from orchestrator.run.workspace import Workspace, clean_stale_tmp, read_result


def _nodes() -> dict[str, Node]:
    return {"prepare:m": Node("prepare:m", "prepare", (), "key-p", model="m"),
            "build:a": Node("build:a", "build", ("prepare:m",), "key-a", address="a", model="m")}


def step_plain(task: StepTask) -> StepOutcome:
    (task.out_dir / "out.txt").write_text(f"{task.node.id} by {cast(dict, task.payload)['who']}\n")
    return StepOutcome(files=("out.txt",), data={"who": cast(dict, task.payload)["who"]})


def step_racing(task: StepTask) -> StepOutcome:
    """While this run works on the prepare node, "another process" completes the same node first."""
    if task.node.kind == "prepare":
        ws = Workspace(Path(cast(dict, task.payload)["ws"]))
        other = Executor(ws, {"prepare": step_plain}, lambda node: ({"who": "other"}, None), in_process=True)
        nodes = {"prepare:m": task.node}
        assert other.run(nodes, ["prepare:m"], {"prepare:m"}).ok
    return step_plain(task)


def test_a_node_another_run_completed_first_is_taken_as_it_is(tmp_path):
    ws = Workspace(tmp_path / "ws")
    nodes = _nodes()
    ex = Executor(ws, {"prepare": step_racing, "build": step_plain},
                  lambda node: ({"who": "me", "ws": str(ws.root)}, None), in_process=True)
    summary = ex.run(nodes, topological_order(nodes), set(nodes))
    assert summary.ok, summary.to_json()
    prep_dir = ws.node_dir(nodes["prepare:m"])
    prep = read_result(prep_dir)
    assert prep is not None and prep["data"] == {"who": "other"}  # the first complete result stands
    assert (prep_dir / "out.txt").read_text() == "prepare:m by other\n"
    report = {r.node: r for r in summary.reports}["prepare:m"]
    assert report.status == "done" and report.data == {"who": "other"}
    # the dependent was made from (and records) the result on disk, not from the copy that was dropped
    build = read_result(ws.node_dir(nodes["build:a"]))
    import hashlib

    assert build is not None
    assert build["deps"] == {"prepare:m": hashlib.sha256(json.dumps(prep, sort_keys=True).encode()).hexdigest()}
    again = ex.run(nodes, topological_order(nodes), set(nodes))
    assert {r.status for r in again.reports} == {"cached"}
    assert [p for p in ws.tmp.iterdir()] == []


def step_lists_a_missing_file(task: StepTask) -> StepOutcome:
    return StepOutcome(files=("never-written.bin",))


def test_a_step_that_lists_a_file_it_did_not_write_fails_cleanly(tmp_path):
    ws = Workspace(tmp_path / "ws")
    nodes = {"build:a": Node("build:a", "build", (), "key-a", address="a")}
    ex = Executor(ws, {"build": step_lists_a_missing_file}, lambda node: (None, None), in_process=True)
    summary = ex.run(nodes, ["build:a"], set(nodes))
    [report] = summary.reports
    assert report.status == "failed" and "never-written.bin" in report.reason
    assert not ws.node_dir(nodes["build:a"]).exists()
    assert list(ws.tmp.iterdir()) == []


_HOLDER = """
import fcntl, os, sys, time
tmp = sys.argv[1]
fd = os.open(os.path.join(tmp, "999999999.otherhost.owner"), os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
os.mkdir(os.path.join(tmp, "999999999.otherhost-build-key-1"))
print("ready", flush=True)
time.sleep(600)
"""


def test_a_live_run_whose_pid_is_not_visible_here_keeps_its_temp_dirs(tmp_path):
    """Pid 999999999 does not exist in this namespace, but the run holds its owner lock: its dir stays. Once it
    is gone (lock released by the kernel), the next cleaner removes the dir and the owner file."""
    ws = Workspace(tmp_path / "ws")
    ws.tmp.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(ws.tmp)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        assert clean_stale_tmp(ws) == 0
        assert (ws.tmp / "999999999.otherhost-build-key-1").is_dir()
    finally:
        holder.kill()
        holder.wait()
    assert clean_stale_tmp(ws) == 1
    assert list(ws.tmp.iterdir()) == []


def test_a_running_executor_holds_its_claim_and_drops_it_at_the_end(tmp_path):
    ws = Workspace(tmp_path / "ws")
    seen: dict[str, object] = {}

    def on_event(event: str, node: Node, report: object) -> None:
        if event == "start":
            owners = list(ws.tmp.glob("*.owner"))
            seen["owners"] = owners
            fd = open(owners[0], "rb")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                seen["locked"] = False
            except OSError:
                seen["locked"] = True
            finally:
                fd.close()
            seen["kept"] = clean_stale_tmp(ws) == 0 and len([p for p in ws.tmp.iterdir() if p.is_dir()]) == 1

    nodes = {"build:a": Node("build:a", "build", (), "key-a", address="a")}
    ex = Executor(ws, {"build": step_plain}, lambda node: ({"who": "me"}, None), in_process=True, on_event=on_event)
    assert ex.run(nodes, ["build:a"], set(nodes)).ok
    assert len(cast(list, seen["owners"])) == 1 and seen["locked"] is True and seen["kept"] is True
    assert list(ws.tmp.iterdir()) == []
