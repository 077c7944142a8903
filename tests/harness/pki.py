"""The certificates and keys of a throwaway control plane, the way kubeadm lays them out.

One CA signs everything: etcd's serving certificate, the API server's serving certificate
(SANs: 127.0.0.1, localhost and the ``kubernetes.default`` names), and a client certificate per
component (the API server to etcd, the admin in ``system:masters``, ``system:kube-scheduler``,
``system:kube-controller-manager``). The ServiceAccount token signing key is separate, as in
every cluster. EC P-256 keys: generated in milliseconds, accepted by every component. The
certificates are built by :func:`cudasched.webhook.server.tls.issue_certificate`, as the
webhook's own.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from cudasched.webhook.server.tls import Signer, issue_certificate

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


#: API server SANs: loopback, and the names in-cluster clients use (the service IP is the first
#: address of the harness's service range 10.96.0.0/16).
APISERVER_IPS = ("127.0.0.1", "10.96.0.1")
APISERVER_DNS_NAMES = (
    "localhost",
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

_SERVER = ExtendedKeyUsageOID.SERVER_AUTH
_CLIENT = ExtendedKeyUsageOID.CLIENT_AUTH


def write_pki(directory: Path) -> Pki:
    """Write a fresh CA, serving and client certificates and the ServiceAccount key pair."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(directory)
    now = dt.datetime.now(dt.UTC)
    start, end = now - dt.timedelta(minutes=5), now + dt.timedelta(days=_VALID_DAYS)
    ca_key = _key()
    ca_cert = issue_certificate(
        ca_key, "cudasched-e2e-ca", not_before=start, not_after=end, ca=True
    )
    pki.ca_cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    pki.ca_key.write_bytes(_pem_key(ca_key))
    ca = Signer(ca_key, ca_cert)

    def emit(
        stem: str,
        common_name: str,
        usages: tuple[x509.ObjectIdentifier, ...],
        *,
        organization: str | None = None,
        dns_names: tuple[str, ...] = (),
        ip_addresses: tuple[str, ...] = (),
    ) -> None:
        key = _key()
        cert = issue_certificate(
            key,
            common_name,
            not_before=start,
            not_after=end,
            organizations=(organization,) if organization else (),
            dns_names=dns_names,
            ip_addresses=ip_addresses,
            signer=ca,
            extended_usages=usages,
        )
        pki.cert(stem).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        pki.key(stem).write_bytes(_pem_key(key))
        pki.key(stem).chmod(0o600)

    emit(
        "etcd-server",
        "etcd",
        (_SERVER, _CLIENT),
        dns_names=("localhost",),
        ip_addresses=("127.0.0.1",),
    )
    emit(
        "apiserver",
        "kube-apiserver",
        (_SERVER,),
        dns_names=APISERVER_DNS_NAMES,
        ip_addresses=APISERVER_IPS,
    )
    for stem, (common, org) in CLIENTS.items():
        emit(stem, common, (_CLIENT,), organization=org)

    sa_key = _key()
    pki.sa_key.write_bytes(_pem_key(sa_key))
    pki.sa_key.chmod(0o600)
    pki.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki
