"""Reading what tells the GPU Operator release (``cudasched.kube.gpuoperator``) from an API server
over real HTTP (``kube_api.ClusterApi`` on kmock): the ClusterPolicies listed, the NVIDIADriver
CRD fetched by name, a cluster without the operator read as none, a refused read said and not
fatal, any other failure one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kmock as kmock_lib
import pytest

from cudasched.compat.operatorrelease import operator_of_cluster
from cudasched.knowledge import KnowledgeBase
from cudasched.kube.client import make_client
from cudasched.kube.gpuoperator import (
    GpuOperatorObjects,
    read_gpu_operator,
    read_live_gpu_operator,
)
from cudasched.kube.live import ApiServer
from cudasched.vocab.errors import InputError
from cudasched.vocab.kinds import CLUSTER_POLICY, CUSTOM_RESOURCE_DEFINITION, NODE
from tests.support.gpu_operator import cluster_policy, nvidiadriver_crd
from tests.support.kube_api import ClusterApi, forbidden, status, write_kubeconfig

CRD = "nvidiadrivers.nvidia.com"


async def read(url: Any) -> GpuOperatorObjects:
    client = make_client(server=str(url).rstrip("/"), timeout=5.0)
    try:
        return await read_gpu_operator(
            client, crd=CRD, where=ApiServer(str(url).rstrip("/"), "a test API server", 5.0)
        )
    finally:
        await client.close()


async def test_reads_the_cluster_policy_and_the_crd(
    kmock: kmock_lib.KubernetesEmulator, kb: KnowledgeBase
) -> None:
    api = ClusterApi.start(kmock, [cluster_policy("v25.10.1"), nvidiadriver_crd("v25.10.1")])
    found = await read(kmock.url)
    assert found.unread == ()
    assert [(o["kind"], o["metadata"]["name"]) for o in found.objects] == [
        ("ClusterPolicy", "cluster-policy"),
        ("CustomResourceDefinition", CRD),
    ]
    assert found.objects[0]["apiVersion"] == "nvidia.com/v1"  # list items carry no kind
    # One list of clusterpolicies, one get of the CRD by name; nothing else.
    assert [(r.plural, r.name) for r in api.requests] == [
        ("clusterpolicies", None),
        ("customresourcedefinitions", CRD),
    ]
    read_back = operator_of_cluster(kb, found.objects)
    assert read_back is not None and read_back.version.version == "25.10"


async def test_a_cluster_without_the_gpu_operator_reads_as_none(
    kmock: kmock_lib.KubernetesEmulator,
) -> None:
    ClusterApi.start(kmock, [], missing=[CLUSTER_POLICY])
    assert await read(kmock.url) == GpuOperatorObjects()


async def test_reads_the_identity_may_not_make_are_said_not_fatal(
    kmock: kmock_lib.KubernetesEmulator,
) -> None:
    api = ClusterApi.start(kmock, [cluster_policy("v26.7.0"), nvidiadriver_crd("v26.7.0")])
    api.fail(CLUSTER_POLICY, 403, forbidden(CLUSTER_POLICY))
    api.fail(CUSTOM_RESOURCE_DEFINITION, 403, forbidden(CUSTOM_RESOURCE_DEFINITION))
    found = await read(kmock.url)
    assert found == GpuOperatorObjects(
        (),
        (
            "not allowed to list clusterpolicies.nvidia.com",
            f"not allowed to get customresourcedefinitions.apiextensions.k8s.io/{CRD}",
        ),
    )


async def test_other_failures_are_one_line_errors(kmock: kmock_lib.KubernetesEmulator) -> None:
    api = ClusterApi.start(kmock, [])
    api.fail(CUSTOM_RESOURCE_DEFINITION, 500, status(500, "InternalError", "etcd timed out"))
    with pytest.raises(InputError) as caught:
        await read(kmock.url)
    assert str(caught.value) == (
        f"the Kubernetes API server at {str(kmock.url).rstrip('/')} answered HTTP 500 to get "
        "customresourcedefinitions.apiextensions.k8s.io at the cluster scope: etcd timed out"
    )


async def test_the_blocking_read_uses_the_kubeconfig(
    kmock: kmock_lib.KubernetesEmulator, tmp_path: Path
) -> None:
    import asyncio

    api = ClusterApi.start(kmock, [cluster_policy("v26.3.3")])
    path = write_kubeconfig(tmp_path, kmock.url)
    found = await asyncio.to_thread(read_live_gpu_operator, crd=CRD, kubeconfig=path)
    assert [o["kind"] for o in found.objects] == ["ClusterPolicy"]
    assert not api.lists_of(NODE)  # only the GPU Operator's objects are read
