"""``--require-signature``: check a chosen artifact's signed provenance before a byte of it is written.

What is trusted is a string (a public key file, ``env:NAME``, a keyless identity); the installed signer plugin
that ``accepts`` it verifies the artifact's signature attachment (``contracts.signer``). Whoever the signer, the
verified statement must then be the record's own in-toto statement (``provenance``) and name the engine's digest as
its subject: a valid signature over another statement, or a statement about other bytes, is refused like a bad
signature. Every refusal is an ``IntegrityError`` (exit 1) naming the artifact and the reason; nothing is written.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator import plugins
from orchestrator.contracts.signer import INTOTO_PAYLOAD_TYPE, SignatureRefused, Signer
from orchestrator.contracts.store import SIGNATURE_ROLE, AttachmentReader, Store, StoredArtifact
from orchestrator.core.model import RegistryConfig
from orchestrator.errors import IntegrityError, UsageError

FLAG = "--require-signature"


@dataclass(frozen=True)
class SignatureCheck:
    """A verified artifact: who signed it."""

    address: str
    digest: str
    signer: str  # in words
    keyid: str
    method: str  # the signer plugin

    def to_json(self) -> dict[str, Any]:
        return {"verified": True, "address": self.address, "digest": self.digest, "signed_by": self.signer,
                "keyid": self.keyid, "signer": self.method}


def required(flag: str | None, registry: plugins.RegistryRef) -> str | None:
    """What must have signed: the flag, else the manifest's ``registry.signing.require`` (a registry given as a
    path or URL has no manifest: nothing), else None (no check)."""
    if flag is not None:
        return flag
    if isinstance(registry, RegistryConfig) and registry.signing is not None:
        return registry.signing.require
    return None


def trusted_signer(trusted: str) -> Signer:
    """The installed signer that verifies against ``trusted`` (a key or an identity)."""
    text = trusted.strip()
    if not text:
        raise UsageError(f"{FLAG} is empty", hint=f"{FLAG} PUBLIC_KEY.pem, env:NAME or a keyless identity")
    found = [s for s in plugins.signers() if s.accepts(text)]
    if not found:
        names = ", ".join(s.name for s in plugins.signers()) or "none installed"
        raise UsageError(f"{FLAG} {text}: no installed signer verifies against that (signers: {names})",
                         hint="give an ed25519 public key file (or env:NAME holding one), or a keyless identity "
                              "such as https://github.com/ORG/REPO/.github/workflows/engines.yml@refs/heads/main")
    return found[0]


def _statement_problem(meta: Mapping[str, Any], payload_type: str, payload: bytes, digest: str) -> str | None:
    if payload_type != INTOTO_PAYLOAD_TYPE:
        return f"the signed payload is {payload_type!r}, not an in-toto statement"
    try:
        statement = json.loads(payload)
    except ValueError:
        return "the signed payload is not JSON"
    subjects = statement.get("subject") if isinstance(statement, dict) else None
    named = {f"sha256:{s.get('digest', {}).get('sha256')}" for s in subjects or [] if isinstance(s, dict)}
    if digest not in named:
        return (f"mismatching: the signed statement's subject is {', '.join(sorted(named)) or 'empty'}, but the "
                f"engine is {digest}")
    if statement != meta.get("provenance"):
        return ("mismatching: the signed statement is not this record's provenance (the record was changed after "
                "it was signed)")
    if meta.get("engine", {}).get("digest") != digest:
        return f"the record's engine digest {meta.get('engine', {}).get('digest')} is not {digest}"
    return None


def verify(store: Store, artifact: StoredArtifact, trusted: str, signer: Signer | None = None) -> SignatureCheck:
    """Check ``artifact``'s signed provenance against ``trusted``; ``IntegrityError`` with the reason when it is
    unsigned, wrongly signed or mismatching."""
    signer = signer or trusted_signer(trusted)
    meta = artifact.metadata
    address = str(meta.get("address"))
    entries = [a for a in meta.get("attachments") or () if isinstance(a, Mapping)
               and a.get("role") == SIGNATURE_ROLE and a.get("name") == signer.filename]
    hint = "publish it again from a manifest with registry.signing (docs/trust.md), or pull without " + FLAG
    if not entries:
        raise IntegrityError(f"{address} ({artifact.digest[:19]}): refused, unsigned: it carries no {signer.name} "
                             f"signature ({signer.filename})", hint=hint)
    if not isinstance(store, AttachmentReader):
        raise IntegrityError(f"{address}: refused: this store cannot hand back signatures",
                             hint="use a store that implements get_attachment (local, oci)")
    with tempfile.TemporaryDirectory(prefix="orchestrate-signature-") as tmp:
        path = Path(tmp) / signer.filename
        store.get_attachment(artifact, signer.filename, path)  # sha256-checked against the record
        document = path.read_bytes()
    try:
        verified = signer.verify(document, trusted)
    except SignatureRefused as e:
        raise IntegrityError(f"{address} ({artifact.digest[:19]}): refused, wrongly signed: {e}", hint=hint) from None
    problem = _statement_problem(meta, verified.payload_type, verified.payload, artifact.digest)
    if problem:
        raise IntegrityError(f"{address} ({artifact.digest[:19]}): refused, {problem}", hint=hint)
    return SignatureCheck(address, artifact.digest, verified.signer, verified.keyid, signer.name)


def verify_all(store: Store, artifacts: Iterable[StoredArtifact], trusted: str | None) -> tuple[SignatureCheck, ...]:
    """Every artifact checked (None trusted: no check); the first that fails raises, before anything is written."""
    if trusted is None:
        return ()
    signer = trusted_signer(trusted)
    seen: dict[str, SignatureCheck] = {}
    for art in artifacts:
        key = str(art.metadata.get("record_key") or art.metadata.get("build_key"))
        if key not in seen:
            seen[key] = verify(store, art, trusted, signer)
    return tuple(seen.values())
