"""Damage stays with its record (issue 23.1), on a real directory and a real registry (CNCF distribution on
127.0.0.1), through the real CLI: one damaged record is flagged by ``ls``, never hides the others from ``ls`` or
``pull``, makes its address plan again (``IndexEntry.damage``), is listed by ``orchestrate store check`` (bad JSON,
schema-invalid, changed, engine or attachment missing, engine no longer hashing to its digest), moved aside by
``--quarantine`` (kept, never deleted) and replaced by publishing it again.

Point -> test:
  ls flags it, lists the rest; pull of the others works      test_*_one_damaged_record_hides_nothing
  the index marks its address (plan: rebuild)                 test_*_one_damaged_record_hides_nothing
  store check: every kind, with and without hashing           test_local_store_check_*, test_oci_store_check_*
  quarantine moves aside, reports, keeps                      test_*_quarantine_*
  publish repairs it                                          test_*_publish_replaces_*
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

try:  # tests/ may or may not be a package
    from .registry_server import flip_byte, make_artifact, registry  # noqa: F401
except ImportError:
    from registry_server import flip_byte, make_artifact, registry  # noqa: F401

from orchestrator.core.model import RegistryConfig
from trt_orchestrator_plugins.stores.local import LocalStore
from trt_orchestrator_plugins.stores.oci import OciStore

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
ORT = dict(builder="onnxruntime", builder_version="1.31.1")  # engines this machine can pull (CPU, onnxruntime)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                          timeout=180, cwd=REPO)


def cli_json(*args: str, code: int = 0) -> dict:
    proc = cli(*args, "--json")
    assert proc.returncode == code and "Traceback" not in proc.stderr, (proc.returncode, proc.stdout, proc.stderr)
    return json.loads(proc.stdout)


def local(root: Path) -> LocalStore:
    return LocalStore(RegistryConfig(store="local", path=str(root)))


def oci(server, prefix: str) -> OciStore:
    store = OciStore(RegistryConfig(store="oci", url=f"{server.host}/{prefix}", insecure=True))
    store.backoff_s = 0.05
    return store


def flip_first_byte(path: Path) -> None:
    os.chmod(path, 0o644)
    raw = bytearray(path.read_bytes())
    raw[0] ^= 0xFF
    path.write_bytes(bytes(raw))


def publish_three(store, tmp_path: Path) -> dict:
    """Two precisions of one model and a second model, all pull-able here: {name: stored artifact}."""
    return {"cls-fp32": store.put(make_artifact(tmp_path / "a", model="cls", precision="fp32", size=32 * 1024, **ORT)),
            "cls-fp16": store.put(make_artifact(tmp_path / "b", model="cls", precision="fp16", size=32 * 1024, **ORT)),
            "det-fp32": store.put(make_artifact(tmp_path / "c", model="det", precision="fp32", size=32 * 1024, **ORT))}


def assert_hides_nothing(registry_arg: str, published: dict, damaged_key: str, tmp_path: Path) -> dict:
    """``ls`` lists the sound records and flags the damaged one; ``pull`` serves the others."""
    bad = published[damaged_key].metadata
    listing = cli_json("ls", "--registry", registry_arg)
    assert sorted(a["record_key"] for a in listing["artifacts"]) == sorted(
        p.metadata["record_key"] for k, p in published.items() if k != damaged_key)
    [flagged] = listing["damaged"]
    assert flagged["key"] == bad["record_key"] and flagged["address"] == bad["address"]
    text = cli("ls", "--registry", registry_arg)
    assert text.returncode == 0 and f"! damaged {bad['address']}" in text.stdout, text.stdout
    # the other precision of the same model and the other model still pull
    for model, precision in (("cls", "fp32"), ("det", "fp32")):
        out = tmp_path / f"{model}-{precision}.onnx"
        pulled = cli_json("pull", model, "--precision", precision, "-o", str(out), "--registry", registry_arg)
        assert out.is_file() and pulled["digest"] == published[f"{model}-{precision}"].digest
    # asking for the damaged one is a located error, not "nothing published"
    proc = cli("pull", "cls", "--precision", "fp16", "-o", str(tmp_path / "x.onnx"), "--registry", registry_arg)
    assert proc.returncode in (1, 4) and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "x.onnx").exists()
    return flagged


# ---- local store ------------------------------------------------------------------------------------------------

def test_local_one_damaged_record_hides_nothing(tmp_path):
    root = tmp_path / "artifacts"
    published = publish_three(local(root), tmp_path)
    record = root / "meta" / f"{published['cls-fp16'].metadata['record_key']}.json"
    flip_first_byte(record)  # what the issue did
    flagged = assert_hides_nothing(str(root), published, "cls-fp16", tmp_path)
    assert flagged["location"] == str(record) and flagged["kind"] == "unreadable"
    assert flagged["problem"].startswith("not JSON") and "changed after it was published" in flagged["problem"]
    # the planner's view: that address is damaged (plan: rebuild), the others read as published
    latest = local(root).index().latest_by_address()
    assert latest[flagged["address"]].damage == flagged["problem"]
    assert [e.damage for a, e in latest.items() if a != flagged["address"]] == ["", ""]
    # and so it stays when the index is rebuilt from the records: the rebuilt index keeps what it knew of it
    local(root).rebuild_index()
    assert local(root).index().latest_by_address()[flagged["address"]].damage.startswith("not JSON")
    assert [(d.key, d.address) for d in local(root).damaged()] == [(flagged["key"], flagged["address"])]
    # an index lost outright knows nothing of it: still flagged (by its file), its address plans as unpublished
    (root / "index.json").unlink()
    assert flagged["address"] not in local(root).index().latest_by_address()
    assert [(d.key, d.location) for d in local(root).damaged()] == [(flagged["key"], flagged["location"])]


def test_local_store_check_finds_every_kind(tmp_path):
    root = tmp_path / "artifacts"
    store = local(root)
    published = {i: store.put(make_artifact(tmp_path / str(i), model="cls", version=f"{i}.0.0", size=16 * 1024, **ORT))
                 for i in range(5)}
    meta_of = {i: root / "meta" / f"{p.metadata['record_key']}.json" for i, p in published.items()}
    flip_first_byte(meta_of[0])  # bad JSON
    broken = json.loads(meta_of[1].read_text())
    del broken["engine"]
    meta_of[1].write_text(json.dumps(broken))  # schema-invalid (and changed)
    flip_byte(store.blob_path(published[2].digest), offset=100)  # engine no longer hashes to its digest
    store.blob_path(published[3].digest).unlink()  # engine missing
    log = next(a for a in published[4].metadata["attachments"] if a["role"] == "log")
    store.blob_path(log["digest"]).unlink()  # attachment missing
    report = cli_json("store", "check", "--registry", str(root), code=1)
    kinds = {d["key"]: d["kind"] for d in report["damaged"]}
    assert kinds == {published[0].metadata["record_key"]: "unreadable", published[1].metadata["record_key"]: "changed",
                     published[2].metadata["record_key"]: "engine-corrupt",
                     published[3].metadata["record_key"]: "engine-missing",
                     published[4].metadata["record_key"]: "attachment-missing"}
    assert report["sound"] == 0 and report["quarantined"] == [] and report["exit_code"] == 1
    # without hashing, a corrupt engine is not seen; the rest is
    fast = cli_json("store", "check", "--no-verify-blobs", "--registry", str(root), code=1)
    assert {d["kind"] for d in fast["damaged"]} == {"unreadable", "changed", "engine-missing", "attachment-missing"}
    # schema-invalid: once the index that recorded its digest is gone, the schema itself says what is wrong
    (root / "index.json").unlink()
    [invalid] = [d for d in local(root).check() if d.key == published[1].metadata["record_key"]]
    assert invalid.kind == "invalid" and invalid.problem.startswith("fails the artifact-v1 schema")
    text = cli("store", "check", "--registry", str(root))
    assert text.returncode == 1 and f"[engine-corrupt]: its engine blob {published[2].digest}" in text.stdout


def test_local_quarantine_moves_aside_keeps_and_reports(tmp_path):
    root = tmp_path / "artifacts"
    published = publish_three(local(root), tmp_path)
    bad_json = root / "meta" / f"{published['cls-fp16'].metadata['record_key']}.json"
    flip_first_byte(bad_json)
    corrupt = local(root).blob_path(published["det-fp32"].digest)
    flip_byte(corrupt, offset=100)
    damaged_bytes, corrupt_bytes = bad_json.read_bytes(), corrupt.read_bytes()
    report = cli_json("store", "check", "--quarantine", "--registry", str(root))
    assert report["exit_code"] == 0 and report["left"] == []
    moved = {q["key"]: Path(q["moved_to"]) for q in report["quarantined"]}
    assert set(moved) == {published["cls-fp16"].metadata["record_key"], published["det-fp32"].metadata["record_key"]}
    for key, where in moved.items():
        assert where.parent == root / "quarantine"
        assert json.loads((where / "reason.json").read_text())["key"] == key
    # kept byte for byte, never deleted: the record file, and the corrupt blob with the record that named it
    assert (moved[published["cls-fp16"].metadata["record_key"]] / bad_json.name).read_bytes() == damaged_bytes
    det = moved[published["det-fp32"].metadata["record_key"]]
    assert (det / f"{published['det-fp32'].digest.split(':')[1]}.blob").read_bytes() == corrupt_bytes
    assert not bad_json.exists() and not corrupt.exists()
    # what remains is sound; the moved records' addresses plan from what remains (nothing there now)
    assert cli_json("store", "check", "--registry", str(root))["damaged"] == []
    listing = cli_json("ls", "--registry", str(root))
    assert [a["record_key"] for a in listing["artifacts"]] == [published["cls-fp32"].metadata["record_key"]]
    assert listing["damaged"] == []
    assert set(local(root).index().latest_by_address()) == {published["cls-fp32"].metadata["address"]}


def test_local_publish_replaces_a_damaged_record(tmp_path):
    root = tmp_path / "artifacts"
    store = local(root)
    files = make_artifact(tmp_path / "a", model="cls", size=16 * 1024, **ORT)
    first = store.put(files)
    record = root / "meta" / f"{first.metadata['record_key']}.json"
    flip_first_byte(record)
    damaged = record.read_bytes()
    again = local(root).put(files)  # what `orchestrate publish` does for that cell
    assert again.metadata["record_key"] == first.metadata["record_key"]
    assert json.loads(record.read_text())["published_at"] == again.metadata["published_at"]
    [kept] = (root / "quarantine").glob(f"*/{record.name}")
    assert kept.read_bytes() == damaged
    assert local(root).check() == [] and [a.digest for a in local(root).records()] == [first.digest]
    assert local(root).index().latest_by_address()[first.metadata["address"]].damage == ""


# ---- OCI registry -----------------------------------------------------------------------------------------------

def _config_digest(store: OciStore, stored) -> str:
    repo = f"{store.prefix}/{stored.metadata['model']['name']}"
    _, manifest = store._get_manifest(repo, "bk-" + stored.metadata["record_key"])
    return manifest["config"]["digest"]


def test_oci_one_damaged_record_hides_nothing(registry, tmp_path):
    store = oci(registry, "dmg1")
    published = publish_three(store, tmp_path)
    flip_first_byte(registry.blob_data(_config_digest(store, published["cls-fp16"])))  # its metadata, in storage
    flagged = assert_hides_nothing(f"oci://{registry.host}/dmg1", published, "cls-fp16", tmp_path)
    assert flagged["kind"] == "changed" and "failed its integrity check" in flagged["problem"]
    assert flagged["location"].startswith("dmg1/cls:bk-")
    latest = oci(registry, "dmg1").index().latest_by_address()
    assert "failed its integrity check" in latest[flagged["address"]].damage
    assert [e.damage for a, e in latest.items() if a != flagged["address"]] == ["", ""]


def test_oci_store_check_quarantine_and_publish_replaces(registry, tmp_path):
    store = oci(registry, "dmg2")
    files = {i: make_artifact(tmp_path / str(i), model="cls", version=f"{i}.0.0", size=16 * 1024, seed=20 + i, **ORT)
             for i in range(3)}
    published = {i: store.put(f) for i, f in files.items()}
    repo = "dmg2/cls"
    flip_first_byte(registry.blob_data(_config_digest(store, published[0])))  # metadata changed
    flip_byte(registry.blob_data(published[1].digest), offset=100)  # engine no longer hashes to its digest
    store._send("DELETE", f"/v2/{repo}/blobs/{published[2].digest}", ok=(202,)).close()  # engine missing
    url = f"oci://{registry.host}/dmg2"
    report = cli_json("store", "check", "--registry", url, code=1)
    assert {d["key"]: d["kind"] for d in report["damaged"]} == {
        published[0].metadata["record_key"]: "changed", published[1].metadata["record_key"]: "engine-corrupt",
        published[2].metadata["record_key"]: "engine-missing"}
    fast = cli_json("store", "check", "--no-verify-blobs", "--registry", url, code=1)
    assert {d["kind"] for d in fast["damaged"]} == {"changed", "engine-missing"}
    # quarantine: each damaged manifest kept under a q- tag (where the registry takes it), its bk- tag a tombstone
    moved = cli_json("store", "check", "--quarantine", "--registry", url)
    assert moved["left"] == [] and len(moved["quarantined"]) == 3
    tags = store._paginated(f"/v2/{repo}/tags/list", "tags")
    for q in moved["quarantined"]:
        if "(untagged" not in q["moved_to"]:
            qtag = q["moved_to"].rsplit(":", 1)[1]
            assert qtag in tags and qtag.startswith("q-" + q["key"])
        _, tomb = store._get_manifest(repo, "bk-" + q["key"])
        assert tomb["annotations"]["io.trt-orchestrator.quarantined"].startswith(q["kind"])
    fresh = oci(registry, "dmg2")
    assert fresh.records() == [] and fresh.damaged() == [] and fresh.check() == []
    assert fresh.index().latest_by_address() == {}
    # publishing the artifact again writes a sound record over the tombstone
    again = oci(registry, "dmg2").put(files[0])
    assert again.metadata["record_key"] == published[0].metadata["record_key"]
    assert [a.metadata["record_key"] for a in oci(registry, "dmg2").records()] == [again.metadata["record_key"]]
    assert oci(registry, "dmg2").check() == []


def test_oci_publish_replaces_a_damaged_record_keeping_it_tagged(registry, tmp_path):
    store = oci(registry, "dmg3")
    files = make_artifact(tmp_path / "a", model="cls", size=16 * 1024, seed=31, **ORT)
    first = store.put(files)
    repo = "dmg3/cls"
    old_digest, _ = store._get_manifest(repo, "bk-" + first.metadata["record_key"])
    flip_first_byte(registry.blob_data(_config_digest(store, first)))
    assert [d.kind for d in oci(registry, "dmg3").damaged()] == ["changed"]
    again = oci(registry, "dmg3").put(files)
    now, _ = store._get_manifest(repo, "bk-" + first.metadata["record_key"])
    assert now != old_digest and again.metadata["published_at"] != first.metadata["published_at"]
    kept = [t for t in store._paginated(f"/v2/{repo}/tags/list", "tags") if t.startswith("q-")]
    assert len(kept) == 1 and store._get_manifest(repo, kept[0])[0] == old_digest
    assert oci(registry, "dmg3").damaged() == [] and len(oci(registry, "dmg3").records()) == 1


def test_local_a_missing_engine_plans_again_and_publish_restores_it(tmp_path):
    root = tmp_path / "artifacts"
    files = make_artifact(tmp_path / "a", model="cls", size=16 * 1024, **ORT)
    first = local(root).put(files)
    local(root).blob_path(first.digest).unlink()
    entry = local(root).index().latest_by_address()[first.metadata["address"]]
    assert entry.damage == f"its engine blob {first.digest} is missing from {root / 'blobs' / 'sha256'}"
    assert [d.kind for d in local(root).check(verify_blobs=False)] == ["engine-missing"]
    again = local(root).put(files)  # not the idempotent no-op: the engine is stored again (the same bytes: the
    assert again.metadata["published_at"] == first.metadata["published_at"]  # record, naming them, stays)
    assert local(root).blob_path(first.digest).is_file() and local(root).check() == []
    assert local(root).index().latest_by_address()[first.metadata["address"]].damage == ""


def test_oci_a_missing_engine_plans_again_and_publish_restores_it(registry, tmp_path):
    store = oci(registry, "dmg4")
    files = make_artifact(tmp_path / "a", model="cls", size=16 * 1024, seed=41, **ORT)
    first = store.put(files)
    store._send("DELETE", f"/v2/dmg4/cls/blobs/{first.digest}", ok=(202,)).close()
    entry = oci(registry, "dmg4").index().latest_by_address()[first.metadata["address"]]
    assert entry.damage == f"its engine blob {first.digest} is missing from {registry.host}/dmg4/cls"
    again = oci(registry, "dmg4").put(files)
    assert again.metadata["published_at"] != first.metadata["published_at"]
    assert oci(registry, "dmg4").check() == []
    assert oci(registry, "dmg4").index().latest_by_address()[first.metadata["address"]].damage == ""
