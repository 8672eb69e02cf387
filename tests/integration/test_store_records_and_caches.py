"""Records identified by record key (build key + gate key) and the caches published with them, on both stores: a
real directory and a real registry (CNCF distribution on 127.0.0.1), real files, no mocks.

Item -> test:
  1/2 a re-gated engine is a second record; latest_by_address returns it   test_regate_*
      same record key: idempotent                                          test_same_record_key_*
      attachments round-trip, digest verified, tampering refused          test_attachments_*, test_tampered_*
      a re-gated record without cache files hands the earlier ones back   test_a_regated_record_inherits_*
      an old local store (no record keys) reads and plans, unrewritten     test_old_layout_local_store_*
      an old registry (no record-key annotations) reads                   test_old_registry_*
      a record naming another record key is damaged (and only it)        test_a_record_naming_*, test_a_bk_tag_*
      delete removes every record of the engine and unreferenced caches   test_delete_*
  3   ls / show list the caches (text and --json, escaped)                test_ls_and_show_*
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

try:  # tests/ may or may not be a package
    from .registry_server import flip_byte, make_artifact, registry  # noqa: F401
except ImportError:
    from registry_server import flip_byte, make_artifact, registry  # noqa: F401

from orchestrator.contracts.store import ArtifactFiles, Attachment, AttachmentReader
from orchestrator.core.fingerprint import RunnerFingerprint
from orchestrator.core.keys import record_key
from orchestrator.core.model import RegistryConfig
from orchestrator.core.plan import plan_against
from orchestrator.core.resolve import resolve
from orchestrator.errors import ArtifactNotFoundError, IntegrityError, InvalidMetadataError
from orchestrator.metadata import ENGINE_MEDIA_TYPE, GateSummary, engine_file, new_metadata, validate_metadata
from trt_orchestrator_plugins.stores import oci as oci_module
from trt_orchestrator_plugins.stores.local import LocalStore
from trt_orchestrator_plugins.stores.oci import (
    CALIBRATION_CACHE_MEDIA_TYPE,
    TIMING_CACHE_MEDIA_TYPE,
    OciStore,
)

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
REPO = HERE.parents[1]
SCOPE = "sm89/NVIDIA L4/tensorrt 10.13.3.9"


# ---- helpers ---------------------------------------------------------------------------------------------------

def gate_key_of(inputs: dict) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def blob(path: Path, size: int, seed: str) -> tuple[Path, str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(random.Random(seed).randbytes(size))
    return path, "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def cache_files(directory: Path, *, calib_seed: str = "calib", timing_seed: str = "timing", scope: str = SCOPE,
                calib_key: str = "c" * 64) -> tuple[dict, tuple[Attachment, ...]]:
    """A calibration cache and a timing cache (real files) -> (metadata ``caches``, attachments)."""
    cpath, cdigest = blob(directory / "calibration.cache", 4096, calib_seed)
    tpath, tdigest = blob(directory / "timing.cache", 6000, timing_seed)
    cname, tname = f"calibration-{calib_key[:16]}.cache", f"timing-{timing_seed}.cache"
    caches = {"calibration": {"key": calib_key, "digest": cdigest, "name": cname, "calibrator": "builder:tensorrt",
                              "size": 4096},
              "timing": {"read": None, "written": tdigest, "pinned": False, "name": tname, "scope": scope,
                         "size": 6000}}
    return caches, (Attachment(cpath, "calibration-cache", cname), Attachment(tpath, "timing-cache", tname))


def gated(files: ArtifactFiles, inputs: dict | None, *, caches: dict | None = None,
          attachments: tuple[Attachment, ...] = (), status: str = "passed") -> ArtifactFiles:
    """``files`` with gate verdicts given under the gate settings ``inputs`` (None: published before gate keys,
    no record key), and caches."""
    meta = copy.deepcopy(files.metadata)
    meta["gates"]["status"] = status
    meta["gates"]["ungated_publish_allowed"] = status != "passed"
    if inputs is None:
        meta.pop("record_key", None)
        meta["gates"].pop("key", None)
        meta["gates"].pop("key_inputs", None)
    else:
        meta["gates"]["key"] = gate_key_of(inputs)
        meta["gates"]["key_inputs"] = inputs
        meta["record_key"] = record_key(meta["build_key"], meta["gates"]["key"])
    if caches is not None:
        meta["caches"] = caches
    validate_metadata(meta)
    return ArtifactFiles(engine=files.engine, metadata=meta, log=files.log, extra=files.extra,
                         attachments=attachments)


LOOSE = {"parity": {"atol": 0.01}}
TIGHT = {"parity": {"atol": 0.0}}


def local_store(root: Path) -> LocalStore:
    return LocalStore(RegistryConfig(store="local", path=str(root)))


def oci_store(server, prefix: str) -> OciStore:
    store = OciStore(RegistryConfig(store="oci", url=f"{server.host}/{prefix}", insecure=True))
    store.backoff_s = 0.05
    return store


@pytest.fixture(params=["local", "oci"])
def kind(request):
    return request.param


@pytest.fixture
def opener(kind, request, tmp_path):
    """A function giving a fresh client of one store (the same store every call): local dir or registry prefix."""
    if kind == "local":
        root = tmp_path / "artifacts"
        return lambda: local_store(root)
    server = request.getfixturevalue("registry")
    prefix = "p" + hashlib.sha256(request.node.name.encode()).hexdigest()[:10]
    return lambda: oci_store(server, prefix)


def engine_count(store) -> int:
    return len({a.digest for a in store.records()})


# ---- 1/2: records by record key ---------------------------------------------------------------------------------

def test_regate_makes_a_second_record_and_latest_by_address_returns_it(opener, kind, tmp_path):
    base = make_artifact(tmp_path / "b", size=64 * 1024)
    first = opener().put(gated(base, LOOSE))
    second = opener().put(gated(base, TIGHT))
    m1, m2 = first.metadata, second.metadata
    assert m1["build_key"] == m2["build_key"] and first.digest == second.digest  # one engine
    assert m1["record_key"] != m2["record_key"]  # two records
    store = opener()
    records = store.records()
    assert [r.metadata["record_key"] for r in records] == [m2["record_key"], m1["record_key"]]  # newest first
    assert engine_count(store) == 1
    latest = store.index().latest_by_address()[m1["address"]]
    assert (latest.build_key, latest.gate_key, latest.record_key) == (m1["build_key"], gate_key_of(TIGHT),
                                                                      m2["record_key"])
    assert latest.gate_inputs == TIGHT and latest.key_inputs == m1["key_inputs"]
    # the engine itself is stored once, and get(digest) gives the newest record of it
    out = tmp_path / "e.plan"
    assert store.get(first.digest, out).metadata["record_key"] == m2["record_key"]
    assert out.read_bytes() == base.engine.read_bytes()
    if kind == "local":
        assert {p.stem for p in (store.root / "meta").glob("*.json")} == {m1["record_key"], m2["record_key"]}
        assert sorted(p.name for p in store.blobs.iterdir()).count(first.digest.split(":")[1]) == 1
    else:
        repo = f"{store.prefix}/ocr-det"
        tags = store._paginated(f"/v2/{repo}/tags/list", "tags")
        assert {t for t in tags if t.startswith("bk-")} == {"bk-" + m1["record_key"], "bk-" + m2["record_key"]}
        _, manifest = store._get_manifest(repo, "bk-" + m2["record_key"])
        ann = manifest["annotations"]
        assert ann["io.trt-orchestrator.record-key"] == m2["record_key"]
        assert ann["io.trt-orchestrator.gate-key"] == gate_key_of(TIGHT)
        assert json.loads(ann["io.trt-orchestrator.gate-key-inputs"]) == TIGHT
        assert ann["io.trt-orchestrator.build-key"] == m1["build_key"]


def test_same_record_key_is_idempotent(opener, kind, tmp_path):
    files = gated(make_artifact(tmp_path / "b", size=32 * 1024), LOOSE)
    first = opener().put(files)
    token = opener().index().state_token()
    again = opener().put(files)
    assert again.metadata == first.metadata and again.location == first.location
    assert opener().index().state_token() == token
    assert len(opener().records()) == 1
    if kind == "local":
        assert len(list((opener().root / "meta").iterdir())) == 1


def test_metadata_whose_record_key_is_not_its_keys_is_refused(opener, tmp_path):
    files = gated(make_artifact(tmp_path / "b", size=4096), LOOSE)
    bad = copy.deepcopy(files.metadata)
    bad["record_key"] = record_key(bad["build_key"], gate_key_of(TIGHT))  # claims other verdicts
    with pytest.raises(InvalidMetadataError, match=r"\$\.record_key: record_key .* is not the record key"):
        opener().put(ArtifactFiles(engine=files.engine, metadata=bad))
    assert opener().records() == []


_PUBLISHER = """
import sys
from pathlib import Path
sys.path[:0] = [sys.argv[4]]
from registry_server import make_artifact
from test_store_records_and_caches import LOOSE, TIGHT, cache_files, gated, local_store, OciStore, RegistryConfig
kind, target, worker = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = (local_store(Path(target)) if kind == "local"
         else OciStore(RegistryConfig(store="oci", url=target, insecure=True)))
work = Path(sys.argv[5]) / f"w{worker}"
caches, attachments = cache_files(work / "caches")
for _ in range(2):
    store.put(gated(make_artifact(work, size=64 * 1024), TIGHT if worker % 2 else LOOSE, caches=caches,
                    attachments=attachments))
"""


def test_concurrent_publishers_of_one_engine_under_two_gate_keys_make_exactly_two_records(opener, kind, request,
                                                                                          tmp_path):
    """6 processes, one build key, two gate keys: every record key published once, the engine and caches once."""
    store = opener()
    target = str(store.root) if kind == "local" else f"{store.host}/{store.prefix}"
    procs = [subprocess.Popen([sys.executable, "-c", _PUBLISHER, kind, target, str(w), str(HERE), str(tmp_path)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for w in range(6)]
    outputs = [(p.wait(timeout=300), p.stdout.read().decode()) for p in procs]
    assert all(rc == 0 for rc, _ in outputs), [out for rc, out in outputs if rc]
    store = opener()
    records = store.records()
    base = make_artifact(tmp_path / "expect", size=64 * 1024)
    assert sorted(r.metadata["record_key"] for r in records) == sorted(
        gated(base, g).metadata["record_key"] for g in (LOOSE, TIGHT))
    assert engine_count(store) == 1
    for r in records:  # each record hands its caches back
        dest = tmp_path / "got" / r.metadata["record_key"]
        store.get_attachment(r, r.metadata["caches"]["calibration"]["name"], dest)
        assert dest.read_bytes() == (tmp_path / "w0" / "caches" / "calibration.cache").read_bytes()
    if kind == "local":
        assert store.index().data["seq"] == 2
        assert len(list(store.blobs.iterdir())) == 4  # engine, log, calibration cache, timing cache: once each
    else:
        tags = store._paginated(f"/v2/{store.prefix}/ocr-det/tags/list", "tags")
        assert len([t for t in tags if t.startswith("bk-")]) == 2


# ---- attachments -------------------------------------------------------------------------------------------------

def test_attachments_round_trip_through_get_attachment(opener, kind, tmp_path):
    caches, attachments = cache_files(tmp_path / "caches")
    files = gated(make_artifact(tmp_path / "b", size=32 * 1024), LOOSE, caches=caches, attachments=attachments)
    opener().put(files)
    store = opener()
    assert isinstance(store, AttachmentReader)
    [record] = store.records()
    listed = {a["name"]: a for a in record.metadata["attachments"]}
    assert listed[caches["calibration"]["name"]]["role"] == "calibration-cache"
    assert listed[caches["timing"]["name"]]["role"] == "timing-cache"
    assert listed[caches["calibration"]["name"]]["digest"] == caches["calibration"]["digest"]
    assert listed[caches["timing"]["name"]]["size"] == 6000
    assert record.metadata["caches"] == caches
    for a in attachments:
        dest = tmp_path / "fetched" / kind / a.name
        assert store.get_attachment(record, a.name, dest) == dest
        assert dest.read_bytes() == a.path.read_bytes()
    with pytest.raises(ArtifactNotFoundError, match=r"has no attachment 'nope\.cache' \(it has: .*calibration-"):
        store.get_attachment(record, "nope.cache", tmp_path / "nope")
    assert not (tmp_path / "nope").exists()
    if kind == "oci":
        _, manifest = store._get_manifest(f"{store.prefix}/ocr-det", "bk-" + record.metadata["record_key"])
        layers = {layer["annotations"]["org.opencontainers.image.title"]: layer for layer in manifest["layers"]}
        assert layers[caches["calibration"]["name"]]["mediaType"] == CALIBRATION_CACHE_MEDIA_TYPE
        assert layers[caches["timing"]["name"]]["mediaType"] == TIMING_CACHE_MEDIA_TYPE
        assert layers[caches["timing"]["name"]]["annotations"]["io.trt-orchestrator.role"] == "timing-cache"
        assert layers[caches["timing"]["name"]]["digest"] == caches["timing"]["written"]


def test_tampered_attachment_is_an_integrity_error_and_dest_is_untouched(opener, kind, request, tmp_path):
    caches, attachments = cache_files(tmp_path / "caches", calib_seed=f"tamper-{kind}")
    files = gated(make_artifact(tmp_path / "b", size=32 * 1024, seed=7), LOOSE, caches=caches,
                  attachments=attachments)
    opener().put(files)
    store = opener()
    [record] = store.records()
    digest = caches["calibration"]["digest"]
    if kind == "local":
        flip_byte(store.blob_path(digest))
    else:
        flip_byte(request.getfixturevalue("registry").blob_data(digest))
    dest = tmp_path / "out" / "calibration.cache"
    dest.parent.mkdir()
    dest.write_bytes(b"what was here before")
    with pytest.raises(IntegrityError) as exc:
        store.get_attachment(record, caches["calibration"]["name"], dest)
    assert (f"{files.metadata['address']}: calibration-cache {caches['calibration']['name']} {digest} failed its "
            "integrity check") in str(exc.value)
    assert dest.read_bytes() == b"what was here before"
    assert [p.name for p in dest.parent.iterdir()] == ["calibration.cache"]  # no temp file left
    # the other attachment is intact and still served
    other = tmp_path / "out" / "timing.cache"
    store.get_attachment(record, caches["timing"]["name"], other)
    assert other.read_bytes() == attachments[1].path.read_bytes()


def test_a_cache_file_that_is_not_the_one_its_metadata_names_is_refused(opener, tmp_path):
    caches, attachments = cache_files(tmp_path / "caches")
    attachments[0].path.write_bytes(b"another calibration run")  # changed after the metadata was built
    files = gated(make_artifact(tmp_path / "b", size=4096), LOOSE, caches=caches, attachments=attachments)
    with pytest.raises(IntegrityError, match=r"cache file .*calibration\.cache has sha256:.* but its metadata says "
                                             r".*\(caches\.calibration\.digest\)"):
        opener().put(files)
    assert opener().records() == []


def test_a_regated_record_inherits_the_caches_of_its_engine(opener, tmp_path):
    caches, attachments = cache_files(tmp_path / "caches")
    base = make_artifact(tmp_path / "b", size=32 * 1024)
    opener().put(gated(base, LOOSE, caches=caches, attachments=attachments))
    # the re-gate publishes the engine from the store: its caches are named, no cache file is handed over
    regated = opener().put(gated(base, TIGHT, caches=caches))
    store = opener()
    newest = store.records()[0]
    assert newest.metadata["record_key"] == regated.metadata["record_key"]
    roles = {a["name"]: a["role"] for a in newest.metadata["attachments"]}
    assert roles[caches["calibration"]["name"]] == "calibration-cache"
    for a in attachments:
        dest = tmp_path / "again" / a.name
        store.get_attachment(newest, a.name, dest)
        assert dest.read_bytes() == a.path.read_bytes()


# ---- old layouts -------------------------------------------------------------------------------------------------

def _cell():
    from tests.unit.core_fixtures import capabilities, inputs_for, manifest, model, target

    m = manifest([model("ocr-det")], [target()])
    graph = resolve([m], inputs_for(m), capabilities)
    return graph, graph.cell("ocr-det/fp16/default@sm89+trt10.13")


def _cell_files(cell, directory: Path, *, gate: bool) -> ArtifactFiles:
    """A real engine file and metadata for a resolved cell; ``gate``: with its gate key (else: as published before
    gate keys)."""
    engine, _ = blob(directory / "engine.plan", 48 * 1024, cell.build_key)
    log = directory / "build.log"
    log.write_text("[I] built\n")
    meta = new_metadata(
        address=cell.address, model_name=cell.model, model_version=cell.model_version,
        model_digest=cell.key_inputs["model"]["digest"], precision=cell.precision.name, profile_set=cell.profile_set,
        profiles=(cell.profile_set,), target=cell.target, builder_version=cell.target.builder_version,
        build_key=cell.build_key, key_inputs=cell.key_inputs, engine=engine_file(engine, media_type=ENGINE_MEDIA_TYPE),
        runtime="tensorrt", runner=RunnerFingerprint(os="linux", arch="x86_64"),
        gates=GateSummary(status="passed", key=cell.gate_key if gate else "",
                          key_inputs=cell.gate_inputs if gate else None),
        timings={"build_seconds": 1.0}, manifest_path="manifests/vision.yaml", git_commit=None,
        started_on="2026-11-21T10:00:00Z", finished_on="2026-11-21T10:00:01Z")
    if not gate:
        meta.pop("record_key")
        meta.pop("caches", None)
        validate_metadata(meta)
    return ArtifactFiles(engine=engine, metadata=meta, log=log)


def write_old_layout(root: Path, records: list[ArtifactFiles]) -> None:
    """The local store as the previous version wrote it: ``meta/<build key>.json`` (no record key, no gate key,
    no caches), an index keyed by build keys whose entries have no gate fields."""
    blobs, meta_dir = root / "blobs" / "sha256", root / "meta"
    blobs.mkdir(parents=True)
    meta_dir.mkdir()
    index = {"format_version": 1, "seq": 0, "artifacts": {}, "latest": {}, "models": {}}
    for n, files in enumerate(records):
        meta = copy.deepcopy(files.metadata)
        assert "record_key" not in meta and "key" not in meta["gates"]
        engine_hex = meta["engine"]["digest"].split(":")[1]
        (blobs / engine_hex).write_bytes(files.engine.read_bytes())
        log_digest = "sha256:" + hashlib.sha256(files.log.read_bytes()).hexdigest()
        (blobs / log_digest.split(":")[1]).write_bytes(files.log.read_bytes())
        meta["published_at"] = f"2026-01-0{n + 1}T00:00:00.000000Z"
        meta["attachments"] = [{"name": files.log.name, "role": "log", "digest": log_digest,
                                "size": files.log.stat().st_size}]
        raw = (json.dumps(meta, indent=1, sort_keys=True) + "\n").encode()
        (meta_dir / f"{meta['build_key']}.json").write_bytes(raw)
        index["seq"] += 1
        bk, seq = meta["build_key"], index["seq"]
        index["artifacts"][bk] = {
            "meta_digest": "sha256:" + hashlib.sha256(raw).hexdigest(), "address": meta["address"],
            "model": meta["model"]["name"], "version": meta["model"]["version"], "digest": meta["engine"]["digest"],
            "size": meta["engine"]["size"], "published_at": meta["published_at"], "seq": seq,
            "precision": meta["precision"], "profile_set": meta["profile_set"], "target": meta["target"]["name"],
            "builder": meta["builder"]["name"], "builder_version": meta["builder"]["version"],
            "gate_status": meta["gates"]["status"], "blobs": sorted({meta["engine"]["digest"], log_digest})}
        index["latest"][meta["address"]] = {
            "address": meta["address"], "build_key": bk, "key_inputs": meta["key_inputs"],
            "model": meta["model"]["name"], "version": meta["model"]["version"], "digest": meta["engine"]["digest"],
            "published_at": meta["published_at"], "seq": seq}
        model = index["models"].setdefault(meta["model"]["name"], {"latest": None, "versions": {}})
        version = model["versions"].setdefault(meta["model"]["version"], {"first_seq": seq, "build_keys": []})
        model["latest"] = meta["model"]["version"]
        version["build_keys"].append(bk)
    (root / "index.json").write_text(json.dumps(index, sort_keys=True))


def test_old_layout_local_store_reads_and_plans_without_a_rewrite(tmp_path):
    graph, cell = _cell()
    old = _cell_files(cell, tmp_path / "old", gate=False)
    other = make_artifact(tmp_path / "other", model="cls", size=8192)
    other = gated(other, None)
    root = tmp_path / "artifacts"
    write_old_layout(root, [old, other])
    index_bytes = (root / "index.json").read_bytes()
    mtimes = {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}

    store = local_store(root)
    entry = store.index().latest_by_address()[cell.address]
    assert (entry.build_key, entry.record_key, entry.gate_key, entry.gate_inputs) == (cell.build_key,
                                                                                       cell.build_key, "", {})
    records = store.records()
    assert {r.metadata["address"] for r in records} == {cell.address, other.metadata["address"]}
    out = tmp_path / "engine.plan"
    store.get(old.metadata["engine"]["digest"], out)
    assert out.read_bytes() == old.engine.read_bytes()
    # reading changed nothing: no index rewrite, no record touched
    assert (root / "index.json").read_bytes() == index_bytes
    assert {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file() and p.name != ".index.lock"} == mtimes

    # the planner reads it: published before gate keys -> re-gate, saying why
    [e] = [e for e in plan_against(graph, store.index().latest_by_address(), store.index().state_token()).entries]
    assert (e.status, e.reason) == ("regate", "its verdicts were published without a gate key (their settings "
                                              "are unknown)")

    # the re-gated record is a second record of that engine; the old one stays readable; the plan is up to date
    new = store.put(_cell_files(cell, tmp_path / "new", gate=True))
    assert new.metadata["record_key"] == cell.record_key != cell.build_key  # build key, gate key, model version
    store = local_store(root)
    assert {p.stem for p in (root / "meta").glob("*.json")} == {cell.build_key, new.metadata["record_key"],
                                                                other.metadata["build_key"]}
    [e] = plan_against(graph, store.index().latest_by_address(), store.index().state_token()).entries
    assert e.status == "up-to-date"
    assert [r.metadata.get("record_key") for r in store.records("ocr-det")] == [new.metadata["record_key"], None]
    # the old record is still idempotent under its own identity (its build key)
    assert store.put(old).metadata["published_at"] == "2026-01-01T00:00:00.000000Z"
    # and an index rebuilt from the records keeps both, keyed by record key
    (root / "index.json").unlink()
    store.rebuild_index()
    assert set(json.loads((root / "index.json").read_text())["artifacts"]) == {
        cell.build_key, new.metadata["record_key"], other.metadata["build_key"]}


def test_a_record_naming_another_record_key_is_damaged(tmp_path):
    store = local_store(tmp_path / "artifacts")
    base = make_artifact(tmp_path / "b", size=4096)
    a = store.put(gated(base, LOOSE))
    b = store.put(gated(base, TIGHT))
    path_b = store.root / "meta" / f"{b.metadata['record_key']}.json"
    path_b.write_bytes((store.root / "meta" / f"{a.metadata['record_key']}.json").read_bytes())  # a's record as b
    (store.root / "index.json").unlink()  # no recorded digest to catch the copy first: the identity check must
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "ls", "--registry", str(store.root), "--json"],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    # damaged, flagged with its file, and only it: the other record still lists (issue 23.1)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    listing = json.loads(proc.stdout)
    assert [r["record_key"] for r in listing["artifacts"]] == [a.metadata["record_key"]]
    [damaged] = listing["damaged"]
    assert (damaged["location"], damaged["kind"], damaged["key"]) == (str(path_b), "invalid", b.metadata["record_key"])
    assert damaged["problem"] == (f"names record key '{a.metadata['record_key']}', not its own "
                                  f"{b.metadata['record_key']}")
    # a record key that is not its build key's and gate key's is damaged too
    meta = json.loads((store.root / "meta" / f"{a.metadata['record_key']}.json").read_text())
    meta["gates"]["key"] = gate_key_of({"other": True})
    path_b.write_text(json.dumps({**meta, "record_key": b.metadata["record_key"]}))
    reader = local_store(store.root)
    assert [r.metadata["record_key"] for r in reader.records()] == [a.metadata["record_key"]]
    [damaged] = reader.damaged()
    assert "is not the record key of its build key and gate key" in damaged.problem


def test_old_registry_without_record_key_annotations_reads_and_takes_a_regated_record(registry, tmp_path,
                                                                                     monkeypatch):
    base = make_artifact(tmp_path / "b", size=16 * 1024)
    real = oci_module._annotations

    def old_annotations(meta):  # what the previous client wrote: no record key, no gate key
        return {k: v for k, v in real(meta).items() if not k.endswith(("record-key", "gate-key", "gate-key-inputs"))}

    monkeypatch.setattr(oci_module, "_annotations", old_annotations)
    old = oci_store(registry, "oldreg").put(gated(base, None))
    monkeypatch.setattr(oci_module, "_annotations", real)
    store = oci_store(registry, "oldreg")
    _, manifest = store._get_manifest("oldreg/ocr-det", "bk-" + base.metadata["build_key"])
    assert "io.trt-orchestrator.record-key" not in manifest["annotations"]
    entry = store.index().latest_by_address()[base.metadata["address"]]
    assert (entry.record_key, entry.gate_key, entry.gate_inputs) == (base.metadata["build_key"], "", {})
    assert oci_store(registry, "oldreg").put(gated(base, None)).location == old.location  # idempotent by build key
    new = oci_store(registry, "oldreg").put(gated(base, LOOSE))
    store = oci_store(registry, "oldreg")
    assert store.index().latest_by_address()[base.metadata["address"]].record_key == new.metadata["record_key"]
    assert len(store.records()) == 2


def test_a_bk_tag_that_does_not_name_its_record_is_a_located_error(registry, tmp_path):
    store = oci_store(registry, "forged")
    a = store.put(gated(make_artifact(tmp_path / "a", size=4096), LOOSE))
    repo = "forged/ocr-det"
    raw = store._get_manifest_raw(repo, "bk-" + a.metadata["record_key"])[2]
    forged = "bk-" + "f" * 64
    store._put_manifest(repo, forged, raw)  # a's manifest under another record's tag
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "ls", "--registry", f"oci://{registry.host}/forged",
                           "--json"], capture_output=True, text=True, cwd=REPO, timeout=120)
    # the forged tag is damaged and flagged where it is; the record itself still lists (issue 23.1)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    listing = json.loads(proc.stdout)
    assert [r["record_key"] for r in listing["artifacts"]] == [a.metadata["record_key"]]
    [damaged] = listing["damaged"]
    assert damaged["location"].startswith(f"{repo}:{forged}@sha256:") and damaged["key"] == "f" * 64
    assert damaged["problem"] == (f"the tag holds the record of record key '{a.metadata['record_key']}', not its "
                                  f"own {'f' * 64}")
    assert damaged["address"] is None  # what a forged tag's manifest says is not taken for the record's


# ---- delete ------------------------------------------------------------------------------------------------------

def test_delete_removes_every_record_of_the_engine_and_caches_no_longer_referenced_local(tmp_path):
    store = local_store(tmp_path / "artifacts")
    shared, shared_att = cache_files(tmp_path / "c1", timing_seed="t1")
    x = make_artifact(tmp_path / "x", precision="fp16", size=8192)
    y = make_artifact(tmp_path / "y", precision="int8", size=8192)
    own, own_att = cache_files(tmp_path / "c2", timing_seed="t2")  # same calibration cache, another timing cache
    x1 = store.put(gated(x, LOOSE, caches=shared, attachments=shared_att))
    x2 = store.put(gated(x, TIGHT, caches=shared))  # re-gated: inherits x1's caches
    y1 = store.put(gated(y, LOOSE, caches=own, attachments=own_att))
    calib = shared["calibration"]["digest"]
    assert own["calibration"]["digest"] == calib  # one calibration cache, linked by two engines
    timing_x, timing_y = shared["timing"]["written"], own["timing"]["written"]
    assert all(store.blob_path(d).exists() for d in (calib, timing_x, timing_y, x1.digest, y1.digest))

    assert store.delete([x1.digest]) == 2  # both records of that engine
    assert [r.metadata["record_key"] for r in store.records()] == [y1.metadata["record_key"]]
    assert not store.blob_path(x1.digest).exists()
    assert not store.blob_path(timing_x).exists()  # only x's records referenced it
    assert store.blob_path(calib).exists() and store.blob_path(timing_y).exists()  # y still links them
    assert not (store.root / "meta" / f"{x2.metadata['record_key']}.json").exists()

    assert store.delete([y1.digest]) == 1
    assert list(store.blobs.iterdir()) == []
    assert store.index().latest_by_address() == {}


def test_delete_removes_every_record_of_the_engine_oci(registry, tmp_path):
    store = oci_store(registry, "del")
    caches, attachments = cache_files(tmp_path / "c")
    x = make_artifact(tmp_path / "x", precision="fp16", size=8192)
    y = make_artifact(tmp_path / "y", precision="int8", size=8192)
    x1 = store.put(gated(x, LOOSE, caches=caches, attachments=attachments))
    store.put(gated(x, TIGHT, caches=caches))
    y1 = store.put(gated(y, LOOSE))
    assert oci_store(registry, "del").delete([x1.digest]) == 2
    fresh = oci_store(registry, "del")
    assert [r.metadata["record_key"] for r in fresh.records()] == [y1.metadata["record_key"]]
    tags = fresh._paginated("/v2/del/ocr-det/tags/list", "tags")
    assert [t for t in tags if t.startswith("bk-")] == ["bk-" + y1.metadata["record_key"]]


# ---- 3: ls / show ------------------------------------------------------------------------------------------------

def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120, env={**os.environ, "COLUMNS": "250"})


def _publish_with_caches(store, tmp_path: Path, scope: str = SCOPE) -> tuple[dict, dict, list]:
    """Two engines (fp16, int8) linking one calibration cache; each with its own timing cache; fp16 re-gated."""
    caches16, att16 = cache_files(tmp_path / "c16", timing_seed="t16", scope=scope)
    caches8, att8 = cache_files(tmp_path / "c8", timing_seed="t8", scope=scope)
    fp16 = make_artifact(tmp_path / "fp16", precision="fp16", size=8192)
    int8 = make_artifact(tmp_path / "int8", precision="int8", size=8192)
    out = [store.put(gated(fp16, LOOSE, caches=caches16, attachments=att16)),
           store.put(gated(int8, LOOSE, caches=caches8, attachments=att8)),
           store.put(gated(fp16, TIGHT, caches=caches16))]
    return caches16, caches8, out


def test_ls_and_show_list_the_caches(opener, kind, request, tmp_path):
    caches16, caches8, (fp16, int8, regated) = _publish_with_caches(opener(), tmp_path)
    where = str(opener().root) if kind == "local" else f"oci://{request.getfixturevalue('registry').host}/" \
                                                       f"{opener().prefix}"
    proc = cli("ls", "--registry", where, "--json")
    assert proc.returncode == 0, proc.stderr
    listing = json.loads(proc.stdout)
    assert [a["record_key"] for a in listing["artifacts"]] == [r.metadata["record_key"]
                                                               for r in (fp16, int8, regated)]
    assert listing["artifacts"][2]["gate_key"] == gate_key_of(TIGHT)
    [calib] = listing["caches"]["calibration"]
    addresses = calib.pop("addresses")
    assert calib == {"name": caches16["calibration"]["name"], "digest": caches16["calibration"]["digest"],
                     "key": "c" * 64, "calibrator": "builder:tensorrt", "size": 4096, "engines": 2, "stored": True}
    assert sorted(addresses) == sorted([fp16.metadata["address"], int8.metadata["address"]])
    timing = {t["digest"]: t for t in listing["caches"]["timing"]}
    assert set(timing) == {caches16["timing"]["written"], caches8["timing"]["written"]}
    assert {t["scope"] for t in timing.values()} == {SCOPE}
    assert timing[caches16["timing"]["written"]]["engines"] == 1  # the re-gated record is the same engine

    text = cli("ls", "--registry", where)
    assert text.returncode == 0, text.stderr
    lines = [x.strip() for x in text.stdout.splitlines()]
    [crow] = [x for x in lines if x.startswith("calibration")]
    assert caches16["calibration"]["name"] in crow and caches16["calibration"]["digest"][:19] in crow
    assert "key cccccccccccc" in crow and "2 engine(s)" in crow
    trows = [x for x in lines if x.startswith("timing")]
    assert len(trows) == 2 and all(SCOPE in x and "1 engine(s)" in x for x in trows)
    assert "3 artifact(s) (2 engine(s))" in text.stdout
    assert regated.metadata["record_key"][:12] in text.stdout and fp16.metadata["record_key"][:12] in text.stdout
    assert "1 calibration cache(s), 2 timing cache(s)" in text.stdout

    shown = cli("show", fp16.metadata["address"], "--registry", where)
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert f"record key  {regated.metadata['record_key']}" in out  # the newest record of that address
    assert f"gate key  {gate_key_of(TIGHT)}" in out
    assert f"calibration  {caches16['calibration']['name']} {caches16['calibration']['digest']}" in out
    assert f"timing  {caches16['timing']['name']} scope {SCOPE}" in out
    for role, entry in (("calibration-cache", caches16["calibration"]), ("timing-cache", caches16["timing"])):
        assert (f"attachment  {role}  {entry['name']}  {entry.get('digest') or entry['written']}  "
                f"{entry['size']} B") in out
    as_json = json.loads(cli("show", fp16.metadata["address"], "--registry", where, "--json").stdout)
    assert as_json["caches"] == caches16
    assert {a["role"] for a in as_json["attachments"]} == {"log", "calibration-cache", "timing-cache"}
    # by record key: the older record of the same engine
    older = json.loads(cli("show", fp16.metadata["record_key"], "--registry", where, "--json").stdout)
    assert older["record_key"] == fp16.metadata["record_key"] and older["gates"]["key"] == gate_key_of(LOOSE)


def test_ls_and_show_escape_registry_text(tmp_path):
    store = local_store(tmp_path / "artifacts")
    scope = "sm89/[red]L4[/red]\x1b[2J\n/tensorrt 10.13.3.9"
    _publish_with_caches(store, tmp_path, scope=scope)
    text = cli("ls", "--registry", str(store.root))
    assert text.returncode == 0, text.stderr
    assert "sm89/[red]L4[/red]\\x1b[2J\\n/tensorrt 10.13.3.9" in text.stdout  # markup shown, controls escaped
    assert "\x1b" not in text.stdout
    shown = cli("show", "ocr-det/fp16/default@sm89+trt10.13", "--registry", str(store.root))
    assert "scope sm89/[red]L4[/red]\\x1b[2J\\n/tensorrt 10.13.3.9" in shown.stdout and "\x1b" not in shown.stdout
