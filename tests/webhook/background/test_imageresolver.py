"""The webhook's image resolver over HTTPS against the real webhook server and the real
registry: the first pod of an unknown in-house image is answered at once and warned, a
replica after the resolution is constrained to the nodes its config requires, and a registry
that hangs never holds a review (issue 19 item 3)."""

from __future__ import annotations

import base64
import ssl
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from cudasched.cluster.snapshot import bundled_snapshot
from cudasched.knowledge import KnowledgeBase
from cudasched.settings.config import WebhookConfig
from cudasched.vocab.nodeaffinity import RequiredNodeAffinity
from cudasched.webhook.admission.review import creation_review
from cudasched.webhook.server.serving import serve_in_thread
from cudasched.webhook.state.clusterstate import ClusterState
from tests.support.registry import Registry, hanging_server, run_registry

IN_HOUSE_ENV = ["PATH=/usr/bin", "NVIDIA_REQUIRE_CUDA=cuda>=12.6"]


def places(answer: dict[str, Any]) -> bool:
    """Whether the answer constrains the pod (patches its spec): an answer for a pod of
    unknown CUDA only records ``unknown (why)`` in its annotations."""
    ops = orjson.loads(base64.b64decode(answer["patch"])) if "patch" in answer else []
    return any(op["path"].startswith("/spec") for op in ops)


@pytest.fixture(scope="module")
def registry() -> Iterator[Registry]:
    with run_registry() as running:
        running.push_image("ml/llm", "7", IN_HOUSE_ENV)
        yield running


@pytest.fixture(scope="module")
def state(kb: KnowledgeBase) -> ClusterState:
    return ClusterState.from_snapshot(bundled_snapshot(), kb=kb)


def gpu_pod(image: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "llm-7d9f-", "namespace": "ml", "labels": {"app": "llm"}},
        "spec": {
            "containers": [
                {"name": "llm", "image": image, "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ]
        },
    }


def resolver_config(*plain_http: str, request_timeout: float = 2.5) -> WebhookConfig:
    return WebhookConfig.from_mapping(
        {
            "imageResolver": {
                "enabled": True,
                "plainHttp": list(plain_http),
                "budgetSeconds": 0.05,
            },
            "server": {"requestTimeoutSeconds": request_timeout},
        }
    )


def admit(client: httpx.Client, pod: dict[str, Any]) -> dict[str, Any]:
    review = creation_review(pod, uid=str(uuid.uuid4()))
    reply = client.post("/mutate/pods", content=orjson.dumps(review))
    assert reply.status_code == 200, reply.text
    return reply.json()["response"]


def eligible(state: ClusterState, pod: dict[str, Any], response: dict[str, Any]) -> set[str]:
    import jsonpatch

    patch = orjson.loads(base64.b64decode(response["patch"])) if response.get("patch") else []
    patched = jsonpatch.apply_patch(pod, patch)
    affinity = RequiredNodeAffinity.from_pod_spec(patched["spec"])
    return {n.name for n in state.nodes if affinity.match(n)}


def test_first_pod_warned_then_replicas_constrained(
    registry: Registry, state: ClusterState, kb: KnowledgeBase
) -> None:
    config = resolver_config(registry.host)
    pod = gpu_pod(f"{registry.host}/ml/llm:7")
    with serve_in_thread(state, config=config, kb=kb) as server:
        tls = ssl.create_default_context(cadata=server.ca_pem.decode("ascii"))
        with httpx.Client(base_url=server.url, verify=tls, timeout=10) as client:
            first = admit(client, pod)
            assert first["allowed"] and not places(first)
            assert any("CUDA unknown" in w for w in first.get("warnings", ()))
            resolver = server.app.image_resolver
            assert resolver is not None and resolver.wait_idle(20)
            second = admit(client, pod)  # a replica of the same template
            assert second["allowed"] and not second.get("warnings")
            third = admit(client, pod)
            metrics = client.get("/metrics").text
    nodes = eligible(state, pod, second)
    everyone = {n.name for n in state.nodes}
    assert nodes and nodes < everyone
    # Exactly the nodes whose driver runs CUDA 12.6: what explain says of a CUDA 12.6 pod.
    from cudasched.explain.eligibility import explain
    from cudasched.vocab.requirements import Requirement
    from cudasched.vocab.versions import parse_cuda

    wanted = explain(pod, state.fleet, "strict", kb, requirement=Requirement(parse_cuda("12.6")))
    assert nodes == {n.node for n in wanted.nodes if n.eligible}
    annotation = orjson.loads(base64.b64decode(second["patch"]))
    assert any(
        f"image config of {registry.host}/ml/llm:7" in orjson.dumps(op).decode()
        for op in annotation
    )
    assert third.get("patch") == second.get("patch")
    assert 'cudasched_webhook_image_config_lookups_total{result="queued"} 1.0' in metrics
    assert 'cudasched_webhook_image_config_resolutions_total{outcome="ok"} 1.0' in metrics


def test_a_registry_outage_never_holds_a_review(state: ClusterState, kb: KnowledgeBase) -> None:
    # The review's own deadline (0.5 s) is far below the registry client's (10 s): a review
    # that waited for the hung registry would be answered by the failure mode ("decision
    # exceeded"), so an ordinary unknown answer shows it did not wait beyond the budget.
    with hanging_server() as host:
        config = resolver_config(host, request_timeout=0.5)
        pod = gpu_pod(f"{host}/ml/llm:7")
        with serve_in_thread(state, config=config, kb=kb) as server:
            tls = ssl.create_default_context(cadata=server.ca_pem.decode("ascii"))
            with httpx.Client(base_url=server.url, verify=tls, timeout=10) as client:
                answers = [admit(client, pod) for _ in range(3)]
                metrics = client.get("/metrics").text
    assert len(answers) == 3
    for answer in answers:
        assert answer["allowed"] and not places(answer)
        warnings = answer.get("warnings", ())
        assert any("CUDA unknown" in w for w in warnings), warnings
        assert not any("exceeded" in w or "admitted without" in w for w in warnings), warnings
    assert 'cudasched_webhook_fallbacks_total{endpoint="/mutate/pods",reason="timeout"}' not in (
        metrics
    )
    assert 'cudasched_webhook_image_config_lookups_total{result="in_flight"} 2.0' in metrics


def test_images_resolve_through_the_mirrors_of_imagemirrors(
    registry: Registry, state: ClusterState, kb: KnowledgeBase
) -> None:
    """The origin is out of reach (nothing listens there); an ``imageMirrors`` entry naming
    the mirror's host sends the look-up to the mirror, which holds the image under
    ``mirror/``: the replica is constrained and the record names the mirror."""
    from tests.harness.controlplane.processes import free_port

    origin = f"127.0.0.1:{free_port()}"
    registry.push_image("mirror/ml/llm", "7", IN_HOUSE_ENV)
    config = WebhookConfig.from_mapping(
        {
            "imageResolver": {"enabled": True, "plainHttp": [registry.host, origin]},
            "imageMirrors": {f"{registry.host}/mirror": origin},
        }
    )
    pod = gpu_pod(f"{origin}/ml/llm:7")
    with serve_in_thread(state, config=config, kb=kb) as server:
        tls = ssl.create_default_context(cadata=server.ca_pem.decode("ascii"))
        with httpx.Client(base_url=server.url, verify=tls, timeout=10) as client:
            first = admit(client, pod)
            resolver = server.app.image_resolver
            assert resolver is not None and resolver.wait_idle(20)
            second = admit(client, pod)
    assert not places(first) and places(second) and not second.get("warnings")
    patch = orjson.loads(base64.b64decode(second["patch"])).__repr__()
    assert f"read from mirror {registry.host}/mirror/ml/llm" in patch
