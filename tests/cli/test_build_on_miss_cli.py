"""`pull --build-on-miss` as a command (issue 26.1): its help names the flags, what each does and the exit codes;
its usage errors (exit 2, no traceback) name what goes with what. The builds themselves:
tests/integration/test_build_on_miss.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from .test_cli import MANIFEST, _model, run


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    _model(tmp_path / "tiny.onnx")
    (tmp_path / "m.yaml").write_text(MANIFEST)
    return tmp_path


def test_pull_help_documents_build_on_miss_and_its_flags(project):
    proc = run("pull", "--help", cwd=project)
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    for words in ("--build-on-miss", "--publish-back", "--require-gate", "--manifest",
                  "the model version's published ONNX", "nearest declared target of the same builder",
                  "exit 3 and nothing written", "built_on_device", "the build key `plan` computes",
                  "Two such pulls at once build once", "docs/deploy.md, 'Build on miss'"):
        assert words in text, words


@pytest.mark.parametrize(("args", "said"), [
    (("tiny", "--publish-back", "-o", "x.onnx"), "--publish-back and --require-gate go with --build-on-miss"),
    (("tiny", "--require-gate", "-o", "x.onnx"), "--publish-back and --require-gate go with --build-on-miss"),
    (("tiny", "--build-on-miss", "-o", "x.onnx"), "builds with the recipe of the manifest that declares the model"),
    (("--all", "--gpus", "sm86", "--build-on-miss", "--manifest", "m.yaml", "-o", "out"),
     "--build-on-miss builds one engine: pull one MODEL"),
    (("tiny", "--build-on-miss", "--manifest", "m.yaml", "--keep-stripped", "-o", "x.onnx"),
     "an engine built here carries its weights"),
])
def test_usage_errors_exit_2_and_say_what_goes_with_what(project, args, said):
    proc = run("pull", *args, cwd=project)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert said in " ".join(proc.stderr.split()) and "Traceback" not in proc.stderr
    assert not (project / "x.onnx").exists() and not (project / "out").exists()
