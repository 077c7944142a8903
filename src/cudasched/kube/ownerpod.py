"""The Pod a ResourceClaim was made for, read by name: what admission of a claim that
kube-controller-manager made from the pod's template needs to know what the pod runs
(:mod:`cudasched.webhook.admission.claimrules`). The webhook's watch cache holds no pods (it
would be the cluster's largest list), so the one pod is read when its claim is reviewed.

RBAC: ``get`` on ``pods``, granted only with ``dra.mode`` on (:mod:`cudasched.install.access`).
"""

from __future__ import annotations

from typing import Any

from cudasched.kube.reflector import get_or_none
from cudasched.vocab.errors import InputError
from cudasched.vocab.kinds import POD
from cudasched.vocab.labelsyntax import dns_label_ok, dns_subdomain_ok

__all__ = ["read_owner_pod"]


async def read_owner_pod(client: Any, namespace: str, name: str) -> dict[str, Any] | None:
    """The Pod ``name`` in ``namespace`` as a plain dict carrying its ``kind``, or ``None``
    when there is none (deleted before its claim). Raises
    :class:`~cudasched.vocab.errors.InputError` naming the HTTP status otherwise."""
    if not dns_label_ok(namespace) or not dns_subdomain_ok(name):
        raise InputError(f"cannot read pod {namespace}/{name}: not a valid name")
    found = await get_or_none(
        client, POD, name, namespace=namespace, what=f"read pod {namespace}/{name}"
    )
    if found is None:
        return None
    found.setdefault("apiVersion", POD.api_version)
    found.setdefault("kind", POD.kind)
    return found
