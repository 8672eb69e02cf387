"""OCI referrers: a file hung on a published manifest (the signed provenance), found the way OCI tools look.

A referrer is an image manifest with ``artifactType`` and a ``subject`` naming the manifest it refers to (OCI image
spec v1.1, manifest.md "subject" and "artifactType"; https://github.com/opencontainers/image-spec). Registries that
implement the distribution spec v1.1 referrers API answer ``GET /v2/<name>/referrers/<digest>`` and say so with an
``OCI-Subject`` header on the PUT; for the others (CNCF distribution 2.8, the Debian ``docker-registry``) the
client keeps the "referrers tag schema": an image index tagged ``<alg>-<hex>`` of the subject, listing every
referrer (https://github.com/opencontainers/distribution-spec/blob/main/spec.md, "Pushing Manifests with Subject"
and "Referrers Tag Schema"). Both are written and read here. The referrer manifest is deterministic (no
timestamp), so publishing it again is a no-op.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from trt_orchestrator_plugins.stores._oci_layout import EMPTY_BLOB, EMPTY_DESCRIPTOR, MANIFEST_MEDIA_TYPE, TITLE

INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"


def _dumps(data: dict[str, Any]) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def fallback_tag(digest: str) -> str:
    algorithm, _, hexpart = digest.partition(":")
    return f"{algorithm}-{hexpart}"


def put_referrer(store: Any, repo: str, subject_digest: str, subject_size: int, path: Path,
                 artifact_type: str) -> str:
    """Upload ``path`` and a referrer manifest of ``subject_digest`` in ``repo`` through ``store`` (the OCI store's
    HTTP primitives); maintain the fallback index when the registry has no referrers API. Returns the referrer's
    manifest digest."""
    data = Path(path).read_bytes()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    store._retrying(f"uploading {path.name}", lambda: store.api.upload_blob(repo, None, digest, len(data), data=data))
    store._retrying("uploading the empty config", lambda: store.api.upload_blob(
        repo, None, EMPTY_DESCRIPTOR["digest"], len(EMPTY_BLOB), data=EMPTY_BLOB))
    manifest = {"schemaVersion": 2, "mediaType": MANIFEST_MEDIA_TYPE, "artifactType": artifact_type,
                "config": EMPTY_DESCRIPTOR,
                "layers": [{"mediaType": artifact_type, "digest": digest, "size": len(data),
                            "annotations": {TITLE: path.name}}],
                "subject": {"mediaType": MANIFEST_MEDIA_TYPE, "digest": subject_digest, "size": subject_size}}
    raw = _dumps(manifest)
    ref = "sha256:" + hashlib.sha256(raw).hexdigest()

    def put() -> bool:
        r = store._send("PUT", f"/v2/{repo}/manifests/{ref}", body=raw,
                        headers={"Content-Type": MANIFEST_MEDIA_TYPE}, ok=(201,))
        native = bool(r.headers.get("OCI-Subject"))
        r.close()
        return native

    if not store._retrying(f"publishing the referrer {ref[:19]}", put):
        descriptor = {"mediaType": MANIFEST_MEDIA_TYPE, "digest": ref, "size": len(raw),
                      "artifactType": artifact_type}
        store._retrying("updating the referrers index", lambda: _add_to_fallback(store, repo, subject_digest,
                                                                                  descriptor))
    return ref


def _add_to_fallback(store: Any, repo: str, subject_digest: str, descriptor: dict[str, Any]) -> None:
    tag = fallback_tag(subject_digest)
    r = store._send("GET", f"/v2/{repo}/manifests/{tag}", headers={"Accept": INDEX_MEDIA_TYPE}, ok=(200, 404))
    index = {"schemaVersion": 2, "mediaType": INDEX_MEDIA_TYPE, "manifests": []}
    if r.status_code == 200:
        try:
            found = json.loads(r.content)
        except ValueError:
            found = None
        if isinstance(found, dict) and isinstance(found.get("manifests"), list):
            index = found
    r.close()
    if any(isinstance(m, dict) and m.get("digest") == descriptor["digest"] for m in index["manifests"]):
        return
    index["manifests"].append(descriptor)
    r = store._send("PUT", f"/v2/{repo}/manifests/{tag}", body=_dumps(index),
                    headers={"Content-Type": INDEX_MEDIA_TYPE}, ok=(201,))
    r.close()


def list_referrers(store: Any, repo: str, subject_digest: str, artifact_type: str | None = None
                   ) -> list[dict[str, Any]]:
    """The referrer descriptors of ``subject_digest``: the referrers API where the registry has it, else the
    fallback index (empty when neither exists)."""
    r = store._send("GET", f"/v2/{repo}/referrers/{subject_digest}", headers={"Accept": INDEX_MEDIA_TYPE},
                    ok=(200, 404))
    if r.status_code == 404:
        r.close()
        r = store._send("GET", f"/v2/{repo}/manifests/{fallback_tag(subject_digest)}",
                        headers={"Accept": INDEX_MEDIA_TYPE}, ok=(200, 404))
    found = json.loads(r.content) if r.status_code == 200 else {}
    r.close()
    manifests = found.get("manifests") if isinstance(found, dict) else None
    return [m for m in manifests or [] if isinstance(m, dict)
            and (artifact_type is None or m.get("artifactType") == artifact_type)]
