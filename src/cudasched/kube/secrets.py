"""One Secret or ServiceAccount read by name in one namespace, on demand: what the image
resolver needs to use a workload's pull secrets (``imageResolver.pullSecrets``). Never a
list or a watch, so the webhook holds no Secret it was not asked about.

RBAC: ``get`` on ``secrets`` and ``serviceaccounts`` (granted only with the option on,
:mod:`cudasched.install.access`). Errors name the object and the HTTP status, never a
Secret's content.

A name or namespace that Kubernetes could not have given an object (not a DNS-1123 subdomain,
resp. label) is refused before any request: it becomes a URL path segment, where ``..`` or
``/`` would reach another namespace's object.
"""

from __future__ import annotations

from typing import Any

from cudasched.kube.reflector import get_or_none
from cudasched.vocab.errors import InputError
from cudasched.vocab.kinds import SECRET, SERVICE_ACCOUNT, Kind
from cudasched.vocab.labelsyntax import dns_label_ok, dns_subdomain_ok

__all__ = ["read_secret", "read_service_account"]


async def _read(client: Any, kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
    if not dns_label_ok(namespace):
        raise InputError(f"cannot get {kind.kind} in namespace {namespace!r}: not a DNS label")
    if not dns_subdomain_ok(name):
        raise InputError(
            f"cannot get {kind.kind} {name!r} in {namespace}: not a DNS-1123 subdomain "
            "(lowercase letters, digits, '-' and '.', at most 253 characters)"
        )
    return await get_or_none(
        client, kind, name, namespace=namespace, what=f"get {kind.kind} {namespace}/{name}"
    )


async def read_secret(client: Any, namespace: str, name: str) -> dict[str, Any] | None:
    """The Secret ``namespace/name`` as a plain dict, or ``None`` when there is none."""
    return await _read(client, SECRET, namespace, name)


async def read_service_account(client: Any, namespace: str, name: str) -> dict[str, Any] | None:
    """The ServiceAccount ``namespace/name`` as a plain dict, or ``None`` when there is none."""
    return await _read(client, SERVICE_ACCOUNT, namespace, name)
