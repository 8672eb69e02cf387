"""Journey (issue 22.3): what the tool writes, another user can read.

A Triton server or a serving container usually runs as a user of its own. Everything `orchestrate` wrote used to be
mode 0600 (a temp file renamed into place keeps ``mkstemp``'s mode), so such a server got "Permission denied" on
every ``config.pbtxt``. Here the demo's published engines are exported as a Triton repository and pulled into a
deployment folder (``pull --all``), the report is rendered, all under umask 022, and then a different, unprivileged
user (``nobody``, switched to by the kernel, not simulated) lists and reads every file. Modes are checked exactly:
files ``0o666 & ~umask``, folders ``0o777 & ~umask``.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

UMASK = 0o022
READER = "nobody"


def _reader() -> pwd.struct_passwd:
    if os.geteuid() != 0:
        pytest.skip("reading as another user needs root to switch to it (CI runs as root)")
    try:
        return pwd.getpwnam(READER)
    except KeyError:
        pytest.skip(f"no user {READER!r} on this machine to read as")


@pytest.fixture
def shared_folder():
    """Where a deployment's files go: a folder others may enter, outside pytest's own tmp tree (which is 0700,
    so nobody could reach anything in it whatever the files' modes)."""
    root = Path(tempfile.mkdtemp(prefix="orchestrate-modes-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def umask_022():
    old = os.umask(UMASK)  # the subprocesses inherit it
    try:
        yield UMASK
    finally:
        os.umask(old)


def read_all_as(user: pwd.struct_passwd, root: Path) -> subprocess.CompletedProcess:
    """As ``user``: walk ``root`` (listing every folder) and read every file; prints the bytes read."""
    return subprocess.run(["/bin/sh", "-c", 'find "$1" -type f -exec cat {} + | wc -c', "sh", str(root)],
                          capture_output=True, text=True, timeout=300, cwd="/", user=user.pw_uid,
                          group=user.pw_gid, extra_groups=[])


def modes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)) or ".": oct(stat.S_IMODE(p.stat().st_mode))
            for p in [root, *sorted(root.rglob("*"))]}


def expected_modes(root: Path, umask: int) -> dict[str, str]:
    return {str(p.relative_to(root)) or ".": oct((0o777 if p.is_dir() else 0o666) & ~umask)
            for p in [root, *sorted(root.rglob("*"))]}


def test_another_user_reads_a_triton_repository_and_a_pull_all_folder(demo_published, shared_folder, umask_022):
    reader = _reader()
    store = str(demo_published.store)
    repo = shared_folder / "triton"
    models = shared_folder / "models"
    report = shared_folder / "report" / "engines.html"
    demo_published.run("export", "triton", "ocr-det", "orientation", "--repo", str(repo), "--registry", store,
                       "--precision", "fp16", "--runtime", "ort1.31", "--gpus", "none")
    demo_published.run("pull", "--all", "--gpus", "sm86,sm89", "--precision", "fp16", "--registry", store,
                       "-o", str(models))
    demo_published.run("report", str(demo_published.manifest), "-o", str(report))

    assert (repo / "ocr-det" / "config.pbtxt").is_file() and any(models.rglob("model.*"))
    for root in (repo, models, report.parent):
        proc = read_all_as(reader, root)
        assert proc.returncode == 0 and proc.stderr == "", f"{READER} could not read {root}: {proc.stderr}"
        total = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
        assert int(proc.stdout) == total > 0
        assert modes(root) == expected_modes(root, UMASK), root


def test_the_published_store_follows_the_umask(demo_published):
    """The session's publish ran under this process's umask: the local store's records and blobs got what any
    file written then would (not 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    # (lock files are filelock's own, created 0o644 less the umask: they hold no data)
    files = [p for p in demo_published.store.rglob("*") if p.is_file() and not p.name.endswith(".lock")]
    assert files
    wrong = {str(p.relative_to(demo_published.store)): oct(stat.S_IMODE(p.stat().st_mode)) for p in files
             if stat.S_IMODE(p.stat().st_mode) != 0o666 & ~umask}
    assert wrong == {}, f"umask {umask:03o}: files not {0o666 & ~umask:o}"
