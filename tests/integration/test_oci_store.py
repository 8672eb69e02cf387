"""The oci store against a real registry (CNCF distribution on 127.0.0.1): no mocks."""

from __future__ import annotations

import threading
import time

import pytest

try:  # tests/ may or may not be a package
    from .registry_server import RegistryServer, flip_byte, free_port, make_artifact, registry, require_binary  # noqa: F401
except ImportError:
    from registry_server import RegistryServer, flip_byte, free_port, make_artifact, registry, require_binary  # noqa: F401

from orchestrator.core.model import RegistryConfig
from orchestrator.core.query import select
from orchestrator.errors import IntegrityError, StoreUnavailableError
from orchestrator.metadata import ENGINE_MEDIA_TYPE, METADATA_MEDIA_TYPE, ONNX_ENGINE_MEDIA_TYPE
from trt_orchestrator_plugins.stores.oci import OciStore

pytestmark = pytest.mark.integration

def find(store, **criteria):
    """The one query semantics every store shares (``core.query.select``) over the store's records."""
    return select(store.records(criteria.get("model")), lambda a: a.metadata, **criteria)



def oci(server: RegistryServer, prefix: str) -> OciStore:
    store = OciStore(RegistryConfig(store="oci", url=f"{server.host}/{prefix}", insecure=True))
    store.backoff_s = 0.05  # keep the failure tests quick; the policy is the same
    return store


def test_publish_then_pull_by_address_and_by_digest(registry, tmp_path):
    store = oci(registry, "t1")
    files = make_artifact(tmp_path / "b", size=3 * 1024 * 1024)
    stored = store.put(files)
    meta = files.metadata
    assert stored.location.startswith(f"{registry.host}/t1/ocr-det@sha256:")

    _, manifest = store._get_manifest("t1/ocr-det", "4.0.0-fp16-default-sm89-trt10.13")  # the readable tag
    assert manifest["config"]["mediaType"] == METADATA_MEDIA_TYPE
    assert manifest["layers"][0]["mediaType"] == ENGINE_MEDIA_TYPE
    assert manifest["layers"][0]["digest"] == meta["engine"]["digest"]
    ann = manifest["annotations"]
    assert ann["io.trt-orchestrator.build-key"] == meta["build_key"]
    assert ann["io.trt-orchestrator.address"] == meta["address"]
    assert ann["io.trt-orchestrator.compute-capabilities"] == "8.9"
    assert ann["io.trt-orchestrator.builder-version"] == "10.13.3.9"

    [found] = find(store, address=meta["address"])
    assert found.metadata["attachments"][0]["role"] == "log"
    out = tmp_path / "pulled.plan"
    store.get(found.digest, out)
    assert out.read_bytes() == files.engine.read_bytes()
    out2 = tmp_path / "by-digest.plan"
    fresh = oci(registry, "t1")  # a new client: nothing cached
    assert fresh.get(stored.digest, out2).metadata["build_key"] == meta["build_key"]
    assert out2.read_bytes() == files.engine.read_bytes()
    entry = fresh.index().latest_by_address()[meta["address"]]
    assert (entry.build_key, entry.digest, entry.key_inputs) == (meta["build_key"], stored.digest,
                                                                 meta["key_inputs"])


def test_onnxruntime_engine_media_type_and_idempotent_republish(registry, tmp_path):
    store = oci(registry, "t2")
    files = make_artifact(tmp_path / "b", model="cls", builder="onnxruntime", builder_version="1.23.2")
    first = store.put(files)
    token = store.index().state_token()
    again = oci(registry, "t2").put(files)
    assert again.digest == first.digest and again.location == first.location
    assert oci(registry, "t2").index().state_token() == token
    assert len(store.records()) == 1
    _, manifest = store._get_manifest("t2/cls", "bk-" + files.metadata["record_key"])  # the record key's tag
    assert manifest["layers"][0]["mediaType"] == ONNX_ENGINE_MEDIA_TYPE
    assert manifest["annotations"]["io.trt-orchestrator.format"] == "onnx"


def test_versions_and_latest(registry, tmp_path):
    store = oci(registry, "t3")
    v4 = store.put(make_artifact(tmp_path / "a", version="4.0.0", size=4096))
    v5 = store.put(make_artifact(tmp_path / "b", version="5.0.0", size=4096))
    v4b = store.put(make_artifact(tmp_path / "c", version="4.0.0", salt="rebuild", size=4096))
    assert [a.digest for a in find(store, model="ocr-det", version="latest")] == [v5.digest]
    assert {a.digest for a in find(store, model="ocr-det", version="4.0.0")} == {v4.digest, v4b.digest}
    assert store.index().latest_by_address()[v4.metadata["address"]].build_key == v4b.metadata["build_key"]


def test_corrupted_blob_in_registry_storage_fails_integrity(registry, tmp_path):
    store = oci(registry, "t4")
    files = make_artifact(tmp_path / "b", model="corrupt-me", seed=4)
    stored = store.put(files)
    flip_byte(registry.blob_data(stored.digest))
    dest = tmp_path / "deploy.plan"
    with pytest.raises(IntegrityError) as exc:
        oci(registry, "t4").get(stored.digest, dest)
    assert str(exc.value).startswith(f"{files.metadata['address']}: engine {stored.digest} failed its integrity")
    assert not dest.exists()


def test_unreachable_registry_is_reported_without_traceback(tmp_path):
    store = OciStore(RegistryConfig(store="oci", url=f"127.0.0.1:{free_port()}/engines", insecure=True))
    store.backoff_s = 0.01
    with pytest.raises(StoreUnavailableError) as exc:
        store.put(make_artifact(tmp_path / "b", size=4096))
    assert str(exc.value).startswith(f"registry {store.host} is not reachable (connection refused) after 4 "
                                     "attempts")
    assert "hint: check that the registry" in str(exc.value)


def test_registry_killed_mid_push_then_retry_after_restart(tmp_path):
    require_binary()
    server = RegistryServer(tmp_path / "reg").start()
    try:
        store = oci(server, "crash")
        files = make_artifact(tmp_path / "big", model="big", size=96 * 1024 * 1024, log=False)
        killed = threading.Event()

        def kill_when_upload_started():
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                datas = [d / "data" for d in server.upload_dirs() if (d / "data").exists()]
                if any(p.stat().st_size > 0 for p in datas):
                    server.kill()
                    killed.set()
                    return
                time.sleep(0.005)

        watcher = threading.Thread(target=kill_when_upload_started)
        watcher.start()
        with pytest.raises(StoreUnavailableError) as exc:
            store.put(files)
        watcher.join()
        assert killed.is_set()
        assert f"registry {server.host} is not reachable" in str(exc.value)
        assert "after 4 attempts while uploading the engine of big/fp16/default@sm89+trt10.13" in str(exc.value)

        server.start()
        stored = store.put(files)
        out = tmp_path / "back.plan"
        oci(server, "crash").get(stored.digest, out)
        assert out.read_bytes() == files.engine.read_bytes()
    finally:
        server.stop()


def test_multi_chunk_pull_is_byte_exact_through_the_direct_body_reader(registry, tmp_path):
    from trt_orchestrator_plugins.stores.oci import _body_reader

    store = oci(registry, "t5")
    files = make_artifact(tmp_path / "b", model="chunks", size=9 * 1024 * 1024 + 123, log=False)
    stored = store.put(files)
    out = tmp_path / "out" / "e.plan"
    oci(registry, "t5").get(stored.digest, out)
    assert out.read_bytes() == files.engine.read_bytes()
    assert [p.name for p in out.parent.iterdir()] == ["e.plan"]
    # The fast path (http.client readinto, no urllib3 copy) must stay in use: it is most of the pull speed-up.
    r = store._send("GET", f"/v2/t5/chunks/blobs/{stored.digest}", stream=True)
    with r:
        assert _body_reader(r) == r.raw._fp.readinto
