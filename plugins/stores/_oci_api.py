"""The OCI distribution API calls the store makes, over one registry's HTTP (``_registry_http``): blobs (HEAD,
a streamed upload as POST + one ``PUT ?digest=``, a streamed download verified into a temp file or only hashed),
manifests (GET, PUT) and paginated tag and catalog lists. What they mean to the store is ``oci.py``'s."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from orchestrator.errors import ArtifactNotFoundError, IntegrityError, StoreError
from trt_orchestrator_plugins.stores._atomic import atomic_writer
from trt_orchestrator_plugins.stores._oci_layout import EMPTY_BLOB, EMPTY_DESCRIPTOR, MANIFEST_MEDIA_TYPE
from trt_orchestrator_plugins.stores._registry_http import (
    BoundedFile,
    RegistryHttp,
    Transient,
    body_reader,
    connection_reason,
    content_length,
    requests_module,
)


class DistributionApi:
    """The distribution API of one registry, as typed calls."""

    def __init__(self, http: RegistryHttp) -> None:
        self.http = http

    def blob_exists(self, repo: str, digest: str) -> bool:
        r = self.http.send("HEAD", f"/v2/{repo}/blobs/{digest}", ok=(200, 404))
        r.close()
        return r.status_code == 200

    def upload_blob(self, repo: str, path: Path | None, digest: str, size: int, data: bytes | None = None,
                     what: str = "") -> None:
        """POST an upload session, then one streamed ``PUT ?digest=`` of the file (never read whole)."""
        if self.blob_exists(repo, digest):
            return
        r = self.http.send("POST", f"/v2/{repo}/blobs/uploads/", headers={"Content-Length": "0"}, ok=(202,))
        location = r.headers["Location"]
        r.close()
        sep = "&" if "?" in location else "?"
        body = (lambda: BoundedFile(path, size, self.http.check_deadline)) if data is None else data
        try:
            r = self.http.send("PUT", f"{location}{sep}digest={digest}", body=body,
                           headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)},
                           ok=(201,))
        except StoreError as e:
            if "DIGEST_INVALID" in str(e) or "BLOB_UPLOAD_INVALID" in str(e):
                raise IntegrityError(f"{what}: the registry computed a different digest than {digest} for "
                                     f"{path or 'the metadata'}",
                                     hint="the file changed after its metadata was built") from e
            raise
        r.close()

    def blob_response(self, repo: str, digest: str, address: str, what: str):
        r = self.http.send("GET", f"/v2/{repo}/blobs/{digest}", stream=True, ok=(200, 404))
        if r.status_code == 404:
            r.close()
            raise ArtifactNotFoundError(f"{address}: the {what} blob {digest} is missing from {self.http.host}/{repo}",
                                        hint="the registry lost it (garbage-collected or damaged storage); "
                                             "`orchestrate store check --quarantine` moves its records aside; "
                                             "publish them again")
        return r

    def download_blob(self, repo: str, digest: str, dest: Path | None, address: str, what: str = "engine") -> str:
        """Stream a blob into ``dest`` (atomically, verified against ``digest``), or only hash it (``dest`` None):
        returns the digest its bytes have."""
        r = self.blob_response(repo, digest, address, what)
        requests = requests_module()
        import urllib3

        read = body_reader(r)

        def bounded(buf):  # the operation's deadline, checked between 1 MiB reads
            self.http.check_deadline()
            return read(buf)

        try:
            with r:
                if dest is None:
                    return self.hash_body(r, bounded)
                with atomic_writer(dest) as w:
                    # Eight reused 1 MiB buffers: this thread reads the socket into one and writes it while a
                    # second thread hashes the previous ones, so socket reads, page-cache writes and sha256 overlap.
                    w.pump(bounded)
                    # http.client's readinto returns 0 on an early EOF instead of raising: a cut connection.
                    expected = content_length(r)
                    if expected is not None and w.size < expected:
                        raise Transient(f"connection closed after {w.size} of {expected} bytes")
                    actual = f"sha256:{w.hexdigest()}"
                    if actual != digest:
                        raise IntegrityError(
                            f"{address}: {what} {digest} failed its integrity check (downloaded bytes hash to "
                            f"{actual}); {dest} was not written",
                            hint=f"the blob in {self.http.host}/{repo} is corrupt; `orchestrate store check "
                                 "--quarantine` moves its records aside; publish them again")
                return actual
        except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError, urllib3.exceptions.HTTPError,
                ConnectionError, TimeoutError) as e:
            raise Transient(connection_reason(e)) from e
        except Exception as e:
            import http.client

            if isinstance(e, http.client.HTTPException):
                raise Transient(connection_reason(e)) from e
            raise

    @staticmethod
    def hash_body(r, read) -> str:
        h = hashlib.sha256()
        buf = bytearray(1024 * 1024)
        view = memoryview(buf)
        total = 0
        while n := read(buf):
            h.update(view[:n])
            total += n
        expected = content_length(r)
        if expected is not None and total < expected:
            raise Transient(f"connection closed after {total} of {expected} bytes")
        return "sha256:" + h.hexdigest()

    def get_manifest(self, repo: str, ref: str) -> tuple[str, dict] | None:
        got = self.get_manifest_raw(repo, ref)
        return None if got is None else (got[0], got[1])

    def get_manifest_raw(self, repo: str, ref: str) -> tuple[str, dict, bytes] | None:
        r = self.http.send("GET", f"/v2/{repo}/manifests/{ref}", headers={"Accept": MANIFEST_MEDIA_TYPE},
                       ok=(200, 404))
        if r.status_code == 404:
            r.close()
            return None
        raw = r.content
        digest = r.headers.get("Docker-Content-Digest") or "sha256:" + hashlib.sha256(raw).hexdigest()
        manifest = self.http.json(r, f"GET /v2/{repo}/manifests/{ref}")
        if not isinstance(manifest, dict):
            raise StoreError(f"registry {self.http.host}: the manifest {repo}:{ref} is not a JSON object")
        return digest, manifest, raw

    def send_manifest(self, repo: str, ref: str, raw: bytes) -> None:
        """PUT a manifest. A MANIFEST_BLOB_UNKNOWN answer for blobs just uploaded is retried (Transient): with
        the filesystem driver, distribution rewrites a repository's blob link in place when several clients
        commit the same blob at once, and a manifest PUT reading it meanwhile finds it empty."""
        r = self.http.send("PUT", f"/v2/{repo}/manifests/{ref}", body=raw,
                       headers={"Content-Type": MANIFEST_MEDIA_TYPE}, ok=(201, 400))
        if r.status_code == 400:
            text = r.text[:300]
            r.close()
            if "MANIFEST_BLOB_UNKNOWN" in text:
                raise Transient("the registry did not find a blob of the manifest (MANIFEST_BLOB_UNKNOWN)")
            raise StoreError(f"registry {self.http.host}: PUT /v2/{repo}/manifests/{ref} failed with HTTP 400: {text}")
        r.close()

    def paginated_or_none(self, path: str, key: str) -> list[str] | None:
        """Every page of a tags/catalog list; None when the registry answers 404 (no such repository)."""
        out: list[str] = []
        url: str | None = f"{path}?n=1000"
        while url:
            r = self.http.retrying(f"listing {path}", lambda u=url: self.http.send("GET", u, ok=(200, 404)))
            if r.status_code == 404:
                r.close()
                return None if not out else out
            body = self.http.json(r, f"GET {path}")
            items = body.get(key) if isinstance(body, dict) else None
            out.extend(str(i) for i in (items or []))
            link = r.headers.get("Link", "")
            m = re.search(r"<([^>]+)>", link)
            url = m.group(1) if m else None
        return out

    def paginated(self, path: str, key: str) -> list[str]:
        return self.paginated_or_none(path, key) or []

    def put_empty_blob(self, repo: str) -> None:
        self.upload_blob(repo, None, EMPTY_DESCRIPTOR["digest"], len(EMPTY_BLOB), data=EMPTY_BLOB, what=repo)
