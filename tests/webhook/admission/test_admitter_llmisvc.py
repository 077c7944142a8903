"""KServe LLMInferenceService admission (issue 12 item 9), with the objects and pods of
``tests/data/kserve/llmisvc.yaml`` (written from KServe's samples and config templates).

* the model-server pods (decode, prefill, LeaderWorkerSet worker) are constrained by the
  service's ``cudasched.io/*`` annotations (read from the watch cache: the controller does not
  copy them to the pods), then by their ``main`` image; the router scheduler is left alone;
* CREATE/UPDATE of the service (``/mutate/llminferenceservices``, v1alpha1 and v1alpha2) is
  annotated with the requirement and warned, or refused on CREATE, when no node can run it;
* ``explain`` and admission answer alike for the same pod and cluster;
* end to end: the real HTTPS server and watch cache against the kmock API server, which serves
  the LLMInferenceService; the NoCompatibleNode Event regards the stored service.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import kmock
import orjson
import pytest
import yaml
from typer.testing import CliRunner

from cudasched.cli import app
from cudasched.cluster.fleet import Fleet
from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.images import ImageTable
from cudasched.settings.config import WebhookConfig
from cudasched.vocab import labels as L
from cudasched.vocab.nodeaffinity import RequiredNodeAffinity
from cudasched.webhook.admission.admitter import Admitter
from cudasched.webhook.admission.review import Placement
from cudasched.webhook.server.app import LLMISVC_PATH, POD_PATH
from cudasched.webhook.state.clusterstate import ClusterState
from cudasched.workloads.resolution import resolve_workload
from tests.support import builders
from tests.support.admission import applied, ask, fleet_node, nodes, ops_of, recorded_only
from tests.support.k8s_schema import assert_valid_event, assert_valid_pod
from tests.support.servers import events, eventually, make_cache, serving, trust

DATA = Path(__file__).parents[2] / "data" / "kserve"
LLMISVCS = "/apis/serving.kserve.io/v1alpha1/namespaces/llm/llminferenceservices"
NODES = "/api/v1/nodes"
CUDA13_NODES = [
    fleet_node("b200-r580", "NVIDIA-B200", "580.95.05"),
    fleet_node("h100-r580", "NVIDIA-H100-80GB-HBM3", "580.95.05"),
]
CUDA13 = {"b200-r580", "h100-r580"}


def objects() -> list[dict[str, Any]]:
    return yaml.safe_load((DATA / "llmisvc.yaml").read_text(encoding="utf-8"))["items"]


def service(name: str) -> dict[str, Any]:
    kinds = [o for o in objects() if o["kind"] == "LLMInferenceService"]
    return next(o for o in kinds if o["metadata"]["name"] == name)


def pod(component: str, image: str = "ghcr.io/llm-d/llm-d-cuda:v0.8.0") -> dict[str, Any]:
    """The pod of ``component`` (its ``main`` image picks among equal components)."""
    for obj in objects():
        if obj["kind"] != "Pod":
            continue
        labels = obj["metadata"].get("labels", {})
        main = next((c for c in obj["spec"]["containers"] if c["name"] == "main"), {})
        if labels.get("app.kubernetes.io/component") == component and (
            component.endswith("router-scheduler") or main.get("image") == image
        ):
            return obj
    raise LookupError(component)


def pod_review(obj: dict[str, Any], uid: str = "6f0c1a2b-0000-4000-8000-000000000001") -> dict:
    """The CREATE review a ReplicaSet's (or LeaderWorkerSet's) pod arrives in: no namespace in
    the object, the request's namespace ``llm``."""
    return builders.review(obj, uid=uid, namespace="llm")


def service_review(obj: dict[str, Any], operation: str = "CREATE") -> dict[str, Any]:
    return builders.review(obj, operation=operation, uid="0c4e2f9a-1111-4000-8000-000000000002")


def eligible(obj: dict[str, Any], state: ClusterState) -> set[str]:
    affinity = RequiredNodeAffinity.from_pod_spec(obj["spec"])
    return {n.name for n in state.nodes if affinity.match(n)}


def cluster(kb: KnowledgeBase, *services: dict[str, Any], cuda13: bool = True) -> ClusterState:
    return ClusterState.from_objects(
        [*nodes(), *(CUDA13_NODES if cuda13 else [])],
        [],
        [],
        [],
        llm_inference_services=services,
        kb=kb,
    )


def admitter(kb: KnowledgeBase, **settings: Any) -> Admitter:
    return Admitter.from_config(WebhookConfig.from_mapping(settings), kb=kb)


# --------------------------------------------------------------------------- pods


@pytest.mark.parametrize(
    "component",
    [
        "llminferenceservice-workload",
        "llminferenceservice-workload-prefill",
        "llminferenceservice-workload-worker",
    ],
)
def test_model_server_pods_are_constrained_by_their_main_image(
    kb: KnowledgeBase, component: str
) -> None:
    """llm-d-cuda v0.8.0 (KServe v0.20.0's default) is CUDA 13.0: only the R580 nodes."""
    state = cluster(kb)
    review = pod_review(pod(component))
    resp = ask(admitter(kb), "pod", review, state)
    assert resp["allowed"] is True and "warnings" not in resp
    mutated = applied(review, resp)
    assert_valid_pod(mutated)
    assert eligible(mutated, state) == CUDA13
    record = mutated["metadata"]["annotations"][L.ANN_REQUIREMENT]
    assert record.startswith("cuda>=13.0 (image ghcr.io/llm-d/llm-d-cuda:v0.8.0")


def test_router_scheduler_is_left_alone(kb: KnowledgeBase) -> None:
    resp = ask(
        admitter(kb), "pod", pod_review(pod("llminferenceservice-router-scheduler")), cluster(kb)
    )
    assert resp == {"uid": "6f0c1a2b-0000-4000-8000-000000000001", "allowed": True}


def test_pods_follow_the_services_annotations_from_the_cache(kb: KnowledgeBase) -> None:
    """The service declares CUDA 13.0 on Blackwell (compute capability >= 10.0): its pods,
    which do not carry the service's annotations, are constrained by that, not by their
    image alone."""
    declared = service("qwen2-7b-instruct-single")
    declared["metadata"]["annotations"] = {
        L.ANN_CUDA_VERSION: "13.0",
        L.ANN_MIN_COMPUTE: "10.0",
    }
    state = cluster(kb, declared)
    review = pod_review(pod("llminferenceservice-workload"))
    mutated = applied(review, ask(admitter(kb), "pod", review, state))
    assert_valid_pod(mutated)
    record = mutated["metadata"]["annotations"][L.ANN_REQUIREMENT]
    assert record == (
        "cuda>=13.0, cc>=10.0 (annotation cudasched.io/cuda-version, "
        "cudasched.io/min-compute-capability)"
    )
    assert eligible(mutated, state) == {"b200-r580"}
    # Without the service in the cache, the pod is judged by its image: any CUDA 13 node.
    alone = applied(review, ask(admitter(kb), "pod", review, cluster(kb)))
    assert eligible(alone, state) == CUDA13


def test_a_model_server_whose_image_is_unknown_is_warned_with_the_fix(kb: KnowledgeBase) -> None:
    """KServe v0.16's default image (llm-d-dev) is not in the table: admitted unchanged, and
    told which service to annotate."""
    review = pod_review(pod("llminferenceservice-workload", "ghcr.io/llm-d/llm-d-dev:v0.2.2"))
    resp = ask(admitter(kb), "pod", review, cluster(kb))
    assert resp["allowed"] is True
    assert recorded_only(review, resp) == (
        "unknown (image not in the image table: ghcr.io/llm-d/llm-d-dev:v0.2.2)"
    )
    assert resp["warnings"] == [
        "cudasched: not constrained, CUDA unknown: image not in the image table: "
        "ghcr.io/llm-d/llm-d-dev:v0.2.2",
        "cudasched: to constrain it, annotate LLMInferenceService qwen2-7b-instruct-single "
        "with cudasched.io/cuda-version",
    ]


# --------------------------------------------------------------------------- the service


@pytest.mark.parametrize("name", ["qwen2-7b-instruct-single", "qwen2-7b-instruct-pd"])
def test_service_whose_image_comes_from_the_configs_is_left_to_its_pods(
    kb: KnowledgeBase, name: str
) -> None:
    """Both API versions are read; no image in the object (it comes from the
    LLMInferenceServiceConfigs) is not an unknown requirement: the pods are judged."""
    resp = ask(admitter(kb), "llmisvc", service_review(service(name)), cluster(kb))
    assert resp == {"uid": "0c4e2f9a-1111-4000-8000-000000000002", "allowed": True}


@pytest.mark.parametrize("name", ["qwen2-7b-instruct-single", "qwen2-7b-instruct-pd"])
def test_declared_service_is_annotated_and_warned_when_no_node_fits(
    kb: KnowledgeBase, name: str
) -> None:
    obj = service(name)
    obj["metadata"].setdefault("annotations", {})[L.ANN_CUDA_VERSION] = "13.0"
    review = service_review(obj)
    # A cluster whose newest driver runs CUDA 12.8: admitted, recorded, warned.
    resp = ask(admitter(kb), "llmisvc", review, cluster(kb, cuda13=False))
    assert resp["allowed"] is True
    assert resp["warnings"] == [
        "cudasched: no node can run CUDA 13.0; newest driver supports 12.8 (2 nodes)"
    ]
    stored = applied(review, resp)
    assert stored["metadata"]["annotations"][L.ANN_REQUIREMENT] == (
        "cuda>=13.0 (annotation cudasched.io/cuda-version)"
    )
    assert stored["spec"] == obj["spec"]  # its pods are constrained, not the service
    # With the R580 node: recorded, no warning; the record is idempotent.
    fits = ask(admitter(kb), "llmisvc", review, cluster(kb))
    assert "warnings" not in fits
    again = service_review(applied(review, fits))
    assert "patch" not in ask(admitter(kb), "llmisvc", again, cluster(kb))


def test_service_refused_on_create_only_under_on_no_fit_deny(kb: KnowledgeBase) -> None:
    obj = service("qwen2-7b-instruct-single")
    obj["spec"]["template"]["containers"][0]["image"] = "ghcr.io/llm-d/llm-d-cuda:v0.8.0"
    deny = admitter(kb, onNoFit="deny")
    created = ask(deny, "llmisvc", service_review(obj), cluster(kb, cuda13=False))
    assert created["allowed"] is False and created["status"]["code"] == 403
    assert "no node can run CUDA 13.0" in created["status"]["message"]
    updated = ask(deny, "llmisvc", service_review(obj, "UPDATE"), cluster(kb, cuda13=False))
    assert updated["allowed"] is True and "no node can run" in updated["warnings"][0]
    stale = applied(service_review(obj, "UPDATE"), updated)
    assert stale["metadata"]["annotations"][L.ANN_REQUIREMENT].startswith("cuda>=13.0 (image")


def test_stale_record_is_dropped_and_placement_reported(kb: KnowledgeBase) -> None:
    adm = admitter(kb)
    seen: list[Placement] = []
    adm.on_placement = seen.append
    obj = service("qwen2-7b-instruct-single")
    obj["metadata"]["annotations"] = {L.ANN_REQUIREMENT: "cuda>=12.4 (old)"}
    review = service_review(obj, "UPDATE")
    resp = ask(adm, "llmisvc", review, cluster(kb))
    assert ops_of(resp) == [
        {"op": "remove", "path": "/metadata/annotations/cudasched.io~1requirement"}
    ]
    (placement,) = seen
    assert (placement.kind, placement.namespace, placement.name) == (
        "LLMInferenceService",
        "llm",
        "qwen2-7b-instruct-single",
    )
    assert placement.api_version == "serving.kserve.io/v1alpha2" and placement.no_fit is None


def test_explain_and_admission_answer_alike(kb: KnowledgeBase, tmp_path: Path) -> None:
    """The same cluster (with the annotated service) and pod: ``resolve_workload`` (what
    explain runs) gives the requirement admission records, and ``cudasched explain`` the nodes
    the mutated pod may use."""
    declared = service("qwen2-7b-instruct-single")
    declared["metadata"]["annotations"] = {L.ANN_MIN_COMPUTE: "10.0"}
    state = cluster(kb, declared)
    decode = pod("llminferenceservice-workload")
    review = pod_review(decode)
    mutated = applied(review, ask(admitter(kb), "pod", review, state))
    record = mutated["metadata"]["annotations"][L.ANN_REQUIREMENT]

    fleet = Fleet([*nodes(), *CUDA13_NODES], kb, llm_inference_services=[declared])
    placed = {**decode, "metadata": {**decode["metadata"], "namespace": "llm", "name": "d"}}
    _, req, _ = resolve_workload(placed, fleet, ImageTable.builtin(kb))
    assert req.record(req.policy or WebhookConfig().policy) == record

    dump = tmp_path / "cluster.yaml"
    dump.write_text(yaml.safe_dump([*nodes(), *CUDA13_NODES, declared, placed]))
    result = CliRunner().invoke(
        app, ["explain", "pod/d", "-n", "llm", "--cluster", str(dump), "-o", "json"]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert {n["node"] for n in doc["nodes"] if n["eligible"]} == eligible(mutated, state)
    # The service's compute capability and the image's gate (cuda>=13.0): Blackwell on R580.
    assert eligible(mutated, state) == {"b200-r580"}


# --------------------------------------------------------------------------- end to end


async def test_cache_serves_services_to_pod_admission_and_events(
    kmock: kmock.KubernetesEmulator,
) -> None:
    """Production wiring: the watch cache lists LLMInferenceServices from the API server, so
    a decode pod is judged with its service's annotation; the service's own CREATE warns and,
    once stored, gets one NoCompatibleNode Event and counts in the gauge."""
    for node in nodes():
        await kmock.post(NODES, json=node)
    declared = service("qwen2-7b-instruct-pd")
    declared["apiVersion"] = "serving.kserve.io/v1alpha1"
    declared["metadata"]["annotations"][L.ANN_CUDA_VERSION] = "12.9"
    cache = make_cache(str(kmock.url))
    async with (
        serving(cache, {}) as srv,
        httpx.AsyncClient(base_url=srv.url, verify=trust(srv.ca_pem)) as c,
    ):
        await eventually(lambda: cache.synced)
        answer = await c.post(LLMISVC_PATH, content=orjson.dumps(service_review(declared)))
        response = answer.json()["response"]
        assert response["allowed"] is True
        assert response["warnings"] == [
            "cudasched: no node can run CUDA 12.9; newest driver supports 12.8 (2 nodes)"
        ]
        assert events(kmock) == []  # not before the service is stored

        stored = {**declared, "metadata": {**declared["metadata"], "uid": "llmisvc-uid-1"}}
        await kmock.post(LLMISVCS, json=stored)
        await eventually(lambda: cache.state.llm_inference_service("llm", "qwen2-7b-instruct-pd"))
        await eventually(lambda: len(events(kmock)) == 1)
        (event,) = events(kmock)
        assert_valid_event(event)
        assert event["reason"] == "NoCompatibleNode"
        assert event["regarding"] == {
            "apiVersion": "serving.kserve.io/v1alpha1",
            "kind": "LLMInferenceService",
            "name": "qwen2-7b-instruct-pd",
            "namespace": "llm",
            "uid": "llmisvc-uid-1",
        }
        metrics = (await c.get("/metrics")).text
        assert (
            'cudasched_webhook_no_compatible_node_objects{kind="LLMInferenceService"} 1.0'
            in metrics
        )

        # Its prefill pod carries no annotation of its own: the service's (12.9) is used.
        review = pod_review(pod("llminferenceservice-workload-prefill"))
        pod_answer = (await c.post(POD_PATH, content=orjson.dumps(review))).json()["response"]
        assert "no node can run CUDA 12.9" in pod_answer["warnings"][0]
        mutated = applied(review, pod_answer)
        assert mutated["metadata"]["annotations"][L.ANN_REQUIREMENT] == (
            "cuda>=12.9 (annotation cudasched.io/cuda-version)"
        )

        # Status churn of the service does not rebuild the snapshot; an annotation change does.
        await asyncio.sleep(0.2)
        before = cache.generation
        await kmock.patch(
            f"{LLMISVCS}/qwen2-7b-instruct-pd",
            json={"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
        )
        await asyncio.sleep(0.2)
        assert cache.generation == before
        await kmock.patch(
            f"{LLMISVCS}/qwen2-7b-instruct-pd",
            json={"metadata": {"annotations": {L.ANN_CUDA_VERSION: "12.4"}}},
        )
        await eventually(lambda: cache.generation > before)
        found = cache.state.llm_inference_service("llm", "qwen2-7b-instruct-pd")
        assert found["metadata"]["annotations"][L.ANN_CUDA_VERSION] == "12.4"
