"""The declared kinds: API coordinates, and lightkube classes that list plain dicts at the
right URLs (checked against the kmock API server) without touching lightkube's registry."""

from __future__ import annotations

from typing import Any

import pytest
from lightkube.core.resource_registry import resource_registry
from lightkube.generic_resource import GenericNamespacedResource

from cudasched.kube.client import make_client
from cudasched.vocab import kinds
from cudasched.vocab.kinds import KINDS, Kind


def test_coordinates() -> None:
    table = {k.kind: (k.api_version, k.plural, k.namespaced, k.crd_of) for k in KINDS}
    assert table == {
        "Node": ("v1", "nodes", False, None),
        "Pod": ("v1", "pods", True, None),
        "Event": ("events.k8s.io/v1", "events", True, None),
        "InferenceService": ("serving.kserve.io/v1beta1", "inferenceservices", True, "KServe"),
        "ServingRuntime": ("serving.kserve.io/v1alpha1", "servingruntimes", True, "KServe"),
        "ClusterServingRuntime": (
            "serving.kserve.io/v1alpha1",
            "clusterservingruntimes",
            False,
            "KServe",
        ),
        "LLMInferenceService": (
            "serving.kserve.io/v1alpha1",
            "llminferenceservices",
            True,
            "KServe",
        ),
        "NVIDIADriver": ("nvidia.com/v1alpha1", "nvidiadrivers", False, "GPU Operator"),
        "NodePool": ("karpenter.sh/v1", "nodepools", False, "Karpenter"),
        "MachineDeployment": (
            "cluster.x-k8s.io/v1beta1",
            "machinedeployments",
            True,
            "Cluster API",
        ),
        "MachineSet": ("cluster.x-k8s.io/v1beta1", "machinesets", True, "Cluster API"),
        "MachinePool": ("cluster.x-k8s.io/v1beta1", "machinepools", True, "Cluster API"),
    }
    assert [k.optional for k in KINDS] == [k.crd_of is not None for k in KINDS]
    # Only the autoscalers' node groups are advisory: read for hints, never required.
    assert {k for k in KINDS if k.advisory} == set(kinds.NODE_GROUP_KINDS)
    assert kinds.NODE in KINDS and kinds.NVIDIA_DRIVER in KINDS


def test_the_gpu_operator_release_kinds() -> None:
    """ClusterPolicy is nvidia.com/v1 and cluster-scoped (NVIDIA/gpu-operator
    api/nvidia/v1/clusterpolicy_types.go ``+kubebuilder:resource:scope=Cluster``); CRDs are
    apiextensions.k8s.io/v1. Neither is listed by every live read: only plan-drivers reads them."""
    table = {
        k.kind: (k.api_version, k.plural, k.namespaced, k.crd_of) for k in kinds.GPU_OPERATOR_KINDS
    }
    assert table == {
        "ClusterPolicy": ("nvidia.com/v1", "clusterpolicies", False, "GPU Operator"),
        "CustomResourceDefinition": (
            "apiextensions.k8s.io/v1",
            "customresourcedefinitions",
            False,
            None,
        ),
    }
    assert not set(kinds.GPU_OPERATOR_KINDS) & set(KINDS)


def test_resource_classes_leave_lightkube_registry_alone() -> None:
    from lightkube.resources.core_v1 import Node

    before = resource_registry.get("v1", "Node")
    for kind in KINDS:
        resource = kind.resource()
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
        listed = [obj async for obj in client.list(kind.resource(), **options)]
    finally:
        await client.close()
    assert [dict(obj)["metadata"]["name"] for obj in listed] == ["one"]
    assert all(isinstance(obj, dict) for obj in listed)
