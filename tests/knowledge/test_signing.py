"""Signatures over a bundle's digest: made, checked, and refused when they do not hold."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from cudasched.knowledge.bundle import BundleError
from cudasched.knowledge.signing import (
    Signature,
    load_private_key,
    load_public_key,
    payload,
    verify_signatures,
)
from tests.support.bundles import ecdsa_pair, ed25519_pair

DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32


@pytest.mark.parametrize("pair", [ed25519_pair, ecdsa_pair], ids=["ed25519", "ecdsa"])
def test_a_signature_verifies_with_its_key_only(pair: Callable[[], tuple[bytes, bytes]]) -> None:
    private, public = pair()
    signer = load_private_key(private, "private.pem")
    trusted = load_public_key(public, "public.pem")
    assert signer.key_id == trusted.key_id and signer.algorithm == trusted.algorithm
    signature = signer.sign(DIGEST)
    assert verify_signatures(DIGEST, [signature], [trusted], "b") == trusted
    again = Signature.from_document(signature.to_document(), "doc")
    assert again == signature
    _, stranger = pair()
    with pytest.raises(BundleError, match="not a trusted key"):
        verify_signatures(DIGEST, [signature], [load_public_key(stranger, "s")], "b")


def test_what_does_not_hold_is_said() -> None:
    private, public = ed25519_pair()
    signer, trusted = load_private_key(private, "k"), load_public_key(public, "p")
    other = signer.sign(OTHER)
    with pytest.raises(BundleError, match="another bundle") as caught:
        verify_signatures(DIGEST, [other], [trusted], "b")
    assert caught.value.reason == "signature"
    forged = Signature(DIGEST, other.key_id, other.algorithm, other.value)
    with pytest.raises(BundleError, match="does not verify"):
        verify_signatures(DIGEST, [forged], [trusted], "b")
    with pytest.raises(BundleError, match="not signed, and signatures are required"):
        verify_signatures(DIGEST, [], [trusted], "b")


def test_the_payload_names_its_purpose() -> None:
    assert payload(DIGEST) == b"cudasched-knowledge-bundle-v1\n" + DIGEST.encode()


def test_keys_that_are_not_ed25519_or_p256_and_documents_that_are_not_signatures() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    with pytest.raises(BundleError, match="an Ed25519 or ECDSA P-256 key is expected"):
        load_public_key(pem, "rsa.pem")
    with pytest.raises(BundleError, match="not a PEM public key"):
        load_public_key(b"hello", "junk.pem")
    with pytest.raises(BundleError, match="not an unencrypted PEM private key"):
        load_private_key(b"hello", "junk.pem")
    with pytest.raises(BundleError, match="not base64"):
        Signature.from_document(
            {"digest": DIGEST, "keyId": "k", "algorithm": "ed25519", "signature": "!!"}, "d"
        )
    with pytest.raises(BundleError, match="a signature has digest"):
        Signature.from_document({"digest": DIGEST}, "d")
