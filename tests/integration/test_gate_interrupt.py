"""Ctrl-C during `gate` (issue 23, point 14): the command says it was interrupted and what it kept, exits 130, and
has reaped every worker before it exits (none left running, none left defunct in its process tree).

Real processes: a one-model CPU manifest is built, then gated with a benchmark long enough to be interrupted; SIGINT
goes to the whole process group, as a terminal's Ctrl-C sends it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.test_cli import _model
from tests.run.procs import _stat, descendants, kill_all

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")]

MANIFEST = """\
manifest_version: 1
project: interrupt
models:
  - name: tiny
    version: "1.0.0"
    source: {path: tiny.onnx}
    inputs:
      x:
        shape: [N, 3, 32, 32]
        profiles:
          default: {min: [1, 3, 32, 32], opt: [2, 3, 32, 32], max: [4, 3, 32, 32]}
    precisions: [fp32]
    gate:
      parity: {data: {samples: 1, seed: 0}}
      benchmark: {warmup: 1, iterations: 10000000, time_budget_s: 600, blocks: 1}
targets:
  - {name: cpu, builder: onnxruntime, builder_version: "1.31", device: cpu, runners: {build: [ubuntu-latest]}}
registry: {store: local, path: artifacts}
"""


def _orchestrate(*args: str, cwd: Path, **kw) -> subprocess.Popen:
    env = {**os.environ, "ORCHESTRATE_CACHE": str(cwd / "cache"), "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.Popen([sys.executable, "-m", "orchestrator", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)


def test_an_interrupted_gate_says_so_keeps_what_finished_and_reaps_its_workers(tmp_path):
    _model(tmp_path / "tiny.onnx")
    (tmp_path / "m.yaml").write_text(MANIFEST)
    build = _orchestrate("build", "m.yaml", cwd=tmp_path)
    out, _ = build.communicate(timeout=300)
    assert build.returncode == 0, out

    gate = _orchestrate("gate", "m.yaml", cwd=tmp_path, start_new_session=True)
    parity = tmp_path / "cache" / "nodes"
    deadline = time.monotonic() + 300
    tree = []
    # the parity verdict is kept, the benchmark runs (a worker) when Ctrl-C comes
    while time.monotonic() < deadline and gate.poll() is None:
        tree = descendants(gate.pid)
        if list(parity.glob("gate*/*/parity.json")) and len(tree) >= 2:
            break
        time.sleep(0.1)
    assert gate.poll() is None, gate.communicate()[0]
    try:
        time.sleep(1.0)  # the benchmark is timing
        tree = descendants(gate.pid)
        os.killpg(gate.pid, signal.SIGINT)
        out, _ = gate.communicate(timeout=60)
        # at exit: every process it started was reaped (not running, not a zombie waiting for init)
        left = [(p, _stat(p.pid)) for p in tree]
        left = [(p, st[1]) for p, st in left if st is not None and st[2] == p.start]
    finally:
        kill_all(tree)
    assert not left, f"still there when orchestrate exited: {left}"
    assert gate.returncode == 130, out
    assert "Traceback" not in out
    last = out.strip().splitlines()[-1]
    assert last.startswith("gate interrupted:"), out
    assert "kept" in last and "1 done" in last, last  # the parity verdict finished before Ctrl-C and stays
    assert "1 interrupted" in last, last  # the benchmark
