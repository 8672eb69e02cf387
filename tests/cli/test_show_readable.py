"""`show` on a terminal (issue 23, point 14): the target, the runner and the manifest as fields a reader takes in,
never a Python dict's repr."""

from __future__ import annotations

import pytest

from .test_cli import MANIFEST, _model, run


@pytest.fixture()
def project(tmp_path):
    _model(tmp_path / "tiny.onnx")
    (tmp_path / "m.yaml").write_text(MANIFEST)
    return tmp_path


CPU32 = "tiny/fp32/default@cpu+ort1.31"


def test_show_prints_target_runner_and_manifest_as_fields(project):
    for verb in ("build", "gate", "publish"):
        proc = run(verb, "m.yaml", "--only", CPU32, cwd=project)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = run("show", CPU32, "--registry", "artifacts", cwd=project)
    assert proc.returncode == 0, proc.stderr
    fields = {line.split(None, 1)[0]: line.split(None, 1)[1] for line in proc.stdout.splitlines()
              if line.strip() and line.split(None, 1)[0] in ("target", "runner", "manifest")}
    assert fields["target"].startswith("cpu: device cpu; linux/"), fields
    assert fields["runner"].startswith("no GPU on linux/") and "onnxruntime 1.31" in fields["runner"], fields
    assert fields["manifest"].startswith(str(project / "m.yaml")) or fields["manifest"].startswith("m.yaml"), fields
    assert "{" not in proc.stdout and "[" not in proc.stdout and "'" not in proc.stdout, proc.stdout
