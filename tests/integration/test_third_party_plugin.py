"""A third-party builder + runtime pair, installed through real entry points, end to end through the CLI.

The plugin is the package in ``tests/data/onnx_copy_plugin`` (builder ``onnx-copy``: the engine is a byte copy of
the ONNX model; runtime ``onnx-copy-ort``: runs it on onnxruntime's CPU provider). It is a test-only plugin, so it
never goes into the user's environment (where it would show in `doctor` and in every `pull` refusal, issue 22.6):
the ``plugin_site`` fixture builds and installs it with pip, once per module, into a private folder that only these
tests' subprocesses get on ``PYTHONPATH``, where its entry points are found exactly as an installed package's. The
manifest (``tests/data/manifests/third-party/onnx-copy.yaml``) names no first-party builder; every command runs as
``python -m orchestrator`` in a subprocess, so the plugins are found exactly as a user's would be.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from tests.conftest import make_tiny_model

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PLUGIN_SRC = REPO / "tests" / "data" / "onnx_copy_plugin"
MANIFEST = REPO / "tests" / "data" / "manifests" / "third-party" / "onnx-copy.yaml"
DIST = "onnx-copy-plugin"
BUILDER, RUNTIME = "onnx-copy", "onnx-copy-ort"
FIRST_PARTY_BUILDERS = ("tensorrt", "tensorrt-rtx", "trtexec", "onnxruntime")
ALLOWED_PROJECT_IMPORTS = ("orchestrator.core", "orchestrator.contracts", "orchestrator.errors")
WANTED_ENTRY_POINTS = {("trt_orchestrator.builders", BUILDER): "onnx_copy_plugin:builder",
                       ("trt_orchestrator.runtimes", RUNTIME): "onnx_copy_plugin:runtime"}


def _sha256(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def _family(version: str) -> str:
    return ".".join(version.split(".")[:2])


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    """The plugin built by pip (with build isolation, as any package) from a copy of its sources and installed
    with ``--target`` into a private folder: on no path but the one these tests give their subprocesses."""
    root = tmp_path_factory.mktemp("onnx-copy-plugin")
    src = root / "src"
    shutil.copytree(PLUGIN_SRC, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    site = root / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check",
                           "--target", str(site), str(src)], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"installing {DIST} into {site} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}",
                    pytrace=False)
    return site


@pytest.fixture(scope="module")
def plugin_version(plugin_site: Path) -> str:
    """The privately installed plugin's version, after checking that its entry points are there, once."""
    (dist,) = metadata.distributions(name=DIST, path=[str(plugin_site)])
    eps = {(ep.group, ep.name): ep.value for ep in dist.entry_points}
    assert {k: eps.get(k) for k in WANTED_ENTRY_POINTS} == WANTED_ENTRY_POINTS, eps
    # the same names must not come from anywhere else (entry points are keyed by name)
    for (group, name), value in WANTED_ENTRY_POINTS.items():
        found = [ep.value for d in metadata.distributions(path=[str(plugin_site), *sys.path])
                 for ep in d.entry_points if (ep.group, ep.name) == (group, name)]
        assert found == [value], f"{group}:{name} is registered {len(found)} times: {found}"
    return dist.version


@pytest.fixture(autouse=True)
def _plugin_on_path(plugin_site: Path, monkeypatch) -> None:
    """Every subprocess of these tests (``_cli``) finds the plugin; this interpreter does not import it."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(plugin_site),
                                                                   os.environ.get("PYTHONPATH")])))


def test_the_test_plugin_is_not_in_the_users_environment(plugin_site: Path) -> None:
    """The environment the tests run in (this interpreter's path, less the private folder) has no trace of the
    test-only plugin: `doctor` and `pull` refusals there never name it."""
    path = [p for p in sys.path if Path(p or ".").resolve() != plugin_site.resolve()]
    found = [f"{d.metadata['Name']} {d.version} at {d.locate_file('')}" for d in metadata.distributions(path=path)
             if d.metadata["Name"] and d.metadata["Name"].lower().replace("_", "-") == DIST]
    assert found == [], (f"{DIST} is installed in the user's environment: {found}; remove it with "
                         f"`{sys.executable} -m pip uninstall -y {DIST}` (scripts/test.sh no longer installs it)")
    eps = [f"{ep.group}:{ep.name}" for d in metadata.distributions(path=path) for ep in d.entry_points
           if ep.name in (BUILDER, RUNTIME)]
    assert eps == []


def _cli(*args: str, cwd: Path, cache: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "ORCHESTRATE_CACHE": str(cache)}
    proc = subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"orchestrate {' '.join(args)} exited {proc.returncode}\n"
                             f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}")
    return proc


def _json(proc: subprocess.CompletedProcess) -> dict:
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError as e:
        raise AssertionError(f"not JSON ({e}):\nstdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The manifest next to a freshly generated tiny model; its registry (``registry``) lands beside them."""
    shutil.copyfile(MANIFEST, tmp_path / "onnx-copy.yaml")
    make_tiny_model(tmp_path / "tiny.onnx")
    return tmp_path


def test_plugin_imports_only_public_project_modules() -> None:
    """The third-party plugin uses the contracts, the core and the errors: nothing first-party."""
    for src in sorted((PLUGIN_SRC / "onnx_copy_plugin").glob("*.py")):
        for node in ast.walk(ast.parse(src.read_text(), str(src))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert not name.startswith("trt_orchestrator_plugins"), f"{src.name} imports {name}"
                if name == "orchestrator" or name.startswith("orchestrator."):
                    assert name.startswith(ALLOWED_PROJECT_IMPORTS), f"{src.name} imports {name}"


def test_third_party_plugin_end_to_end(project: Path, plugin_version: str) -> None:
    manifest = str(project / "onnx-copy.yaml")
    model = project / "tiny.onnx"
    registry = project / "registry"
    cache = project / "cache"
    cd = ["--cache-dir", str(cache)]
    family = _family(plugin_version)
    assert family == "1.0", f"the manifest's target pins builder_version '1.0'; installed {DIST} is {plugin_version}"
    address = f"tiny/fp32/default@cpu+copy{family}"
    text = MANIFEST.read_text()
    assert not any(f"builder: {name}\n" in text for name in FIRST_PARTY_BUILDERS)

    _cli("validate", manifest, cwd=project, cache=cache)

    # plan: one cell, addressed by the plugin's slug and the target's version family
    plan = _json(_cli("plan", manifest, "--json", *cd, cwd=project, cache=cache))
    assert [(c["address"], c["status"], c["target"]) for c in plan["cells"]] == [(address, "build", "copy-cpu")]
    assert plan["cells"][0]["address"].endswith(f"@cpu+copy{family}")

    # build: the plugin's builder ran and reported its exact version; the engine is the model, byte for byte
    build = _json(_cli("build", manifest, "--json", *cd, cwd=project, cache=cache))
    assert build["ok"], build
    node = next(n for n in build["nodes"] if n["node"] == f"build:{address}")
    assert node["status"] == "done", node
    data = node["data"]
    assert (data["builder"], data["builder_version"]) == (BUILDER, plugin_version)
    engine = Path(node["dir"]) / data["engine"]
    assert engine.name == "model.onnx" and engine.read_bytes() == model.read_bytes()
    assert data["engine_digest"] == _sha256(model)
    assert (Path(node["dir"]) / data["log"]).read_text().startswith("source: tiny.onnx")

    # gate: both gates ran on this runner through the plugin's runtime and passed; a copy agrees exactly
    gate_proc = _cli("gate", manifest, "--json", *cd, cwd=project, cache=cache)
    assert gate_proc.returncode == 0
    gate = _json(gate_proc)
    by_kind = {n["kind"]: n for n in gate["nodes"]}
    assert set(by_kind) == {"gate:parity", "gate:benchmark"}, gate
    assert by_kind["gate:parity"]["data"]["status"] == "passed", by_kind["gate:parity"]
    assert by_kind["gate:benchmark"]["data"]["status"] == "passed", by_kind["gate:benchmark"]
    parity = json.loads((Path(by_kind["gate:parity"]["dir"]) / "parity.json").read_text())
    cases = parity["profiles"]["default"]["cases"]
    assert [c["label"] for c in cases] == ["min", "opt", "max"]
    assert all(o["max_abs_error"] == 0.0 for c in cases for o in c["outputs"]), cases
    bench = json.loads((Path(by_kind["gate:benchmark"]["dir"]) / "benchmark.json").read_text())
    shape = bench["verdict"]["shapes"][0]
    # 5 iterations per block (the schedule splits a series in blocks: see orchestrator/gates/run.py)
    assert shape["clock"] == "perf_counter_ns" and shape["compute"]["count"] >= 5, shape

    # publish: gated, into the manifest's local registry
    publish = _json(_cli("publish", manifest, "--json", *cd, cwd=project, cache=cache))
    pub = next(n for n in publish["nodes"] if n["node"] == f"publish:{address}")
    assert pub["status"] == "done" and pub["data"]["gates"] == "passed", pub
    assert pub["data"]["digest"] == _sha256(model)

    plan = _json(_cli("plan", manifest, "--json", *cd, cwd=project, cache=cache))
    assert [(c["address"], c["status"]) for c in plan["cells"]] == [(address, "up-to-date")]
    assert plan["summary"]["up_to_date"] == 1 and plan["summary"]["build"] == 0

    # pull: the plugin's runtime judged it runnable here, verified the file, and it is the model's bytes
    out = project / "out.onnx"
    pulled = _json(_cli("pull", "tiny", "-o", str(out), "--json", "--registry", str(registry), cwd=project,
                        cache=cache))
    assert pulled["address"] == address and pulled["rejected"] == []
    assert pulled["reason"] == "onnx-copy engine on onnxruntime's CPU execution provider"
    assert out.read_bytes() == model.read_bytes() == engine.read_bytes()
    assert pulled["digest"] == _sha256(out) == pulled["metadata"]["engine"]["digest"]
    meta = pulled["metadata"]
    assert meta["builder"] == {"name": BUILDER, "version": plugin_version}
    assert meta["runtime"] == RUNTIME
    assert meta["engine"]["media_type"] == "application/vnd.trt-orchestrator.engine.v1.onnx"
    assert meta["gates"]["status"] == "passed" and meta["target"]["device"] == "cpu"

    # a declared GPU is served a CPU engine only when asked (issue 22.2): the plugin's target says device: cpu
    refused = _cli("pull", "tiny", "--gpu", "sm89", "--json", "--registry", str(registry), cwd=project, cache=cache,
                   check=False)
    assert refused.returncode == 4, refused.stdout + refused.stderr
    (candidate,) = _json(refused)["error"]["candidates"]
    assert candidate["address"] == address and candidate["runtime"] == RUNTIME
    assert "a CPU engine, and the deployment declares GPU sm89" in candidate["reason"]
    on_gpu = _json(_cli("pull", "tiny", "--gpu", "sm89", "--allow-cpu", "--json", "--registry", str(registry),
                        cwd=project, cache=cache))
    assert on_gpu["address"] == address and on_gpu["path"] is None

    # --runtime names the plugin's runtime by its slug; its can_run decides on the declared version
    declared = _json(_cli("pull", "tiny", "--runtime", f"copyort{family}", "--json", "--registry", str(registry),
                          cwd=project, cache=cache))
    assert declared["address"] == address
    newer = _cli("pull", "tiny", "--runtime", "copyort9.9", "--json", "--registry", str(registry), cwd=project,
                 cache=cache, check=False)
    assert newer.returncode == 4, newer.stdout + newer.stderr
    error = _json(newer)["error"]
    assert error["type"] == "NoCompatibleEngineError"
    assert f"built by onnx-copy {plugin_version}, this runner has onnx-copy-ort 9.9" in error["message"]
    other = _cli("pull", "tiny", "--runtime", "ort1.31", "--json", "--registry", str(registry), cwd=project,
                 cache=cache, check=False)
    assert other.returncode == 4, other.stdout + other.stderr
    assert "runs on onnx-copy-ort, not the requested runtime onnxruntime" in _json(other)["error"]["message"]

    # doctor: the plugin pair reports itself like any first-party one
    doctor = _json(_cli("doctor", "--json", cwd=project, cache=cache))
    assert doctor["fingerprint"]["runtimes"][RUNTIME] == {"version": plugin_version,
                                                          "features": ["CPUExecutionProvider"]}
    builder = next(b for b in doctor["builders"] if b["name"] == BUILDER)
    assert builder["can_build"] is True and builder["reason"] is None, builder
    assert builder["installed_version"] == plugin_version
    assert builder["probe_target"] == f"cpu+copy{family}" and builder["runtime"] == RUNTIME
    assert builder["target_kinds"] == ["cpu"] and builder["needs_gpu"] is False
    assert builder["precisions_native"] == [] and builder["precisions_via_transform"] == []
    runtime = next(r for r in doctor["runtimes"] if r["name"] == RUNTIME)
    assert runtime["can_run"] is True and runtime["reason"] is None, runtime
    assert runtime["installed_version"] == plugin_version and runtime["probe_target"] == f"cpu+copy{family}"


def test_third_party_builder_unavailable_version_is_skipped(project: Path, plugin_version: str) -> None:
    """A target pinning a plugin version not installed here: the plugin's ``available`` says why, and the build
    node is skipped with that reason (not built with the wrong version)."""
    manifest = project / "onnx-copy.yaml"
    manifest.write_text(manifest.read_text().replace('builder_version: "1.0"', 'builder_version: "9.9"'))
    cache = project / "cache"
    plan = _json(_cli("plan", str(manifest), "--json", "--cache-dir", str(cache), cwd=project, cache=cache))
    assert [c["address"] for c in plan["cells"]] == ["tiny/fp32/default@cpu+copy9.9"]
    build = _json(_cli("build", str(manifest), "--json", "--cache-dir", str(cache), cwd=project, cache=cache))
    node = next(n for n in build["nodes"] if n["node"] == "build:tiny/fp32/default@cpu+copy9.9")
    assert node["status"] == "skipped", node
    assert node["reason"] == (f"installed onnx-copy-plugin {plugin_version} but target 'copy-cpu' wants 9.9.x")
