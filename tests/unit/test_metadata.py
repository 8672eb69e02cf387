"""Artifact metadata: schema validation (every problem at once, exact paths) and the provenance shape."""

from __future__ import annotations

import copy
import hashlib

import pytest

from orchestrator.core.fingerprint import GpuInfo, InstalledRuntime, RunnerFingerprint
from orchestrator.core.model import BuilderOptions, Target
from orchestrator.errors import StoreError
from orchestrator.metadata import (
    ENGINE_MEDIA_TYPE,
    ONNX_ENGINE_MEDIA_TYPE,
    EngineFile,
    GateSummary,
    InvalidMetadataError,
    engine_file,
    index_entry,
    new_metadata,
    provenance_statement,
    validate_metadata,
)

ENGINE = b"ftrt" + bytes(60)
ENGINE_HEX = hashlib.sha256(ENGINE).hexdigest()
MODEL_DIGEST = "sha256:" + "a" * 64
CALIB_DIGEST = "sha256:" + "c" * 64
BUILD_KEY = "b" * 64
TARGET = Target(name="ada", builder="tensorrt", builder_version="10.13.3.9", compute_capabilities=("8.9",),
                options=BuilderOptions(version_compatible=True))
RUNNER = RunnerFingerprint(os="linux", arch="x86_64",
                           gpus=(GpuInfo(0, "NVIDIA L4", "8.9", 23034),),
                           runtimes={"tensorrt": InstalledRuntime("10.13.3.9")})


def make(**over):
    args = dict(
        address="ocr-det/fp16/default@sm89+trt10.13-vc", model_name="ocr-det", model_version="4.0.0",
        model_digest=MODEL_DIGEST, precision="fp16", profile_set="default", profiles=("default",),
        target=TARGET, builder_version="10.13.3.9", build_key=BUILD_KEY, key_inputs={"precision": "fp16"},
        engine=EngineFile(f"sha256:{ENGINE_HEX}", len(ENGINE), "ocr-det.plan"),
        runner=RUNNER, gates=GateSummary(status="passed", parity={"ok": True, "max_abs": 1e-3}),
        timings={"build_seconds": 12.5, "gate_seconds": 3}, manifest_path="manifests/ocr.yaml",
        git_commit="0123abc", started_on="2026-11-21T10:00:00Z", finished_on="2026-11-21T10:00:12.5Z",
        created_at="2026-11-21T10:00:13Z", calibration_digest=CALIB_DIGEST, invocation_id="urn:uuid:1",
        runtime="tensorrt",
    )
    args.update(over)
    return new_metadata(**args)


def test_build_metadata_shape():
    meta = make()
    assert meta["schema_version"] == 1
    assert meta["model"] == {"name": "ocr-det", "version": "4.0.0", "digest": MODEL_DIGEST}
    assert meta["target"] == {"name": "ada", "compute_capabilities": ["8.9"], "hardware_compatibility": "none",
                              "device": "gpu", "version_compatible": True, "platform": "linux/x86_64",
                              "platform_specific": True, "gpu_match": "cc", "lean_runtime": None}
    assert meta["builder"] == {"name": "tensorrt", "version": "10.13.3.9"}
    assert meta["engine"] == {"digest": f"sha256:{ENGINE_HEX}", "size": len(ENGINE), "filename": "ocr-det.plan",
                              "media_type": ENGINE_MEDIA_TYPE}
    assert meta["runner"]["gpus"][0]["compute_capability"] == "8.9"
    assert meta["gates"] == {"parity": {"ok": True, "max_abs": 1e-3}, "benchmark": None, "status": "passed",
                             "ungated_publish_allowed": False}
    assert meta["timings"] == {"build_seconds": 12.5, "gate_seconds": 3.0}
    assert meta["manifest"] == {"path": "manifests/ocr.yaml", "git_commit": "0123abc"}
    entry = index_entry(meta)
    assert (entry.address, entry.build_key, entry.digest, entry.version) == (
        meta["address"], BUILD_KEY, f"sha256:{ENGINE_HEX}", "4.0.0")


def test_provenance_is_in_toto_statement_with_slsa_v1_predicate():
    prov = make()["provenance"]
    assert prov["_type"] == "https://in-toto.io/Statement/v1"
    assert prov["predicateType"] == "https://slsa.dev/provenance/v1"
    assert prov["subject"] == [{"name": "ocr-det.plan", "digest": {"sha256": ENGINE_HEX}}]
    bd = prov["predicate"]["buildDefinition"]
    assert bd["buildType"].startswith("https://")
    assert bd["externalParameters"]["build_key"] == BUILD_KEY
    assert bd["resolvedDependencies"] == [
        {"name": "model:ocr-det", "digest": {"sha256": "a" * 64}},
        {"name": "calibration:ocr-det", "digest": {"sha256": "c" * 64}},
    ]
    rd = prov["predicate"]["runDetails"]
    assert rd["builder"]["id"] == "https://trt-orchestrator.dev/builders/tensorrt@10.13.3.9"
    assert rd["metadata"] == {"invocationId": "urn:uuid:1", "startedOn": "2026-11-21T10:00:00Z",
                              "finishedOn": "2026-11-21T10:00:12.5Z"}


def test_provenance_without_calibration_has_only_the_model():
    st = provenance_statement(subject_name="m.onnx", subject_digest=f"sha256:{ENGINE_HEX}",
                              external_parameters={}, model_name="m", model_digest=MODEL_DIGEST,
                              model_uri="file:///models/m.onnx", builder_id="b", invocation_id="i",
                              started_on="2026-01-01T00:00:00Z", finished_on="2026-01-01T00:00:01Z")
    assert st["predicate"]["buildDefinition"]["resolvedDependencies"] == [
        {"name": "model:m", "digest": {"sha256": "a" * 64}, "uri": "file:///models/m.onnx"}]


def test_onnxruntime_engines_get_the_onnx_media_type(tmp_path):
    p = tmp_path / "m.onnx"
    p.write_bytes(ENGINE)
    ef = engine_file(p, media_type=ONNX_ENGINE_MEDIA_TYPE)
    assert ef == EngineFile(f"sha256:{ENGINE_HEX}", len(ENGINE), "m.onnx", ONNX_ENGINE_MEDIA_TYPE)


def test_validation_reports_every_problem_with_its_path():
    meta = make()
    bad = copy.deepcopy(meta)
    bad["schema_version"] = 2
    bad["engine"]["digest"] = "md5:abc"
    bad["gates"]["status"] = "maybe"
    del bad["timings"]["build_seconds"]
    bad["surprise"] = 1
    with pytest.raises(InvalidMetadataError) as exc:
        validate_metadata(bad)
    paths = [p for p, _ in exc.value.problems]
    assert paths == ["$", "$.engine.digest", "$.gates.status", "$.schema_version", "$.timings"]
    assert isinstance(exc.value, StoreError)
    text = str(exc.value)
    assert text.startswith("metadata of ocr-det/fp16/default@sm89+trt10.13-vc is invalid (5 problems):")
    assert "'surprise' was unexpected" in text
    assert "hint: build metadata with orchestrator.metadata.new_metadata()" in text


def test_provenance_subject_must_name_the_engine_digest():
    meta = make()
    meta["provenance"]["subject"][0]["digest"]["sha256"] = "f" * 64
    with pytest.raises(InvalidMetadataError) as exc:
        validate_metadata(meta)
    assert exc.value.problems == [("$.provenance.subject[0].digest.sha256",
                                   f"names sha256:{'f' * 64} but the engine digest is sha256:{ENGINE_HEX}")]


def test_build_metadata_rejects_bad_inputs_before_returning():
    with pytest.raises(InvalidMetadataError) as exc:
        make(precision="fp64", timings={})
    assert [p for p, _ in exc.value.problems] == ["$.precision", "$.timings"]


def test_store_added_fields_are_allowed():
    meta = make()
    meta["published_at"] = "2026-11-21T10:01:00.123456Z"
    meta["attachments"] = [{"name": "build.log", "role": "log", "digest": f"sha256:{ENGINE_HEX}", "size": 3}]
    validate_metadata(meta)


def test_the_shipped_artifact_schema_is_a_valid_2020_12_schema():
    """Checked here rather than when the validator is built (that cost every publishing or reading process ~80 ms)."""
    import json
    from importlib import resources

    import jsonschema

    schema = json.loads(resources.files("orchestrator.schemas").joinpath("artifact-v1.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_building_the_validator_does_not_check_the_schema_against_the_metaschema(monkeypatch):
    """That check ran in every publishing or reading process (issue 24, registry row); the test above does it."""
    import jsonschema

    from orchestrator import metadata

    def refuse(schema) -> None:
        raise AssertionError("check_schema ran while building the metadata validator")

    monkeypatch.setattr(jsonschema.Draft202012Validator, "check_schema", staticmethod(refuse))
    metadata._validator.cache_clear()
    try:
        metadata._validator()
    finally:
        metadata._validator.cache_clear()
