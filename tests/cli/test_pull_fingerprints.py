"""`pull` never serves a wrong or stale engine (issue 12), through the real command line, each in its own process:
the platform an engine was built for (decided from metadata: the engine blob is never read for a refused
candidate), the GPU model (SKU) it was built on, and the lean runtime a version-compatible engine needs.

The engines are real: the fixture builds and publishes the tiny model's onnxruntime CPU engine and its
TensorRT-RTX engine (the RTX builder needs no GPU) into a local store. What cannot be built here is written as a
variant of those records through the store's normal ``put``, beside the real engine bytes:

- the GPU model a record was built on (its metadata ``runner``): building on two GPU models (an L4 and an L40S)
  is impossible on one machine, so the RTX record is republished with another ``runner`` (and its own target
  name, address and build key, as two targets of one compute capability would have);
- the lean-runtime records are TensorRT (version compatible, built without the lean runtime): TensorRT cannot
  build here, so their engine bytes are the RTX engine's and those pulls never write the engine (no ``-o``):
  the decision is made from metadata before any byte is read.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from orchestrator import plugins
from orchestrator.app import gating
from orchestrator.app.project import load_project
from orchestrator.contracts.store import ArtifactFiles
from orchestrator.core.fingerprint import GpuInfo, RunnerFingerprint
from orchestrator.core.keys import record_key
from orchestrator.core.model import RegistryConfig

_TRACEBACK = "Traceback (most recent call last)"
CPU_ADDRESS = "tiny/fp32/default@cpu+ort1.31"
RTX_ADDRESS = "tiny/fp32/default@sm89+rtx1.7"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "ORCHESTRATE_CACHE": str(cwd / ".orchestrate"), "COLUMNS": "250"}
    env.pop("ORCHESTRATE_REGISTRY", None)
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


def _no_traceback(proc: subprocess.CompletedProcess) -> None:
    assert _TRACEBACK not in proc.stderr and _TRACEBACK not in proc.stdout, proc.stderr[-3000:]


def _model(path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 8, 8])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)


def manifest(rtx_version: str, benchmark: str = "{enabled: false}") -> str:
    return f"""\
manifest_version: 1
project: fingerprints
registry: {{store: local, path: artifacts}}
targets:
  - {{name: cpu, builder: onnxruntime, builder_version: "1.31", device: cpu, runners: {{build: [ubuntu-latest]}}}}
  - {{name: rtx, builder: tensorrt-rtx, builder_version: "{rtx_version}", compute_capability: "8.9",
     runners: {{build: [ubuntu-latest]}}}}
models:
  - name: tiny
    version: "1.0.0"
    source: {{path: tiny.onnx}}
    inputs:
      x:
        shape: [N, 3, 8, 8]
        profiles:
          default: {{min: [1, 3, 8, 8], opt: [2, 3, 8, 8], max: [4, 3, 8, 8]}}
    precisions: [fp32]
    gate:
      parity: {{data: {{samples: 1}}}}
      benchmark: {benchmark}
      allow_ungated_publish: true
"""


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> Path:
    """The tiny model's fp32 onnxruntime CPU engine (gated) and TensorRT-RTX engine (gate pending here: no GPU;
    published under allow_ungated_publish), built and published by the real commands."""
    rtx = pytest.importorskip("tensorrt_rtx", reason="the tensorrt-rtx extra builds the GPU engine")
    folder = tmp_path_factory.mktemp("published")
    _model(folder / "tiny.onnx")
    (folder / "m.yaml").write_text(manifest(rtx.__version__))
    for verb in ("build", "gate", "publish"):
        proc = run(verb, "m.yaml", cwd=folder)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return folder


def _store(path: Path):
    return plugins.open_store(RegistryConfig(store="local", path=str(path)))


def real(published: Path, address: str) -> tuple[dict, Path]:
    """A published record and its engine file (the blob in the fixture's store)."""
    (art,) = [a for a in _store(published / "artifacts").records("tiny") if a.metadata["address"] == address]
    return art.metadata, published / "artifacts" / "blobs" / "sha256" / art.digest.split(":", 1)[1]


def variant(meta: dict, *, name: str, built_on: tuple[str, str] | None = None, slug: str | None = None,
            same_address: bool = False, **target: object) -> dict:
    """``meta`` as another target ``name`` of it would publish it (its own address and build key; with
    ``same_address`` a rebuild of the same cell), built on the GPU ``built_on`` = (model, CC) (None: a runner without
    a GPU), with ``target`` fields replaced."""
    m = copy.deepcopy(meta)
    cell, _, where = m["address"].partition("@")
    if not same_address:
        m["address"] = f"{cell}@{name}+{slug or where.split('+', 1)[1]}"
    m["target"] = {**m["target"], "name": name, **target}
    m["build_key"] = hashlib.sha256(f"{meta['build_key']}/{name}".encode()).hexdigest()
    m["record_key"] = record_key(m["build_key"], m["gates"].get("key", ""))
    gpus = [{"index": 0, "name": built_on[0], "compute_capability": built_on[1], "memory_mib": 23034,
             "uuid": None}] if built_on else []
    m["runner"] = {**m["runner"], "gpus": gpus}
    params = m["provenance"]["predicate"]["buildDefinition"]["externalParameters"]
    params.update(address=m["address"], build_key=m["build_key"], target=m["target"])
    return m


def put(registry: Path, meta: dict, engine: Path) -> None:
    _store(registry).put(ArtifactFiles(engine=engine, metadata=meta))


def pull(folder: Path, *args: str) -> subprocess.CompletedProcess:
    proc = run("pull", "tiny", "--registry", "artifacts", *args, cwd=folder)
    _no_traceback(proc)
    return proc


# -- platform ----------------------------------------------------------------------------------------------------

def test_an_x86_64_engine_is_refused_on_aarch64_from_metadata_without_reading_the_blob(published, tmp_path):
    meta, engine = real(published, CPU_ADDRESS)
    # platform-specific whatever the onnxruntime builder declares; and one record from before platforms were
    # recorded (no target.platform): judged by the machine that built it (runner os/arch)
    pinned = variant(meta, name="cpu-pinned", platform="linux/x86_64", platform_specific=True)
    old = variant(meta, name="cpu-old")
    for key in ("platform", "platform_specific", "gpu_match", "lean_runtime"):
        old["target"].pop(key, None)
    old["runner"] = {**old["runner"], "os": "Linux", "arch": "x86_64"}
    for m in (pinned, old):
        put(tmp_path / "artifacts", m, engine)
    blob = tmp_path / "artifacts" / "blobs" / "sha256" / meta["engine"]["digest"].split(":", 1)[1]
    blob.unlink()  # any read of the engine now fails

    proc = pull(tmp_path, "--platform", "linux/aarch64", "--gpu", "sm87", "-o", "out.engine")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "no published engine of tiny 1.0.0 can run on this runner (declared sm87 (CC 8.7) on linux/aarch64" \
        in proc.stderr
    assert (f"{pinned['address']} ({meta['engine']['digest'][:19]}): built for linux/x86_64, this deployment is "
            "linux/aarch64") in proc.stderr
    assert (f"{old['address']} ({meta['engine']['digest'][:19]}): built for linux/x86_64, this deployment is "
            "linux/aarch64") in proc.stderr and "recorded before platforms were" in proc.stderr
    assert "integrity" not in proc.stderr.lower() and "blob" not in proc.stderr.lower()
    assert not (tmp_path / "out.engine").exists()

    # the control: on its own platform the same record is chosen, and only then is the missing blob noticed
    here = pull(tmp_path, "--platform", "linux/x86_64", "--gpu", "none", "-o", "out.engine")
    assert here.returncode != 0 and "linux/aarch64" not in here.stderr
    assert not (tmp_path / "out.engine").exists()
    chosen = pull(tmp_path, "--platform", "linux/x86_64", "--gpu", "none", "--json")
    assert chosen.returncode == 0, chosen.stderr
    assert json.loads(chosen.stdout)["platform"] == "linux/x86_64"


def test_a_jetson_is_not_an_aarch64_server(published, tmp_path):
    meta, engine = real(published, CPU_ADDRESS)
    put(tmp_path / "artifacts", variant(meta, name="sbsa", platform="linux/aarch64", platform_specific=True), engine)
    proc = pull(tmp_path, "--platform", "linux/arm64/L4T36.4", "--gpu", "sm87")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "built for linux/aarch64 servers (SBSA); this deployment is a Jetson (linux/aarch64/l4t36.4)" \
        in proc.stderr
    ok = pull(tmp_path, "--platform", "linux/aarch64", "--gpu", "none", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["address"] == "tiny/fp32/default@sbsa+ort1.31"


def test_a_portable_engine_is_not_refused_for_its_platform(published, tmp_path):
    meta, engine = real(published, CPU_ADDRESS)
    put(tmp_path / "artifacts", variant(meta, name="portable", platform="linux/x86_64", platform_specific=False),
        engine)
    proc = pull(tmp_path, "--platform", "windows/x86_64", "--gpu", "none", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["address"] == "tiny/fp32/default@portable+ort1.31"


@pytest.mark.parametrize("text,message", [
    ("darwin/arm64", "unknown OS 'darwin'"),
    ("linux", "unknown platform 'linux'"),
    ("linux/x86_64/l4t36.4", "the only variant is an L4T release on linux/aarch64"),
])
def test_an_unknown_platform_is_a_usage_error_with_the_forms(published, text, message):
    proc = pull(published, "--platform", text, "-o", "never.engine")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--platform" in proc.stderr and message in proc.stderr
    assert "linux/x86_64, windows/x86_64, linux/aarch64/l4t36.4" in proc.stderr
    assert not (published / "never.engine").exists()


# -- GPU model (SKU) ---------------------------------------------------------------------------------------------

@pytest.fixture()
def two_models(published, tmp_path) -> Path:
    """The real RTX engine published for two targets of compute capability 8.9: one built on an NVIDIA L4, then
    (newer, so listed first) one built on an NVIDIA L40S."""
    meta, engine = real(published, RTX_ADDRESS)
    put(tmp_path / "artifacts", variant(meta, name="l4", built_on=("NVIDIA L4", "8.9")), engine)
    put(tmp_path / "artifacts", variant(meta, name="l40s", built_on=("NVIDIA L40S", "8.9")), engine)
    return tmp_path


def test_an_engine_built_on_this_gpu_model_ranks_before_one_of_the_same_compute_capability(two_models):
    proc = pull(two_models, "--platform", "linux/x86_64", "--gpu", "sm89", "--gpu-model", "NVIDIA L4", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["address"] == "tiny/fp32/default@l4+rtx1.7"
    assert out["reason"].endswith("; built on this GPU model (NVIDIA L4)")
    (lower,) = out["rejected"]
    assert lower["artifact"].startswith("tiny/fp32/default@l40s+rtx1.7")
    assert "same compute capability 8.9, built on NVIDIA L40S; this GPU is NVIDIA L4" in lower["reason"]

    other = pull(two_models, "--platform", "linux/x86_64", "--gpu", "sm89", "--gpu-model", "nvidia l40s", "--json",
                 "-o", "l40s.engine")
    assert other.returncode == 0, other.stderr
    assert json.loads(other.stdout)["address"] == "tiny/fp32/default@l40s+rtx1.7"
    assert (two_models / "l40s.engine").stat().st_size > 0  # the real RTX engine, its header verified

    # no model declared: neither is "this model"; the newest wins, and the reason says the model is unknown
    unknown = pull(two_models, "--platform", "linux/x86_64", "--gpu", "sm89", "--json")
    assert unknown.returncode == 0, unknown.stderr
    out = json.loads(unknown.stdout)
    assert out["address"] == "tiny/fp32/default@l40s+rtx1.7"
    assert "this GPU's model is not declared (--gpu-model)" in out["reason"]


def test_gpu_model_needs_a_declared_gpu_of_its_compute_capability(two_models):
    alone = pull(two_models, "--gpu-model", "NVIDIA L4")
    assert alone.returncode == 2 and "--gpu-model declares the model of a declared GPU" in alone.stderr
    assert "--gpu sm89 --gpu-model 'NVIDIA L4'" in alone.stderr
    wrong = pull(two_models, "--gpu", "sm86", "--gpu-model", "NVIDIA L4")
    assert wrong.returncode == 2 and "compute capability 8.9, not the declared 8.6" in wrong.stderr


def test_a_gpu_match_sku_engine_runs_only_on_its_gpu_model(published, tmp_path):
    meta, engine = real(published, RTX_ADDRESS)
    sku = variant(meta, name="l40s", built_on=("NVIDIA L40S", "8.9"), gpu_match="sku")
    put(tmp_path / "artifacts", sku, engine)
    base = ("--platform", "linux/x86_64", "--gpu", "sm89")

    other = pull(tmp_path, *base, "--gpu-model", "NVIDIA L4")
    assert other.returncode == 4, other.stdout + other.stderr
    assert "built for the NVIDIA L40S only (gpu_match: sku); this GPU is NVIDIA L4" in other.stderr

    undeclared = pull(tmp_path, *base)
    assert undeclared.returncode == 4, undeclared.stdout + undeclared.stderr
    assert ("the declared GPU (sm89) has no model: declare it with --gpu-model 'NVIDIA L40S' if the deployment's "
            "GPU is one") in undeclared.stderr

    same = pull(tmp_path, *base, "--gpu-model", "NVIDIA L40S", "--json")
    assert same.returncode == 0, same.stderr
    assert json.loads(same.stdout)["reason"].endswith("built on this GPU model (NVIDIA L40S)")


# -- lean runtime ------------------------------------------------------------------------------------------------

LEAN = "10.13.3.9"


@pytest.fixture()
def lean_store(published, tmp_path) -> Path:
    """A TensorRT 10.13.3.9 engine, version compatible, built without its lean runtime (see the module
    docstring: metadata of a TensorRT record, the RTX engine's bytes, never written out here)."""
    meta, engine = real(published, RTX_ADDRESS)
    trt = variant(meta, name="sm89", slug="trt10.13", built_on=("NVIDIA L4", "8.9"), version_compatible=True,
                  lean_runtime=LEAN)
    trt["builder"] = {"name": "tensorrt", "version": LEAN}
    trt["runtime"] = "tensorrt"
    put(tmp_path / "artifacts", trt, engine)
    return tmp_path


# the deployment runs a newer TensorRT and loads the building release's lean runtime: what such engines are for
DEPLOYMENT = ("--platform", "linux/x86_64", "--gpu", "sm89", "--runtime", "trt10.14.1.48")


def test_a_lean_runtime_engine_is_refused_without_the_lean_runtime(lean_store):
    proc = pull(lean_store, *DEPLOYMENT)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "needs the TensorRT 10.13.3.9 lean runtime loaded by the deployment" in proc.stderr
    assert "pass --lean-runtime PATH" in proc.stderr and "libnvinfer_lean.so.10.13.3" in proc.stderr


@pytest.mark.parametrize("name", ["libnvinfer_lean.so.10.13.3", "libnvinfer_lean.so.10.13.3.9", "nvinfer_lean_10.dll",
                                  "lean-runtime.so"])
def test_a_lean_runtime_engine_is_chosen_with_its_lean_runtime(lean_store, name):
    library = lean_store / "lib" / name
    library.parent.mkdir()
    library.write_bytes(b"\x7fELF")
    proc = pull(lean_store, *DEPLOYMENT, "--lean-runtime", str(library), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["address"] == "tiny/fp32/default@sm89+trt10.13"
    assert out["lean_runtime"] == {"version": LEAN, "path": str(library)}
    assert "newer TensorRT runtime (version compatible)" in out["reason"]
    assert f"loads the TensorRT {LEAN} lean runtime from {library}" in out["reason"]
    human = pull(lean_store, *DEPLOYMENT, "--lean-runtime", str(library))
    assert human.returncode == 0 and f"the deployment must load the TensorRT {LEAN} lean runtime" in human.stdout


def test_a_lean_runtime_of_another_release_is_refused(lean_store):
    (lean_store / "lib").mkdir()
    newer = lean_store / "lib" / "libnvinfer_lean.so.10.14.1"
    newer.write_bytes(b"\x7fELF")
    proc = pull(lean_store, *DEPLOYMENT, "--lean-runtime", str(newer))
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert ("needs the TensorRT 10.13.3.9 lean runtime; --lean-runtime libnvinfer_lean.so.10.14.1 is TensorRT "
            "10.14.1") in proc.stderr
    # the SONAME link names only the major: its target's name is read
    link = lean_store / "lib" / "libnvinfer_lean.so.10"
    link.symlink_to(newer.name)
    proc = pull(lean_store, *DEPLOYMENT, "--lean-runtime", str(link))
    assert proc.returncode == 4 and "is TensorRT 10.14.1" in proc.stderr


def test_a_missing_lean_runtime_path_is_a_usage_error(lean_store):
    proc = pull(lean_store, *DEPLOYMENT, "--lean-runtime", "no/such/libnvinfer_lean.so.10.13.3", "-o", "x.engine")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--lean-runtime 'no/such/libnvinfer_lean.so.10.13.3': no such file" in proc.stderr
    assert "hint:" in proc.stderr and not (lean_store / "x.engine").exists()


# -- benchmark baseline: the same GPU model only -----------------------------------------------------------------

def test_the_benchmark_baseline_is_the_last_verdict_on_this_gpu_model(published, tmp_path):
    rtx = pytest.importorskip("tensorrt_rtx")
    meta, engine = real(published, RTX_ADDRESS)
    (tmp_path / "m.yaml").write_text(manifest(rtx.__version__, "{max_regression_pct: 10}"))
    _model(tmp_path / "tiny.onnx")

    def timed(name: str, on: str | None, p50: float, *, facts: bool = True) -> dict:
        # same address (the cell), its own build key: one engine per (re)build, newest put last
        m = variant(meta, name="rtx", built_on=(on, "8.9") if on else None, same_address=True)
        m["build_key"] = hashlib.sha256(name.encode()).hexdigest()
        m["record_key"] = record_key(m["build_key"], m["gates"].get("key", ""))
        verdict = {"status": "passed", "shapes": [{"label": "opt", "p50_ms": p50}], "reasons": [], "marker": name}
        m["gates"]["benchmark"] = {"kind": "benchmark", "address": m["address"], "status": "passed",
                                   "verdict": verdict, **({"runner": {"gpu": on}} if facts else {})}
        return m

    registry = tmp_path / "artifacts"
    put(registry, timed("old-build-on-l4", "NVIDIA L4", 1.0, facts=False), engine)  # before verdicts named a GPU
    put(registry, timed("on-l4", "NVIDIA L4", 2.0), engine)
    put(registry, timed("on-l40s", "NVIDIA L40S", 3.0), engine)  # the newest
    project = load_project([tmp_path / "m.yaml"], cache_dir=tmp_path / "cache")
    cell = project.graph.cell(RTX_ADDRESS)
    model = project.models["tiny"]

    def runner_on(name: str | None) -> RunnerFingerprint:
        gpus = (GpuInfo(0, name, "8.9", 23034),) if name else ()
        return RunnerFingerprint(os="linux", arch="x86_64", gpus=gpus)

    def baseline(name: str | None) -> str | None:
        found = gating._baseline(project, cell, model, runner_on(name))
        return found["marker"] if found else None

    assert baseline("NVIDIA L40S") == "on-l40s"
    assert baseline("NVIDIA L4") == "on-l4"  # not the newer L40S verdict
    assert baseline("NVIDIA A10") is None  # none on this model: no regression check against another GPU
    # a verdict that names no GPU is judged by the GPU of the runner that built it
    put(registry, timed("old-build-on-a10", "NVIDIA A10", 4.0, facts=False), engine)
    assert baseline("NVIDIA A10") == "old-build-on-a10"
