"""``export_triton`` and ``pull_all`` against a real local store holding TensorRT records of one model over four
GPUs (sm75, sm86, sm89 exact engines and one ampere_plus engine), published through ``new_metadata`` and the
store's ``put``. TensorRT cannot build here, so the engine bytes are a synthetic plan: a valid TensorRT plan
header (``ftrt``, serialization 0, version bytes 10.13.3.9: what the tensorrt runtime's ``verify_engine`` checks)
followed by bytes unique to each engine. Every config.pbtxt is parsed with Triton's own protobuf definition."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from orchestrator import plugins
from orchestrator.app.deploy import pull_all
from orchestrator.app.triton import NO_IO, STATE_FILE, export_triton, pbtxt_string
from orchestrator.contracts.store import ArtifactFiles
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.model import RegistryConfig, Target, target_slug
from orchestrator.errors import IntegrityError, NoCompatibleEngineError, UsageError
from orchestrator.metadata import ENGINE_MEDIA_TYPE, GateSummary, engine_file, new_metadata

HERE = RunnerFingerprint(os="linux", arch="x86_64")  # the exporting machine: no GPU, no TensorRT
IO = {"inputs": [{"name": "images", "dtype": "float32", "shape": [-1, 3, 224, 224]}],
      "outputs": [{"name": "logits", "dtype": "float16", "shape": [-1, 1000]},
                  {"name": "ids", "dtype": "int64", "shape": [-1]}]}
PROFILES = [{"name": "default", "shapes": {"images": {"min": [1, 3, 224, 224], "opt": [8, 3, 224, 224],
                                                      "max": [32, 3, 224, 224]}}},
            {"name": "default#1", "shapes": {"images": {"min": [1, 3, 224, 224], "opt": [1, 3, 224, 224],
                                                        "max": [1, 3, 224, 224]}}}]
TARGETS = {"sm75": ("7.5",), "sm86": ("8.6",), "sm89": ("8.9",), "ampere": ()}


def plan_bytes(tag: str, version=(10, 13, 3, 9)) -> bytes:
    # uint32 magic "ftrt" (0x74727466 little-endian), uint32 serialization version 0, bytes 24..27 the version
    head = struct.pack("<II", 0x74727466, 0) + bytes(16) + bytes(version)
    return head + bytes(64 - len(head)) + hashlib.sha256(tag.encode()).digest() * 64


def publish(registry: Path, work: Path, *, model: str = "resnet", version: str = "1.0.0", target: str = "sm86",
            builder_version: str = "10.13.3.9", io: dict | None = IO, precision: str = "fp16") -> dict:
    ampere = target == "ampere"
    t = Target(name=target, builder="tensorrt", builder_version=builder_version, builder_slug="trt",
               compute_capabilities=TARGETS[target], hardware_compatibility="ampere_plus" if ampere else "none")
    address = f"{model}/{precision}/default@{target_slug(t)}"
    tag = f"{address}:{version}:{builder_version}"
    engine = work / f"{hashlib.sha256(tag.encode()).hexdigest()[:16]}.plan"
    engine.parent.mkdir(parents=True, exist_ok=True)
    parts = tuple(int(p) for p in builder_version.split("."))
    engine.write_bytes(plan_bytes(tag, parts))
    build_key = hashlib.sha256(tag.encode()).hexdigest()
    meta = new_metadata(
        address=address, model_name=model, model_version=version, model_digest="sha256:" + "a" * 64,
        precision=precision, profile_set="default", profiles=("default",), target=t,
        builder_version=builder_version, build_key=build_key,
        key_inputs={"model": model, "profiles": PROFILES, "target": target},
        engine=engine_file(engine, media_type=ENGINE_MEDIA_TYPE), runtime="tensorrt",
        runner=RunnerFingerprint(os="linux", arch="x86_64"),
        gates=GateSummary(status="passed", parity={"status": "passed", "max_abs_error": 0.001}),
        timings={"build_seconds": 1.0}, manifest_path="m.yaml", git_commit=None,
        started_on="2026-11-21T10:00:00Z", finished_on="2026-11-21T10:00:01Z", io=io)
    stored = _store(registry).put(ArtifactFiles(engine=engine, metadata=meta))
    return stored.metadata


def _store(registry: Path):
    return plugins.open_store(RegistryConfig(store="local", path=str(registry)))


@pytest.fixture
def registry(tmp_path) -> Path:
    root = tmp_path / "artifacts"
    for target in TARGETS:
        publish(root, tmp_path / "engines", target=target)
    return root


def export(registry: Path, repo: Path, **kw):
    kw.setdefault("gpus", ["sm75", "sm86", "sm89", "sm90"])
    return export_triton(kw.pop("models", ["resnet"]), registry=RegistryConfig(store="local", path=str(registry)),
                         repo=repo, fingerprint=HERE, **kw)


def parse(path: Path):
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def digest_of(registry: Path, target: str) -> str:
    (art,) = [a for a in _store(registry).records("resnet") if a.metadata["target"]["name"] == target]
    return art.digest


def tree(root: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_layout_and_cc_model_filenames(registry, tmp_path):
    repo = tmp_path / "repo"
    result = export(registry, repo)
    files = sorted(str(p.relative_to(repo)) for p in repo.rglob("*") if p.is_file())
    assert files == ["resnet/1/model.sm75.plan", "resnet/1/model.sm75.plan.provenance.json",
                     "resnet/1/model.sm86.plan", "resnet/1/model.sm86.plan.provenance.json",
                     "resnet/1/model.sm89.plan", "resnet/1/model.sm89.plan.provenance.json",
                     "resnet/1/model.sm90.plan", "resnet/1/model.sm90.plan.provenance.json",
                     "resnet/config.pbtxt", f"resnet/{STATE_FILE}"]
    config = parse(repo / "resnet" / "config.pbtxt")
    assert dict(config.cc_model_filenames) == {"7.5": "model.sm75.plan", "8.6": "model.sm86.plan",
                                               "8.9": "model.sm89.plan", "9.0": "model.sm90.plan"}
    assert config.name == "resnet" and config.platform == "tensorrt_plan" and config.backend == ""
    assert config.default_model_filename == "model.sm90.plan"  # the ampere_plus engine: any other CC >= 8.0
    assert config.max_batch_size == 0
    assert [(t.name, model_config_pb2.DataType.Name(t.data_type), list(t.dims)) for t in config.input] == [
        ("images", "TYPE_FP32", [-1, 3, 224, 224])]
    assert [(t.name, model_config_pb2.DataType.Name(t.data_type), list(t.dims)) for t in config.output] == [
        ("logits", "TYPE_FP16", [-1, 1000]), ("ids", "TYPE_INT64", [-1])]
    (group,) = config.instance_group
    assert (group.count, model_config_pb2.ModelInstanceGroup.Kind.Name(group.kind), list(group.profile)) == (
        1, "KIND_GPU", ["0", "1"])
    assert config.version_policy.WhichOneof("policy_choice") == "latest"
    assert config.version_policy.latest.num_versions == 1
    # each file is the engine chosen for its GPU, byte for byte
    for name, target in (("sm75", "sm75"), ("sm86", "sm86"), ("sm89", "sm89"), ("sm90", "ampere")):
        data = (repo / "resnet" / "1" / f"model.{name}.plan").read_bytes()
        assert "sha256:" + hashlib.sha256(data).hexdigest() == digest_of(registry, target)
    prov = json.loads((repo / "resnet" / "1" / "model.sm90.plan.provenance.json").read_text())
    assert prov["address"] == "resnet/fp16/default@ampere-plus+trt10.13"
    assert prov["engine"]["digest"] == digest_of(registry, "ampere")
    assert prov["builder"] == {"name": "tensorrt", "version": "10.13.3.9"}
    assert prov["gates"]["status"] == "passed" and prov["gates"]["parity"]["status"] == "passed"
    assert prov["published_at"] and prov["serves_compute_capabilities"] == ["9.0"]
    (model,) = result.models
    assert (model.version, model.backend, model.model_version) == (1, "tensorrt_plan", "1.0.0")
    assert "tensorrt 10.13.3.9" in model.runtime
    assert {f.path.name: f.ccs for f in model.files if f.digest} == {
        "model.sm75.plan": ("7.5",), "model.sm86.plan": ("8.6",), "model.sm89.plan": ("8.9",),
        "model.sm90.plan": ("9.0",)}
    assert not result.unchanged


def test_one_ampere_plus_engine_serves_several_gpus_in_one_file(registry, tmp_path):
    repo = tmp_path / "repo"
    export(registry, repo, gpus=["sm86", "sm90,sm100", "12.0"])
    config = parse(repo / "resnet" / "config.pbtxt")
    assert dict(config.cc_model_filenames) == {"8.6": "model.sm86.plan", "9.0": "model.sm90-sm100-sm120.plan",
                                               "10.0": "model.sm90-sm100-sm120.plan",
                                               "12.0": "model.sm90-sm100-sm120.plan"}
    assert sorted(p.name for p in (repo / "resnet" / "1").glob("*.plan")) == [
        "model.sm86.plan", "model.sm90-sm100-sm120.plan"]


def test_gpus_auto_are_the_ccs_the_engines_name(registry, tmp_path):
    export(registry, tmp_path / "repo", gpus="auto")
    config = parse(tmp_path / "repo" / "resnet" / "config.pbtxt")
    assert sorted(config.cc_model_filenames) == ["7.5", "8.6", "8.9"]


def test_reexport_writes_nothing(registry, tmp_path):
    repo = tmp_path / "repo"
    export(registry, repo)
    before = tree(repo)
    again = export(registry, repo)
    assert tree(repo) == before  # same bytes, same mtimes
    assert again.unchanged
    assert {f.status for f in again.models[0].files} == {"unchanged"}


def test_new_model_version_is_a_new_directory(registry, tmp_path):
    repo = tmp_path / "repo"
    export(registry, repo)
    v1 = tree(repo / "resnet" / "1")
    for target in ("sm86", "ampere"):
        publish(registry, tmp_path / "engines2", version="1.1.0", target=target)
    result = export(registry, repo, gpus=["sm86", "sm90"], version_policy="specific:1,2")
    assert (result.models[0].version, result.models[0].model_version) == (2, "1.1.0")
    assert tree(repo / "resnet" / "1") == v1  # the old version is untouched
    assert sorted(p.name for p in (repo / "resnet" / "2").iterdir()) == [
        "model.sm86.plan", "model.sm86.plan.provenance.json", "model.sm90.plan", "model.sm90.plan.provenance.json"]
    state = json.loads((repo / "resnet" / STATE_FILE).read_text())
    assert state["versions"] == {"1.0.0": 1, "1.1.0": 2}
    config = parse(repo / "resnet" / "config.pbtxt")
    assert list(config.version_policy.specific.versions) == [1, 2]
    # the older version again keeps its number; a latest:2 policy
    export(registry, repo, version="1.0.0", version_policy="latest:2")
    assert json.loads((repo / "resnet" / STATE_FILE).read_text())["versions"] == {"1.0.0": 1, "1.1.0": 2}
    assert parse(repo / "resnet" / "config.pbtxt").version_policy.latest.num_versions == 2
    with pytest.raises(UsageError, match="unknown --version-policy 'newest'"):
        export(registry, repo, version_policy="newest")


def test_missing_gpu_is_refused_with_every_candidate_reason(registry, tmp_path):
    repo = tmp_path / "repo"
    with pytest.raises(NoCompatibleEngineError) as exc:
        export(registry, repo, gpus=["sm70", "sm86"])
    err = exc.value
    assert "resnet on sm70" in err.message and "resnet on sm86" not in err.message
    reasons = dict(err.rejections)
    assert len(reasons) == 4  # every candidate, for the missing GPU only
    assert reasons["resnet on sm70: resnet/fp16/default@ampere-plus+trt10.13 ("
                   + digest_of(registry, "ampere")[:19] + ")"] == (
        "hardware-compatible (Ampere+) engines need compute capability >= 8.0; this GPU is 7.0")
    assert any("built for compute capability 7.5; this GPU is 7.0" in why for why in reasons.values())
    assert not repo.exists()  # nothing written
    result = export(registry, repo, gpus=["sm70", "sm86"], allow_missing=True)
    assert [m.gpu for m in result.missing] == ["sm70"]
    assert dict(parse(repo / "resnet" / "config.pbtxt").cc_model_filenames) == {"8.6": "model.sm86.plan"}


def test_sm100_without_an_ampere_plus_engine_is_missing(tmp_path):
    registry = tmp_path / "artifacts"
    publish(registry, tmp_path / "e", target="sm86")
    with pytest.raises(NoCompatibleEngineError) as exc:
        export(registry, tmp_path / "repo", gpus=["sm86", "sm100"])
    assert exc.value.rejections[0][1] == ("built for compute capability 8.6; this GPU is 10.0 (plain TensorRT "
                                          "engines run only on the CC they were built for)")


def test_serving_stack_runtime(registry, tmp_path):
    result = export(registry, tmp_path / "repo", runtime="triton:25.11")
    assert result.models[0].runtime == "tensorrt 10.13.3.9 (triton:25.11)"
    assert len(list((tmp_path / "repo" / "resnet" / "1").glob("*.plan"))) == 4
    # Triton 25.01 ships TensorRT 10.8.0.43: none of these 10.13.3.9 engines loads there
    with pytest.raises(NoCompatibleEngineError) as exc:
        export(registry, tmp_path / "repo2", runtime="triton:25.01", gpus=["sm86"])
    assert "runtime: tensorrt 10.8.0.43 (triton:25.01)" in exc.value.message
    assert any("built with TensorRT 10.13.3.9, this runner has 10.8.0.43" in why
               for _, why in exc.value.rejections)
    with pytest.raises(UsageError, match="unknown triton release '27.01'"):
        export(registry, tmp_path / "repo3", runtime="triton:27.01")


def test_without_runtime_the_newest_tensorrt_is_declared(registry, tmp_path):
    publish(registry, tmp_path / "e", target="sm86", builder_version="10.14.1.48")
    with pytest.raises(NoCompatibleEngineError) as exc:
        export(registry, tmp_path / "repo", gpus=["sm75", "sm86"])
    assert "runtime: tensorrt 10.14.1.48 (the newest published" in exc.value.message
    assert "resnet on sm75" in exc.value.message and "resnet on sm86" not in exc.value.message
    export(registry, tmp_path / "repo", gpus=["sm75", "sm86"], runtime="trt10.13")


def test_record_without_io_is_refused(tmp_path):
    registry = tmp_path / "artifacts"
    publish(registry, tmp_path / "e", target="sm86", io=None)
    with pytest.raises(NoCompatibleEngineError) as exc:
        export(registry, tmp_path / "repo", gpus=["sm86"])
    assert [why for _, why in exc.value.rejections] == [NO_IO]
    assert "republish" in NO_IO


def test_hostile_names_are_escaped(tmp_path):
    registry = tmp_path / "artifacts"
    name = 'we"ird}{#name\''
    tensor = 'x\\" } output [ { name: "pwn\n\u00e9'
    io = {"inputs": [{"name": tensor, "dtype": "float32", "shape": [1, 3]}],
          "outputs": [{"name": "y", "dtype": "bool", "shape": [1]}]}
    publish(registry, tmp_path / "e", model=name, target="sm86", io=io)
    export(registry, tmp_path / "repo", models=[name], gpus=["sm86"])
    config = parse(tmp_path / "repo" / name / "config.pbtxt")
    assert config.name == name
    assert [t.name for t in config.input] == [tensor]
    assert [t.name for t in config.output] == ["y"]
    assert pbtxt_string('a"b\\c\n') == '"a\\"b\\\\c\\012"'
    publish(registry, tmp_path / "e", model="..", target="sm86")
    with pytest.raises(UsageError, match="cannot be a directory name"):
        export(registry, tmp_path / "repo", models=[".."], gpus=["sm86"])


def test_two_precisions_need_a_choice(registry, tmp_path):
    publish(registry, tmp_path / "e", target="sm86", precision="fp32")
    with pytest.raises(UsageError, match=r"engines of 2 precisions are published \(fp16, fp32\)"):
        export(registry, tmp_path / "repo", gpus=["sm86"])
    export(registry, tmp_path / "repo", gpus=["sm86"], precision="fp32")
    assert parse(tmp_path / "repo" / "resnet" / "config.pbtxt").cc_model_filenames["8.6"] == "model.sm86.plan"


def _blob(registry: Path, digest: str) -> Path:
    return registry / "blobs" / "sha256" / digest.split(":", 1)[1]


def test_corrupt_engine_leaves_nothing_behind(registry, tmp_path):
    blob = _blob(registry, digest_of(registry, "sm89"))
    blob.chmod(0o644)
    data = bytearray(blob.read_bytes())
    data[500] ^= 0xFF
    blob.write_bytes(bytes(data))
    repo = tmp_path / "repo"
    with pytest.raises(IntegrityError):
        export(registry, repo)
    assert not repo.joinpath("resnet").exists()


def test_pull_all_one_file_per_engine(registry, tmp_path):
    out = tmp_path / "models"
    config = RegistryConfig(store="local", path=str(registry))
    result = pull_all([], registry=config, gpus=["sm75,sm86", "sm90", "sm100"], out=out, fingerprint=HERE)
    assert [(e.path.relative_to(out).as_posix(), e.ccs, e.status) for e in result.engines] == [
        ("resnet/model.sm75.plan", ("7.5",), "written"), ("resnet/model.sm86.plan", ("8.6",), "written"),
        ("resnet/model.sm90-sm100.plan", ("9.0", "10.0"), "written")]
    for e in result.engines:
        assert "sha256:" + hashlib.sha256(e.path.read_bytes()).hexdigest() == e.digest
        assert e.size == e.path.stat().st_size
    again = pull_all(["resnet"], registry=config, gpus=["sm75", "sm86", "sm90", "sm100"], out=out, fingerprint=HERE)
    assert not again.changed
    with pytest.raises(NoCompatibleEngineError) as exc:
        pull_all(["resnet"], registry=config, gpus=["sm70"], out=tmp_path / "none", fingerprint=HERE)
    assert len(exc.value.rejections) == 4
    assert not (tmp_path / "none").exists()
