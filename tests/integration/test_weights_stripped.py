"""``targets[].weights: stripped`` end to end with the onnxruntime plugin (issue 25), against the real local store and
the real OCI registry (CNCF distribution, tests/integration/registry_server.py), through the CLI:

- publish: each model version's ONNX is published once as a weights record, every stripped engine's record points at
  its blob (the fp16 engines carry their weights: onnxruntime's CPU optimizer rewrote them all, so no fp16 blob is
  published), publishing again adds nothing;
- ``pull`` refits the stripped engine from the blob, checks it on the samples its gate recorded and writes it;
  ``--keep-stripped`` writes it as published; ``pull --all`` and ``export triton`` fetch each blob once;
- a tampered blob is refused (digest), a missing weights record and a refit that does not reproduce the recorded
  outputs write nothing and exit non-zero with the reason;
- ``ls``/``show`` show the blobs, ``retention`` keeps a blob while an engine it keeps needs it.
"""

from __future__ import annotations

import hashlib
import shutil
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

from orchestrator.contracts.runtime import RuntimeOptions
from orchestrator.core.artifact import EngineDescriptor
from orchestrator.core.model import RegistryConfig
from orchestrator.gates.drift import load_outputs
from orchestrator.gates.refit_check import check_refitted
from orchestrator.weights_file import DATA_NAME, GRAPH_NAME, reassemble, split
from tests.integration.conftest import orchestrate, run_json
from tests.integration.registry_server import RegistryServer, require_binary
from tests.weights_models import mlp, perturbed_copy

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (pip install 'trt-orchestrator[ort]')")

pytestmark = pytest.mark.integration

FAMILY = ".".join(metadata.version("onnxruntime").split(".")[:2])
MANIFEST = """\
manifest_version: 1
project: weights
models:
  - name: mlp
    version: "{version}"
    source: {{path: {model}}}
    inputs:
      x:
        shape: [N, 64]
        profiles:
          small: {{min: [1, 64], opt: [2, 64], max: [4, 64]}}
          big: {{min: [1, 64], opt: [8, 64], max: [16, 64]}}
    precisions: [fp32, {{name: fp16, via: transform}}]
    gate:
      parity: {{data: {{samples: 2, seed: 3}}}}
      benchmark: {{warmup: 1, iterations: 5, blocks: 1}}
targets:
  - name: cpu
    builder: onnxruntime
    builder_version: "{family}"
    device: cpu
    weights: stripped
transforms:
  tools: {{onnxconverter-common: "1.16", onnx: "1.23"}}
registry: {registry}
"""


def write_manifest(root: Path, model: Path, registry: str, version: str = "1.0") -> Path:
    path = root / f"weights-{version}.yaml"
    path.write_text(MANIFEST.format(model=model, registry=registry, family=FAMILY, version=version))
    return path


class World:
    """One published registry: its manifest, the CLI's ``--registry`` value and the store behind it."""

    def __init__(self, kind: str, root: Path, registry_yaml: str, ref: str, config: RegistryConfig,
                 server: RegistryServer | None = None) -> None:
        self.kind, self.root, self.ref, self.config, self.server = kind, root, ref, config, server
        self.cache = root / "cache"
        self.model = mlp(root / "mlp.onnx")
        self.manifest = write_manifest(root, self.model, registry_yaml)
        for verb in ("build", "gate", "publish"):
            orchestrate(verb, str(self.manifest), cache=self.cache)

    def cli(self, *args: str, check: bool = True):
        return orchestrate(*args, "--registry", self.ref, cache=self.cache, check=check)

    def json(self, *args: str, check: bool = True):
        return run_json(*args, "--registry", self.ref, cache=self.cache, check=check)[0]


@pytest.fixture(scope="module", params=["local", "oci"])
def world(request, tmp_path_factory) -> World:
    root = tmp_path_factory.mktemp(f"weights-{request.param}")
    if request.param == "local":
        store = root / "artifacts"
        return World("local", root, f"{{store: local, path: {store}}}", str(store),
                     RegistryConfig(store="local", path=str(store)))
    require_binary()
    server = RegistryServer(root / "registry").start()
    request.addfinalizer(server.stop)
    url = f"{server.host}/weights"
    return World("oci", root, f'{{store: oci, url: "{url}", insecure: true}}', f"oci://{url}",
                 RegistryConfig(store="oci", url=url, insecure=True), server)


def _ls(world: World) -> dict:
    return world.json("ls")


def _sha(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def _outputs(path: Path, x: np.ndarray) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_publish_puts_each_blob_once_and_every_stripped_engine_points_at_it(world):
    listing = _ls(world)
    engines = {a["address"]: a for a in listing["artifacts"]}
    assert sorted(engines) == [f"mlp/{p}/{s}@cpu+ort{FAMILY}" for p in ("fp16", "fp32") for s in ("big", "small")]
    blobs = {w["source"]["kind"]: w for w in listing["weights"]}
    assert sorted(blobs) == ["model"] and len(listing["weights"]) == 1
    model_blob = blobs["model"]
    # the two fp32 engines (two profile sets) share the model's blob; it is published once
    fp32 = [a for a in engines.values() if "/fp32/" in a["address"]]
    assert {a["weights"]["blob"] for a in fp32} == {model_blob["digest"]}
    assert sorted(model_blob["engines"]) == sorted(a["address"] for a in fp32)
    assert all(a["weights"] == {"mode": "stripped", "stripped": True, "blob": model_blob["digest"]} for a in fp32)
    # onnxruntime's CPU optimizer upcasts the fp16 weights: those engines carry them, nothing to refit, no blob
    fp16 = [a for a in engines.values() if "/fp16/" in a["address"]]
    assert all(a["weights"] == {"mode": "stripped", "stripped": False, "blob": None} for a in fp16)
    # the stripped engine is a fraction of its weights (two 1 KiB+ matrices live in the blob)
    assert all(a["size"] * 10 < model_blob["size"] for a in fp32)
    # publishing again adds no record
    orchestrate("publish", str(world.manifest), cache=world.cache)
    again = _ls(world)
    assert len(again["artifacts"]) == 4 and len(again["weights"]) == 1
    shown = world.json("show", model_blob["address"])
    assert shown["kind"] == "weights" and shown["blob"]["tensors"] == 2
    assert {a["name"] for a in shown["attachments"]} == {GRAPH_NAME}


def test_pull_refits_checks_and_writes(world, tmp_path):
    out = tmp_path / "mlp.onnx"
    got = world.json("pull", "mlp", "--precision", "fp32", "--profile", "big", "-o", str(out))
    assert got["refit"]["check"]["passed"] and got["refit"]["check"]["compared"] == 2
    assert _sha(out) != got["digest"] and out.stat().st_size > got["metadata"]["engine"]["size"]
    x = np.random.default_rng(0).random((5, 64), dtype=np.float32)
    np.testing.assert_allclose(_outputs(out, x), _outputs(world.model, x), rtol=1e-4, atol=1e-5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlp.onnx"]  # no staging or blob file left
    kept = tmp_path / "stripped.onnx"
    stripped = world.json("pull", "mlp", "--precision", "fp32", "--profile", "big", "--keep-stripped", "-o",
                          str(kept))
    assert stripped["refit"] is None and _sha(kept) == stripped["digest"]


def test_pull_all_and_export_triton_fetch_each_blob_once(world, tmp_path):
    result = world.json("pull", "--all", "mlp", "--gpus", "none", "--precision", "fp32", "-o", str(tmp_path / "d"))
    assert [e["status"] for e in result["engines"]] == ["refitted"] and result["weights_blobs_fetched"] == 1
    written = Path(result["engines"][0]["path"])
    x = np.random.default_rng(1).random((3, 64), dtype=np.float32)
    np.testing.assert_allclose(_outputs(written, x), _outputs(world.model, x), rtol=1e-4, atol=1e-5)
    # both fp32 profile sets, through Triton's writer: two engines, one blob download
    repo = tmp_path / "triton"
    for profile in ("big", "small"):
        exported = world.json("export", "triton", "mlp", "--precision", "fp32", "--profile", profile, "--gpus",
                              "none", "--repo", str(repo / profile))
        assert exported["weights_blobs_fetched"] == 1
        model = repo / profile / "mlp" / "1" / "model.onnx"
        np.testing.assert_allclose(_outputs(model, x), _outputs(world.model, x), rtol=1e-4, atol=1e-5)


def test_a_tampered_blob_is_refused_and_nothing_written(world, tmp_path):
    blob = next(w for w in _ls(world)["weights"] if w["source"]["kind"] == "model")
    if world.kind == "local":
        stored = Path(world.config.path) / "blobs" / "sha256" / blob["digest"].split(":")[1]
    else:
        stored = world.server.blob_data(blob["digest"])
    original = stored.read_bytes()
    stored.chmod(0o644)
    try:
        stored.write_bytes(original[:100] + bytes([original[100] ^ 1]) + original[101:])
        out = tmp_path / "mlp.onnx"
        proc = world.cli("pull", "mlp", "--precision", "fp32", "--profile", "big", "-o", str(out), check=False)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "weights blob" in proc.stderr and "refused" in proc.stderr, proc.stderr
        assert not out.exists() and list(tmp_path.iterdir()) == []
        # the same refusal from pull --all and export triton: no engine, no folder, no model repository
        for args in (("pull", "--all", "mlp", "--gpus", "none", "--precision", "fp32", "-o", str(tmp_path / "all")),
                     ("export", "triton", "mlp", "--precision", "fp32", "--profile", "big", "--gpus", "none",
                      "--repo", str(tmp_path / "triton"))):
            proc = world.cli(*args, check=False)
            assert proc.returncode == 1, proc.stdout + proc.stderr
            assert "weights blob" in proc.stderr and "refused" in proc.stderr and "Traceback" not in proc.stderr
            assert list(tmp_path.iterdir()) == [], sorted(str(p) for p in tmp_path.rglob("*"))
    finally:
        stored.write_bytes(original)


def _registry_yaml(world: World) -> str:
    if world.kind == "local":
        return "{store: local, path: " + str(world.config.path) + "}"
    return f'{{store: oci, url: "{world.config.url}", insecure: true}}'


def test_a_version_bump_publishes_the_weights_record_of_that_version(world, tmp_path):
    """The same model file under a new version label: the engines are published again (not rebuilt), and so is
    their weights record, as that version (the blob's bytes are stored once), which its pull refits from."""
    manifest = write_manifest(world.root, world.model, _registry_yaml(world), version="1.1")
    for verb in ("build", "gate", "publish"):
        orchestrate(verb, str(manifest), cache=world.cache)
    listing = _ls(world)
    bumped = {w["source"]["kind"]: w for w in listing["weights"] if w["version"] == "1.1"}
    first = {w["source"]["kind"]: w for w in listing["weights"] if w["version"] == "1.0"}
    assert sorted(bumped) == ["model"]
    assert {k: w["digest"] for k, w in bumped.items()} == {k: w["digest"] for k, w in first.items()}
    assert {k: w["record_key"] for k, w in bumped.items()} != {k: w["record_key"] for k, w in first.items()}
    assert sorted(bumped["model"]["engines"]) == [f"mlp/fp32/{s}@cpu+ort{FAMILY}" for s in ("big", "small")]
    got = world.json("pull", "mlp", "--version", "1.1", "--precision", "fp32", "--profile", "small", "-o",
                     str(tmp_path / "m.onnx"))
    assert got["metadata"]["model"]["version"] == "1.1" and got["refit"]["check"]["passed"]


def test_a_refit_that_does_not_reproduce_the_recorded_outputs_is_caught(world, tmp_path):
    """The check itself: the stripped engine refitted from other weights (same layout: the perturbed model's blob)
    runs, and its outputs are not the ones its gate recorded."""
    if world.kind != "local":
        pytest.skip("the check does not depend on the store")
    from orchestrator import plugins

    store = plugins.open_store(world.config)
    record = next(r for r in store.records("mlp") if r.metadata["address"].startswith("mlp/fp32/big")
                  and r.metadata["model"]["version"] == "1.0")
    engine = tmp_path / "stripped.onnx"
    store.get(record.digest, engine)
    store.get_attachment(record, "outputs.npz", tmp_path / "outputs.npz")
    other = split(perturbed_copy(world.model, tmp_path / "other.onnx", scale=0.05)[0], tmp_path / "other")
    same = split(world.model, tmp_path / "same")
    desc = EngineDescriptor.from_json(record.metadata)
    runtime = plugins.runtime_for(desc)
    recorded = load_outputs(tmp_path / "outputs.npz")
    for folder, passed in ((same, True), (other, False)):
        out = tmp_path / f"refitted-{folder.data.parent.name}.onnx"
        reassemble(engine, folder.data.parent / DATA_NAME, out)
        check = check_refitted(record.metadata, recorded,
                               lambda i, out=out: runtime.load(out, desc, RuntimeOptions(profile_index=i)))
        assert check.passed is passed and check.compared == 2, check
        if not passed:
            assert any("y" in p for p in check.problems), check.problems


def test_a_missing_weights_record_writes_nothing(world, tmp_path):
    if world.kind != "local":
        pytest.skip("removing one record by hand is a local store operation")
    copy = tmp_path / "store"
    shutil.copytree(world.config.path, copy)
    blob = next(w for w in _ls(world)["weights"] if w["source"]["kind"] == "model" and w["version"] == "1.0")
    (copy / "meta" / f"{blob['record_key']}.json").unlink()
    (copy / "index.json").unlink()
    out = tmp_path / "out" / "mlp.onnx"
    out.parent.mkdir()
    proc = orchestrate("pull", "mlp", "--version", "1.0", "--precision", "fp32", "--profile", "big", "--registry",
                       str(copy), "-o", str(out), cache=world.cache, check=False)
    assert proc.returncode == 1 and "weights record" in proc.stderr and "not in the registry" in proc.stderr
    assert list(out.parent.iterdir()) == [] and "Traceback" not in proc.stderr


def test_retention_keeps_the_blob_while_an_engine_needs_it(world):
    # the version bump (1.1, the same file; done already where the test above ran: publishing again adds nothing)
    for verb in ("build", "gate", "publish"):
        orchestrate(verb, str(write_manifest(world.root, world.model, _registry_yaml(world), version="1.1")),
                    cache=world.cache)
    # a second model version with other weights: its own blob; keeping 1 version drops 1.0's engines and blob
    v2 = world.root / "mlp-v2.onnx"
    perturbed_copy(world.model, v2, scale=0.05)
    manifest = write_manifest(world.root, v2, _registry_yaml(world), version="2.0")
    for verb in ("build", "gate", "publish"):
        orchestrate(verb, str(manifest), cache=world.cache)
    listing = _ls(world)
    old = [w for w in listing["weights"] if w["version"] != "2.0"]
    assert len(listing["weights"]) - len(old) == 1
    # keeping 2 versions (2.0 and the bump 1.1): 1.0's engines and blob are byte for byte 1.1's, and stores delete by
    # digest, so nothing 1.1 needs may go with 1.0
    digest_of = {f"{r['address']}@{r['version']}": r["digest"] for r in [*listing["artifacts"], *listing["weights"]]}
    needed = {r["digest"] for r in [*listing["artifacts"], *listing["weights"]] if r["version"] in ("1.1", "2.0")}
    assert "1.1" in {w["version"] for w in old} and any(r["version"] == "1.0" for r in listing["artifacts"])
    two = world.json("retention", "--keep-versions", "2")
    assert [d for d in two["would_delete"] if digest_of[d] in needed] == []
    if world.kind == "local":
        world.json("retention", "--keep-versions", "2", "--yes")
        got = world.json("pull", "mlp", "--version", "1.1", "--precision", "fp32", "--profile", "big", "-o",
                         str(world.root / "kept-1.1.onnx"))
        assert got["refit"]["check"]["passed"]
    dry = world.json("retention", "--keep-versions", "1")
    doomed = dry["would_delete"]
    assert sorted(doomed) == sorted(
        [f"{a['address']}@{a['version']}" for a in listing["artifacts"] if a["version"] != "2.0"]
        + [f"{w['address']}@{w['version']}" for w in old])
    # every blob an engine of 2.0 needs stays, and none of those is among the doomed
    kept_blobs = {a["weights"]["blob"] for a in listing["artifacts"] if a["version"] == "2.0"}
    assert len(kept_blobs - {None}) == 1 and not any(w["digest"] in kept_blobs for w in old)
    if world.kind == "local":  # deleting: what 2.0 needs is still pulled and refitted
        world.json("retention", "--keep-versions", "1", "--yes")
        after = _ls(world)
        assert {w["version"] for w in after["weights"]} == {"2.0"} and len(after["artifacts"]) == 4
        got = world.json("pull", "mlp", "--precision", "fp32", "--profile", "big", "-o",
                         str(world.root / "after-retention.onnx"))
        assert got["refit"]["check"]["passed"]
