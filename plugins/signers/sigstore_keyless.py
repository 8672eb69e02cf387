"""Keyless signing with Sigstore, where the runner has an OIDC identity (GitHub Actions with ``id-token: write``).

The statement is signed as DSSE with a short-lived Fulcio certificate for the workflow's identity and logged in
Rekor; the stored document is the Sigstore bundle (``application/vnd.dev.sigstore.bundle.v0.3+json``) that carries
the DSSE envelope, the certificate and the log entry. It is verified against a certificate identity: the workflow
URI GitHub puts in the certificate (``https://github.com/ORG/REPO/.github/workflows/engines.yml@refs/heads/main``),
issued by GitHub Actions' token issuer.

Uses sigstore-python (https://pypi.org/project/sigstore/: ``SigningContext``, ``Signer.sign_dsse``,
``Verifier.verify_dsse``, ``policy.Identity``). It needs the network (Fulcio, Rekor, the TUF trust root) and an
ambient OIDC credential, so on a machine without them ``available`` says why and nothing is signed: the tests skip
it with that reason. The key-based ``ed25519`` signer is the offline one.
"""

from __future__ import annotations

import os
from typing import Any

from orchestrator.contracts.signer import SignatureRefused, Verified
from orchestrator.errors import StoreError, UsageError

GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"


def _sigstore() -> Any:
    try:
        import sigstore  # noqa: F401
    except ImportError:
        return None
    return True


class SigstoreSigner:
    name = "sigstore"
    media_type = BUNDLE_MEDIA_TYPE
    filename = "provenance.intoto.sigstore.json"

    def available(self) -> str | None:
        if _sigstore() is None:
            return "the Python package sigstore is not installed (pip install sigstore)"
        if not os.environ.get("ACTIONS_ID_TOKEN_REQUEST_URL"):
            return ("no ambient OIDC identity: keyless signing runs in GitHub Actions with `permissions: id-token: "
                    "write` (ACTIONS_ID_TOKEN_REQUEST_URL is not set here)")
        return None

    def accepts(self, trusted: str) -> bool:
        return trusted.strip().startswith("https://github.com/")

    def sign(self, payload: bytes, payload_type: str, key: str | None) -> bytes:
        why = self.available()
        if why:
            raise StoreError(f"cannot sign keyless with Sigstore: {why}",
                             hint="sign with a key instead (registry.signing.key: env:ORCH_SIGNING_KEY)")
        from sigstore.dsse import Statement
        from sigstore.oidc import IdentityToken, detect_credential
        from sigstore.sign import SigningContext

        credential = detect_credential()
        if not credential:
            raise StoreError("cannot sign keyless with Sigstore: no OIDC credential was detected")
        context = SigningContext.production()
        with context.signer(IdentityToken(credential)) as signer:
            bundle = signer.sign_dsse(Statement(payload))
        return bundle.to_json().encode("utf-8")

    def verify(self, document: bytes, trusted: str) -> Verified:
        if _sigstore() is None:
            raise UsageError("verifying a keyless signature needs the Python package sigstore",
                             hint="pip install sigstore")
        from sigstore.errors import VerificationError
        from sigstore.models import Bundle
        from sigstore.verify import Verifier
        from sigstore.verify.policy import Identity

        identity = trusted.strip()
        try:
            bundle = Bundle.from_json(document)
            payload_type, payload = Verifier.production().verify_dsse(
                bundle, Identity(identity=identity, issuer=GITHUB_ISSUER))
        except (VerificationError, ValueError) as e:
            raise SignatureRefused(f"the Sigstore bundle does not verify for {identity}: {e}") from None
        return Verified(payload_type, payload, f"Sigstore certificate identity {identity}", identity)


signer = SigstoreSigner()
