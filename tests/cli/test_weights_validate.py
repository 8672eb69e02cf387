"""`validate` on ``targets[].weights`` with the real plugins (issue 25): what a builder release cannot build is refused
at the line, naming why and what it can build; what it can is accepted."""

from __future__ import annotations

import re

from .test_cli import MANIFEST, _model, run

TRT = """\
  - name: {name}
    builder: {builder}
    builder_version: "{version}"
    compute_capability: "8.9"
    weights: {weights}
"""


def _manifest(tmp_path, *targets: str) -> str:
    _model(tmp_path / "tiny.onnx")
    text = MANIFEST.replace("registry: {store: local", "".join(targets) + "registry: {store: local")
    (tmp_path / "m.yaml").write_text(text)
    return text


def _line_of(text: str, needle: str, after: str) -> int:
    start = text.index(after)
    return text[:start].count("\n") + text[start:].split("\n").index(next(
        line for line in text[start:].split("\n") if needle in line)) + 1


def test_tensorrt_86_stripped_is_refused_at_its_line(tmp_path):
    text = _manifest(tmp_path, TRT.format(name="t86", builder="tensorrt", version="8.6.1.6", weights="stripped"),
                     TRT.format(name="x86", builder="trtexec", version="8.6.1.6", weights="stripped"))
    proc = run("validate", "m.yaml", cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    for name, index in (("t86", 2), ("x86", 3)):
        line = _line_of(text, "weights: stripped", f"name: {name}")
        pattern = (rf"m\.yaml:{line}:\d+: targets\[{index}\]\.weights: \w+ 8\.6\.1\.6 cannot build weights: "
                   r"stripped engines: TensorRT 8\.6\.1\.6 has no BuilderFlag\.STRIP_PLAN")
        assert re.search(pattern, proc.stderr), proc.stderr
    assert "it can build: embedded, refittable" in proc.stderr


def test_onnxruntime_refittable_is_refused_and_what_each_release_can_is_accepted(tmp_path):
    _manifest(tmp_path, TRT.format(name="t86", builder="tensorrt", version="8.6.1.6", weights="refittable"),
              TRT.format(name="t10", builder="tensorrt", version="10.0.1.6", weights="stripped"),
              TRT.format(name="x11", builder="trtexec", version="11.4.0.106", weights="refittable"))
    assert run("validate", "m.yaml", cwd=tmp_path).returncode == 0
    text = (tmp_path / "m.yaml").read_text().replace("    device: cpu\n", "    device: cpu\n    weights: refittable\n")
    (tmp_path / "m.yaml").write_text(text)
    proc = run("validate", "m.yaml", cwd=tmp_path)
    assert proc.returncode == 1
    assert "targets[0].weights: onnxruntime 1.31 cannot build weights: refittable engines: an onnxruntime-optimized " \
           "model bakes its weights" in proc.stderr, proc.stderr
    assert "it can build: embedded, stripped" in proc.stderr
    ort = "    device: cpu\n    weights: "
    rtx = text.replace(ort + "refittable\n", ort + "stripped\n").replace(
        'compute_capabilities: ["8.6", "8.9"]\n', 'compute_capabilities: ["8.6", "8.9"]\n    weights: refittable\n')
    (tmp_path / "m.yaml").write_text(rtx)
    assert run("validate", "m.yaml", cwd=tmp_path).returncode == 0
