"""`pull` without `--precision` picks by a rule a user can predict (issue 23, point 23): among engines that fit
the machine equally well, the most precise precision, never the newest by publish time."""

from __future__ import annotations

import json

import pytest

from .test_cli import MANIFEST, _model, run


@pytest.fixture()
def project(tmp_path):
    _model(tmp_path / "tiny.onnx")
    (tmp_path / "m.yaml").write_text(MANIFEST)
    return tmp_path


CPU32, CPU16 = "tiny/fp32/default@cpu+ort1.31", "tiny/fp16/default@cpu+ort1.31"


def test_the_most_precise_engine_wins_among_equal_fits_whatever_was_published_last(project):
    # fp32 published first, fp16 last: the store lists fp16 first (newest), and both fit a CPU equally well
    for cell in (CPU32, CPU16):
        for verb in ("build", "gate", "publish"):
            proc = run(verb, "m.yaml", "--only", cell, cwd=project)
            assert proc.returncode == 0, proc.stdout + proc.stderr
    listing = json.loads(run("ls", "--registry", "artifacts", "--model", "tiny", "--json", cwd=project).stdout)
    assert [a["address"] for a in listing["artifacts"]][0] == CPU16  # newest first
    pulled = run("pull", "tiny", "--gpu", "none", "--registry", "artifacts", "-o", "tiny.onnx", "--json",
                 cwd=project)
    assert pulled.returncode == 0, pulled.stderr
    chosen = json.loads(pulled.stdout)
    assert chosen["address"] == CPU32, chosen["address"]
    assert any(r["artifact"].startswith(CPU16) and "ranked lower" in r["reason"] for r in chosen["rejected"])
    # asked for by name, the faster one
    pulled = run("pull", "tiny", "--gpu", "none", "--precision", "fp16", "--registry", "artifacts", "-o", "t16.onnx",
                 "--json", cwd=project)
    assert json.loads(pulled.stdout)["address"] == CPU16
    helptext = " ".join(run("pull", "--help", cwd=project).stdout.split())
    assert "the most precise wins: fp32, then fp16, bf16, int8, fp8" in helptext
