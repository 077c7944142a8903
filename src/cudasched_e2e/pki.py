"""The certificates and keys of a throwaway control plane, the way kubeadm lays them out.

One CA signs everything: etcd's serving certificate, the API server's serving certificate
(SANs: 127.0.0.1, localhost and the ``kubernetes.default`` names), and a client certificate per
component (the API server to etcd, the admin in ``system:masters``, ``system:kube-scheduler``,
``system:kube-controller-manager``). The ServiceAccount token signing key is separate, as in
every cluster. EC P-256 keys: generated in milliseconds, accepted by every component.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["Pki", "write_pki"]

_VALID_DAYS = 30


@dataclass(frozen=True)
class Pki:
    """Paths of the files :func:`write_pki` wrote."""

    directory: Path

    def path(self, name: str) -> Path:
        return self.directory / name

    @property
    def ca_cert(self) -> Path:
        return self.path("ca.crt")

    @property
    def ca_key(self) -> Path:
        return self.path("ca.key")

    @property
    def sa_key(self) -> Path:
        return self.path("sa.key")

    @property
    def sa_pub(self) -> Path:
        return self.path("sa.pub")

    def cert(self, name: str) -> Path:
        return self.path(f"{name}.crt")

    def key(self, name: str) -> Path:
        return self.path(f"{name}.key")


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _name(common: str, org: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common)]
    if org:
        parts.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(parts)


def _issue(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_name: x509.Name,
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    *,
    server_names: tuple[str, ...] = (),
    server: bool = False,
    client: bool = False,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    usages = []
    if server:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    if client:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=_VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    )
    if server_names:
        alt: list[x509.GeneralName] = []
        for name in server_names:
            try:
                alt.append(x509.IPAddress(ipaddress.ip_address(name)))
            except ValueError:
                alt.append(x509.DNSName(name))
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


#: API server SANs: loopback, and the names in-cluster clients use (the service IP is the first
#: address of the harness's service range 10.96.0.0/16).
APISERVER_NAMES = (
    "127.0.0.1",
    "localhost",
    "10.96.0.1",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)

#: Client certificates: file stem -> (common name, organization).
CLIENTS: dict[str, tuple[str, str | None]] = {
    "admin": ("kubernetes-admin", "system:masters"),
    "apiserver-etcd-client": ("kube-apiserver-etcd-client", None),
    "scheduler": ("system:kube-scheduler", None),
    "controller-manager": ("system:kube-controller-manager", None),
}


def write_pki(directory: Path) -> Pki:
    """Write a fresh CA, serving and client certificates and the ServiceAccount key pair."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(directory)
    ca_key = _key()
    ca_name = _name("cudasched-e2e-ca")
    now = dt.datetime.now(dt.UTC)
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=_VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pki.ca_cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    pki.ca_key.write_bytes(_pem_key(ca_key))

    def emit(stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
        pki.cert(stem).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        pki.key(stem).write_bytes(_pem_key(key))
        pki.key(stem).chmod(0o600)

    key = _key()
    emit(
        "etcd-server",
        _issue(
            ca_key,
            ca_name,
            _name("etcd"),
            key,
            server_names=("127.0.0.1", "localhost"),
            server=True,
            client=True,
        ),
        key,
    )
    key = _key()
    emit(
        "apiserver",
        _issue(
            ca_key, ca_name, _name("kube-apiserver"), key, server_names=APISERVER_NAMES, server=True
        ),
        key,
    )
    for stem, (common, org) in CLIENTS.items():
        key = _key()
        emit(stem, _issue(ca_key, ca_name, _name(common, org), key, client=True), key)

    sa_key = _key()
    pki.sa_key.write_bytes(_pem_key(sa_key))
    pki.sa_key.chmod(0o600)
    pki.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki
