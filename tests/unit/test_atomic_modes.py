"""Files we write get ``0o666 & ~umask`` and folders ``0o777 & ~umask``, like any program's (issue 22.3): the
atomic writers of orchestrator/ and of the stores used to leave every file 0600 (``mkstemp`` + rename)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator import atomic
from orchestrator.atomic import create_temp, write_bytes_atomic, write_json_atomic
from trt_orchestrator_plugins.stores._atomic import atomic_writer, commit, stage_copy

UMASKS = [0o022, 0o077, 0o002]


@pytest.fixture(params=UMASKS, ids=lambda m: f"umask{m:03o}")
def umask(request) -> int:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_write_bytes_atomic(tmp_path: Path, umask: int):
    target = tmp_path / "new" / "dir" / "config.pbtxt"
    write_bytes_atomic(target, b"name: 'm'\n")
    assert oct(mode(target)) == oct(0o666 & ~umask)
    assert oct(mode(target.parent)) == oct(mode(target.parent.parent)) == oct(0o777 & ~umask)
    write_bytes_atomic(target, b"again")  # replacing a file gives the same mode
    assert target.read_bytes() == b"again" and oct(mode(target)) == oct(0o666 & ~umask)
    assert [p.name for p in target.parent.iterdir()] == ["config.pbtxt"], "no temp file is left"


def test_write_json_atomic(tmp_path: Path, umask: int):
    target = tmp_path / "report.json"
    write_json_atomic(target, {"a": 1})
    assert oct(mode(target)) == oct(0o666 & ~umask)


def test_store_atomic_writer(tmp_path: Path, umask: int):
    dest = tmp_path / "store" / "blobs" / "engine"
    with atomic_writer(dest) as w:
        w.write(b"x" * 5000)
        assert len(w.hexdigest()) == 64
    assert dest.read_bytes() == b"x" * 5000
    assert oct(mode(dest)) == oct(0o666 & ~umask)
    assert oct(mode(dest.parent)) == oct(0o777 & ~umask)


def test_store_stage_copy_and_commit(tmp_path: Path, umask: int):
    src = tmp_path / "src.bin"
    src.write_bytes(b"engine bytes")
    src.chmod(0o600)  # the copy's mode is ours to set, not the source's
    tmp, hexdigest, size = stage_copy(src, tmp_path / "out")
    dest = tmp_path / "out" / "model.plan"
    commit(tmp, dest)
    assert dest.read_bytes() == b"engine bytes" and size == 12 and len(hexdigest) == 64
    assert oct(mode(dest)) == oct(0o666 & ~umask)


def test_create_temp_is_exclusive_and_readable_writable(tmp_path: Path):
    fd, path = create_temp(tmp_path, prefix=".x.")
    try:
        assert Path(path).parent == tmp_path and Path(path).name.startswith(".x.") and path.endswith(".tmp")
        os.write(fd, b"abc")
        assert os.pread(fd, 3, 0) == b"abc"  # open for reading too, as mkstemp's
    finally:
        os.close(fd)


def test_create_temp_never_opens_a_taken_name(tmp_path: Path, monkeypatch):
    """A name that exists (here a symlink planted where the first name would go) is skipped, never followed."""
    names = iter(["aaaaaaaaaaaa", "bbbbbbbbbbbb"])
    monkeypatch.setattr(atomic, "secrets", SimpleNamespace(token_hex=lambda n: next(names)))
    (tmp_path / ".x.aaaaaaaaaaaa.tmp").symlink_to(tmp_path / "elsewhere")
    fd, path = create_temp(tmp_path, prefix=".x.")
    os.close(fd)
    assert Path(path).name == ".x.bbbbbbbbbbbb.tmp"
    assert not (tmp_path / "elsewhere").exists()
