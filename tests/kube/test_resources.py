"""A declared kind as lightkube's class: objects listed as plain dicts from the kind's URL
(checked against the kmock API server), without touching lightkube's resource registry."""

from __future__ import annotations

from typing import Any

import pytest
from lightkube.core.resource_registry import resource_registry
from lightkube.generic_resource import GenericNamespacedResource

from cudasched.kube.client import make_client
from cudasched.kube.resources import resource_of
from cudasched.vocab import kinds
from cudasched.vocab.kinds import KINDS, Kind


def test_resource_classes_leave_lightkube_registry_alone() -> None:
    from lightkube.resources.core_v1 import Node

    before = resource_registry.get("v1", "Node")
    for kind in KINDS:
        resource = resource_of(kind)
        info = resource._api_info
        assert (info.resource.group, info.resource.version, info.resource.kind) == (
            kind.group,
            kind.version,
            kind.kind,
        )
        assert info.plural == kind.plural
        assert issubclass(resource, GenericNamespacedResource) == kind.namespaced
    assert resource_registry.get("v1", "Node") is before
    assert resource_registry.get(kinds.NVIDIA_DRIVER.api_version, "NVIDIADriver") is None
    assert Node.__module__ == "lightkube.resources.core_v1"


def _path(kind: Kind, namespace: str | None) -> str:
    root = f"/apis/{kind.group}/{kind.version}" if kind.group else f"/api/{kind.version}"
    scope = f"/namespaces/{namespace}" if namespace else ""
    return f"{root}{scope}/{kind.plural}"


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
async def test_lists_plain_dicts_from_the_kind_url(kmock: Any, kind: Kind) -> None:
    namespace = "ml" if kind.namespaced else None
    meta: dict[str, Any] = {"name": "one"}
    if namespace:
        meta["namespace"] = namespace
    body = {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": meta}
    await kmock.post(_path(kind, namespace), json=body)
    client = make_client(server=str(kmock.url).rstrip("/"))
    try:
        options = {"namespace": "*"} if kind.namespaced else {}
        listed = [obj async for obj in client.list(resource_of(kind), **options)]
    finally:
        await client.close()
    assert [dict(obj)["metadata"]["name"] for obj in listed] == ["one"]
    assert all(isinstance(obj, dict) for obj in listed)
