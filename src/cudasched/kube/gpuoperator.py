"""Read what tells the GPU Operator release a cluster runs (``plan-drivers --live``): its
ClusterPolicies, listed, and the NVIDIADriver CustomResourceDefinition, fetched by name. The
judgement is :func:`cudasched.compat.operatorrelease.operator_of_cluster`; this only reads.

The read is best effort, as the release has a fallback (the stored NVIDIADriver objects, then
the newest release with a note): a kind the cluster does not serve (404: no GPU Operator) or the
identity may not read (403) is read as none and said in :attr:`GpuOperatorObjects.unread`.
Any other failure is the one-line :class:`~cudasched.vocab.errors.InputError` every live read
gives (:func:`cudasched.kube.live.request_failure`).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Any

from cudasched.cluster.snapshot import KubeObject
from cudasched.compat.operatorrelease import reduced
from cudasched.kube.client import DEFAULT_TIMEOUT_SECONDS, load_config, make_client
from cudasched.kube.live import ApiServer, request_failure
from cudasched.kube.reflector import plain_object, status_code
from cudasched.kube.resources import resource_of
from cudasched.vocab.kinds import CLUSTER_POLICY, CUSTOM_RESOURCE_DEFINITION, Kind

__all__ = ["GpuOperatorObjects", "read_gpu_operator", "read_live_gpu_operator"]


@dataclass(frozen=True, slots=True)
class GpuOperatorObjects:
    """The ClusterPolicies and the NVIDIADriver CRD as read (``kind``/``apiVersion`` filled
    in, cut to what the release read needs: :func:`cudasched.compat.operatorrelease.reduced`),
    and one line per thing that could not be read."""

    objects: tuple[KubeObject, ...] = ()
    unread: tuple[str, ...] = ()


def _resource_name(kind: Kind, name: str | None = None) -> str:
    plural = f"{kind.plural}.{kind.group}" if kind.group else kind.plural
    return f"{plural}/{name}" if name else plural


def _typed(kind: Kind, obj: Any) -> KubeObject:
    """A list item or fetched object with its kind, cut to what the release read needs."""
    return reduced({"apiVersion": kind.api_version, "kind": kind.kind, **plain_object(obj)})


async def read_gpu_operator(
    client: Any, *, crd: str, where: ApiServer | None = None
) -> GpuOperatorObjects:
    """List ClusterPolicies and get the CRD named ``crd`` through a lightkube ``AsyncClient``
    (the caller closes it)."""
    where = where if where is not None else ApiServer("(unknown URL)", "the given client")
    objects: list[KubeObject] = []
    unread: list[str] = []

    def refused(exc: Exception, verb: str, kind: Kind, name: str | None) -> None:
        """A 404 (not served) or a 403 (not allowed) reads as none; anything else fails."""
        code = status_code(exc)
        if code == 403:
            unread.append(f"not allowed to {verb} {_resource_name(kind, name)}")
        elif code != 404:
            raise request_failure(exc, verb, kind, None, where) from None

    try:
        async for obj in client.list(resource_of(CLUSTER_POLICY)):
            objects.append(_typed(CLUSTER_POLICY, obj))
    except Exception as exc:
        refused(exc, "list", CLUSTER_POLICY, None)
    try:
        found = await client.get(resource_of(CUSTOM_RESOURCE_DEFINITION), crd)
    except Exception as exc:
        refused(exc, "get", CUSTOM_RESOURCE_DEFINITION, crd)
    else:
        objects.append(_typed(CUSTOM_RESOURCE_DEFINITION, found))
    return GpuOperatorObjects(tuple(objects), tuple(unread))


def read_live_gpu_operator(
    *,
    crd: str,
    kubeconfig: str | os.PathLike[str] | None = None,
    context: str | None = None,
    server: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
) -> GpuOperatorObjects:
    """:func:`read_gpu_operator` on the cluster the configuration names. Blocks; raises
    ``InputError``."""
    config = load_config(kubeconfig=kubeconfig, context=context, server=server)
    client = make_client(kubeconfig=kubeconfig, context=context, server=server, timeout=timeout)
    where = ApiServer(str(config.settings.cluster.server), config.origin, timeout)

    async def run() -> GpuOperatorObjects:
        try:
            return await read_gpu_operator(client, crd=crd, where=where)
        finally:
            await client.close()

    return asyncio.run(run())
