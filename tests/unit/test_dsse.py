"""DSSE (issue 27.2): the PAE the spec defines, the envelope round trip, and the ed25519 signer on it."""

from __future__ import annotations

import base64
import json

import pytest

from orchestrator.core import dsse


def test_pae_matches_the_spec_example():
    # https://github.com/secure-systems-lab/dsse/blob/master/protocol.md, "Test vectors"
    assert dsse.pae("http://example.com/HelloWorld", b"hello world") == \
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"


def test_envelope_round_trip_and_refusals():
    env = dsse.Envelope("application/vnd.in-toto+json", b'{"a":1}', (dsse.Signature("k1", b"\x01\x02"),))
    assert dsse.parse(env.dumps()) == env
    for raw, words in ((b"[]", "not a JSON object"), (b"{}", "payloadType"),
                       (json.dumps({"payloadType": "t", "payload": "", "signatures": []}).encode(), "no signatures"),
                       (json.dumps({"payloadType": "t", "payload": "!!", "signatures": [{"sig": "AA=="}]}).encode(),
                        "base64")):
        with pytest.raises(dsse.EnvelopeError, match=words):
            dsse.parse(raw)


def test_ed25519_signs_the_pae_and_refuses_changes(tmp_path, monkeypatch):
    pytest.importorskip("cryptography")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    from orchestrator.contracts.signer import SignatureRefused
    from trt_orchestrator_plugins.signers.ed25519 import signer

    key = ed25519.Ed25519PrivateKey.generate()
    monkeypatch.setenv("TEST_SIGNING_KEY", key.private_bytes(serialization.Encoding.PEM,
                                                             serialization.PrivateFormat.PKCS8,
                                                             serialization.NoEncryption()).decode())
    pub = tmp_path / "k.pub"
    pub.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                  serialization.PublicFormat.SubjectPublicKeyInfo))
    doc = signer.sign(b'{"_type":"x"}', "application/vnd.in-toto+json", "env:TEST_SIGNING_KEY")
    env = json.loads(doc)
    # the signature is over the PAE, checked with cryptography directly
    key.public_key().verify(base64.b64decode(env["signatures"][0]["sig"]),
                            dsse.pae("application/vnd.in-toto+json", b'{"_type":"x"}'))
    verified = signer.verify(doc, str(pub))
    assert verified.payload == b'{"_type":"x"}' and verified.signer.startswith("ed25519 key SHA256:")
    env["payloadType"] = "text/plain"  # the type is signed too
    with pytest.raises(SignatureRefused):
        signer.verify(json.dumps(env).encode(), str(pub))
