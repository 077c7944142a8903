"""The webhook's serving certificate, as manifests. **Certificates** (cert-manager): a
self-signed root, a CA Issuer and a serving certificate; the ``caBundle`` comes from the root,
so renewing the serving certificate never changes it. Without cert-manager, a Secret holding a
given self-signed pair.
"""

from __future__ import annotations

import base64
from typing import Any

from cudasched.install.naming import APP, CA_CERTIFICATE, object_meta

__all__ = [
    "tls_objects",
]


def tls_objects(
    namespace: str,
    *,
    cert_manager: bool,
    cert_pem: bytes | None = None,
    key_pem: bytes | None = None,
) -> list[dict[str, Any]]:
    """Serving certificate: with cert-manager, a chain whose root never changes: a self-signed
    Issuer makes a CA certificate (ten years), a CA Issuer signs the serving certificate with it
    (90 days, renewed 15 days before, a new key each time), and the webhook's ``caBundle`` is
    injected from the CA's Secret, so a renewal of the serving certificate never changes the
    trust root the API server holds. Without cert-manager, a Secret holding the given
    self-signed pair (whose certificate is also the webhook's ``caBundle``)."""
    dns = [f"{APP}.{namespace}.svc", f"{APP}.{namespace}.svc.cluster.local"]
    if cert_manager:
        ecdsa = {"algorithm": "ECDSA", "size": 256}
        return [
            {
                "apiVersion": "cert-manager.io/v1",
                "kind": "Issuer",
                "metadata": object_meta(f"{APP}-selfsigned", namespace, "webhook"),
                "spec": {"selfSigned": {}},
            },
            {
                "apiVersion": "cert-manager.io/v1",
                "kind": "Certificate",
                "metadata": object_meta(CA_CERTIFICATE, namespace, "webhook"),
                "spec": {
                    "isCA": True,
                    "commonName": f"{APP} CA",
                    "secretName": CA_CERTIFICATE,
                    "issuerRef": {"name": f"{APP}-selfsigned", "kind": "Issuer"},
                    "privateKey": {**ecdsa, "rotationPolicy": "Never"},
                    "duration": "87600h",
                    "renewBefore": "720h",
                },
            },
            {
                "apiVersion": "cert-manager.io/v1",
                "kind": "Issuer",
                "metadata": object_meta(CA_CERTIFICATE, namespace, "webhook"),
                "spec": {"ca": {"secretName": CA_CERTIFICATE}},
            },
            {
                "apiVersion": "cert-manager.io/v1",
                "kind": "Certificate",
                "metadata": object_meta(APP, namespace, "webhook"),
                "spec": {
                    "secretName": f"{APP}-tls",
                    "dnsNames": dns,
                    "issuerRef": {"name": CA_CERTIFICATE, "kind": "Issuer"},
                    "privateKey": {**ecdsa, "rotationPolicy": "Always"},
                    "duration": "2160h",
                    "renewBefore": "360h",
                },
            },
        ]
    if cert_pem is None or key_pem is None:
        raise ValueError("self-signed TLS objects need the certificate and key PEM")
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": object_meta(f"{APP}-tls", namespace, "webhook"),
            "type": "kubernetes.io/tls",
            "data": {
                "tls.crt": base64.b64encode(cert_pem).decode(),
                "tls.key": base64.b64encode(key_pem).decode(),
            },
        }
    ]
