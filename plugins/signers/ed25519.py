"""Key-based signing: an ed25519 key pair, a DSSE envelope over the in-toto statement.

Keys (PEM, what ``cryptography`` and ``openssl genpkey -algorithm ed25519`` write): the private key (PKCS#8,
``-----BEGIN PRIVATE KEY-----``) signs at publish, named by the manifest's ``registry.signing.key`` as
``env:NAME`` (the PEM text in that environment variable, e.g. a CI secret) or ``file:PATH``; the public key
(SubjectPublicKeyInfo, ``-----BEGIN PUBLIC KEY-----``) verifies at pull, given as a file path, ``file:PATH`` or
``env:NAME``. A key's id is ``SHA256:`` and the hex sha256 of its raw 32 public bytes; the envelope names it.

The signature covers DSSE's PAE of the statement (``orchestrator.core.dsse``); ``cryptography`` does the
ed25519 arithmetic (RFC 8032), nothing here is hand-written crypto.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from orchestrator.contracts.signer import DSSE_MEDIA_TYPE, SignatureRefused, Verified
from orchestrator.core import dsse
from orchestrator.errors import StoreError, UsageError

INSTALL_HINT = "pip install 'trt-orchestrator[sign]'"


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        return None
    return serialization, ed25519


def _read_spec(spec: str, what: str, error: type[Exception]) -> bytes:
    """The PEM bytes ``spec`` names: ``env:NAME``, ``file:PATH`` or a path."""
    if spec.startswith("env:"):
        name = spec[4:]
        value = os.environ.get(name)
        if not value:
            raise error(f"the {what} is named env:{name}, but the environment variable {name} is not set or empty",
                        hint=f"export {name} with the PEM text of the key (a CI secret), or name a file: file:PATH")
        return value.encode("utf-8")
    path = Path(spec[5:] if spec.startswith("file:") else spec).expanduser()
    try:
        return path.read_bytes()
    except OSError as e:
        raise error(f"cannot read the {what} {path}: {e.strerror or e}",
                    hint="give the path of a PEM file, file:PATH or env:NAME") from None


def key_id(public_raw: bytes) -> str:
    return "SHA256:" + hashlib.sha256(public_raw).hexdigest()


def _raw(public_key: Any) -> bytes:
    serialization, _ = _crypto()
    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


class Ed25519Signer:
    name = "ed25519"
    media_type = DSSE_MEDIA_TYPE
    filename = "provenance.intoto.dsse.json"

    def available(self) -> str | None:
        return None if _crypto() is not None else f"the Python package cryptography is not installed ({INSTALL_HINT})"

    def accepts(self, trusted: str) -> bool:
        text = trusted.strip()
        return text.startswith(("env:", "file:")) or text.endswith((".pem", ".pub")) or Path(text).is_file()

    def _need(self, error: type[Exception]) -> Any:
        found = _crypto()
        if found is None:
            raise error("signing with an ed25519 key needs the Python package cryptography, which is not installed",
                        hint=INSTALL_HINT)
        return found

    def sign(self, payload: bytes, payload_type: str, key: str | None) -> bytes:
        serialization, ed25519 = self._need(StoreError)
        if not key:
            raise StoreError("registry.signing names no key for the ed25519 signer",
                             hint="set registry.signing.key: env:ORCH_SIGNING_KEY (a PEM private key)")
        pem = _read_spec(key, "signing key", StoreError)
        try:
            private = serialization.load_pem_private_key(pem, password=None)
        except (ValueError, TypeError) as e:
            raise StoreError(f"the signing key {key} is not an unencrypted PEM private key ({e})",
                             hint="write one with: openssl genpkey -algorithm ed25519 -out signing.pem") from None
        if not isinstance(private, ed25519.Ed25519PrivateKey):
            raise StoreError(f"the signing key {key} is a {type(private).__name__}, not an ed25519 key",
                             hint="write one with: openssl genpkey -algorithm ed25519 -out signing.pem")
        keyid = key_id(_raw(private.public_key()))
        sig = private.sign(dsse.pae(payload_type, payload))
        return dsse.Envelope(payload_type, payload, (dsse.Signature(keyid, sig),)).dumps()

    def public_key(self, trusted: str) -> Any:
        serialization, ed25519 = self._need(UsageError)
        pem = _read_spec(trusted.strip(), "public key", UsageError)
        try:
            public = serialization.load_pem_public_key(pem)
        except (ValueError, TypeError) as e:
            raise UsageError(f"--require-signature {trusted}: not a PEM public key ({e})",
                             hint="give the ed25519 public key (-----BEGIN PUBLIC KEY-----), e.g. "
                                  "openssl pkey -in signing.pem -pubout -out signing.pub") from None
        if not isinstance(public, ed25519.Ed25519PublicKey):
            raise UsageError(f"--require-signature {trusted}: a {type(public).__name__}, not an ed25519 public key")
        return public

    def verify(self, document: bytes, trusted: str) -> Verified:
        public = self.public_key(trusted)
        from cryptography.exceptions import InvalidSignature

        try:
            envelope = dsse.parse(document)
        except dsse.EnvelopeError as e:
            raise SignatureRefused(f"the signature is not a DSSE envelope: {e}") from None
        keyid = key_id(_raw(public))
        message = dsse.pae(envelope.payload_type, envelope.payload)
        for s in envelope.signatures:
            try:
                public.verify(s.sig, message)
            except InvalidSignature:
                continue
            return Verified(envelope.payload_type, envelope.payload, f"ed25519 key {keyid}", keyid)
        named = ", ".join(sorted({s.keyid or "(no keyid)" for s in envelope.signatures}))
        raise SignatureRefused(f"no signature verifies with the trusted key {keyid} (signed by {named}; a "
                               "wrong key, or the statement or signature was changed)")


signer = Ed25519Signer()
