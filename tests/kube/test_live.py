"""Reading a live cluster (``cudasched.kube.live``) from an API server over real HTTP: paging,
kinds filled in, absent CRDs, every failure as one line. The server (``kube_api.ClusterApi`` on
kmock) pages, strips list-item kinds and fails on demand; nothing in the client is patched."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from typing import Any

import kmock as kmock_lib
import pytest
from rich.console import Console

from cudasched.cli.inputs import TerminalProgress
from cudasched.cluster.snapshot import bundled_snapshot
from cudasched.kube.client import make_client
from cudasched.kube.live import (
    LIVE_KINDS,
    PAGE_SIZE,
    ApiServer,
    LiveCluster,
    ObjectRef,
    absent_notes,
    read_cluster,
    read_live_cluster,
)
from cudasched.vocab.errors import InputError
from cudasched.vocab.kinds import (
    CLUSTER_SERVING_RUNTIME,
    DEPLOYMENT,
    INFERENCE_SERVICE,
    LLM_INFERENCE_SERVICE,
    MUTATING_WEBHOOK_CONFIGURATION,
    NODE,
    NVIDIA_DRIVER,
    POD,
    SERVING_RUNTIME,
    Kind,
)
from tests.harness.controlplane.processes import free_port
from tests.support.kube_api import UNAUTHORIZED, ClusterApi, forbidden, status, write_kubeconfig

SAMPLE = bundled_snapshot()


def node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/cuda.driver-version.major": "550"}},
    }


async def read(url: Any, **options: Any) -> LiveCluster:
    client = make_client(server=str(url).rstrip("/"), timeout=options.pop("timeout", 5.0))
    where = ApiServer(str(url).rstrip("/"), "a test API server", 5.0)
    try:
        return await read_cluster(client, where=where, **options)
    finally:
        await client.close()


async def failure(url: Any, **options: Any) -> str:
    with pytest.raises(InputError) as caught:
        await read(url, **options)
    text = str(caught.value)
    assert "\n" not in text
    return text


class Recorded:
    """A progress listener that writes down what it is told."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int | None]] = []

    def start(self, kind: Kind) -> None:
        self.calls.append(("start", kind.plural, None))

    def advance(self, kind: Kind, count: int) -> None:
        self.calls.append(("advance", kind.plural, count))

    def finish(self, kind: Kind, count: int | None) -> None:
        self.calls.append(("finish", kind.plural, count))


@pytest.fixture
async def sample_api(kmock: kmock_lib.KubernetesEmulator) -> AsyncIterator[ClusterApi]:
    yield ClusterApi.start(kmock, SAMPLE.objects())


# --------------------------------------------------------------------------- reading


async def test_reads_the_sample_cluster_into_the_snapshot_its_file_gives(
    kmock: kmock_lib.KubernetesEmulator, sample_api: ClusterApi
) -> None:
    live = await read(kmock.url, page_size=4)
    assert live.absent == ()
    # Same objects, same order, bucket by bucket; pods reduced and bulk dropped as a dump is.
    assert live.snapshot == SAMPLE.shareable()
    assert live.snapshot.source == f"live cluster {str(kmock.url).rstrip('/')}"
    # 21 nodes in pages of 4: six requests, each asking for 4, chained by continue tokens.
    nodes = sample_api.lists_of(NODE)
    assert [r.params.get("limit") for r in nodes] == ["4"] * 6
    assert [r.params.get("continue") for r in nodes] == [
        None,
        *[f"nodes:{4 * i}" for i in range(1, 6)],
    ]
    # Namespaced kinds are listed across all namespaces.
    assert {r.namespace for r in sample_api.lists_of(POD)} == {None}


async def test_pages_of_500_fill_in_the_kind_of_every_item(
    kmock: kmock_lib.KubernetesEmulator,
) -> None:
    api = ClusterApi.start(kmock, [node(f"gpu-{i:04}") for i in range(1201)])
    live = await read(kmock.url, kinds=(NODE,))
    assert [r.params.get("limit") for r in api.lists_of(NODE)] == [str(PAGE_SIZE)] * 3
    assert PAGE_SIZE == 500
    names = [n["metadata"]["name"] for n in live.snapshot.nodes]
    assert names == [f"gpu-{i:04}" for i in range(1201)]
    assert {(n["apiVersion"], n["kind"]) for n in live.snapshot.nodes} == {("v1", "Node")}


async def test_list_items_arrive_without_kinds(
    kmock: kmock_lib.KubernetesEmulator, sample_api: ClusterApi
) -> None:
    # The server really strips them (the reader's fill-in is what puts them back).
    import httpx

    async with httpx.AsyncClient(base_url=str(kmock.url)) as client:
        body = (await client.get("/apis/serving.kserve.io/v1beta1/inferenceservices")).json()
    assert body["kind"] == "InferenceServiceList" and body["items"]
    assert all("kind" not in i and "apiVersion" not in i for i in body["items"])
    live = await read(kmock.url, kinds=(INFERENCE_SERVICE,))
    assert {o["kind"] for o in live.snapshot.inference_services} == {"InferenceService"}


async def test_kinds_not_served_are_read_as_none_with_one_note_per_product(
    kmock: kmock_lib.KubernetesEmulator,
) -> None:
    kserve = (INFERENCE_SERVICE, SERVING_RUNTIME, CLUSTER_SERVING_RUNTIME, LLM_INFERENCE_SERVICE)
    ClusterApi.start(kmock, SAMPLE.objects(), missing=(*kserve, NVIDIA_DRIVER))
    live = await read(kmock.url)
    assert live.absent == (*kserve, NVIDIA_DRIVER)
    assert live.snapshot.nodes == SAMPLE.shareable().nodes
    assert live.snapshot.inference_services == ()
    assert absent_notes(live.absent) == [
        "the cluster does not serve inferenceservices.serving.kserve.io, "
        "servingruntimes.serving.kserve.io, clusterservingruntimes.serving.kserve.io, "
        "llminferenceservices.serving.kserve.io (KServe CRD not installed); read as none",
        "the cluster does not serve nvidiadrivers.nvidia.com (GPU Operator CRD not installed); "
        "read as none",
    ]


async def test_an_older_kserve_without_llminferenceservices(
    kmock: kmock_lib.KubernetesEmulator,
) -> None:
    ClusterApi.start(kmock, SAMPLE.objects(), missing=(LLM_INFERENCE_SERVICE,))
    live = await read(kmock.url)
    assert live.absent == (LLM_INFERENCE_SERVICE,)
    assert live.snapshot.inference_services == SAMPLE.shareable().inference_services


async def test_only_reads_and_never_secrets(
    kmock: kmock_lib.KubernetesEmulator, sample_api: ClusterApi
) -> None:
    ref = ObjectRef(DEPLOYMENT, "team-nlp", "web")
    with pytest.raises(InputError):
        await read(kmock.url, fetch=[ref])
    await read(kmock.url)
    methods = {str(r.method).rsplit(".", 1)[-1].upper() for r in list(kmock)}
    assert methods == {"GET"}
    assert all("watch" not in r.url.query for r in list(kmock))
    plurals = {r.plural for r in sample_api.requests}
    assert plurals == {k.plural for k in LIVE_KINDS} | {"deployments"}


async def test_fetches_a_named_controller(kmock: kmock_lib.KubernetesEmulator) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "team-nlp", "managedFields": [{}]},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
    }
    api = ClusterApi.start(kmock, [node("n1"), deployment])
    live = await read(kmock.url, fetch=[ObjectRef(DEPLOYMENT, "team-nlp", "web")])
    assert [w["metadata"] for w in live.snapshot.workloads] == [
        {"name": "web", "namespace": "team-nlp"}
    ]
    assert [(r.namespace, r.name) for r in api.requests if r.plural == "deployments"] == [
        ("team-nlp", "web")
    ]
    missing = await failure(kmock.url, fetch=[ObjectRef(DEPLOYMENT, "team-nlp", "nope")])
    assert missing == "Deployment team-nlp/nope not found in the live cluster"


async def test_progress_is_told_per_page(
    kmock: kmock_lib.KubernetesEmulator,
) -> None:
    ClusterApi.start(kmock, [node(f"n{i}") for i in range(5)], missing=(NVIDIA_DRIVER,))
    progress = Recorded()
    await read(kmock.url, kinds=(NODE, NVIDIA_DRIVER), page_size=2, progress=progress)
    assert progress.calls == [
        ("start", "nodes", None),
        ("advance", "nodes", 2),
        ("advance", "nodes", 4),
        ("finish", "nodes", 5),
        ("start", "nvidiadrivers", None),
        ("finish", "nvidiadrivers", None),
    ]


async def test_terminal_progress_draws_with_rich(kmock: kmock_lib.KubernetesEmulator) -> None:
    ClusterApi.start(kmock, [node(f"n{i}") for i in range(3)], missing=(NVIDIA_DRIVER,))
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=80)
    with TerminalProgress(console) as progress:
        await read(kmock.url, kinds=(NODE, NVIDIA_DRIVER), page_size=2, progress=progress)
        console.file.flush()
        progress._progress.refresh()
        drawn = out.getvalue()
    assert "listed nodes" in drawn and "3" in drawn
    assert "nvidiadrivers" in drawn and "not served" in drawn


# --------------------------------------------------------------------------- failures


async def test_403_names_the_verb_and_the_resource_to_grant(
    kmock: kmock_lib.KubernetesEmulator, sample_api: ClusterApi
) -> None:
    sample_api.fail(POD, 403, forbidden(POD))
    assert await failure(kmock.url) == (
        "cannot list pods at the cluster scope: grant list on pods "
        "(denied to User 'system:serviceaccount:ops:reader')"
    )
    sample_api.failures.clear()
    sample_api.fail(INFERENCE_SERVICE, 403, forbidden(INFERENCE_SERVICE))
    text = await failure(kmock.url)
    assert text.startswith(
        "cannot list inferenceservices.serving.kserve.io at the cluster scope: grant list on "
        "inferenceservices.serving.kserve.io"
    )


async def test_403_on_a_fetch_names_the_namespace(
    kmock: kmock_lib.KubernetesEmulator, sample_api: ClusterApi
) -> None:
    sample_api.fail(DEPLOYMENT, 403, status(403, "Forbidden", "forbidden"))
    text = await failure(kmock.url, fetch=[ObjectRef(DEPLOYMENT, "team-nlp", "web")])
    assert text == (
        "cannot get deployments.apps in the namespace 'team-nlp': grant get on deployments.apps"
    )


async def test_401_says_the_credentials_are_rejected(
    kmock: kmock_lib.KubernetesEmulator, sample_api: ClusterApi
) -> None:
    sample_api.fail(None, 401, UNAUTHORIZED)
    text = await failure(kmock.url)
    url = str(kmock.url).rstrip("/")
    assert text == (
        f"the Kubernetes API server at {url} rejected the credentials of a test API server "
        "(401 Unauthorized): they are expired or invalid; log in again or refresh the kubeconfig"
    )


async def test_404_on_a_built_in_kind_is_an_error(
    kmock: kmock_lib.KubernetesEmulator,
) -> None:
    ClusterApi.start(kmock, [], missing=(NODE,))
    text = await failure(kmock.url)
    assert "does not serve nodes (404 Not Found)" in text


async def test_an_expired_continue_token_relists_once(
    kmock: kmock_lib.KubernetesEmulator,
) -> None:
    api = ClusterApi.start(kmock, [node(f"n{i}") for i in range(5)])
    api.expire["nodes"] = 1
    live = await read(kmock.url, kinds=(NODE,), page_size=2)
    assert [n["metadata"]["name"] for n in live.snapshot.nodes] == [f"n{i}" for i in range(5)]
    assert [r.params.get("continue") for r in api.lists_of(NODE)] == [
        None,
        "nodes:2",  # 410
        None,  # listed again from the start
        "nodes:2",
        "nodes:4",
    ]
    api.expire["nodes"] = 2
    text = await failure(kmock.url, kinds=(NODE,), page_size=2)
    assert text.startswith("the list of nodes expired twice while paging (410 Gone)")


async def test_other_statuses_carry_the_server_message(
    kmock: kmock_lib.KubernetesEmulator, sample_api: ClusterApi
) -> None:
    sample_api.fail(NODE, 500, status(500, "InternalError", "etcdserver: request timed out"))
    text = await failure(kmock.url)
    assert text.endswith(
        "answered HTTP 500 to list nodes at the cluster scope: etcdserver: request timed out"
    )


async def test_an_unreachable_server_is_one_line() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    text = await failure(url)
    assert text.startswith(f"cannot reach the Kubernetes API server at {url} (a test API server): ")


async def test_a_server_that_does_not_answer_in_time(
    kmock: kmock_lib.KubernetesEmulator,
) -> None:
    async def stall(request: kmock_lib.Request) -> Any:
        await asyncio.sleep(30)

    kmock[kmock.action.LIST] << stall
    client = make_client(server=str(kmock.url).rstrip("/"), timeout=0.2)
    where = ApiServer("http://x", "a test API server", 0.2)
    try:
        with pytest.raises(InputError) as caught:
            await read_cluster(client, where=where)
    finally:
        await client.close()
    assert str(caught.value) == (
        "the Kubernetes API server at http://x (a test API server) did not answer within 0.2s"
    )


def test_a_page_size_must_be_positive() -> None:
    with pytest.raises(InputError, match="invalid page size 0"):
        asyncio.run(read_cluster(object(), page_size=0))


# --------------------------------------------------------------------------- configuration


async def test_read_live_cluster_follows_the_kubeconfig(
    kmock: kmock_lib.KubernetesEmulator, sample_api: ClusterApi, tmp_path: Any
) -> None:
    config = write_kubeconfig(tmp_path, kmock.url)
    live = await asyncio.to_thread(read_live_cluster, kubeconfig=config)
    assert live.snapshot == SAMPLE.shareable()
    # The bearer token of the kubeconfig's user went with every request.
    assert {r.headers.get("Authorization") for r in list(kmock)} == {"Bearer t0ken"}


async def test_a_context_that_does_not_exist(tmp_path: Any) -> None:
    config = write_kubeconfig(tmp_path, "http://127.0.0.1:1")
    with pytest.raises(InputError, match="has no context 'prod' \\(contexts: mock\\)"):
        await asyncio.to_thread(read_live_cluster, kubeconfig=config, context="prod")


async def test_the_webhook_registration_is_read_when_asked(
    kmock: kmock_lib.KubernetesEmulator,
) -> None:
    """Issue 27 item 11: with ``admission`` the read lists the MutatingWebhookConfigurations
    and, of the Service cudasched's names, the EndpointSlices (by its label, in its
    namespace); an identity that may not list them reads as not read, never as an error."""
    registration = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "cudasched-webhook"},
        "webhooks": [
            {
                "name": "pods.cudasched.io",
                "clientConfig": {
                    "service": {"namespace": "cudasched", "name": "cudasched-webhook"}
                },
            }
        ],
    }
    endpoints = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "cudasched-webhook-abc",
            "namespace": "cudasched",
            "labels": {"kubernetes.io/service-name": "cudasched-webhook"},
        },
        "endpoints": [{"addresses": ["10.1.0.7"], "conditions": {"ready": True}}],
    }
    api = ClusterApi.start(kmock, [node("gpu-1"), registration, endpoints])
    plain = await read(kmock.url)
    assert plain.admission_read is False and plain.snapshot.other == ()
    asked = await read(kmock.url, admission=True)
    assert asked.admission_read and asked.snapshot.admission_read
    assert [o["kind"] for o in asked.snapshot.other] == [
        "MutatingWebhookConfiguration",
        "EndpointSlice",
    ]
    (slices,) = [r for r in api.requests if r.plural == "endpointslices"]
    assert slices.namespace == "cudasched"
    assert slices.params.get("labelSelector") == "kubernetes.io/service-name=cudasched-webhook"
    api.fail(MUTATING_WEBHOOK_CONFIGURATION, 403, forbidden(MUTATING_WEBHOOK_CONFIGURATION))
    denied = await read(kmock.url, admission=True)
    assert denied.admission_read is False and denied.snapshot.other == ()
