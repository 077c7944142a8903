"""What the webhook's installed objects are called and how they are labelled: the app name
every object shares, its port, the CA certificate's name, the replicas, the default namespace
and image, and metadata with Kubernetes' recommended ``app.kubernetes.io/*`` labels.
"""

from __future__ import annotations

from typing import Any

from cudasched import __version__

__all__ = [
    "APP",
    "CA_CERTIFICATE",
    "DEFAULT_IMAGE",
    "DEFAULT_NAMESPACE",
    "POLICY_CONTROLLER",
    "PORT",
    "REPLICAS",
    "object_labels",
    "object_meta",
]

DEFAULT_NAMESPACE = "cudasched"
DEFAULT_IMAGE = f"cudasched/cudasched:{__version__}"
APP = "cudasched-webhook"
#: The policy mode's controller: its Deployment, ServiceAccount and grants.
POLICY_CONTROLLER = "cudasched-policy-controller"
#: The cert-manager CA certificate (and its Issuer and Secret) that signs the serving one.
CA_CERTIFICATE = f"{APP}-ca"
PORT = 8443
REPLICAS = 2


def object_labels(component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "cudasched",
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/version": __version__,
    }


def object_meta(name: str, namespace: str | None, component: str, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": object_labels(component)}
    if namespace is not None:
        meta["namespace"] = namespace
    meta.update(extra)
    return meta
