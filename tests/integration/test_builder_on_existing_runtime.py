"""Issue 23.24: a third-party builder whose engines run on a runtime it does not ship, end to end through the CLI.

``onnx-tidy`` (tests/data/onnx_copy_plugin/onnx_copy_plugin/tidy.py, registered by the same distribution as
``onnx-copy``) declares ``runtime = "onnxruntime"``: trt-orchestrator's own onnxruntime runtime gates and pulls its
engines. That runtime judges an engine by its own library's version (the engine's recorded builder version against
the runner's onnxruntime, major.minor), so the builder speaks onnxruntime's versions: the target's
``builder_version`` is onnxruntime's family and the build records the onnxruntime version it built with. Taken
through validate, plan, build, gate, publish, plan (up to date) and pull, with the real onnxruntime; then the rule
it lives by is shown failing for an engine recorded with the plugin's own version (docs/architecture.md, "A builder
for an existing runtime").
"""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path

import onnx
import pytest

from orchestrator.core.artifact import EngineDescriptor
from orchestrator.core.fingerprint import InstalledRuntime, RunnerFingerprint
from tests.conftest import make_tiny_model
from tests.integration.test_third_party_plugin import DIST, _cli, _family, _json, _sha256
from tests.integration.test_third_party_plugin import _plugin_on_path as _plugin_on_path  # noqa: F401 (fixture)
from tests.integration.test_third_party_plugin import plugin_site as plugin_site  # noqa: F401 (fixture)
from tests.integration.test_third_party_plugin import plugin_version as plugin_version  # noqa: F401 (fixture)
from trt_orchestrator_plugins.runtimes.onnxruntime import check_onnxruntime

pytestmark = pytest.mark.integration

BUILDER = "onnx-tidy"
MANIFEST = """\
manifest_version: 1
project: existing-runtime
defaults:
  precisions: [fp32]
  gate:
    parity: {{data: {{samples: 1, seed: 0}}}}
    benchmark: {{warmup: 1, iterations: 5, shapes: [opt]}}
    allow_ungated_publish: false
models:
  - name: tiny
    version: "1.0.0"
    source: {{path: tiny.onnx}}
    inputs:
      x:
        shape: [N, 3, H, W]
        dtype: float32
        profiles:
          default: {{min: [1, 3, 16, 16], opt: [2, 3, 32, 32], max: [4, 3, 64, 64]}}
targets:
  - name: tidy-cpu
    builder: onnx-tidy
    builder_version: "{ort}"      # an onnxruntime release: the version its engines are judged by
    device: cpu
    runners: {{build: [ubuntu-latest]}}
registry: {{store: local, path: registry}}
"""


@pytest.fixture
def ort_version() -> str:
    return metadata.version("onnxruntime")


@pytest.fixture
def project(tmp_path: Path, plugin_site: Path, plugin_version: str, ort_version: str) -> Path:  # noqa: F811
    (dist,) = metadata.distributions(name=DIST, path=[str(plugin_site)])  # the private install (issue 22.6)
    eps = {ep.name: ep.value for ep in dist.entry_points}
    if eps.get(BUILDER) != "onnx_copy_plugin:tidy_builder":
        pytest.fail(f"{DIST} {plugin_version} in {plugin_site} does not register {BUILDER}", pytrace=False)
    (tmp_path / "m.yaml").write_text(MANIFEST.format(ort=_family(ort_version)))
    make_tiny_model(tmp_path / "tiny.onnx")
    return tmp_path


def test_a_builder_on_the_onnxruntime_runtime_end_to_end(project: Path, ort_version: str) -> None:
    manifest, cache, registry = str(project / "m.yaml"), project / "cache", project / "registry"
    cd = ["--cache-dir", str(cache)]
    address = f"tiny/fp32/default@cpu+tidy{_family(ort_version)}"
    _cli("validate", manifest, cwd=project, cache=cache)

    plan = _json(_cli("plan", manifest, "--json", *cd, cwd=project, cache=cache))
    assert [(c["address"], c["status"]) for c in plan["cells"]] == [(address, "build")]

    # build: the recorded version is onnxruntime's, the engine is the tidied model
    build = _json(_cli("build", manifest, "--json", *cd, cwd=project, cache=cache))
    node = next(n for n in build["nodes"] if n["node"] == f"build:{address}")
    assert node["status"] == "done", node
    assert (node["data"]["builder"], node["data"]["builder_version"]) == (BUILDER, ort_version)
    engine = onnx.load(str(Path(node["dir"]) / node["data"]["engine"]))
    assert len(engine.graph.value_info) > 0 and not engine.doc_string
    source = onnx.load(str(project / "tiny.onnx"))
    assert [n.op_type for n in engine.graph.node] == [n.op_type for n in source.graph.node]

    # gate: the onnxruntime runtime ran both gates; the same graph agrees exactly with the reference
    gate = _json(_cli("gate", manifest, "--json", *cd, cwd=project, cache=cache))
    by_kind = {n["kind"]: n for n in gate["nodes"]}
    assert by_kind["gate:parity"]["data"]["status"] == "passed", by_kind["gate:parity"]
    assert by_kind["gate:benchmark"]["data"]["status"] == "passed", by_kind["gate:benchmark"]
    parity = json.loads((Path(by_kind["gate:parity"]["dir"]) / "parity.json").read_text())
    assert all(o["max_abs_error"] == 0.0 for c in parity["profiles"]["default"]["cases"] for o in c["outputs"])

    publish = _json(_cli("publish", manifest, "--json", *cd, cwd=project, cache=cache))
    pub = next(n for n in publish["nodes"] if n["node"] == f"publish:{address}")
    assert pub["status"] == "done" and pub["data"]["gates"] == "passed", pub
    plan = _json(_cli("plan", manifest, "--json", *cd, cwd=project, cache=cache))
    assert [(c["address"], c["status"]) for c in plan["cells"]] == [(address, "up-to-date")]

    # pull: the onnxruntime runtime judged it by the recorded onnxruntime version
    out = project / "out.onnx"
    pulled = _json(_cli("pull", "tiny", "-o", str(out), "--json", "--registry", str(registry), cwd=project,
                        cache=cache))
    assert pulled["address"] == address and pulled["reason"] == "onnxruntime CPU engine"
    assert pulled["metadata"]["runtime"] == "onnxruntime"
    assert pulled["metadata"]["builder"] == {"name": BUILDER, "version": ort_version}
    assert pulled["digest"] == _sha256(out)
    declared = _json(_cli("pull", "tiny", "--runtime", f"ort{_family(ort_version)}", "--json", "--registry",
                          str(registry), cwd=project, cache=cache))
    assert declared["address"] == address
    other = _cli("pull", "tiny", "--runtime", "ort9.9", "--json", "--registry", str(registry), cwd=project,
                 cache=cache, check=False)
    assert other.returncode == 4, other.stdout + other.stderr
    assert f"built for onnxruntime {_family(ort_version)}, this runner has 9.9" in _json(other)["error"]["message"]


def test_the_runtime_judges_by_its_library_version_not_the_plugin_s(ort_version: str,
                                                                      plugin_version: str) -> None:  # noqa: F811
    """Why the builder records onnxruntime's version: an engine recorded with the plugin's own version (1.0.0)
    would be refused by the onnxruntime runtime on every runner."""
    runner = RunnerFingerprint(os="linux", arch="x86_64",
                               runtimes={"onnxruntime": InstalledRuntime(ort_version, ("CPUExecutionProvider",))})

    def engine(version: str) -> EngineDescriptor:
        return EngineDescriptor.from_json({"address": "tiny/fp32/default@cpu+tidy", "precision": "fp32",
                                           "builder": {"name": BUILDER, "version": version},
                                           "target": {"device": "cpu", "compute_capabilities": []}},
                                          runtime="onnxruntime")

    assert check_onnxruntime(engine(ort_version), runner).ok
    wrong = check_onnxruntime(engine(plugin_version), runner)
    assert not wrong.ok and f"built for onnxruntime {_family(plugin_version)}" in wrong.reason
