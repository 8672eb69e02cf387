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


# A third-party builder that offers every weights mode, and its own runtime plugin, which has no ``refit``: both
# registered by entry points (a dist-info on PYTHONPATH, as pip installs one), loaded by validate like any plugin.
FROZEN = '''\
from orchestrator.contracts.builder import probe_target
from orchestrator.core.capabilities import BuilderCapabilities


class FrozenBuilder:
    name, runtime, slug = "frozen", "frozen-rt", "frozen"

    def capabilities(self, version):
        return BuilderCapabilities(native=frozenset({"fp32", "fp16"}), via_transform=frozenset(),
                                   target_kinds=frozenset({"cpu"}), needs_gpu=False, runs_on="the frozen runtime",
                                   weights_modes=frozenset({"embedded", "stripped", "refittable"}))

    def available(self, fingerprint, target):
        return "frozen builds nothing"

    def build(self, request):
        raise NotImplementedError

    def probe_target(self, fingerprint):
        return probe_target(self, fingerprint, device="cpu")


class FrozenRuntime:  # runs engines; cannot put weights into one (no refit)
    name, slug = "frozen-rt", "frozenrt"

    def probe(self):
        return None

    def can_run(self, descriptor, fingerprint):
        raise NotImplementedError

    def verify_engine(self, path, descriptor):
        raise NotImplementedError

    def load(self, path, descriptor, options):
        raise NotImplementedError


builder, runtime = FrozenBuilder(), FrozenRuntime()
'''
FROZEN_TARGET = """\
  - name: frozen
    builder: frozen
    builder_version: "1.0"
    device: cpu
    weights: {weights}
"""


def test_a_runtime_plugin_without_refit_is_refused_at_the_line(tmp_path, monkeypatch):
    site = tmp_path / "site"
    dist = site / "frozen_plugin-1.0.dist-info"
    dist.mkdir(parents=True)
    (site / "frozen_plugin.py").write_text(FROZEN)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: frozen-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[trt_orchestrator.builders]\nfrozen = frozen_plugin:builder\n\n"
                                           "[trt_orchestrator.runtimes]\nfrozen-rt = frozen_plugin:runtime\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    text = _manifest(tmp_path, FROZEN_TARGET.format(weights="embedded"))
    assert run("validate", "m.yaml", cwd=tmp_path).returncode == 0, "the plugin loads and embedded is accepted"
    for weights in ("stripped", "refittable"):
        text = (tmp_path / "m.yaml").read_text().replace("    device: cpu\n    weights: embedded\n",
                                                         f"    device: cpu\n    weights: {weights}\n")
        (tmp_path / "m.yaml").write_text(text)
        proc = run("validate", "m.yaml", cwd=tmp_path)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        line = _line_of(text, f"weights: {weights}", "name: frozen")
        assert re.search(rf"m\.yaml:{line}:\d+: targets\[2\]\.weights: frozen 1\.0 cannot build weights: {weights} "
                         r"engines: its runtime plugin 'frozen-rt' has no refit "
                         r"\(contracts\.runtime\.RefitCapability\)", proc.stderr), proc.stderr
        assert "it can build: embedded (docs/refit.md)" in proc.stderr, proc.stderr
        text = text.replace(f"    weights: {weights}\n", "    weights: embedded\n")
        (tmp_path / "m.yaml").write_text(text)
