"""The local directory store, on a real directory: publish, pull, integrity, idempotence, versions, retention."""

from __future__ import annotations

import json

import pytest

try:  # tests/ may or may not be a package
    from .registry_server import flip_byte, make_artifact  # noqa: F401
except ImportError:
    from registry_server import flip_byte, make_artifact  # noqa: F401

from orchestrator.core.model import RegistryConfig
from orchestrator.core.query import select
from orchestrator.errors import ArtifactNotFoundError, IntegrityError, StoreError
from orchestrator.metadata import InvalidMetadataError
from trt_orchestrator_plugins.stores.local import LocalStore

pytestmark = pytest.mark.integration


def find(store, **criteria):
    """The one query semantics every store shares (``core.query.select``) over the store's records."""
    return select(store.records(criteria.get("model")), lambda a: a.metadata, **criteria)


@pytest.fixture
def store(tmp_path):
    return LocalStore(RegistryConfig(store="local", path=str(tmp_path / "artifacts")))


def test_publish_then_pull_by_address_and_by_digest(store, tmp_path):
    files = make_artifact(tmp_path / "build", size=3 * 1024 * 1024)
    stored = store.put(files)
    meta = files.metadata
    assert stored.digest == meta["engine"]["digest"]
    assert stored.metadata["attachments"][0]["role"] == "log"
    assert (store.root / "meta" / f"{meta['record_key']}.json").exists()  # a record is named by its record key
    hexes = sorted(p.name for p in store.blobs.iterdir())
    assert hexes == sorted(d.split(":")[1] for d in (stored.digest, stored.metadata["attachments"][0]["digest"]))

    [found] = find(store, address=meta["address"])
    out = tmp_path / "pulled" / "by-address.plan"
    store.get(found.digest, out)
    assert out.read_bytes() == files.engine.read_bytes()

    out2 = tmp_path / "by-digest.plan"
    got = store.get(stored.digest.split(":")[1], out2)  # bare hex is accepted too
    assert out2.read_bytes() == files.engine.read_bytes()
    assert got.metadata["build_key"] == meta["build_key"]

    entry = store.index().latest_by_address()[meta["address"]]
    assert (entry.build_key, entry.digest, entry.key_inputs) == (meta["build_key"], stored.digest,
                                                                 meta["key_inputs"])


def test_republish_is_idempotent(store, tmp_path):
    files = make_artifact(tmp_path / "b")
    first = store.put(files)
    token = store.index().state_token()
    again = store.put(files)
    assert again == first
    assert store.index().state_token() == token
    assert len(store.records()) == 1
    assert len(list((store.root / "meta").iterdir())) == 1


def test_flipped_byte_fails_integrity_and_leaves_dest_untouched(store, tmp_path):
    files = make_artifact(tmp_path / "b")
    stored = store.put(files)
    flip_byte(store.blob_path(stored.digest))
    dest = tmp_path / "deploy.plan"
    dest.write_bytes(b"the engine that was here before")
    with pytest.raises(IntegrityError) as exc:
        store.get(stored.digest, dest)
    text = str(exc.value)
    assert text.startswith(f"{files.metadata['address']}: engine {stored.digest} failed its integrity check")
    assert dest.read_bytes() == b"the engine that was here before"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp left behind


def test_versions_are_immutable_and_latest_moves_only_forward(store, tmp_path):
    v4 = store.put(make_artifact(tmp_path / "a", version="4.0.0"))
    v4b = store.put(make_artifact(tmp_path / "b", version="4.0.0", builder_version="10.13.3.10"))
    v5 = store.put(make_artifact(tmp_path / "c", version="5.0.0"))
    v4c = store.put(make_artifact(tmp_path / "d", version="4.0.0", salt="rebuild"))  # rebuild of the older one
    assert len({a.metadata["build_key"] for a in (v4, v4b, v5, v4c)}) == 4
    assert [a.metadata["build_key"] for a in find(store, model="ocr-det", version="4.0.0")] == [
        v4c.metadata["build_key"], v4b.metadata["build_key"], v4.metadata["build_key"]]
    assert [a.digest for a in find(store, model="ocr-det", version="latest")] == [v5.digest]
    # latest per address: the newest publish for it
    address = v4.metadata["address"]
    assert store.index().latest_by_address()[address].build_key == v4c.metadata["build_key"]
    assert find(store, model="ocr-det", labels={"precision": "fp32"}) == []
    with pytest.raises(StoreError, match="unknown label"):
        find(store, labels={"colour": "red"})


def test_bad_metadata_and_changed_engine_are_refused(store, tmp_path):
    files = make_artifact(tmp_path / "b")
    bad = dict(files.metadata, precision="fp64")
    with pytest.raises(InvalidMetadataError, match=r"\$\.precision"):
        store.put(type(files)(engine=files.engine, metadata=bad))
    with open(files.engine, "ab") as f:
        f.write(b"appended after the metadata was built")
    with pytest.raises(IntegrityError, match="its metadata says"):
        store.put(files)
    assert store.index().latest_by_address() == {}
    assert [p.name for p in store.blobs.iterdir()] == []


def test_missing_digest_and_missing_path(store, tmp_path):
    with pytest.raises(ArtifactNotFoundError):
        store.get("sha256:" + "0" * 64, tmp_path / "x")
    with pytest.raises(StoreError, match="needs registry.path"):
        LocalStore(RegistryConfig(store="local"))


def test_delete_and_rebuild_index(store, tmp_path):
    a = store.put(make_artifact(tmp_path / "a", precision="fp16"))
    b = store.put(make_artifact(tmp_path / "b", precision="int8"))
    assert store.delete([a.digest]) == 1
    assert not store.blob_path(a.digest).exists()
    assert store.blob_path(b.digest).exists()
    assert set(store.index().latest_by_address()) == {b.metadata["address"]}
    before = json.loads(store.index_path.read_text())
    store.index_path.unlink()
    store.rebuild_index()
    after = json.loads(store.index_path.read_text())
    assert after["artifacts"].keys() == before["artifacts"].keys()
    assert after["latest"] == before["latest"] | {}  # same entries (seq renumbered consistently)


def test_multi_chunk_engine_round_trips_byte_exact_and_leaves_no_temp(store, tmp_path):
    # 9 MiB + 123 B: ten 1 MiB buffers through the pool of eight, the last one short (the hasher trails the copy).
    files = make_artifact(tmp_path / "b", size=9 * 1024 * 1024 + 123, log=False)
    stored = store.put(files)
    assert store.blob_path(stored.digest).read_bytes() == files.engine.read_bytes()
    out = tmp_path / "out" / "e.plan"
    store.get(stored.digest, out)
    assert out.read_bytes() == files.engine.read_bytes()
    assert [p.name for p in store.blobs.iterdir() if p.name.startswith(".")] == []
    assert [p.name for p in out.parent.iterdir()] == ["e.plan"]


# -- a crash between the record and the index; records edited after publishing (hardening issue, items 1 and 3) --

_CRASH_BETWEEN_RECORD_AND_INDEX = """
import os, sys
from pathlib import Path
sys.path[:0] = [sys.argv[3]]
from registry_server import make_artifact
from orchestrator.core.model import RegistryConfig
from trt_orchestrator_plugins.stores import local

real = os.replace
def crash_on_the_index(src, dest):
    if Path(dest).name == "index.json":
        os._exit(137)  # the process dies right after the record was renamed into place, before the index
    return real(src, dest)
os.replace = crash_on_the_index
store = local.LocalStore(RegistryConfig(store="local", path=sys.argv[1]))
store.put(make_artifact(Path(sys.argv[2]), precision="fp32"))
"""


def test_a_crash_between_record_and_index_never_hides_the_artifact(store, tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    store.put(make_artifact(tmp_path / "b1", precision="fp16"))
    proc = subprocess.run([sys.executable, "-c", _CRASH_BETWEEN_RECORD_AND_INDEX, str(store.root),
                           str(tmp_path / "b2"), str(Path(__file__).parent)], capture_output=True, text=True)
    assert proc.returncode == 137, proc.stderr
    recorded = {p.stem for p in (store.root / "meta").glob("*.json")}
    assert len(recorded) == 2  # the record landed, the index did not
    # every reader sees both: the index is repaired from the records (and written back)
    index = store.index()
    assert set(index.data["artifacts"]) == recorded
    assert {m.metadata["precision"] for m in store.records()} == {"fp16", "fp32"}
    assert {e.address.split("/")[1] for e in index.latest_by_address().values()} == {"fp16", "fp32"}
    assert set(json.loads((store.root / "index.json").read_text())["artifacts"]) == recorded
    # a rerun of the crashed publish is idempotent and finds it
    again = store.put(make_artifact(tmp_path / "b2", precision="fp32"))
    assert again.metadata["precision"] == "fp32"


def test_metadata_edited_after_publishing_is_refused_not_served(store, tmp_path):
    fp16 = store.put(make_artifact(tmp_path / "a", precision="fp16"))
    fp32 = store.put(make_artifact(tmp_path / "b", precision="fp32", seed=1))
    path = store.root / "meta" / f"{fp32.metadata['record_key']}.json"
    meta = json.loads(path.read_text())
    meta["engine"]["digest"] = fp16.digest  # point the fp32 record at the fp16 engine
    path.write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    # the edited record is damaged, never served; the other one reads as before (issue 23.1)
    assert [a.digest for a in store.records()] == [fp16.digest]
    [damaged] = store.damaged()
    assert (damaged.kind, damaged.location, damaged.address) == ("changed", str(path), fp32.metadata["address"])
    assert damaged.problem.startswith("changed after it was published")
    with pytest.raises(IntegrityError, match="changed after it was published"):
        store.get(fp32.digest, tmp_path / "out.plan")
    assert not (tmp_path / "out.plan").exists()
    # rebuilding the index from the records keeps the digests it had recorded: the edit still fails its check
    store.rebuild_index()
    assert [a.digest for a in store.records()] == [fp16.digest]
    assert [(d.kind, d.address) for d in store.damaged()] == [("changed", fp32.metadata["address"])]
    with pytest.raises(IntegrityError, match="changed after it was published"):
        store.get(fp32.digest, tmp_path / "out.plan")
