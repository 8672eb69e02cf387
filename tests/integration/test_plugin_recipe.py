"""A plugin's new release rebuilds what it built (issue 23, point 21).

The third-party test plugin (``tests/data/onnx_copy_plugin``) is put on the path as two releases, 1.0.0 and 1.0.1,
each a real distribution (its ``.dist-info`` with the entry points) in its own folder on ``PYTHONPATH``, found by
``importlib.metadata`` as an installed plugin is. Both releases are of the builder version the target names
("1.0"), so before recipe versions a new release changed no key and `plan` said "up to date". The plugin states
no recipe of its own: its distribution version is its recipe, and the plan names it as the changed field. A
second copy whose builder states ``recipe`` explicitly keys on that instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import make_tiny_model

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "tests" / "data" / "onnx_copy_plugin"
MANIFEST = REPO / "tests" / "data" / "manifests" / "third-party" / "onnx-copy.yaml"
CELL = "tiny/fp32/default@cpu+copy1.0"


def release(root: Path, version: str, *, recipe: str | None = None) -> Path:
    """onnx-copy-plugin ``version`` as an installed distribution in ``root`` (a PYTHONPATH entry)."""
    shutil.copytree(PLUGIN / "onnx_copy_plugin", root / "onnx_copy_plugin",
                    ignore=shutil.ignore_patterns("__pycache__"))
    if recipe is not None:  # a plugin that states its recipe: bumped by hand when its output changes
        builder = root / "onnx_copy_plugin" / "builder.py"
        builder.write_text(builder.read_text().replace('    slug = "copy"\n',
                                                       f'    slug = "copy"\n    recipe = "{recipe}"\n'))
    info = root / f"onnx_copy_plugin-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: onnx-copy-plugin\nVersion: {version}\n")
    (info / "entry_points.txt").write_text("[trt_orchestrator.builders]\nonnx-copy = onnx_copy_plugin:builder\n\n"
                                           "[trt_orchestrator.runtimes]\nonnx-copy-ort = onnx_copy_plugin:runtime\n")
    return root


def cli(*args: str, cwd: Path, site: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "ORCHESTRATE_CACHE": str(cwd / "cache"),
           "PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"orchestrate {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def test_a_new_plugin_release_rebuilds_and_the_plan_names_its_recipe(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    make_tiny_model(work / "tiny.onnx")
    shutil.copy(MANIFEST, work / "m.yaml")
    old = release(tmp_path / "v1.0.0", "1.0.0")
    new = release(tmp_path / "v1.0.1", "1.0.1")
    stated = release(tmp_path / "stated", "1.0.1", recipe="copy-2")

    explained = json.loads(cli("explain", CELL, "m.yaml", "--json", cwd=work, site=old).stdout)
    assert explained["build_inputs"]["builder"] == {"name": "onnx-copy", "version": "1.0", "recipe": "1.0.0"}
    for verb in ("build", "gate", "publish"):
        cli(verb, "m.yaml", cwd=work, site=old)
    assert json.loads(cli("plan", "m.yaml", "--json", cwd=work, site=old).stdout)["summary"]["up_to_date"] == 1

    plan = json.loads(cli("plan", "m.yaml", "--json", cwd=work, site=new).stdout)
    (cell,) = plan["cells"]
    assert (cell["status"], cell["changes"]) == ("rebuild", ["builder recipe: onnx-copy 1.0.0 -> 1.0.1"])
    human = cli("plan", "m.yaml", cwd=work, site=new).stdout
    assert "~" in human and "builder recipe: onnx-copy 1.0.0 -> 1.0.1" in human, human

    plan = json.loads(cli("plan", "m.yaml", "--json", cwd=work, site=stated).stdout)
    assert plan["cells"][0]["changes"] == ["builder recipe: onnx-copy 1.0.0 -> copy-2"]
