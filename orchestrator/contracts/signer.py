"""The signer port: sign an artifact's in-toto statement at publish, verify it at pull.

A signer plugin (entry-point group ``trt_orchestrator.signers``) turns the statement into a signed document stored
beside the artifact (an attachment of role ``signature`` named ``filename``; the OCI store also hangs it on the
record's manifest as a referrer) and, at pull, checks such a document against what the deployment trusts. The
key-based signer writes a DSSE envelope (https://github.com/secure-systems-lab/dsse/blob/master/envelope.md); a
keyless one may write a Sigstore bundle that carries one. What is trusted is a string the user gives
(``--require-signature``, ``registry.signing.require``): each signer says whether it is one of its own
(``accepts``: a public key file or ``env:NAME`` for the key-based signer, an identity for a keyless one).

The app then checks what every signer's answer must satisfy, whoever made it: the verified statement is the
record's own ``provenance`` and its subject digest is the engine's digest (``orchestrator.app.signatures``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

SIGNATURE_ROLE = "signature"
INTOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"  # the DSSE payloadType of an in-toto statement
DSSE_MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"


@dataclass(frozen=True)
class Verified:
    """A signed document that checked out: what it signs and who signed it."""

    payload_type: str
    payload: bytes  # the signed bytes (the in-toto statement, canonical JSON)
    signer: str  # who, in words: "ed25519 key SHA256:ab12…", a certificate identity
    keyid: str  # the key or identity, machine-readable


class SignatureRefused(Exception):
    """A signed document did not verify against what is trusted; the message says why (the app turns it into the
    project's IntegrityError naming the artifact)."""


@runtime_checkable
class Signer(Protocol):
    name: str
    media_type: str  # the stored document's media type (the OCI referrer's artifactType)
    filename: str  # its attachment name in a record

    def available(self) -> str | None:
        """None when this signer can sign on this machine, else why not (cheap; no network)."""
        ...

    def accepts(self, trusted: str) -> bool:
        """Whether ``trusted`` (``--require-signature``) names something this signer verifies against."""
        ...

    def sign(self, payload: bytes, payload_type: str, key: str | None) -> bytes:
        """The signed document over ``payload`` (``key``: the manifest's ``registry.signing.key``, None for a
        keyless signer); raise ``orchestrator.errors.StoreError`` when it cannot sign (key missing or unusable)."""
        ...

    def verify(self, document: bytes, trusted: str) -> Verified:
        """Check ``document`` against ``trusted``; raise ``SignatureRefused`` saying why it does not verify, or
        ``orchestrator.errors.UsageError`` when ``trusted`` itself cannot be read (a missing key file)."""
        ...
