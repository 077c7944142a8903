"""A kubeconfig for one user of the control plane (the admin, kube-scheduler,
kube-controller-manager): the API server's address, the cluster CA and the user's client
certificate from the harness's PKI; or for a service account, with a token the API server
issued it.
"""

from __future__ import annotations

import yaml

from tests.harness.pki import Pki

__all__ = [
    "kubeconfig_yaml",
    "token_kubeconfig_yaml",
]


def _config(server: str, pki: Pki, user: str, credentials: dict[str, str], context: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": context,
                    "cluster": {"server": server, "certificate-authority": str(pki.ca_cert)},
                }
            ],
            "users": [{"name": user, "user": credentials}],
            "contexts": [{"name": context, "context": {"cluster": context, "user": user}}],
            "current-context": context,
        },
        sort_keys=False,
    )


def kubeconfig_yaml(server: str, pki: Pki, user: str, context: str = "cudasched-e2e") -> str:
    """A kubeconfig whose user ``user`` authenticates with its client certificate."""
    credentials = {"client-certificate": str(pki.cert(user)), "client-key": str(pki.key(user))}
    return _config(server, pki, user, credentials, context)


def token_kubeconfig_yaml(server: str, pki: Pki, user: str, token: str) -> str:
    """A kubeconfig whose user ``user`` authenticates with ``token`` (a service account's, from
    the TokenRequest API): what a Pod of that account would send."""
    return _config(server, pki, user, {"token": token}, "cudasched-e2e")
