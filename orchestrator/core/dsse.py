"""DSSE, the Dead Simple Signing Envelope (pure): the bytes a signature covers and the envelope that carries it.

Protocol (https://github.com/secure-systems-lab/dsse/blob/master/protocol.md): a signature is over the
Pre-Authentication Encoding ``PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body``, where SP is
one space and LEN the ASCII decimal byte length, so the payload type is signed with the payload and no parser ever
reads unsigned bytes. Envelope (https://github.com/secure-systems-lab/dsse/blob/master/envelope.md): JSON
``{"payload": base64(body), "payloadType": type, "signatures": [{"keyid": ..., "sig": base64(sig)}]}``, standard
base64 written, standard or URL-safe accepted on reading.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any


def pae(payload_type: str, payload: bytes) -> bytes:
    """The Pre-Authentication Encoding DSSE signs."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


@dataclass(frozen=True)
class Signature:
    keyid: str
    sig: bytes


@dataclass(frozen=True)
class Envelope:
    payload_type: str
    payload: bytes
    signatures: tuple[Signature, ...]

    def to_json(self) -> dict[str, Any]:
        return {"payload": base64.b64encode(self.payload).decode("ascii"), "payloadType": self.payload_type,
                "signatures": [{"keyid": s.keyid, "sig": base64.b64encode(s.sig).decode("ascii")}
                               for s in self.signatures]}

    def dumps(self) -> bytes:
        return json.dumps(self.to_json(), indent=1).encode("utf-8") + b"\n"


class EnvelopeError(ValueError):
    """The bytes are not a DSSE envelope; the message says what is wrong."""


def _b64(text: object, what: str) -> bytes:
    if not isinstance(text, str):
        raise EnvelopeError(f"{what} is not a base64 string")
    padded = text + "=" * (-len(text) % 4)
    try:
        if "-" in text or "_" in text:
            return base64.urlsafe_b64decode(padded)
        return base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        raise EnvelopeError(f"{what} is not valid base64") from None


def parse(raw: bytes) -> Envelope:
    """A DSSE envelope from JSON bytes; ``EnvelopeError`` says what is missing or malformed."""
    try:
        data = json.loads(raw)
    except ValueError as e:
        raise EnvelopeError(f"not JSON ({e})") from None
    if not isinstance(data, dict):
        raise EnvelopeError("not a JSON object")
    payload_type = data.get("payloadType")
    if not isinstance(payload_type, str):
        raise EnvelopeError("payloadType is missing")
    sigs = data.get("signatures")
    if not isinstance(sigs, list) or not sigs:
        raise EnvelopeError("it carries no signatures")
    out = []
    for i, s in enumerate(sigs):
        if not isinstance(s, dict):
            raise EnvelopeError(f"signatures[{i}] is not an object")
        keyid = s.get("keyid", "")
        out.append(Signature(keyid if isinstance(keyid, str) else "", _b64(s.get("sig"), f"signatures[{i}].sig")))
    return Envelope(payload_type, _b64(data.get("payload"), "payload"), tuple(out))
