"""``pull --build-on-miss`` end to end (issue 26.1), through the CLI, against the real OCI registry (CNCF distribution,
tests/integration/registry_server.py) and the local store, with real onnxruntime and TensorRT-RTX AOT builds:

- a manifest without a CPU target is published (TensorRT-RTX engines for SM86, gates pending; its model version's
  ONNX beside them: ``registry.publish_onnx``); on this CPU machine ``pull`` exits 4, ``pull --build-on-miss`` builds
  an onnxruntime CPU engine from the published ONNX (the deployment's copy of the manifest has no model file),
  gates it, writes it; ``--publish-back`` adds exactly one record, marked ``built_on_device``, whose build key is the
  one ``plan`` computes for a manifest declaring the printed target (``= up to date``); a second pull builds
  nothing; two pulls at once build once (with ``--publish-back``: the other pulls the record; without: it reuses
  the build left in the cache dir, as a later pull does);
- an RTX AOT engine for a declared GPU is built for real here with the builder options of the nearest declared
  RTX target (the builder applies them), its gate pending (no GPU here): said, written, refused by
  ``--require-gate`` (exit 1, nothing written);
- the gate: a published fp32 engine's recorded outputs are reproduced by an fp16 engine built on a miss (each
  side's tolerance added), an engine of other weights is refused by that check, and a parity failure against the
  reference exits 3 with the failing output, writes nothing and publishes nothing (``--publish-back``);
- no ONNX published for the version: said with the fix; ``--publish-back`` with the model file here publishes it.
- int8: the deployment has no calibration data; the engine takes the calibration cache published with the
  version's engines, under the build key ``plan`` computes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from importlib import metadata
from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from filelock import FileLock

from orchestrator.app import deploy
from orchestrator.app.heal import descriptor_of, recipe
from orchestrator.app.heal_gate import recorded_check
from orchestrator.app.project import load_manifests
from orchestrator.core.model import RegistryConfig
from orchestrator.plugins import fingerprint, open_store
from orchestrator.run.workspace import read_result
from tests.integration.conftest import REPO, orchestrate, run_json
from tests.integration.registry_server import RegistryServer, require_binary
from tests.weights_models import mlp, perturbed_copy

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (pip install 'trt-orchestrator[ort]')")

pytestmark = pytest.mark.integration

FAMILY = ".".join(metadata.version("onnxruntime").split(".")[:2])
try:
    RTX = metadata.version("tensorrt_rtx_cu13")
except metadata.PackageNotFoundError:
    RTX = None
RTX_VERSION = "1.7.1.116"
HERE = fingerprint()
# a GPU here that the declared GPUs below are: the engines built for them would be gated for real here
GPU_CCS = {g.compute_capability for g in HERE.gpus}
ORT_CUDA = "CUDAExecutionProvider" in HERE.runtime_features("onnxruntime")

MANIFEST = """\
manifest_version: 1
project: heal
models:
  - name: mlp
    version: "1.0"
    source: {{path: {model}}}
    inputs:
      x:
        shape: [N, 64]
        profiles:
          default: {{min: [1, 64], opt: [2, 64], max: [4, 64]}}
    precisions: [fp32, {{name: fp16, via: transform}}]
    gate:
      parity: {{data: {{samples: 2, seed: 3}}{tolerances}}}
      benchmark: {{warmup: 1, iterations: 5, blocks: 1}}
      allow_ungated_publish: true
targets:
  - name: rtx-sm86
    builder: tensorrt-rtx
    builder_version: "{rtx}"
    compute_capability: "8.6"
    options: {{optimization_level: 2}}
{extra_targets}transforms:
  tools: {{onnxconverter-common: "1.16", onnx: "1.23"}}
registry: {registry}
"""
CPU_TARGET = f"""  - name: cpu
    builder: onnxruntime
    builder_version: "{FAMILY}"
    device: cpu
    options: {{ort_optimization: basic}}
"""


def write_manifest(path: Path, model: Path, registry: str, *, cpu: bool = False, tolerances: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(MANIFEST.format(model=model, registry=registry, rtx=RTX_VERSION, tolerances=tolerances,
                                    extra_targets=CPU_TARGET if cpu else ""))
    return path


def with_targets(src: Path, dest: Path, *targets: dict) -> Path:
    """A copy of the manifest ``src`` that also declares ``targets`` (as a deployment printed them)."""
    data = yaml.safe_load(src.read_text())
    data["targets"] = data["targets"] + list(targets)
    dest.write_text(yaml.safe_dump(data, sort_keys=False))
    return dest


def _records(ref: str, cache: Path) -> list[dict]:
    return run_json("ls", "--registry", ref, cache=cache)[0]["artifacts"]


def _plan(manifest: Path, cache: Path) -> dict[str, dict]:
    return {c["address"]: c for c in run_json("plan", str(manifest), cache=cache)[0]["cells"]}


def _ort_outputs(path: Path, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


class Published:
    """A registry the 'CI' side published a manifest to, and a deployment's copy of that manifest whose model file
    is not on the deployment machine."""

    def __init__(self, root: Path, registry_yaml: str, ref: str, *, cpu: bool = False, publish: tuple[str, ...] = (),
                 publish_onnx: bool = True) -> None:
        self.root, self.ref = root, ref
        (root / "ci").mkdir(parents=True, exist_ok=True)
        self.model = mlp(root / "ci" / "mlp.onnx")
        registry = registry_yaml.replace("}", ", publish_onnx: true}") if publish_onnx else registry_yaml
        self.manifest = write_manifest(root / "ci" / "heal.yaml", self.model, registry, cpu=cpu)
        self.ci_cache = root / "ci-cache"
        for verb in ("build", "gate"):
            orchestrate(verb, str(self.manifest), cache=self.ci_cache)
        only = [a for p in publish for a in ("--only", p)]
        orchestrate("publish", str(self.manifest), *only, cache=self.ci_cache)
        # the deployment's copy: the same manifest, its model file absent there
        self.deployed = write_manifest(root / "deploy" / "heal.yaml", root / "deploy" / "models" / "mlp.onnx",
                                       registry, cpu=cpu)

    def pull(self, *args: str, cache: Path, check: bool = True, manifest: Path | None = None):
        """``pull --build-on-miss``; the deployment is declared without a GPU unless ``args`` declare one (the same
        answers on a machine with one)."""
        where = () if "--gpu" in args else ("--gpu", "none")
        return run_json("pull", "mlp", "--build-on-miss", "--manifest", str(manifest or self.deployed), *where, *args,
                        cache=cache, check=check)


@pytest.fixture(scope="module")
def oci(tmp_path_factory) -> Published:
    require_binary()
    root = tmp_path_factory.mktemp("heal-oci")
    server = RegistryServer(root / "registry").start()
    try:
        url = f"{server.host}/heal"
        world = Published(root, f'{{store: oci, url: "{url}", insecure: true}}', f"oci://{url}")
        yield world
    finally:
        server.stop()


def test_a_miss_builds_an_onnxruntime_cpu_engine_gates_it_and_publishes_it_back_under_the_plan_key(oci, tmp_path):
    cache = tmp_path / "deploy-cache"
    assert not (oci.root / "deploy" / "models" / "mlp.onnx").exists()  # the deployment has no model file
    refused = orchestrate("pull", "mlp", "--registry", oci.ref, "--gpu", "none", "-o", str(tmp_path / "none.onnx"),
                          cache=cache, check=False)
    assert refused.returncode == 4 and "--build-on-miss" in refused.stderr  # what exit 4 offers now
    before = _records(oci.ref, cache)
    out = tmp_path / "mlp.onnx"
    doc, proc = oci.pull("--precision", "fp32", "-o", str(out), "--publish-back", cache=cache)
    heal = doc["build_on_miss"]
    assert heal["built"] == "built" and heal["address"] == f"mlp/fp32/default@cpu+ort{FAMILY}"
    assert heal["gate"]["status"] == "passed", heal["gate"]
    assert heal["gate"]["parity"]["status"] == "passed" and heal["gate"]["benchmark"]["status"] == "passed"
    assert heal["target"] == {"name": f"device-cpu-ort{FAMILY}", "builder": "onnxruntime",
                              "builder_version": metadata.version("onnxruntime"), "device": "cpu"}
    assert heal["nearest_target"] is None  # the manifest declares no onnxruntime target: its default options
    assert [c["address"] for c in heal["published_candidates"]] == ["mlp/fp32/default@sm86+rtx1.7"]
    # the written engine is the one built, runs here and agrees with the model
    assert doc["digest"] == heal["digest"] and out.is_file()
    x = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)
    np.testing.assert_allclose(_ort_outputs(out, x), _ort_outputs(oci.model, x), rtol=1e-4, atol=1e-5)
    # exactly one record more, marked built on device, with the deployment's fingerprint and the gate's verdict
    after = _records(oci.ref, cache)
    assert len(after) == len(before) + 1
    (new,) = [a for a in after if a["record_key"] not in {b["record_key"] for b in before}]
    assert (new["address"], new["build_key"], new["digest"]) == (heal["address"], heal["build_key"], heal["digest"])
    shown = run_json("show", new["record_key"][:16], "--registry", oci.ref, cache=cache)[0]
    assert shown["built_on_device"]["gate"]["status"] == "passed" and shown["gates"]["status"] == "passed"
    assert shown["built_on_device"]["runner"]["runtimes"]["onnxruntime"]["version"] == metadata.version("onnxruntime")
    assert shown["built_on_device"]["target"] == heal["target"]
    text = orchestrate("show", new["record_key"][:16], "--registry", oci.ref, cache=cache).stdout
    assert "built on  a deployment (no GPU" in text and "by pull --build-on-miss" in text
    # a manifest declaring the printed target plans that very cell, published and up to date
    declared = with_targets(oci.manifest, tmp_path / "declared.yaml", heal["target"])
    cell = _plan(declared, tmp_path / "plan-cache")[heal["address"]]
    assert (cell["status"], cell["build_key"]) == ("up-to-date", heal["build_key"])

    # the model version's ONNX was published once (registry.publish_onnx); publishing again adds nothing
    orchestrate("publish", str(oci.manifest), cache=oci.ci_cache)
    weights = run_json("ls", "--registry", oci.ref, cache=cache)[0]["weights"]
    assert [(w["address"].split("/")[1], w["version"]) for w in weights] == [("weights", "1.0")]

    # a second pull builds nothing: the record published back fits
    again, _ = oci.pull("--precision", "fp32", "-o", str(tmp_path / "again.onnx"), cache=tmp_path / "other-cache")
    assert again["build_on_miss"] == {"built": None, "waited": False} and again["digest"] == heal["digest"]
    assert len(_records(oci.ref, cache)) == len(after)


@pytest.mark.skipif(ORT_CUDA, reason="onnxruntime's CUDA provider is here: an onnxruntime CUDA engine runs on SM90")
def test_nothing_that_can_be_built_here_runs_there_exits_4_with_every_reason(oci, tmp_path):
    """A declared Hopper GPU: RTX runtimes refuse CC 9.0, a CPU engine is refused for a declared GPU; the published
    candidates and the cells that could be built here are listed, each with its reason; nothing built or written."""
    cache = tmp_path / "cache"
    before = _records(oci.ref, cache)
    out = tmp_path / "mlp.engine"
    doc, proc = oci.pull("--gpu", "sm90", "-o", str(out), cache=cache, check=False)
    assert proc.returncode == 4 and not out.exists()
    built = {c["id"]: c["reason"] for c in doc["error"]["candidates"] if c.get("build")}
    assert f"build mlp/fp32/default@cpu+ort{FAMILY}" in built
    assert "--allow-cpu" in built[f"build mlp/fp32/default@cpu+ort{FAMILY}"]
    assert any(c.get("address") == "mlp/fp32/default@sm86+rtx1.7" for c in doc["error"]["candidates"])
    if RTX is not None:
        assert "9.0" in built["build mlp/fp32/default@sm90+rtx1.7"]
    assert not (cache / "nodes").exists() and _records(oci.ref, cache) == before


def _two_at_once(world: Published, cache: Path, key: str, outs: Path, *args: str) -> list[str]:
    """Two ``pull --build-on-miss --precision fp16`` of one cell on one machine (``cache``), both waiting at the
    build key's lock (held here until both say so); what each printed."""
    (cache / "locks").mkdir(parents=True, exist_ok=True)
    held = FileLock(str(cache / "locks" / f"build-on-miss-{key}.lock"))
    held.acquire()
    env = {**os.environ, "ORCHESTRATE_CACHE": str(cache), "COLUMNS": "400"}
    procs, waiting, said = [], [], []
    try:
        for i in range(2):
            proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "pull", "mlp", "--build-on-miss",
                                     "--manifest", str(world.deployed), "--gpu", "none", "--precision", "fp16",
                                     *args, "-o", str(outs / f"mlp-{i}.onnx")], cwd=REPO, env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            event, lines = threading.Event(), []

            def read(proc=proc, event=event, lines=lines) -> None:
                for line in proc.stderr:
                    lines.append(line)
                    if "waiting for it" in line:
                        event.set()
                event.set()

            threading.Thread(target=read, daemon=True).start()
            procs.append(proc)
            waiting.append(event)
            said.append(lines)
        for event in waiting:
            assert event.wait(timeout=300)
        assert all(any("waiting for it" in line for line in lines) for lines in said), said
    finally:
        held.release()
    printed = []
    for proc in procs:
        printed.append(proc.stdout.read())
        assert proc.wait(timeout=600) == 0, said
    return printed


def test_two_pulls_at_once_build_once(oci, tmp_path):
    """The first to get the lock builds and publishes back, the other finds that record: built once, one record
    more."""
    cache = tmp_path / "shared-cache"
    target = {"name": f"device-cpu-ort{FAMILY}", "builder": "onnxruntime",
              "builder_version": metadata.version("onnxruntime"), "device": "cpu"}
    key = _plan(with_targets(oci.manifest, tmp_path / "declared.yaml", target),
                tmp_path / "plan-cache")[f"mlp/fp16/default@cpu+ort{FAMILY}"]["build_key"]
    before = len(_records(oci.ref, cache))
    outs = _two_at_once(oci, cache, key, tmp_path, "--publish-back")
    built = [o for o in outs if o.startswith("built ")]
    assert len(built) == 1, outs  # the other "chose" the record the first published back
    assert sum(o.startswith("chose ") for o in outs) == 1, outs
    assert len(_records(oci.ref, cache)) == before + 1


@pytest.mark.skipif(RTX is None, reason="TensorRT-RTX is not installed (pip install 'trt-orchestrator[rtx]')")
@pytest.mark.skipif("8.9" in GPU_CCS, reason="an SM89 GPU is here: the engine would be gated for real")
def test_an_rtx_engine_for_a_declared_gpu_is_built_here_and_its_gate_stays_pending(oci, tmp_path):
    cache = tmp_path / "deploy-cache"
    out = tmp_path / "mlp.engine"
    refused, proc = oci.pull("--gpu", "sm89", "--require-gate", "-o", str(out), cache=cache, check=False)
    assert proc.returncode == 1 and not out.exists()
    assert "--require-gate refuses an ungated engine" in refused["error"]["message"]
    assert "needs an NVIDIA GPU" in refused["error"]["message"]
    # the deployment is told, in words: the gate is pending here, and why; the engine is written ungated
    told = orchestrate("pull", "mlp", "--build-on-miss", "--manifest", str(oci.deployed), "--gpu", "sm89", "-o",
                       str(tmp_path / "told.engine"), cache=cache)
    said = " ".join(told.stdout.split())
    assert "gate pending (" in said and "needs an NVIDIA GPU" in said and "written ungated" in said, told.stdout
    assert (tmp_path / "told.engine").is_file()
    before = _records(oci.ref, cache)
    doc, _ = oci.pull("--gpu", "sm89", "-o", str(out), "--publish-back", cache=cache)
    heal = doc["build_on_miss"]
    assert heal["address"] == "mlp/fp32/default@sm89+rtx1.7" and heal["built"] == "cached"  # built by the refusal
    assert heal["gate"]["status"] == "pending" and "needs an NVIDIA GPU" in heal["gate"]["pending"]
    assert heal["nearest_target"] == "rtx-sm86" and heal["target"]["compute_capability"] == "8.9"
    # the builder options of the nearest declared target of the same builder, applied by the real build
    assert heal["target"]["options"] == {"optimization_level": 2}
    # a real TensorRT-RTX engine for SM89, read from its own bytes
    identified = run_json("identify", str(out), cache=cache)[0]
    assert "8.9" in json.dumps(identified) and "rtx" in json.dumps(identified).lower()
    after = _records(oci.ref, cache)
    assert len(after) == len(before) + 1
    (new,) = [a for a in after if a["record_key"] not in {b["record_key"] for b in before}]
    shown = run_json("show", new["record_key"][:16], "--registry", oci.ref, cache=cache)[0]
    assert shown["built_on_device"]["gate"]["status"] == "pending" and shown["gates"]["status"] == "pending"
    assert shown["key_inputs"]["options"]["optimization_level"] == 2
    applied = read_result(Path(heal["engine"]).parent)["data"]["metadata"]["options"]  # what the builder set
    assert applied == {"optimization_level": 2}
    declared = with_targets(oci.manifest, tmp_path / "declared.yaml", heal["target"])
    cell = _plan(declared, tmp_path / "plan-cache")[heal["address"]]
    assert (cell["status"], cell["build_key"]) == ("up-to-date", heal["build_key"])
    # the deployment with that GPU now pulls it as any published engine
    again, _ = oci.pull("--gpu", "sm89", "-o", str(tmp_path / "again.engine"), cache=tmp_path / "c2")
    assert again["build_on_miss"]["built"] is None and again["digest"] == heal["digest"]


# -- the gate, on a local store ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def local(tmp_path_factory) -> Published:
    """RTX and CPU targets, published: the RTX engines and the CPU fp32 engine (its parity gate recorded its
    outputs); the CPU fp16 cell is not published."""
    root = tmp_path_factory.mktemp("heal-local")
    store = root / "artifacts"
    return Published(root, f"{{store: local, path: {store}}}", str(store), cpu=True,
                     publish=("mlp/fp32/default@sm86+rtx1.7", "mlp/fp16/default@sm86+rtx1.7",
                              f"mlp/fp32/default@cpu+ort{FAMILY}"))


def test_an_engine_built_on_a_miss_reproduces_the_outputs_a_published_engine_recorded(local, tmp_path):
    out = tmp_path / "fp16.onnx"
    doc, _ = local.pull("--precision", "fp16", "-o", str(out), cache=tmp_path / "cache")
    heal = doc["build_on_miss"]
    assert heal["address"] == f"mlp/fp16/default@cpu+ort{FAMILY}" and heal["nearest_target"] == "cpu"
    recorded = heal["gate"]["recorded_outputs"]
    assert recorded["against"]["address"] == f"mlp/fp32/default@cpu+ort{FAMILY}"  # the most precise record
    assert recorded["passed"] and recorded["compared"] > 0 and "recorded default:fp32" in recorded["tolerance"]
    assert heal["gate"]["status"] == "passed" and out.is_file()
    # the builder options of the nearest declared target of the same builder (the declared cpu target's)
    assert heal["target"]["options"] == {"ort_optimization": "basic"}
    # a second pull on this machine builds nothing: the build it left in the cache dir, gated again
    again, _ = local.pull("--precision", "fp16", "-o", str(tmp_path / "again.onnx"), cache=tmp_path / "cache")
    assert again["build_on_miss"]["built"] == "cached" and again["digest"] == heal["digest"]
    assert again["build_on_miss"]["gate"]["status"] == "passed"


def test_the_recorded_outputs_refuse_an_engine_of_other_weights(local, tmp_path):
    """The check itself, on the built cell and the published record: the engine built on a miss reproduces them;
    an onnxruntime engine of the same graph with other weights does not."""
    store = open_store(RegistryConfig(store="local", path=str(local.ref)))
    (manifest,) = load_manifests([local.deployed], absent_files_ok=True)
    chosen = recipe(manifest, manifest.models[0], store, where=deploy.deployment(), actual=fingerprint(),
                    ws_root=tmp_path / "ws", precision="fp32")
    other, changed = perturbed_copy(local.model, tmp_path / "other.onnx", scale=0.5)
    assert changed
    refused = recorded_check(store, chosen.cell, other, descriptor_of(chosen.cell))
    assert refused["compared"] > 0 and not refused["passed"] and refused["problems"]
    same = recorded_check(store, chosen.cell, local.model, descriptor_of(chosen.cell))
    assert same["passed"], same


def test_two_pulls_at_once_without_publish_back_build_once(local, tmp_path):
    """Nothing is published back: the first to get the lock builds, the other takes the build it left in the cache
    dir (``reused``); both write the same gated engine, the registry is unchanged."""
    cache = tmp_path / "shared-cache"
    store = open_store(RegistryConfig(store="local", path=str(local.ref)))
    (manifest,) = load_manifests([local.deployed], absent_files_ok=True)
    key = recipe(manifest, manifest.models[0], store, where=deploy.deployment(gpu="none"), actual=fingerprint(),
                 ws_root=cache, precision="fp16").cell.build_key
    before = len(_records(local.ref, cache))
    outs = _two_at_once(local, cache, key, tmp_path)
    assert sorted(o.split(" ", 1)[0] for o in outs) == ["built", "reused"], outs
    assert all("gate passed" in o for o in outs), outs
    assert (tmp_path / "mlp-0.onnx").read_bytes() == (tmp_path / "mlp-1.onnx").read_bytes()
    assert len(_records(local.ref, cache)) == before


def test_a_parity_failure_writes_nothing_publishes_nothing_and_exits_3(local, tmp_path):
    strict = write_manifest(tmp_path / "strict.yaml", tmp_path / "absent.onnx", f"{{store: local, path: {local.ref}}}",
                            cpu=True, tolerances=", tolerances: {fp16: {atol: 0.0, rtol: 0.0}}")
    out = tmp_path / "out" / "fp16.onnx"
    before = _records(local.ref, tmp_path / "cache")
    doc, proc = local.pull("--precision", "fp16", "-o", str(out), "--publish-back", cache=tmp_path / "cache",
                           check=False, manifest=strict)
    assert proc.returncode == 3 and doc["path"] is None
    gate = doc["build_on_miss"]["gate"]
    assert gate["status"] == "failed" and any(r.startswith("parity: opt/y: ") for r in gate["reasons"]), gate
    assert doc["build_on_miss"]["published"] is None
    text = orchestrate("pull", "mlp", "--build-on-miss", "--manifest", str(strict), "--precision", "fp16",
                       "--gpu", "none", "--publish-back", "-o", str(out), cache=tmp_path / "cache", check=False)
    assert text.returncode == 3 and "gate failed" in text.stderr and "nothing written" in text.stderr
    assert "parity: opt/y: " in text.stderr  # the failing output
    # nothing written (not even the folder -o named) and nothing published
    assert not out.parent.exists()
    assert _records(local.ref, tmp_path / "cache") == before


def test_no_published_onnx_is_said_with_the_fix_and_publish_back_publishes_it(tmp_path):
    store = tmp_path / "artifacts"
    world = Published(tmp_path, f"{{store: local, path: {store}}}", str(store), publish_onnx=False)
    doc, proc = world.pull("-o", str(tmp_path / "x.onnx"), cache=tmp_path / "cache", check=False)
    assert proc.returncode == 1 and "its ONNX is not in the registry" in doc["error"]["message"]
    assert "registry.publish_onnx: true" in doc["error"]["hint"] and "--publish-back" in doc["error"]["hint"]
    # a machine with the model file and the registry's credentials publishes it (once) and builds
    doc, _ = world.pull("-o", str(tmp_path / "x.onnx"), "--publish-back", cache=tmp_path / "cache",
                        manifest=world.manifest)
    assert doc["build_on_miss"]["gate"]["status"] == "passed"
    weights = run_json("ls", "--registry", world.ref, cache=tmp_path / "cache")[0]["weights"]
    assert len(weights) == 1


# -- int8: the calibration cache published with the version's engines ---------------------------------------------

INT8 = """\
manifest_version: 1
project: heal-int8
models:
  - name: mlp
    version: "1.0"
    source: {{path: {model}}}
    inputs:
      x:
        shape: [N, 64]
        profiles:
          default: {{min: [1, 64], opt: [2, 64], max: [4, 64]}}
    precisions: [{{name: int8, calibration_method: minmax}}]
    calibration: {{path: {calib}, samples: 4}}
    gate:
      parity:
        data: {{samples: 2, seed: 3}}
        # the recipe is under test, not int8 accuracy (onnxruntime picks int8 kernels by instruction set)
        tolerances: {{int8: {{atol: 1.0, rtol: 1.0, min_cosine: 0.9, max_rel_l2: 0.5}}}}
      benchmark: {{enabled: false}}
      allow_ungated_publish: true
targets:
  - name: rtx-sm86
    builder: tensorrt-rtx
    builder_version: "{rtx}"
    compute_capability: "8.6"
registry: {{store: local, path: {store}, publish_onnx: true}}
"""


@pytest.mark.skipif(RTX is None, reason="TensorRT-RTX is not installed (pip install 'trt-orchestrator[rtx]')")
def test_an_int8_engine_is_built_from_the_published_calibration_cache_without_the_calibration_data(tmp_path):
    """CI calibrates once (Q/DQ scales for the RTX int8 engine) and publishes the cache with the engine; the
    deployment has neither the model nor the calibration data: its onnxruntime int8 engine takes the published ONNX
    and that calibration cache, and its build key is the one ``plan`` computes for the declared target."""
    store = tmp_path / "artifacts"
    (tmp_path / "ci" / "calib").mkdir(parents=True)
    model = mlp(tmp_path / "ci" / "mlp.onnx")
    for i in range(4):  # calibration runs at the opt shape
        np.save(tmp_path / "ci" / "calib" / f"s{i}.npy",
                np.random.default_rng(i).standard_normal((2, 64)).astype(np.float32))
    ci = tmp_path / "ci" / "m.yaml"
    ci.write_text(INT8.format(model=model, calib=tmp_path / "ci" / "calib", store=store, rtx=RTX_VERSION))
    for verb in ("build", "gate", "publish"):
        orchestrate(verb, str(ci), cache=tmp_path / "ci-cache")
    (tmp_path / "deploy").mkdir()
    deployed = tmp_path / "deploy" / "m.yaml"
    deployed.write_text(INT8.format(model=tmp_path / "deploy" / "mlp.onnx", calib=tmp_path / "deploy" / "calib",
                                    store=store, rtx=RTX_VERSION))
    cache = tmp_path / "deploy-cache"
    out = tmp_path / "mlp-int8.onnx"
    doc, _ = run_json("pull", "mlp", "--build-on-miss", "--manifest", str(deployed), "--gpu", "none", "-o", str(out),
                      "--publish-back", cache=cache)
    heal = doc["build_on_miss"]
    assert heal["address"] == f"mlp/int8/default@cpu+ort{FAMILY}" and heal["built"] == "built"
    assert heal["gate"]["status"] == "passed" and out.is_file()
    # quantized: the Q/DQ model from the published scales, not a float engine
    assert any(n.op_type == "QuantizeLinear" for n in onnx.load(str(out)).graph.node)
    logs = "".join(p.read_text() for p in (cache / "logs").glob("calibrate_*.log"))
    assert "fetched from the store" in logs and "mlp/int8/default@sm86+rtx1.7" in logs, logs
    declared = with_targets(ci, tmp_path / "declared.yaml", heal["target"])
    cell = _plan(declared, tmp_path / "plan-cache")[heal["address"]]
    assert (cell["status"], cell["build_key"]) == ("up-to-date", heal["build_key"])
