"""One answer to "can any node run it?" (issue 27 item 3): the webhook's "no node can run it"
(its warning, or its denial under ``onNoFit: deny``), ``explain``'s eligible count and the
audit's ``no-compatible-node`` finding agree on every pod, because all three ask
:mod:`cudasched.explain.fit`.

A pod whose own nodeSelector excluded every node that could run it was admitted without a
warning, and the audit did not report it, while ``explain`` said 0 of 21. The pods here are
generated: a CUDA requirement the sample cluster's drivers run on some nodes or none, GPU
resources offered or not, and a nodeSelector or required affinity that keeps, narrows or
excludes the nodes that can run it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cudasched.cluster.fleet import Fleet
from cudasched.cluster.snapshot import ClusterSnapshot, bundled_snapshot
from cudasched.explain.eligibility import explain, explain_many
from cudasched.explain.fit import Selection, runs_anywhere, selection_of
from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.images import ImageTable
from cudasched.operations.audit import audit
from cudasched.settings.config import WebhookConfig
from cudasched.vocab.nodeaffinity import RequiredNodeAffinity
from cudasched.vocab.requirements import Policy
from cudasched.webhook.admission.admitter import Admitter
from cudasched.webhook.state.clusterstate import ClusterState
from cudasched.workloads.resolution import workload_need
from tests.support import builders

NS = "fit"
PRODUCT = "nvidia.com/gpu.product"
ZONE = "topology.kubernetes.io/zone"


@pytest.fixture(scope="module")
def sample() -> ClusterSnapshot:
    return bundled_snapshot()


@pytest.fixture(scope="module")
def fleet(sample: ClusterSnapshot, kb: KnowledgeBase) -> Fleet:
    return Fleet(sample.nodes, kb)


@pytest.fixture(scope="module")
def state(sample: ClusterSnapshot, kb: KnowledgeBase) -> ClusterState:
    return ClusterState.from_objects(sample.nodes, [], [], [], kb=kb)


@pytest.fixture(scope="module")
def admitter(kb: KnowledgeBase) -> Admitter:
    # Under deny, "no node can run it" is the answer's reason, whatever its words.
    return Admitter.from_config(WebhookConfig.from_mapping({"onNoFit": "deny"}), kb)


def _values(sample: ClusterSnapshot, key: str) -> list[str]:
    return sorted(
        {str(n["metadata"]["labels"][key]) for n in sample.nodes if key in n["metadata"]["labels"]}
    )


def _pod(cuda: str, resource: str, selector: dict[str, str], affinity: Any) -> dict[str, Any]:
    pod = builders.pod(
        "gen",
        NS,
        image="registry.example.com/in-house:1",
        annotations={"cudasched.io/cuda-version": cuda},
    )
    container = pod["spec"]["containers"][0]
    container["resources"] = {"limits": {resource: "1"}} if resource else {}
    if selector:
        pod["spec"]["nodeSelector"] = selector
    if affinity is not None:
        pod["spec"]["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [affinity]}
            }
        }
    return pod


def _pods(sample: ClusterSnapshot) -> st.SearchStrategy[dict[str, Any]]:
    products = [*_values(sample, PRODUCT), "NVIDIA-Nonexistent"]
    zones = [*_values(sample, ZONE), "nowhere-1a"]
    selectors = st.one_of(
        st.just({}),
        st.sampled_from(products).map(lambda p: {PRODUCT: p}),
        st.sampled_from(zones).map(lambda z: {ZONE: z}),
    )
    affinities = st.one_of(
        st.none(),
        st.lists(st.sampled_from(products), min_size=1, max_size=3).map(
            lambda v: {"matchExpressions": [{"key": PRODUCT, "operator": "In", "values": v}]}
        ),
        st.lists(st.sampled_from(products), min_size=1, max_size=3).map(
            lambda v: {"matchExpressions": [{"key": PRODUCT, "operator": "NotIn", "values": v}]}
        ),
    )
    return st.builds(
        _pod,
        cuda=st.sampled_from(["11.8", "12.2", "12.8", "13.0", "13.2"]),
        resource=st.sampled_from(["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", ""]),
        selector=selectors,
        affinity=affinities,
    )


def _webhook_says_no_node(admitter: Admitter, pod: dict[str, Any], state: ClusterState) -> bool:
    body = orjson.dumps(builders.review(pod, uid="fit-1", namespace=NS))
    decision = admitter.decide("pod", body, state)
    assert decision.requirement.startswith("cuda>=")  # judged: the agreement's domain
    return decision.reason == "no node fits"


def _audit_says_no_node(
    sample: ClusterSnapshot, fleet: Fleet, pod: dict[str, Any], images: ImageTable
) -> bool:
    snapshot = ClusterSnapshot(nodes=sample.nodes, pods=(pod,))
    report = audit(snapshot, fleet, images, Policy.STRICT)
    return any(
        f.code == "no-compatible-node" and f.object == f"Pod/{NS}/gen" for f in report.findings
    )


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_webhook_explain_and_audit_agree_on_where_a_pod_can_run(
    data: st.DataObject,
    sample: ClusterSnapshot,
    fleet: Fleet,
    state: ClusterState,
    admitter: Admitter,
    kb: KnowledgeBase,
) -> None:
    pod = data.draw(_pods(sample))
    images = ImageTable.builtin(kb)
    explained = explain(pod, fleet, Policy.STRICT, kb).eligible_count == 0
    assert _webhook_says_no_node(admitter, pod, state) is explained, pod["spec"]
    assert _audit_says_no_node(sample, fleet, pod, images) is explained, pod["spec"]


def test_the_issue_27_pod_is_warned_and_reported(
    sample: ClusterSnapshot, fleet: Fleet, state: ClusterState, kb: KnowledgeBase
) -> None:
    """CUDA 12.8 runs on the sample's newer drivers; the pod's own nodeSelector asks for the
    K80s, whose driver cannot run it: explain says no node, and now so do the other two."""
    pod = _pod("12.8", "nvidia.com/gpu", {PRODUCT: "Tesla-K80"}, None)
    assert explain(pod, fleet, Policy.STRICT, kb).eligible_count == 0
    warn = Admitter.from_config(WebhookConfig(), kb)
    decision = warn.decide("pod", orjson.dumps(builders.review(pod, uid="u", namespace=NS)), state)
    assert decision.warnings == (
        "cudasched: the pod's own nodeSelector or node affinity excludes every node that can "
        "run CUDA 12.8",
    )
    snapshot = ClusterSnapshot(nodes=sample.nodes, pods=(pod,))
    (finding,) = [
        f
        for f in audit(snapshot, fleet, ImageTable.builtin(kb), Policy.STRICT).findings
        if f.object == f"Pod/{NS}/gen"
    ]
    assert finding.code == "no-compatible-node"
    assert "its own nodeSelector or node affinity" in finding.message
    # Without the nodeSelector the same pod runs on the newer nodes: no word from anyone.
    free = _pod("12.8", "nvidia.com/gpu", {}, None)
    assert (
        warn.decide(
            "pod", orjson.dumps(builders.review(free, uid="v", namespace=NS)), state
        ).warnings
        == ()
    )


def test_the_rule_is_the_affinity_and_the_resources(fleet: Fleet) -> None:
    """A node admits a pod when its required affinity as admitted matches and the node offers
    the GPU resources asked for; a node whose resources are not known is not held to them."""
    spec = {"nodeSelector": {PRODUCT: "Tesla-T4"}}
    t4 = selection_of(spec, None, frozenset({"nvidia.com/gpu"}))
    assert runs_anywhere(fleet, t4)
    mig = selection_of(spec, None, frozenset({"nvidia.com/mig-1g.10gb"}))
    assert not runs_anywhere(fleet, mig)
    node = next(n for n in fleet.nodes if n.labels.get(PRODUCT) == "Tesla-T4")
    assert mig.admits(node, None)  # resources not known
    assert not mig.admits(node, frozenset({"nvidia.com/gpu"}))
    nowhere = Selection(
        RequiredNodeAffinity.from_pod_spec({"nodeSelector": {PRODUCT: "x"}}), frozenset()
    )
    assert not nowhere.admits(node, None)


def test_a_service_whose_runtime_does_not_exist_counts_on_no_node(
    sample: ClusterSnapshot, kb: KnowledgeBase
) -> None:
    """KServe creates no pods for an InferenceService whose runtime does not exist: explain
    counted it on every node (60/60, nodes without GPUs too), the webhook said "no container
    names an image"; now explain counts it nowhere and the audit reports it, with the words
    the webhook warns with (issue 27 item 1)."""
    service = builders.isvc("detector", "team-vision", model_format="triton", runtime="gone")
    snapshot = dataclasses.replace(sample, inference_services=(service,), pods=())
    fleet = Fleet.from_snapshot(snapshot, kb)
    images = ImageTable.builtin(kb)
    target, need = workload_need(service, fleet, images)
    assert need.no_pods == (
        "no ServingRuntime or ClusterServingRuntime gone (named by spec.predictor.model.runtime) "
        "exists"
    )
    (exp,) = explain_many([target], fleet, Policy.STRICT, kb, no_pods=[need.no_pods])
    assert exp.eligible_count == 0 and exp.total == len(sample.nodes)
    assert {r.code for n in exp.nodes for r in n.reasons if r.code == "no-pods"} == {"no-pods"}
    assert exp.summary()["noPods"] == need.no_pods
    (finding,) = [
        f
        for f in audit(snapshot, fleet, images, Policy.STRICT).findings
        if f.object == "InferenceService/team-vision/detector"
    ]
    assert finding.code == "no-compatible-node"
    assert need.no_pods in finding.message
