"""The one workload reader: the pod a workload creates, whether it uses a GPU, and the
requirement admission and ``explain`` derive from it, which must agree on every object."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.cluster.fleet import Fleet
from cudasched.cluster.snapshot import ClusterSnapshot, bundled_snapshot
from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.images import ImageTable
from cudasched.settings.config import WebhookConfig
from cudasched.vocab.errors import InputError
from cudasched.webhook.admission.admitter import Admitter
from cudasched.webhook.state.clusterstate import ClusterState
from cudasched.workloads.pods import (
    is_inference_service,
    is_skipped,
    pod_of,
    workload_uses_gpu,
    workloads_of,
)
from cudasched.workloads.resolution import workload_need
from tests.support import builders, synth

GPU = {"limits": {"nvidia.com/gpu": "1"}}


@pytest.fixture(scope="module")
def sample() -> ClusterSnapshot:
    return bundled_snapshot()


def _isvc(predictor: dict[str, Any], **annotations: str) -> dict[str, Any]:
    return builders.isvc("svc", "team-nlp", predictor=predictor, annotations=annotations)


def _runtime_model(**extra: Any) -> dict[str, Any]:
    return {"modelFormat": {"name": "transformers"}, "runtime": "aml-vllm-cuda-12.8", **extra}


# --------------------------------------------------------------------------- readers


def test_is_skipped_accepts_the_webhooks_values() -> None:
    for value in ("true", "TRUE", " yes ", "1"):
        assert is_skipped({"cudasched.io/skip": value})
    for value in ("false", "no", "", "0"):
        assert not is_skipped({"cudasched.io/skip": value})
    assert not is_skipped({"cudasched.io/skip": True})  # not a string: the API never sends it
    assert not is_skipped({})


def test_pod_of_a_deployment_overlays_its_annotations() -> None:
    deploy = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "annotations": {"a": "own", "b": "own"}},
        "spec": {
            "template": {
                "metadata": {"labels": {"app": "x"}, "annotations": {"b": "template"}},
                "spec": {"containers": [{"name": "c", "image": "i", "resources": GPU}]},
            }
        },
    }
    pod = pod_of(deploy)
    assert pod["kind"] == "Pod" and pod["metadata"]["namespace"] == "default"
    assert pod["metadata"]["annotations"] == {"a": "own", "b": "template"}
    assert pod["metadata"]["labels"] == {"app": "x"}
    assert workload_uses_gpu(deploy)


def test_pod_of_an_inference_service_is_its_predictor_pod(sample: ClusterSnapshot) -> None:
    isvc = next(i for i in sample.inference_services if i["metadata"]["name"] == "qwen2-7b")
    pod = pod_of(isvc)
    labels = pod["metadata"]["labels"]
    assert labels["serving.kserve.io/inferenceservice"] == "qwen2-7b"
    assert labels["component"] == "predictor"
    assert pod["metadata"]["namespace"] == "team-nlp"


def test_controller_without_template_is_bad_input() -> None:
    with pytest.raises(InputError, match="default/Deployment/d"):
        workload_uses_gpu(
            {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}
        )


@pytest.mark.parametrize(
    ("predictor", "uses"),
    [
        ({"model": _runtime_model()}, False),
        ({"model": _runtime_model(resources=GPU)}, True),
        ({"model": _runtime_model(), "workerSpec": {"containers": [{"resources": GPU}]}}, True),
        ({"containers": [{"name": "kserve-container", "image": "x", "resources": GPU}]}, True),
        ({"pytorch": {"resources": GPU}}, True),
        ({"model": _runtime_model(), "resourceClaims": [{"name": "gpu"}]}, True),
    ],
)
def test_inference_service_gpu_anywhere_in_its_predictor(
    predictor: dict[str, Any], uses: bool
) -> None:
    assert workload_uses_gpu(_isvc(predictor)) is uses


def test_workloads_of_lists_each_workload_once(sample: ClusterSnapshot) -> None:
    chosen = workloads_of(sample)
    names = [(o["kind"], o["metadata"].get("name")) for o in chosen]
    assert len(names) == len(set(names))
    # InferenceServices with a predictor pod are explained through that pod only.
    with_pods = {
        p["metadata"]["labels"].get("serving.kserve.io/inferenceservice") for p in sample.pods
    }
    assert not any(is_inference_service(o) and o["metadata"]["name"] in with_pods for o in chosen)


# --------------------------------------------------------------------------- agreement


def _review(obj: dict[str, Any], number: int) -> bytes:
    return orjson.dumps(builders.review(obj, uid=f"u-{number}"))


class _Paths:
    """The webhook's answer and explain's answer for the same object and cluster."""

    def __init__(self, snapshot: ClusterSnapshot, kb: KnowledgeBase) -> None:
        self.config = WebhookConfig()
        self.admitter = Admitter.from_config(self.config, kb)
        self.state = ClusterState.from_objects(
            snapshot.nodes,
            snapshot.inference_services,
            snapshot.serving_runtimes,
            snapshot.cluster_serving_runtimes,
            kb=kb,
        )
        self.fleet = Fleet.from_snapshot(snapshot, kb)
        self.images = ImageTable.builtin(kb)

    def webhook(self, obj: dict[str, Any], number: int = 0) -> str:
        kind = "isvc" if is_inference_service(obj) else "pod"
        return self.admitter.decide(kind, _review(obj, number), self.state).requirement

    def explain(self, obj: dict[str, Any]) -> str:
        try:
            _, need = workload_need(obj, self.fleet, self.images)
        except InputError:
            return ""  # the webhook admits unreadable objects unconstrained, with a warning
        if need.no_pods is not None:
            return ""  # KServe runs no predictor: the webhook records nothing, and says why
        if need.unknown is not None:
            return need.unknown.record()  # what the webhook records: unknown (why)
        req = need.requirement
        if req.is_empty:
            return ""
        policy = req.policy if req.policy is not None else self.config.policy
        return req.record(policy)


def test_webhook_and_explain_agree_on_every_sample_object(
    sample: ClusterSnapshot, kb: KnowledgeBase
) -> None:
    paths = _Paths(sample, kb)
    objects = [*sample.pods, *sample.inference_services]
    assert objects
    for number, obj in enumerate(objects):
        assert paths.webhook(copy.deepcopy(obj), number) == paths.explain(obj), obj["metadata"]


def test_webhook_and_explain_agree_on_generated_clusters(kb: KnowledgeBase) -> None:
    cluster = synth.make_cluster(60, runtimes=40, isvcs=120)
    snapshot = ClusterSnapshot(
        nodes=cluster.nodes,
        inference_services=cluster.inference_services,
        serving_runtimes=cluster.serving_runtimes,
        cluster_serving_runtimes=cluster.cluster_serving_runtimes,
        pods=cluster.pods,
    )
    paths = _Paths(snapshot, kb)
    objects = [*cluster.pods, *cluster.inference_services]
    assert len(objects) == 240  # one predictor pod per InferenceService
    for number, obj in enumerate(objects):
        assert paths.webhook(copy.deepcopy(obj), number) == paths.explain(obj)


_PLACES = st.sampled_from(["none", "model", "worker", "containers", "claims", "legacy"])


@settings(max_examples=60)
@given(
    place=_PLACES,
    declared=st.sampled_from([None, "12.4", "13.0"]),
    runtime=st.sampled_from(["aml-vllm-cuda-12.8", "aml-vllm-cuda-13.0", "kserve-tritonserver"]),
)
def test_webhook_and_explain_agree_wherever_the_gpu_is(
    place: str, declared: str | None, runtime: str
) -> None:
    """An InferenceService whose GPU is requested in the model, a multi-node worker, custom
    containers, a resource claim or a legacy framework field gets the same requirement from
    admission and from explain (the workerSpec case used to differ)."""
    kb = KnowledgeBase.load()
    model: dict[str, Any] = {"modelFormat": {"name": "transformers"}, "runtime": runtime}
    predictor: dict[str, Any] = {"model": model}
    if place == "model":
        model["resources"] = GPU
    elif place == "worker":
        predictor["workerSpec"] = {"containers": [{"name": "worker-container", "resources": GPU}]}
    elif place == "containers":
        predictor = {
            "containers": [
                {"name": "kserve-container", "image": "vllm/vllm-openai:v0.9.0", "resources": GPU}
            ]
        }
    elif place == "claims":
        predictor["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    elif place == "legacy":
        predictor = {"pytorch": {"resources": GPU, "storageUri": "gs://m"}}
    annotations = {"cudasched.io/cuda-version": declared} if declared else {}
    isvc = _isvc(predictor, **annotations)
    paths = _Paths(bundled_snapshot(), kb)
    assert paths.webhook(copy.deepcopy(isvc)) == paths.explain(isvc)
    if place == "worker" and runtime.startswith("aml-vllm"):
        assert paths.explain(isvc) != ""  # a GPU only in workerSpec is still a GPU service
