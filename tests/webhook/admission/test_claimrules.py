"""The webhook's ResourceClaim path with ``dra.mode`` on: a claim kube-controller-manager made
from a pod's template gets the CUDA-aware class's selectors added to its GPU requests (the
patch applies and gives a valid 1.37 claim), decided from the pod as read; a claim with no pod,
a pod whose CUDA is unknown or that cannot be read, and ``dra.mode: off`` leave it unchanged."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import kubernetes_validate
import orjson

from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.images import ImageTable
from cudasched.placement.deviceclass import device_class
from cudasched.settings.config import WebhookConfig
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.vocab.versions import parse_cuda
from cudasched.webhook.admission.admitter import Admitter
from cudasched.webhook.admission.claimrules import POD_CLAIM_NAME
from cudasched.webhook.admission.review import creation_review
from cudasched.webhook.state.clusterstate import ClusterState
from tests.support import builders
from tests.support.admission import applied, ask, nodes_state, ops_of

IMAGE = "nvidia/cuda:12.8.1-runtime-ubuntu22.04"
CLASS = "gpu-cuda-12-8.cudasched.io"


@functools.cache
def kb() -> KnowledgeBase:
    return KnowledgeBase.load()


@functools.cache
def state() -> ClusterState:
    return nodes_state(kb())


class _Pods:
    """The API server's pods as a claim's admission reads them, and which were read."""

    def __init__(self, *pods: dict[str, Any]) -> None:
        self.pods = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}
        self.reads: list[tuple[str, str]] = []

    def read_pod(self, namespace: str, name: str) -> tuple[Mapping[str, Any] | None, str]:
        self.reads.append((namespace, name))
        found = self.pods.get((namespace, name))
        return found, "" if found is not None else f"pod {namespace}/{name} not found"


def _admitter(pods: _Pods, mode: str = "extended-resource") -> Admitter:
    config = WebhookConfig.from_mapping({"dra": {"mode": mode}})
    return Admitter(config, kb(), ImageTable.from_config(config, kb=kb()), pods=pods)


def _pod(name: str, image: str = IMAGE) -> dict[str, Any]:
    """A pod asking its GPU through a claim from a template of NVIDIA's class."""
    container = {"name": "main", "image": image, "resources": {"claims": [{"name": "gpu"}]}}
    pod = builders.pod(name, containers=[container])
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "nvidia-gpu"}]
    return pod


def _claim(pod: str | None, requests: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The claim kube-controller-manager makes for ``pod`` from its template (``None``: one a
    person made)."""
    meta: dict[str, Any] = {"generateName": f"{pod}-gpu-", "namespace": "default"}
    if pod is not None:
        meta["annotations"] = {POD_CLAIM_NAME: "gpu"}
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": "u-1", "controller": True}
        ]
    exactly = {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": {"devices": {"requests": requests or [{"name": "gpu", "exactly": exactly}]}},
    }


def _selectors() -> list[str]:
    req = Requirement(cuda=parse_cuda("12.8"), source="test")
    draft = device_class(req, Policy.STRICT, kb())
    assert draft.name == CLASS
    return [s["cel"]["expression"] for s in draft.obj["spec"]["selectors"]]


def test_a_claim_made_for_a_pod_gets_its_class_selectors() -> None:
    pods = _Pods(_pod("llm"))
    review = creation_review(_claim("llm"), uid="uid-claim1")
    resp = ask(_admitter(pods), "claim", review, state())
    claim = applied(review, resp)
    claim["metadata"]["name"] = "llm-gpu-abcde"
    kubernetes_validate.validate(claim, "1.37", strict=True)
    request = claim["spec"]["devices"]["requests"][0]["exactly"]
    assert [s["cel"]["expression"] for s in request["selectors"]] == _selectors()
    assert {k: v for k, v in request.items() if k != "selectors"} == {
        "deviceClassName": "gpu.nvidia.com",
        "allocationMode": "ExactCount",
        "count": 1,
    }
    assert pods.reads == [("default", "llm")]


def test_the_answer_is_never_remembered_the_pod_is_read_each_time() -> None:
    pods = _Pods(_pod("llm"))
    adm = _admitter(pods)
    body = _claim("llm")
    first = ask(adm, "claim", creation_review(body, uid="uid-claim1"), state())
    second = ask(adm, "claim", creation_review(body, uid="uid-claim2"), state())
    assert ops_of(first) == ops_of(second) != []
    assert pods.reads == [("default", "llm")] * 2


def test_claims_left_unchanged() -> None:
    """No pod owner, dra.mode off, a pod whose CUDA is unknown, a pod that is gone, a
    request of the pod's own class or another vendor's: no patch."""
    pods = _Pods(_pod("llm"), _pod("mystery", image="example.com/mystery:1"))
    own = [{"name": "gpu", "exactly": {"deviceClassName": CLASS}}]
    fpga = [{"name": "f", "exactly": {"deviceClassName": "fpga.example.com"}}]
    cases = {
        "no owner": (_admitter(pods), _claim(None)),
        "off": (_admitter(pods, "off"), _claim("llm")),
        "unknown": (_admitter(pods), _claim("mystery")),
        "gone": (_admitter(pods), _claim("deleted")),
        "own class": (_admitter(pods), _claim("llm", own)),
        "fpga": (_admitter(pods), _claim("llm", fpga)),
    }
    answers = {
        case: ask(adm, "claim", creation_review(claim, uid=f"uid-{i}"), state())
        for i, (case, (adm, claim)) in enumerate(cases.items())
    }
    assert {case: ops_of(resp) for case, resp in answers.items()} == {key: [] for key in cases}
    warned = {case for case, resp in answers.items() if resp.get("warnings")}
    assert warned == {"unknown", "gone"}
    assert "requirement unknown" in answers["unknown"]["warnings"][0]
    read = [name for _, name in pods.reads]
    assert read == ["mystery", "deleted", "llm", "llm"], "no owner or off: nothing is read"


def test_an_extended_resource_claim_of_the_scheduler_is_not_narrowed() -> None:
    """kube-scheduler's claim for a pod's extended resources is owned by the pod too, but is
    made with its devices chosen: it carries no pod-claim-name and is never read for."""
    pods = _Pods(_pod("llm"))
    claim = _claim("llm")
    claim["metadata"]["annotations"] = {"resource.kubernetes.io/extended-resource-claim": "true"}
    resp = ask(_admitter(pods), "claim", creation_review(claim, uid="uid-x"), state())
    assert ops_of(resp) == [] and pods.reads == []
    decided = _admitter(pods).decide("claim", orjson.dumps(creation_review(claim)), state())
    assert decided.reason == "not made for a pod"


def test_a_pod_asking_through_template_claims_is_recorded_without_node_affinity() -> None:
    """Its claims are narrowed when they are made, so its own admission records what it
    needs and adds no node affinity; with dra.mode off it is placed by node affinity, and a
    pod naming a claim made before it keeps node affinity (that claim is not narrowed)."""
    named = _pod("named")
    named["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "made-before"}]
    answers = {
        (mode, which): ask(
            _admitter(_Pods(), mode), "pod", creation_review(pod, uid="uid-p1"), state()
        )
        for mode in ("extended-resource", "off")
        for which, pod in (("templates", _pod("llm")), ("named", named))
    }
    pods = {
        key: applied(creation_review(_pod("llm"), uid="uid-p1"), resp)
        for key, resp in answers.items()
        if key[1] == "templates"
    }
    on = pods[("extended-resource", "templates")]
    assert on["metadata"]["annotations"]["cudasched.io/requirement"].startswith("cuda>=12.8")
    assert "affinity" not in on["spec"] and on["spec"] == _pod("llm")["spec"]
    assert "affinity" in pods[("off", "templates")]["spec"]
    assert any(
        op["path"] == "/spec/affinity" for op in ops_of(answers[("extended-resource", "named")])
    )
