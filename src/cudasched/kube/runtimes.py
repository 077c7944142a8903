"""The serving runtimes an InferenceService may use, listed now: one namespace's
ServingRuntimes and every ClusterServingRuntime.

The webhook's watch cache lags the API server by the time a watch event takes to arrive, and
``kubectl apply -f`` of a runtime and its InferenceService (what GitOps always does) sends the
service a few milliseconds after the runtime is stored: the cache has not seen the runtime yet.
The webhook reads them here on such a miss (:mod:`cudasched.webhook.background.runtimereader`).
A list of one namespace's runtimes and the cluster's runtimes is two small requests; KServe's
selection needs the candidates, not only the runtime a service names, when it names none.

RBAC: ``list`` on ``servingruntimes`` and ``clusterservingruntimes``, which the watch cache
already has. A KServe CRD that is not installed reads as no runtimes of that kind.
"""

from __future__ import annotations

import asyncio
from typing import Any

from cudasched.kube.reflector import failure_reason, plain_object, status_code
from cudasched.kube.resources import resource_of
from cudasched.vocab.errors import InputError
from cudasched.vocab.kinds import CLUSTER_SERVING_RUNTIME, SERVING_RUNTIME, Kind
from cudasched.vocab.labelsyntax import dns_label_ok

__all__ = ["read_runtimes"]


async def _list(client: Any, kind: Kind, namespace: str | None) -> list[dict[str, Any]]:
    kwargs: dict[str, Any] = {} if namespace is None else {"namespace": namespace}
    try:
        return [plain_object(obj) async for obj in client.list(resource_of(kind), **kwargs)]
    except Exception as exc:
        code = status_code(exc)
        if code == 404:  # the CRD is not installed
            return []
        raise InputError(f"cannot list {kind.plural}: {failure_reason(exc)}") from None


async def read_runtimes(
    client: Any, namespace: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The ServingRuntimes of ``namespace`` and every ClusterServingRuntime, as plain dicts
    carrying their ``kind`` (list items arrive without it). Raises
    :class:`~cudasched.vocab.errors.InputError` naming the kind and the HTTP status."""
    if not dns_label_ok(namespace):
        raise InputError(f"cannot list servingruntimes in {namespace!r}: not a DNS label")
    serving, cluster = await asyncio.gather(
        _list(client, SERVING_RUNTIME, namespace), _list(client, CLUSTER_SERVING_RUNTIME, None)
    )
    for kind, objects in ((SERVING_RUNTIME, serving), (CLUSTER_SERVING_RUNTIME, cluster)):
        for obj in objects:
            obj.setdefault("apiVersion", kind.api_version)
            obj.setdefault("kind", kind.kind)
    return serving, cluster
