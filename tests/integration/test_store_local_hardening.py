"""The local store (and ``pull -o`` for both stores) under the faults of the hardening issue (#11), with real
processes and the real CLI: temp blobs left by killed publishes, damaged records and index, a full or read-only
destination filesystem.

Item -> test:
  7 temp blobs of killed publishes   test_item7_*
  8 damaged metadata / index.json    test_item8_*
  9 pull -o onto a full disk         test_item9_*
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

try:  # tests/ may or may not be a package
    from .registry_server import make_artifact, registry  # noqa: F401
except ImportError:
    from registry_server import make_artifact, registry  # noqa: F401

from orchestrator.core.model import RegistryConfig
from trt_orchestrator_plugins.stores.local import LocalStore

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
REPO = HERE.parents[1]
ORT = dict(model="cls", builder="onnxruntime", builder_version="1.31.1")  # pull-able here (CPU, onnxruntime)


def local(root: Path) -> LocalStore:
    return LocalStore(RegistryConfig(store="local", path=str(root)))


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def one_line_error(proc: subprocess.CompletedProcess, code: int = 1) -> str:
    """exit ``code``, no traceback, stderr = one ``error:`` line plus its ``hint:`` line; returns the error line."""
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines and lines[0].startswith("error: "), proc.stderr
    assert len(lines) == 2 and lines[1].startswith("  hint: "), proc.stderr
    return lines[0]


def temps(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob(".*") if p.is_file() and p.name.endswith(".tmp"))


# ---- 7. temp blobs of killed publishes ---------------------------------------------------------------------

_PUBLISH_AND_DIE_MID_COPY = """
import os, signal, sys, time
from pathlib import Path
sys.path[:0] = [sys.argv[4]]
from registry_server import make_artifact
from orchestrator.core.model import RegistryConfig
from trt_orchestrator_plugins.stores import _atomic, local

mode = sys.argv[3]

def stop_mid_copy(src_fd, dst_fd, where, size_hint):
    os.write(dst_fd, os.read(src_fd, 64 * 1024))  # the temp blob holds part of the engine
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    print("copying", flush=True)
    time.sleep(600)  # a publisher still at work

_atomic._copy = stop_mid_copy
store = local.LocalStore(RegistryConfig(store="local", path=sys.argv[1]))
store.put(make_artifact(Path(sys.argv[2]), precision="fp32", size=1024 * 1024))
"""


def _publisher(root: Path, work: Path, mode: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _PUBLISH_AND_DIE_MID_COPY, str(root), str(work), mode, str(HERE)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_item7_a_killed_publish_leaves_a_temp_blob_the_next_publish_removes(tmp_path):
    root = tmp_path / "artifacts"
    store = local(root)
    store.put(make_artifact(tmp_path / "a", precision="fp16", size=64 * 1024))
    proc = _publisher(root, tmp_path / "b", "kill")
    assert proc.wait(60) == -signal.SIGKILL, proc.stderr.read()
    left = temps(root)
    assert len(left) == 1 and left[0].parent == store.blobs and left[0].stat().st_size > 0, left
    store.put(make_artifact(tmp_path / "c", precision="int8", size=64 * 1024))  # the next publish
    assert temps(root) == []
    # the killed publish, run again, completes
    again = local(root).put(make_artifact(tmp_path / "b", precision="fp32", size=1024 * 1024))
    assert local(root).blob_path(again.digest).stat().st_size == 1024 * 1024
    assert temps(root) == []


def test_item7_the_next_read_removes_it_too_and_a_live_publishers_temp_is_kept(tmp_path):
    root = tmp_path / "artifacts"
    first = local(root).put(make_artifact(tmp_path / "a", size=64 * 1024, **ORT))
    alive = _publisher(root, tmp_path / "c", "stay")
    try:
        assert alive.stdout.readline().strip() == "copying"  # its temp blob exists now
        killed = _publisher(root, tmp_path / "b", "kill")  # its own sweep keeps the live publisher's temp
        assert killed.wait(60) == -signal.SIGKILL
        assert len(temps(root)) == 2
        local(root).get(first.digest, tmp_path / "out.onnx")  # a read
        [kept] = temps(root)
        assert f".{alive.pid}." in kept.name  # the live publisher's temp is untouched
    finally:
        alive.kill()
        alive.wait(30)
    local(root).records()
    local(root).get(first.digest, tmp_path / "out2.onnx")
    assert temps(root) == []


def test_item7_old_temp_files_without_an_owner_go_after_the_bound(tmp_path):
    root = tmp_path / "artifacts"
    store = local(root)
    first = store.put(make_artifact(tmp_path / "a", size=64 * 1024, **ORT))
    stale = [root / ".index.json.k2j3h4.tmp", root / "meta" / f".{'0' * 64}.json.x8y9.tmp",
             store.blobs / ".incoming.abc123.tmp"]
    fresh = root / ".index.json.fresh1.tmp"
    for p in [*stale, fresh]:
        p.write_bytes(b"partial")
    old = time.time() - 2 * 24 * 3600
    for p in stale:
        os.utime(p, (old, old))
    store.get(first.digest, tmp_path / "out.onnx")
    assert temps(root) == [fresh]  # a recent one may still be written by someone: kept until it ages


# ---- 8. damaged records and index: a located error or a repair, never a traceback --------------------------------

def _store_with_one_artifact(tmp_path: Path) -> tuple[Path, dict]:
    root = tmp_path / "artifacts"
    stored = local(root).put(make_artifact(tmp_path / "b", size=64 * 1024, **ORT))
    return root, stored.metadata


def _commands(root: Path, meta: dict, out: Path) -> list[tuple[str, ...]]:
    reg = ("--registry", str(root))
    return [("ls", *reg), ("show", meta["address"], *reg), ("pull", "cls", "-o", str(out), *reg)]


_INDEX_DAMAGE = {
    "truncated": lambda raw: raw[: len(raw) // 2],
    "empty": lambda raw: b"",
    "binary": lambda raw: b"\x00\xff\xfe garbage \x81",
    "a list": lambda raw: b"[]",
    "null": lambda raw: b"null",
    "no artifacts": lambda raw: b'{"format_version": 1}',
    "record not an object": lambda raw: json.dumps(
        {**json.loads(raw), "artifacts": {k: 5 for k in json.loads(raw)["artifacts"]}}).encode(),
    "latest not an object": lambda raw: json.dumps({**json.loads(raw), "latest": {"x": 1}}).encode(),
    "wrong types": lambda raw: json.dumps({**json.loads(raw), "seq": "many", "models": []}).encode(),
}


@pytest.mark.parametrize("damage", list(_INDEX_DAMAGE))
def test_item8_a_damaged_index_is_repaired_from_the_records(damage, tmp_path):
    root, meta = _store_with_one_artifact(tmp_path)
    index = root / "index.json"
    index.write_bytes(_INDEX_DAMAGE[damage](index.read_bytes()))
    out = tmp_path / "out.onnx"
    for args in _commands(root, meta, out):
        proc = cli(*args)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, (args, proc.stdout, proc.stderr)
        assert meta["address"] in proc.stdout or meta["engine"]["digest"][:19] in proc.stdout, proc.stdout
    assert out.read_bytes() == (tmp_path / "b" / f"{meta['build_key'][:12]}.onnx").read_bytes()
    assert set(json.loads(index.read_bytes())["artifacts"]) == {meta["record_key"]}  # written back, repaired


_RECORD_DAMAGE = {
    "truncated": lambda raw: raw[: len(raw) // 2],
    "empty": lambda raw: b"",
    "binary": lambda raw: b"\x00\xff\xfe garbage \x81",
    "a list": lambda raw: b"[]",
    "an empty object": lambda raw: b"{}",
    "no engine": lambda raw: json.dumps({k: v for k, v in json.loads(raw).items() if k != "engine"}).encode(),
}


@pytest.mark.parametrize("index", ["kept", "lost"])
@pytest.mark.parametrize("damage", list(_RECORD_DAMAGE))
def test_item8_a_damaged_record_is_flagged_and_a_located_error_where_asked_for(damage, index, tmp_path):
    root, meta = _store_with_one_artifact(tmp_path)
    record = root / "meta" / f"{meta['record_key']}.json"
    record.write_bytes(_RECORD_DAMAGE[damage](record.read_bytes()))
    if index == "lost":
        (root / "index.json").unlink()
    out = tmp_path / "out.onnx"
    ls, show, pull = _commands(root, meta, out)
    # ls lists what can be read (nothing here) and flags the damaged record with its file (issue 23.1)
    listed = cli(*ls)
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, (listed.stdout, listed.stderr)
    assert "0 artifact(s)" in listed.stdout and str(record) in listed.stdout.replace("\n", ""), listed.stdout
    # asking for that very record is a located error
    for args in (show, pull):
        line = one_line_error(cli(*args))
        assert str(record) in line and "is damaged" in line, (args, line)
    assert not out.exists()


def test_item8_a_stray_damaged_file_among_the_records_hides_nothing(tmp_path):
    root, meta = _store_with_one_artifact(tmp_path)
    stray = root / "meta" / f"{'f' * 64}.json"
    stray.write_text('{"build_key": ')
    out = tmp_path / "out.onnx"
    ls, show, pull = _commands(root, meta, out)
    listed = cli(*ls, "--json")
    assert listed.returncode == 0, listed.stderr
    found = json.loads(listed.stdout)
    assert [a["address"] for a in found["artifacts"]] == [meta["address"]]
    assert [(d["location"], d["kind"]) for d in found["damaged"]] == [(str(stray), "unreadable")]
    for args in (show, pull):
        proc = cli(*args)
        assert proc.returncode == 0 and meta["engine"]["digest"][:19] in proc.stdout, (args, proc.stdout, proc.stderr)
    assert out.is_file()


# ---- 9. pull -o onto a full (or read-only) filesystem -------------------------------------------------------

@contextmanager
def tiny_tmpfs(where: Path, *options: str):
    where.mkdir(parents=True, exist_ok=True)
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(("size=64k", *options)), "tmpfs", str(where)],
                           capture_output=True, text=True)
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mount.stderr.strip() or mount.returncode}): needs root")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


@pytest.mark.parametrize("fs", ["full", "read-only"])
def test_item9_pull_onto_a_full_or_read_only_filesystem_local_store(fs, tmp_path):
    root = tmp_path / "artifacts"
    local(root).put(make_artifact(tmp_path / "b", size=1024 * 1024, **ORT))
    with tiny_tmpfs(tmp_path / "mnt", *(("ro",) if fs == "read-only" else ())) as mnt:
        dest = mnt / "engines" / "cls.onnx" if fs == "full" else mnt / "cls.onnx"
        if fs == "full":
            dest.parent.mkdir()
        # a full disk shows at the write (exit 1); a read-only folder is refused before any work as a bad -o (exit 2)
        line = one_line_error(cli("pull", "cls", "-o", str(dest), "--registry", str(root)),
                              code=1 if fs == "full" else 2)
        assert str(dest) in line, line
        assert ("no space left" if fs == "full" else "read-only") in line.lower(), line
        assert not dest.exists()
        assert [p for p in mnt.rglob("*") if p.is_file()] == []  # no partial or temp file left


def test_item9_pull_onto_a_full_filesystem_oci_store(registry, tmp_path):
    from trt_orchestrator_plugins.stores.oci import OciStore

    store = OciStore(RegistryConfig(store="oci", url=f"{registry.host}/fulldisk", insecure=True))
    store.put(make_artifact(tmp_path / "b", size=1024 * 1024, **ORT))
    with tiny_tmpfs(tmp_path / "mnt") as mnt:
        dest = mnt / "cls.onnx"
        line = one_line_error(cli("pull", "cls", "-o", str(dest), "--registry", f"oci://{registry.host}/fulldisk"))
        assert str(dest) in line and "no space left" in line.lower(), line
        assert [p for p in mnt.rglob("*") if p.is_file()] == []
