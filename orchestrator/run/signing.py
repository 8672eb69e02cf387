"""Signing at publish: the in-toto statement of each artifact (its metadata's ``provenance``) signed by the signer
the manifest names (``registry.signing``), stored beside the engine as an attachment of role ``signature`` and,
where the store can (OCI), as a referrer of the record's manifest. A manifest that asks for signing and cannot
sign (key unset, signer unavailable) stops the publish of that cell: an artifact is never published unsigned by
accident."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator import plugins
from orchestrator.contracts.signer import INTOTO_PAYLOAD_TYPE
from orchestrator.contracts.store import SIGNATURE_ROLE, Attachment, ReferrerWriter, Store, StoredArtifact
from orchestrator.core.model import RegistryConfig
from orchestrator.errors import StoreError


def statement_bytes(meta: Mapping[str, Any]) -> bytes:
    """The signed payload: the record's in-toto statement as canonical JSON (sorted keys, no spaces)."""
    return json.dumps(meta["provenance"], sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True)
class SignedStatement:
    attachment: Attachment
    media_type: str
    signer: str


def sign_statement(meta: Mapping[str, Any], registry: RegistryConfig, out_dir: Path) -> SignedStatement | None:
    """The signed statement of ``meta`` written into ``out_dir`` (None: the manifest asks for no signing)."""
    config = registry.signing
    if config is None or (config.key is None and config.signer == "ed25519"):
        return None  # no signing, or only a verification default (`require`)
    signer = plugins.signer(config.signer)
    why = signer.available()
    if why:
        raise StoreError(f"{meta['address']}: registry.signing asks the {config.signer} signer, which cannot sign "
                         f"here: {why}", hint="fix that, or remove registry.signing to publish unsigned")
    document = signer.sign(statement_bytes(meta), INTOTO_PAYLOAD_TYPE, config.key)
    path = out_dir / signer.filename
    path.write_bytes(document)
    return SignedStatement(Attachment(path, SIGNATURE_ROLE, signer.filename), signer.media_type, config.signer)


def attach_referrer(store: Store, stored: StoredArtifact, signed: SignedStatement | None) -> None:
    """Also hang the signed statement on the record where the store offers referrers (OCI)."""
    if signed is not None and isinstance(store, ReferrerWriter):
        store.put_referrer(stored, signed.attachment.path, signed.media_type)
