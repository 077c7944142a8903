"""``imageResolver.pullSecrets``: the webhook reads a private image's config with the pull
secrets the pod (or its ServiceAccount) names, from the pod's own namespace only, over HTTPS
against the real webhook server, with the Secrets and ServiceAccounts served by a Kubernetes
API on kmock and the real registry (htpasswd basic auth) on 127.0.0.1. The credential never
shows in logs, metrics or answers; with the option off no Secret is ever read. Warming from
the watch cache uses each object's own pull scope (an InferenceService's merged with its
runtime's, as KServe merges them), so the first pod of a private image is constrained."""

from __future__ import annotations

import asyncio
import base64
import logging
import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import kmock as kmock_lib
import orjson
import pytest

from cudasched.cluster.snapshot import bundled_snapshot
from cudasched.knowledge import KnowledgeBase
from cudasched.settings.config import WebhookConfig
from cudasched.webhook.admission.review import creation_review
from cudasched.webhook.background.imageresolver import images_of
from cudasched.webhook.server.serving import serve_in_thread
from cudasched.webhook.state.clusterstate import ClusterState
from tests.support import builders
from tests.support.kube_api import ClusterApi, write_kubeconfig
from tests.support.registry import Registry, hanging_server, run_registry

USER, PASSWORD = "puller", "pa55-9f3b2c7e"
PRIVATE_ENV = ["PATH=/usr/bin", "NVIDIA_REQUIRE_CUDA=cuda>=12.6"]


@pytest.fixture(scope="module")
def registry() -> Iterator[Registry]:
    with run_registry(basic={USER: PASSWORD}) as running:
        for tag in ("7", "8", "9"):
            running.push_image("team/llm", tag, PRIVATE_ENV)
        yield running


@pytest.fixture(scope="module")
def state(kb: KnowledgeBase) -> ClusterState:
    return ClusterState.from_snapshot(bundled_snapshot(), kb=kb)


def auth_of(registry: Registry) -> str:
    return base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


def secret(
    namespace: str, name: str, registry: Registry, *, legacy: bool = False
) -> dict[str, Any]:
    """A pull secret for ``registry`` as ``kubectl create secret docker-registry`` makes it
    (``legacy``: the older ``kubernetes.io/dockercfg`` type)."""
    entry = {registry.host: {"auth": auth_of(registry)}}
    doc, key, kind = (
        (entry, ".dockercfg", "kubernetes.io/dockercfg")
        if legacy
        else ({"auths": entry}, ".dockerconfigjson", "kubernetes.io/dockerconfigjson")
    )
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": kind,
        "data": {key: base64.b64encode(orjson.dumps(doc)).decode()},
    }


def service_account(namespace: str, name: str, *pull: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": namespace},
        "imagePullSecrets": [{"name": n} for n in pull],
    }


def gpu_pod(namespace: str, image: str, *pull: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {"name": "llm", "image": image, "resources": {"limits": {"nvidia.com/gpu": "1"}}}
        ]
    }
    if pull:
        spec["imagePullSecrets"] = [{"name": n} for n in pull]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "llm-", "namespace": namespace},
        "spec": spec,
    }


def config(registry: Registry, kubeconfig: Path, *, pull_secrets: bool) -> WebhookConfig:
    return WebhookConfig.from_mapping(
        {
            "imageResolver": {
                "enabled": True,
                "plainHttp": [registry.host],
                "pullSecrets": pull_secrets,
                "budgetSeconds": 0.05,
            },
            "kube": {"kubeconfig": str(kubeconfig)},
        }
    )


def two_admissions(
    state: ClusterState,
    kb: KnowledgeBase,
    cfg: WebhookConfig,
    pod: dict[str, Any],
    path: str = "/mutate/pods",
) -> tuple[dict[str, Any], dict[str, Any], str]:
    """The first pod (or other object, at ``path``) and a replica after the resolution
    settled, and the metrics."""
    with serve_in_thread(state, config=cfg, kb=kb) as server:
        tls = ssl.create_default_context(cadata=server.ca_pem.decode("ascii"))
        with httpx.Client(base_url=server.url, verify=tls, timeout=10) as client:

            def admit() -> dict[str, Any]:
                review = creation_review(pod, uid=str(uuid.uuid4()))
                reply = client.post(path, content=orjson.dumps(review))
                assert reply.status_code == 200, reply.text
                return dict(reply.json()["response"])

            first = admit()
            resolver = server.app.image_resolver
            assert resolver is not None and resolver.wait_idle(20)
            second = admit()
            metrics = client.get("/metrics").text
    return first, second, metrics


def constrained(answer: dict[str, Any]) -> bool:
    return bool(answer.get("patch")) and not answer.get("warnings")


def constrained_in_turn(
    state: ClusterState, kb: KnowledgeBase, cfg: WebhookConfig, pods: list[dict[str, Any]]
) -> list[bool]:
    """Through one webhook, each pod in turn: admitted, the resolver left to settle, then
    admitted again; whether that second answer is constrained (and the resolver settled)."""
    with serve_in_thread(state, config=cfg, kb=kb) as server:
        tls = ssl.create_default_context(cadata=server.ca_pem.decode("ascii"))
        with httpx.Client(base_url=server.url, verify=tls, timeout=10) as client:

            def admit(pod: dict[str, Any]) -> dict[str, Any]:
                review = creation_review(pod, uid=str(uuid.uuid4()))
                return dict(client.post("/mutate/pods", content=orjson.dumps(review)).json())

            resolver = server.app.image_resolver
            answers = []
            for pod in pods:
                admit(pod)
                settled = resolver is not None and resolver.wait_idle(20)
                answers.append(settled and constrained(admit(pod)["response"]))
            return answers


def secret_reads(api: ClusterApi) -> list[tuple[str, str | None, str | None]]:
    wanted = ("secrets", "serviceaccounts")
    return [(r.plural, r.namespace, r.name) for r in api.requests if r.plural in wanted]


@pytest.fixture
def api(kmock: kmock_lib.KubernetesEmulator, registry: Registry) -> ClusterApi:
    return ClusterApi.start(
        kmock,
        [
            secret("team-a", "regcred", registry),
            secret("team-b", "sa-cred", registry, legacy=True),
            service_account("team-b", "default", "sa-cred"),
            service_account("team-c", "default"),
            service_account("team-d", "runner", "regcred"),
            secret("team-d", "regcred", registry),
        ],
    )


async def test_a_pod_naming_a_pull_secret_is_constrained_after_one_resolution(
    api: ClusterApi,
    kmock: kmock_lib.KubernetesEmulator,
    registry: Registry,
    state: ClusterState,
    kb: KnowledgeBase,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    cfg = config(registry, write_kubeconfig(tmp_path, kmock.url), pull_secrets=True)
    pod = gpu_pod("team-a", f"{registry.host}/team/llm:7", "regcred")
    first, second, metrics = await asyncio.to_thread(two_admissions, state, kb, cfg, pod)
    assert not constrained(first) and any("CUDA unknown" in w for w in first["warnings"])
    assert constrained(second)
    assert secret_reads(api) == [("secrets", "team-a", "regcred")]
    assert 'cudasched_webhook_image_pull_secret_reads_total{result="read"} 1.0' in metrics
    assert 'cudasched_webhook_image_config_resolutions_total{outcome="ok"} 1.0' in metrics
    # The credential is nowhere: not in logs, metrics or answers.
    seen = [caplog.text, metrics, orjson.dumps([first, second]).decode()]
    leaks = [text for text in seen if PASSWORD in text or auth_of(registry) in text]
    assert leaks == []


async def test_the_service_accounts_secrets_when_the_pod_names_none(
    api: ClusterApi,
    kmock: kmock_lib.KubernetesEmulator,
    registry: Registry,
    state: ClusterState,
    kb: KnowledgeBase,
    tmp_path: Path,
) -> None:
    cfg = config(registry, write_kubeconfig(tmp_path, kmock.url), pull_secrets=True)
    default_sa = gpu_pod("team-b", f"{registry.host}/team/llm:7")  # legacy dockercfg secret
    _, second, _ = await asyncio.to_thread(two_admissions, state, kb, cfg, default_sa)
    named_sa = gpu_pod("team-d", f"{registry.host}/team/llm:7")
    named_sa["spec"]["serviceAccountName"] = "runner"
    _, named, _ = await asyncio.to_thread(two_admissions, state, kb, cfg, named_sa)
    assert constrained(second) and constrained(named)
    assert secret_reads(api) == [
        ("serviceaccounts", "team-b", "default"),
        ("secrets", "team-b", "sa-cred"),
        ("serviceaccounts", "team-d", "runner"),
        ("secrets", "team-d", "regcred"),
    ]


async def test_a_secret_of_another_namespace_is_never_used(
    api: ClusterApi,
    kmock: kmock_lib.KubernetesEmulator,
    registry: Registry,
    state: ClusterState,
    kb: KnowledgeBase,
    tmp_path: Path,
) -> None:
    """team-c names ``regcred``, which exists in team-a only: it is looked up in team-c,
    found missing, and the registry refuses the anonymous look-up."""
    cfg = config(registry, write_kubeconfig(tmp_path, kmock.url), pull_secrets=True)
    pod = gpu_pod("team-c", f"{registry.host}/team/llm:7", "regcred")
    first, second, metrics = await asyncio.to_thread(two_admissions, state, kb, cfg, pod)
    assert not constrained(first) and not constrained(second)
    assert any("CUDA unknown" in w for w in second["warnings"])
    assert secret_reads(api) == [("secrets", "team-c", "regcred")]
    assert 'cudasched_webhook_image_config_resolutions_total{outcome="unauthorized"} 1.0' in (
        metrics
    )


async def test_a_config_read_with_one_namespaces_secret_is_not_given_to_another(
    api: ClusterApi,
    kmock: kmock_lib.KubernetesEmulator,
    registry: Registry,
    state: ClusterState,
    kb: KnowledgeBase,
    tmp_path: Path,
) -> None:
    """One webhook: team-a's pod resolves with its secret; a replica in team-c (no secret)
    stays unconstrained, because the config read with team-a's credential is team-a's."""
    cfg = config(registry, write_kubeconfig(tmp_path, kmock.url), pull_secrets=True)
    image = f"{registry.host}/team/llm:7"

    pods = [gpu_pod("team-a", image, "regcred"), gpu_pod("team-c", image)]
    assert await asyncio.to_thread(constrained_in_turn, state, kb, cfg, pods) == [True, False]


async def test_a_pod_without_the_secret_does_not_shut_out_one_with_it(
    api: ClusterApi,
    kmock: kmock_lib.KubernetesEmulator,
    registry: Registry,
    state: ClusterState,
    kb: KnowledgeBase,
    tmp_path: Path,
) -> None:
    """One namespace, two pods of one private image: the first names no pull secret (and its
    ServiceAccount has none), the second names ``regcred``. The first one's refused look-up
    is that pod's answer only: the second is read with its own secret, as the kubelet would
    pull it, instead of being handed the first one's failure until ``errorTtlSeconds``."""
    cfg = config(registry, write_kubeconfig(tmp_path, kmock.url), pull_secrets=True)
    image = f"{registry.host}/team/llm:8"

    pods = [gpu_pod("team-a", image), gpu_pod("team-a", image, "regcred")]
    assert await asyncio.to_thread(constrained_in_turn, state, kb, cfg, pods) == [False, True]


async def test_with_the_option_off_no_secret_is_read(
    api: ClusterApi,
    kmock: kmock_lib.KubernetesEmulator,
    registry: Registry,
    state: ClusterState,
    kb: KnowledgeBase,
    tmp_path: Path,
) -> None:
    cfg = config(registry, write_kubeconfig(tmp_path, kmock.url), pull_secrets=False)
    pod = gpu_pod("team-a", f"{registry.host}/team/llm:7", "regcred")
    _, second, metrics = await asyncio.to_thread(two_admissions, state, kb, cfg, pod)
    assert not constrained(second)
    assert secret_reads(api) == []
    assert 'cudasched_webhook_image_pull_secret_reads_total{result="read"} 0.0' in metrics


def warmed_state(kb: KnowledgeBase, host: str) -> ClusterState:
    """The bundled nodes and KServe objects with private images: a ClusterServingRuntime
    naming ``regcred`` (its InferenceServices in team-a, which has it, and team-c, which
    does not), a ServingRuntime of team-d naming its own ``regcred``, and an
    LLMInferenceService of team-b whose pods pull with the ServiceAccount's secret; their
    images on the registry at ``host``."""
    cluster_rt = builders.runtime(
        "private-llm", image=f"{host}/team/llm:7", spec={"imagePullSecrets": [{"name": "regcred"}]}
    )
    team_d_rt = builders.runtime(
        "private-llm-d",
        "team-d",
        image=f"{host}/team/llm:8",
        spec={"imagePullSecrets": [{"name": "regcred"}]},
    )
    services = [
        builders.isvc("svc-a", "team-a", runtime="private-llm"),
        builders.isvc("svc-c", "team-c", runtime="private-llm"),
    ]
    llm_d = {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "LLMInferenceService",
        "metadata": {"name": "big", "namespace": "team-b"},
        "spec": {"template": {"containers": [{"name": "main", "image": f"{host}/team/llm:9"}]}},
    }
    return ClusterState.from_objects(
        bundled_snapshot().nodes,
        services,
        [team_d_rt],
        [cluster_rt],
        llm_inference_services=[llm_d],
        kb=kb,
    )


async def test_warming_reads_each_objects_pull_secrets_so_first_pods_are_constrained(
    api: ClusterApi,
    kmock: kmock_lib.KubernetesEmulator,
    registry: Registry,
    kb: KnowledgeBase,
    tmp_path: Path,
) -> None:
    """Warmed from the watch cache: every image is first asked for everybody (refused),
    then with the scope of each object naming it. The first pod of each service is
    constrained at once; team-c, whose namespace lacks the runtime's secret, is not, and
    its look-up is not asked of the registry again."""
    cfg = config(registry, write_kubeconfig(tmp_path, kmock.url), pull_secrets=True)
    state = warmed_state(kb, registry.host)
    host = registry.host
    isvc_a = builders.isvc("svc-a", "team-a", runtime="private-llm")

    def scenario() -> tuple[list[dict[str, Any]], dict[str, Any], str]:
        with serve_in_thread(state, config=cfg, kb=kb) as server:
            resolver = server.app.image_resolver
            assert resolver is not None
            resolver.warm(images_of(state))
            assert resolver.wait_idle(20)
            tls = ssl.create_default_context(cadata=server.ca_pem.decode("ascii"))
            with httpx.Client(base_url=server.url, verify=tls, timeout=10) as client:

                def admit(path: str, obj: dict[str, Any]) -> dict[str, Any]:
                    review = creation_review(obj, uid=str(uuid.uuid4()))
                    reply = client.post(path, content=orjson.dumps(review))
                    assert reply.status_code == 200, reply.text
                    return dict(reply.json()["response"])

                pods = [
                    # The predictor pod KServe builds carries the runtime's secret.
                    gpu_pod("team-a", f"{host}/team/llm:7", "regcred"),
                    gpu_pod("team-d", f"{host}/team/llm:8", "regcred"),
                    gpu_pod("team-b", f"{host}/team/llm:9"),
                    gpu_pod("team-c", f"{host}/team/llm:7", "regcred"),
                ]
                answers = [admit("/mutate/pods", pod) for pod in pods]
                service = admit("/mutate/inferenceservices", isvc_a)
                metrics = client.get("/metrics").text
        return answers, service, metrics

    answers, service, metrics = await asyncio.to_thread(scenario)
    assert [constrained(a) for a in answers] == [True, True, True, False]
    assert constrained(service)
    assert sorted(secret_reads(api)) == [
        ("secrets", "team-a", "regcred"),
        ("secrets", "team-b", "sa-cred"),
        ("secrets", "team-c", "regcred"),
        ("secrets", "team-d", "regcred"),
        ("serviceaccounts", "team-b", "default"),
    ]
    # Three refusals for everybody, three reads with a namespace's credentials; team-c
    # had nothing to add, so the registry was not asked for it.
    assert 'cudasched_webhook_image_config_resolutions_total{outcome="unauthorized"} 3.0' in (
        metrics
    )
    assert 'cudasched_webhook_image_config_resolutions_total{outcome="ok"} 3.0' in metrics
    assert 'cudasched_webhook_image_config_lookups_total{result="queued"} 0.0' in metrics


async def test_a_public_image_is_warmed_once_without_reading_any_secret(
    api: ClusterApi,
    kmock: kmock_lib.KubernetesEmulator,
    kb: KnowledgeBase,
    tmp_path: Path,
) -> None:
    """An anonymous registry: the runtime's and each service's scope name the same image;
    one look-up answers them all and no Secret or ServiceAccount is read."""
    with run_registry() as public:
        for tag in ("7", "8", "9"):
            public.push_image("team/llm", tag, PRIVATE_ENV)
        cfg = config(public, write_kubeconfig(tmp_path, kmock.url), pull_secrets=True)
        state = warmed_state(kb, public.host)

        def scenario() -> tuple[int, bool]:
            with serve_in_thread(state, config=cfg, kb=kb) as server:
                resolver = server.app.image_resolver
                assert resolver is not None
                queued = resolver.warm(images_of(state))
                return queued, resolver.wait_idle(20)

        queued, settled = await asyncio.to_thread(scenario)
    assert (queued, settled) == (3, True)
    assert secret_reads(api) == []


async def test_an_inferenceservice_is_resolved_with_its_runtimes_pull_secret(
    api: ClusterApi,
    kmock: kmock_lib.KubernetesEmulator,
    registry: Registry,
    kb: KnowledgeBase,
    tmp_path: Path,
) -> None:
    """Being created, the InferenceService is not in the watch cache yet: its own review
    looks its image up with the secret its ClusterServingRuntime names (KServe puts it in
    the predictor pod), read in team-a. The runtime alone is warmed for everybody only."""
    cfg = config(registry, write_kubeconfig(tmp_path, kmock.url), pull_secrets=True)
    warmed = warmed_state(kb, registry.host).fleet
    state = ClusterState.from_objects(
        bundled_snapshot().nodes, [], [], warmed.cluster_serving_runtimes, kb=kb
    )
    isvc = builders.isvc("svc-a", "team-a", runtime="private-llm")
    first, second, _ = await asyncio.to_thread(
        two_admissions, state, kb, cfg, isvc, "/mutate/inferenceservices"
    )
    assert not constrained(first) and constrained(second)
    assert secret_reads(api) == [("secrets", "team-a", "regcred")]


async def test_a_registry_that_does_not_answer_costs_no_secret_read(
    api: ClusterApi,
    kmock: kmock_lib.KubernetesEmulator,
    kb: KnowledgeBase,
    tmp_path: Path,
) -> None:
    """A timeout for everybody is one with any credentials: warming does not ask again with
    each namespace's, so no Secret is read for a registry that is down."""
    with hanging_server() as host:
        cfg = WebhookConfig.from_mapping(
            {
                "imageResolver": {
                    "enabled": True,
                    "plainHttp": [host],
                    "pullSecrets": True,
                    "deadlineSeconds": 0.5,
                },
                "kube": {"kubeconfig": str(write_kubeconfig(tmp_path, kmock.url))},
            }
        )
        state = warmed_state(kb, host)

        def scenario() -> bool:
            with serve_in_thread(state, config=cfg, kb=kb) as server:
                resolver = server.app.image_resolver
                assert resolver is not None
                resolver.warm(images_of(state))
                return resolver.wait_idle(20)

        assert await asyncio.to_thread(scenario)
    assert secret_reads(api) == []
