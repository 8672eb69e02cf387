"""`orchestrate plan` keeps its project, graph and plan out of the cyclic GC's reach (issue 24.1): they are made
with the collector paused and then frozen, so no full collection walks a million cells again and again
(bench/NOTES.md, "Plan at scale"). Only the CLI process does so; an in-process caller keeps its own GC state."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

from orchestrator.cli import common
from tests.integration.conftest import write_demo_copy

_CODE = """\
import atexit, gc, sys
atexit.register(lambda: print("frozen", gc.get_freeze_count(), "enabled", gc.isenabled(), file=sys.stderr))
from orchestrator.cli import main
main()
"""


def test_the_plan_process_freezes_what_it_keeps(tmp_path):
    manifest = write_demo_copy(tmp_path)
    proc = subprocess.run([sys.executable, "-c", _CODE, "plan", str(manifest)], capture_output=True, text=True,
                          env={**os.environ, "ORCHESTRATE_CACHE": str(tmp_path / "cache"),
                               "ORCHESTRATE_FASTPATH": "0"}, timeout=600)
    assert proc.returncode == 0, proc.stderr
    _, frozen, _, enabled = proc.stderr.strip().splitlines()[-1].split()
    assert int(frozen) > 10_000 and enabled == "True", proc.stderr


def test_an_in_process_caller_keeps_its_gc():
    frozen = gc.get_freeze_count()
    with common.long_lived():
        assert not gc.isenabled()
        made = [[i] for i in range(1000)]
    # objects frozen earlier in this process may die meanwhile: what counts is that these 1,000 were not frozen
    assert gc.isenabled() and gc.get_freeze_count() - frozen < len(made) // 2


def test_main_called_in_process_leaves_the_caller_its_gc(tmp_path, monkeypatch):
    """A test (or a script) that calls ``main`` in-process goes on afterwards: later commands of that process are
    not treated as the process's own (nothing frozen), whatever way ``main`` ended."""
    monkeypatch.setenv("ORCHESTRATE_CACHE", str(tmp_path / "cache"))
    from orchestrator.cli import main

    for argv in (["plan", str(write_demo_copy(tmp_path))], ["plan", str(tmp_path / "missing.yaml")]):
        try:
            main(argv)
        except SystemExit:
            pass
        frozen = gc.get_freeze_count()
        with common.long_lived():
            made = [[i] for i in range(1000)]
        assert gc.get_freeze_count() - frozen < len(made) // 2 and common.recording() is None
