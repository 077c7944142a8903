"""Bundles signed and their signatures verified: Ed25519 or ECDSA P-256 over the bundle's
digest, with the ``cryptography`` library cudasched already depends on.

A signature says "the holder of this key published the bundle whose manifest has this
digest". The digest covers the metadata and every table's bytes (the manifest names each
blob by its digest), so one signature covers the whole bundle, whichever copy (a registry, a
directory, an archive) it is read from. What is signed is :func:`payload`: a fixed prefix
naming the purpose and the digest, so a signature made for something else with the same key
never passes for a bundle's.

Why not Sigstore: keyless signing needs Fulcio and Rekor on the network, which an air-gapped
cluster has not, and a cosign key pair verified offline is this same check with a larger
library; a cluster owner trusts public keys listed in the settings (docs/design.md). A
signature is a small JSON document (:class:`Signature`); several may sign one bundle (a key
being rotated), and one valid signature from a trusted key is enough.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cudasched.knowledge.bundle import BundleError
from cudasched.vocab.errors import shown

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ec import (
        EllipticCurvePrivateKey,
        EllipticCurvePublicKey,
    )
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

    PublicKey = Ed25519PublicKey | EllipticCurvePublicKey
    PrivateKey = Ed25519PrivateKey | EllipticCurvePrivateKey

__all__ = [
    "ALGORITHMS",
    "Signature",
    "SigningKey",
    "TrustedKey",
    "load_private_key",
    "load_public_key",
    "payload",
    "verify_signatures",
]

ALGORITHMS = ("ed25519", "ecdsa-p256-sha256")
_PREFIX = b"cudasched-knowledge-bundle-v1\n"


def payload(digest: str) -> bytes:
    """What a signature over the bundle ``digest`` signs."""
    return _PREFIX + digest.encode("ascii")


@dataclass(frozen=True, slots=True)
class TrustedKey:
    """A public key a cluster owner trusts, and its id (a digest of the key)."""

    key_id: str
    algorithm: str
    key: PublicKey

    def verifies(self, signed: bytes, signature: bytes) -> bool:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        try:
            if isinstance(self.key, ec.EllipticCurvePublicKey):
                self.key.verify(signature, signed, ec.ECDSA(hashes.SHA256()))
            else:
                self.key.verify(signature, signed)
        except InvalidSignature:
            return False
        return True


@dataclass(frozen=True, slots=True)
class SigningKey:
    """A private key that signs bundles, with the id of its public half."""

    key_id: str
    algorithm: str
    key: PrivateKey

    def sign(self, digest: str) -> Signature:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        signed = payload(digest)
        if isinstance(self.key, ec.EllipticCurvePrivateKey):
            raw = self.key.sign(signed, ec.ECDSA(hashes.SHA256()))
        else:
            raw = self.key.sign(signed)
        return Signature(digest, self.key_id, self.algorithm, raw)


@dataclass(frozen=True, slots=True)
class Signature:
    """One signature of a bundle: the digest it signs, the key that made it, the bytes."""

    digest: str
    key_id: str
    algorithm: str
    value: bytes

    def to_document(self) -> dict[str, str]:
        return {
            "digest": self.digest,
            "keyId": self.key_id,
            "algorithm": self.algorithm,
            "signature": base64.b64encode(self.value).decode("ascii"),
        }

    @classmethod
    def from_document(cls, doc: object, what: str) -> Signature:
        if not isinstance(doc, Mapping):
            raise BundleError("signature", f"{what}: a signature is a JSON object")
        fields = [doc.get(k) for k in ("digest", "keyId", "algorithm", "signature")]
        if not all(isinstance(f, str) and f for f in fields):
            raise BundleError(
                "signature", f"{what}: a signature has digest, keyId, algorithm and signature"
            )
        digest, key_id, algorithm, value = (str(f) for f in fields)
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise BundleError("signature", f"{what}: the signature is not base64") from None
        return cls(digest, key_id, algorithm, raw)


def _key_id(public: Any) -> str:
    from cryptography.hazmat.primitives import serialization

    der = public.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return "sha256:" + hashlib.sha256(der).hexdigest()[:32]


def _algorithm(key: Any, label: str) -> str:
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    if isinstance(key, ed25519.Ed25519PublicKey | ed25519.Ed25519PrivateKey):
        return "ed25519"
    if isinstance(key, ec.EllipticCurvePublicKey | ec.EllipticCurvePrivateKey) and isinstance(
        key.curve, ec.SECP256R1
    ):
        return "ecdsa-p256-sha256"
    raise BundleError(
        "signature", f"{label}: an Ed25519 or ECDSA P-256 key is expected, not {type(key).__name__}"
    )


def load_public_key(pem: bytes, label: str) -> TrustedKey:
    """A PEM public key (``openssl pkey -pubout``), Ed25519 or ECDSA P-256."""
    from cryptography.hazmat.primitives import serialization

    try:
        key = serialization.load_pem_public_key(pem)
    except (ValueError, TypeError) as exc:
        raise BundleError("signature", f"{label}: not a PEM public key ({exc})") from None
    algorithm = _algorithm(key, label)
    return TrustedKey(_key_id(key), algorithm, key)  # type: ignore[arg-type]  # checked above


def load_private_key(pem: bytes, label: str) -> SigningKey:
    """A PEM private key without a passphrase (``openssl genpkey -algorithm ed25519``)."""
    from cryptography.hazmat.primitives import serialization

    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise BundleError(
            "signature", f"{label}: not an unencrypted PEM private key ({exc})"
        ) from None
    algorithm = _algorithm(key, label)
    return SigningKey(_key_id(key.public_key()), algorithm, key)  # type: ignore[arg-type]


def verify_signatures(
    digest: str, signatures: Sequence[Signature], trusted: Sequence[TrustedKey], what: str
) -> TrustedKey:
    """The trusted key with a valid signature over ``digest`` among ``signatures``; else a
    :class:`BundleError` (``signature``) saying what was found and why none holds."""
    keys = {k.key_id: k for k in trusted}
    if not signatures:
        raise BundleError(
            "signature",
            f"{what}: not signed, and signatures are required (trusted keys: {', '.join(keys)})",
        )
    why: list[str] = []
    for sig in signatures:
        key = keys.get(sig.key_id)
        if sig.digest != digest:
            why.append(f"a signature over {shown(sig.digest, 24)}, another bundle")
        elif key is None:
            why.append(f"a signature by {sig.key_id}, not a trusted key")
        elif sig.algorithm != key.algorithm or not key.verifies(payload(digest), sig.value):
            why.append(f"a signature by {sig.key_id} that does not verify")
        else:
            return key
    raise BundleError(
        "signature", f"{what}: no valid signature from a trusted key ({'; '.join(why)})"
    )
