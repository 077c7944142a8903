"""A kubeconfig for one user of the control plane (the admin, kube-scheduler,
kube-controller-manager): the API server's address, the cluster CA and the user's client
certificate from the harness's PKI.
"""

from __future__ import annotations

import yaml

from tests.harness.pki import Pki

__all__ = [
    "kubeconfig_yaml",
]


def kubeconfig_yaml(server: str, pki: Pki, user: str, context: str = "cudasched-e2e") -> str:
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
            "users": [
                {
                    "name": user,
                    "user": {
                        "client-certificate": str(pki.cert(user)),
                        "client-key": str(pki.key(user)),
                    },
                }
            ],
            "contexts": [{"name": context, "context": {"cluster": context, "user": user}}],
            "current-context": context,
        },
        sort_keys=False,
    )
