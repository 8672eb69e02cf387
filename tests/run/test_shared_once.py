"""The test suite's own sharing (issue 24): ``tests.conftest.shared_once`` makes a directory once for every
pytest-xdist worker of a run, under a file lock, and a make that failed half-way is made again, not reused."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest

from tests.conftest import content_key, shared_once


class _Factory:
    """What shared_once reads of pytest's tmp_path_factory: a worker's base temp dir under the run's root."""

    def __init__(self, base: Path) -> None:
        self.base = base

    def getbasetemp(self) -> Path:
        return self.base


def _make(dest: Path) -> None:
    with open(dest.parent / "makes.log", "a") as log:
        log.write(f"{dest.name}\n")
    time.sleep(0.5)  # long enough for the other workers to arrive while it is being made
    (dest / "engine.bin").write_bytes(b"built")


def _worker(run_root: str, name: str, out: multiprocessing.Queue) -> None:
    import os

    os.environ["PYTEST_XDIST_WORKER"] = name
    base = Path(run_root) / f"popen-{name}"
    base.mkdir(parents=True, exist_ok=True)
    out.put(str(shared_once(_Factory(base), "demo", content_key("demo.yaml", b"v1"), _make)))


def test_workers_of_one_run_make_it_once_and_share_it(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(str(tmp_path), f"gw{i}", out)) for i in range(3)]
    for p in procs:
        p.start()
    found = {out.get(timeout=120) for _ in procs}
    for p in procs:
        p.join(60)
    assert len(found) == 1
    (shared,) = found
    assert Path(shared).parent == tmp_path / "shared" and (Path(shared) / "engine.bin").read_bytes() == b"built"
    assert (tmp_path / "shared" / "makes.log").read_text().count("\n") == 1


def test_a_make_that_failed_is_made_again_from_scratch(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    factory = _Factory(tmp_path)

    def broken(dest: Path) -> None:
        (dest / "half.bin").write_bytes(b"half")
        raise RuntimeError("build failed")

    with pytest.raises(RuntimeError):
        shared_once(factory, "demo", "k" * 64, broken)
    made = shared_once(factory, "demo", "k" * 64, _make)
    assert sorted(p.name for p in made.iterdir()) == [".complete", "engine.bin"]  # nothing of the half-made one
    assert made.parent == tmp_path / "shared"


def test_other_content_is_another_directory():
    assert content_key("a", b"b") != content_key("ab", b"")  # parts are length-prefixed
