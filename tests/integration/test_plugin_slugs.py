"""Builder address slugs are unique (issue 23, point 23): a third-party builder that takes a slug an installed
builder has (`rtx`) is refused when builders load, with an error naming both plugins and their distributions,
before any cell address is made from it (not later as a misleading address hint).

The clashing plugin is a real distribution (its ``.dist-info`` with the entry point) in a folder on PYTHONPATH."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.cli.test_cli import MANIFEST, _model

pytestmark = pytest.mark.integration

CLASH = '''
from orchestrator.contracts.builder import BuilderCapabilities, probe_target


class Clash:
    name = "slug-clash"
    runtime = "onnxruntime"
    slug = "rtx"  # tensorrt-rtx's

    def probe_target(self, fingerprint):
        return probe_target(self, fingerprint, device="cpu")

    def capabilities(self, version):
        return BuilderCapabilities(native=frozenset(), via_transform=frozenset(), target_kinds=frozenset({"cpu"}),
                                   needs_gpu=False, runs_on="nowhere")

    def available(self, fingerprint, target):
        return None

    def build(self, request):
        raise NotImplementedError


builder = Clash()
'''


def test_two_builders_with_one_slug_are_refused_naming_both(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "slug_clash.py").write_text(CLASH)
    info = site / "slug_clash_plugin-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: slug-clash-plugin\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[trt_orchestrator.builders]\nslug-clash = slug_clash:builder\n")
    _model(tmp_path / "tiny.onnx")
    (tmp_path / "m.yaml").write_text(MANIFEST)
    env = {**os.environ, "ORCHESTRATE_CACHE": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "plan", "m.yaml"], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    message = " ".join(proc.stderr.split())
    assert "address slug 'rtx'" in message, message
    assert "'slug-clash'" in message and "slug-clash-plugin 0.1.0" in message, message
    assert "'tensorrt-rtx'" in message and "trt-orchestrator" in message, message
    # without the clashing plugin the same manifest plans
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    ok = subprocess.run([sys.executable, "-m", "orchestrator", "plan", "m.yaml"], capture_output=True, text=True,
                        env=env, cwd=tmp_path, timeout=300)
    assert ok.returncode == 0, ok.stderr
