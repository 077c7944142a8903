"""The pods of one namespace that no node is bound to yet, listed now.

A pod a controller creates has no name when admission sees it (the API server generates it from
``generateName`` after mutating admission, in ``registry/generic/registry/store.go``), so the
webhook finds such a pod after it is stored, to record a ``NoCompatibleNode`` Event on it
(:mod:`cudasched.webhook.background.podevents`). Only pods the scheduler has not bound are
wanted: the field selector ``spec.nodeName=`` makes the API server leave out the rest, so the
answer is as small as the namespace's Pending pods.

RBAC: ``list`` on ``pods``.
"""

from __future__ import annotations

from typing import Any

from cudasched.kube.reflector import failure_reason, plain_object
from cudasched.kube.resources import resource_of
from cudasched.vocab.errors import InputError
from cudasched.vocab.kinds import POD
from cudasched.vocab.labelsyntax import dns_label_ok

__all__ = ["UNBOUND", "list_unbound_pods"]

#: The field selector of pods no node is bound to.
UNBOUND = {"spec.nodeName": ""}


async def list_unbound_pods(client: Any, namespace: str) -> list[dict[str, Any]]:
    """The pods of ``namespace`` with no ``spec.nodeName``, as plain dicts. Raises
    :class:`~cudasched.vocab.errors.InputError` naming the HTTP status."""
    if not dns_label_ok(namespace):
        raise InputError(f"cannot list pods in {namespace!r}: not a DNS label")
    try:
        return [
            plain_object(obj)
            async for obj in client.list(resource_of(POD), namespace=namespace, fields=UNBOUND)
        ]
    except Exception as exc:
        raise InputError(f"cannot list pods in {namespace}: {failure_reason(exc)}") from None
