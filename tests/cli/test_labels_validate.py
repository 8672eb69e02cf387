"""`validate` on gate.parity.data.labels: labels without the images they label, and a labels file that is not
there, are manifest errors with their place."""

from __future__ import annotations

from .test_cli import MANIFEST, _model, run


def test_labels_need_images_and_must_exist(tmp_path):
    _model(tmp_path / "tiny.onnx")
    (tmp_path / "images").mkdir()
    without_path = MANIFEST.replace("    precisions: [fp32, fp16]\n", """\
    precisions: [fp32, fp16]
    gate: {parity: {data: {labels: labels.json}}}
""")
    (tmp_path / "m.yaml").write_text(without_path)
    proc = run("validate", "m.yaml", cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "models[0].gate.parity.data.labels: labels need the images they label" in proc.stderr, proc.stderr
    missing = without_path.replace("data: {labels: labels.json}", "data: {path: images, labels: labels.json}")
    (tmp_path / "m.yaml").write_text(missing)
    proc = run("validate", "m.yaml", cwd=tmp_path)
    assert proc.returncode == 1
    assert f"labels file not found: {tmp_path / 'labels.json'}" in proc.stderr, proc.stderr
    (tmp_path / "labels.json").write_text("{}")
    assert run("validate", "m.yaml", cwd=tmp_path).returncode == 0
