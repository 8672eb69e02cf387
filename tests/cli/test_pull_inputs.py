"""`pull`, `pull --all` and `export triton` refuse bad input with the right exit code and nothing written (issue 23):

- 23.3: an output path that cannot be written (an existing file where a directory goes, a file among its parents,
  /proc) is a usage error (2) naming the path, not a traceback;
- 23.4: a malformed `--runtime` ('', `rtx1.7.x`, `trtx`) is a usage error naming the accepted forms;
- 23.5: a version, precision or profile that was never published is exit 1 ("not published", with what is), not
  exit 4 (which means: published, but none runs there).

Through the real command line in a subprocess, against a real local store the real commands built and published.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.cli.test_pull_fingerprints import _model, _no_traceback
from tests.cli.test_pull_fingerprints import run as run_cli

MANIFEST = """\
manifest_version: 1
project: inputs
registry: {store: local, path: artifacts}
targets:
  - {name: cpu, builder: onnxruntime, builder_version: "1.31", device: cpu, runners: {build: [ubuntu-latest]}}
models:
  - name: tiny
    version: "1.0.0"
    source: {path: tiny.onnx}
    inputs:
      x:
        shape: [N, 3, 8, 8]
        profiles:
          default: {min: [1, 3, 8, 8], opt: [2, 3, 8, 8], max: [4, 3, 8, 8]}
    precisions: [fp32]
    gate:
      parity: {data: {samples: 1}}
      benchmark: {enabled: false}
"""
PULL_ALL = ("pull", "--all", "tiny", "--gpus", "none")
EXPORT = ("export", "triton", "tiny", "--gpus", "none")


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    proc = run_cli(*args, cwd=cwd)
    _no_traceback(proc)
    return proc


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("inputs")
    _model(folder / "tiny.onnx")
    (folder / "m.yaml").write_text(MANIFEST)
    for verb in ("build", "gate", "publish"):
        proc = run(verb, "m.yaml", cwd=folder)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return folder


def _store(folder: Path) -> tuple[str, ...]:
    return ("--registry", str(folder / "artifacts"))


# -- 23.3: output paths ---------------------------------------------------------------------------------------------

def test_pull_all_into_an_existing_file_is_a_usage_error_naming_it(published, tmp_path):
    target = tmp_path / "afile"
    target.write_text("mine")
    for out, words in ((target, "is a file, not a directory"), (target / "sub", "is a file, not a directory")):
        proc = run(*PULL_ALL, *_store(published), "-o", str(out), cwd=published)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert str(target) in proc.stderr and words in proc.stderr and "-o" in proc.stderr
    assert target.read_text() == "mine"


def test_pull_all_into_a_path_that_cannot_be_created_is_a_usage_error_naming_it(published, tmp_path):
    proc = run(*PULL_ALL, *_store(published), "-o", "/proc/orchestrate-x", cwd=published)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "/proc/orchestrate-x" in proc.stderr and "cannot" in proc.stderr


@pytest.mark.parametrize("where", ["file-parent", "directory", "proc"])
def test_pull_to_an_unwritable_path_is_a_usage_error_naming_it(published, tmp_path, where):
    (tmp_path / "afile").write_text("mine")
    (tmp_path / "adir").mkdir()
    out = {"file-parent": tmp_path / "afile" / "x.onnx", "directory": tmp_path / "adir",
           "proc": Path("/proc/orchestrate-x.onnx")}[where]
    proc = run("pull", "tiny", *_store(published), "-o", str(out), cwd=published)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert str(out) in proc.stderr or str(out.parent) in proc.stderr
    assert (tmp_path / "afile").read_text() == "mine" and not list((tmp_path / "adir").iterdir())


@pytest.mark.parametrize("where", ["file-parent", "proc"])
def test_export_triton_to_an_unwritable_repo_is_a_usage_error_naming_it(published, tmp_path, where):
    (tmp_path / "afile").write_text("mine")
    repo = {"file-parent": tmp_path / "afile" / "repo", "proc": Path("/proc/orchestrate-repo")}[where]
    proc = run(*EXPORT, *_store(published), "--repo", str(repo), cwd=published)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert str(repo) in proc.stderr or str(repo.parent) in proc.stderr
    assert (tmp_path / "afile").read_text() == "mine"


# -- 23.4: --runtime ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("runtime", ["", "rtx1.7.x", "trtx", "ort", "ort1.31 "])
@pytest.mark.parametrize("command", ["pull", "pull-all", "export"])
def test_a_malformed_runtime_is_a_usage_error_with_the_forms(published, tmp_path, command, runtime):
    args = {"pull": ("pull", "tiny", "-o", str(tmp_path / "x.onnx")),
            "pull-all": (*PULL_ALL, "-o", str(tmp_path / "out")),
            "export": (*EXPORT, "--repo", str(tmp_path / "repo"))}[command]
    proc = run(*args, *_store(published), "--runtime", runtime, cwd=published)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"--runtime {runtime!r}" in proc.stderr
    assert "ortX.Y" in proc.stderr and "triton:25.01" in proc.stderr  # the accepted forms
    assert not list(tmp_path.iterdir())


def test_a_well_formed_runtime_still_pulls(published, tmp_path):
    proc = run("pull", "tiny", *_store(published), "--runtime", "ort1.31", "--json", cwd=published)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["address"] == "tiny/fp32/default@cpu+ort1.31"


# -- 23.5: never published ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["pull", "pull-all", "export"])
@pytest.mark.parametrize("option,value,published_words", [
    ("--precision", "int8", "precisions fp32"),
    ("--profile", "big", "profile sets default"),
    ("--version", "9.9", "versions 1.0.0"),
])
def test_what_was_never_published_is_exit_1_saying_what_is(published, tmp_path, command, option, value,
                                                            published_words):
    args = {"pull": ("pull", "tiny", "-o", str(tmp_path / "x.onnx")),
            "pull-all": (*PULL_ALL, "-o", str(tmp_path / "out")),
            "export": (*EXPORT, "--repo", str(tmp_path / "repo"), "--runtime", "ort1.31")}[command]
    proc = run(*args, *_store(published), option, value, "--json", cwd=published)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["type"] == "ArtifactNotFoundError"
    assert "not published" in error["message"] and value in error["message"]
    assert published_words in error["hint"], error
    assert "build a target" not in error["message"] + (error["hint"] or "")
    assert not list(tmp_path.iterdir())
