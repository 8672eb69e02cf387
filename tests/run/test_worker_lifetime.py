"""Workers die with their parent (hardening item: killing only the main process left its worker processes
running for 120 s+, holding the GPU on a GPU runner). Real processes: a build whose steps run long (and start a
child process of their own, as the trtexec builder does) is started in a child process, its main pid is
SIGKILLed, and every process below it must be gone within a few seconds. Reproduced first: the workers and
their children kept running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import cast

import pytest

from orchestrator.run.executor import StepOutcome, StepTask
from tests.run.procs import descendants, kill_all, survivors

REPO = Path(__file__).resolve().parents[2]
GONE_WITHIN_S = 5.0

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def step_linger(task: StepTask) -> StepOutcome:
    """A long step: starts a child process (a builder's tool) and works for minutes."""
    marks = Path(cast(dict, task.payload)["marks"])
    tool = subprocess.Popen(["sleep", "600"])
    (marks / f"{os.getpid()}.worker").write_text(str(tool.pid))
    time.sleep(600)
    return StepOutcome()


_MAIN = """
import sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from orchestrator.core.graph import Node
from orchestrator.run.executor import Executor
from orchestrator.run.workspace import Workspace
from tests.run.test_worker_lifetime import step_linger
nodes = {f"build:{i}": Node(f"build:{i}", "build", (), f"key-{i}", address=str(i)) for i in range(2)}
ex = Executor(Workspace(Path(sys.argv[2])), {"build": step_linger}, lambda node: ({"marks": sys.argv[3]}, None),
              jobs=2)
ex.run(nodes, list(nodes), set(nodes))
"""


def _start(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    marks = tmp_path / "marks"
    marks.mkdir()
    main = subprocess.Popen([sys.executable, "-c", _MAIN, str(REPO), str(tmp_path / "ws"), str(marks)],
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "main.err", "w"))
    deadline = time.monotonic() + 60
    while len(list(marks.glob("*.worker"))) < 2:
        if main.poll() is not None or time.monotonic() > deadline:
            main.kill()
            pytest.fail(f"the build never had two steps running: {(tmp_path / 'main.err').read_text()[-3000:]}")
        time.sleep(0.05)
    return main, marks


def test_killing_the_main_process_ends_its_workers_and_their_children(tmp_path):
    main, marks = _start(tmp_path)
    tree = descendants(main.pid)
    workers = {int(p.stem) for p in marks.glob("*.worker")}
    tools = {int(p.read_text()) for p in marks.glob("*.worker")}
    try:
        assert workers | tools <= {p.pid for p in tree}, tree
        os.kill(main.pid, signal.SIGKILL)
        main.wait(10)
        left = survivors(tree, GONE_WITHIN_S)
        assert not left, f"still running {GONE_WITHIN_S} s after the main process was killed: {left}"
    finally:
        kill_all(tree)


def test_sigterm_or_ctrl_c_of_the_main_process_leaves_no_process_behind(tmp_path):
    """The same tree after SIGTERM of the main process (no handler: it dies like SIGKILL) and after Ctrl-C (the
    executor stops its workers itself): nothing below it survives either way."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        run = tmp_path / sig.name
        run.mkdir()
        main, _ = _start(run)
        tree = descendants(main.pid)
        try:
            os.kill(main.pid, sig)
            main.wait(30)
            left = survivors(tree, GONE_WITHIN_S)
            assert not left, f"{sig.name}: still running: {left}"
        finally:
            kill_all(tree)
