"""One answer about a pod, from all four (issue 26 item 5): on generated pods, what admission
decides (skipped, unreadable, no GPU, outside KServe, the requirement it records, unknown)
is what ``explain``, the audit and driver planning decide, each through the functions it
really calls (``Admitter.decide``, ``cli.explain.explain_snapshot``,
``AuditContext.resolve_pod``/``covered``, ``cluster_demand``). They agree by construction,
because each asks the pod's one view; this test keeps it so.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cudasched.cli.explain import Explained, explain_snapshot
from cudasched.cluster.fleet import Fleet
from cudasched.cluster.snapshot import ClusterSnapshot
from cudasched.explain.decision import NO_GPU_RESOURCE
from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.images import ImageTable
from cudasched.operations.audit.context import AuditContext, Resolved
from cudasched.operations.drivers.demand import cluster_demand
from cudasched.operations.refs import object_ref
from cudasched.settings.config import WebhookConfig
from cudasched.vocab.errors import InputError
from cudasched.vocab.labels import LabelScheme
from cudasched.vocab.requirements import Policy
from cudasched.webhook.admission.admitter import Admitter
from cudasched.webhook.admission.review import Decision, creation_review
from cudasched.webhook.admission.reviewed import declares_requirement
from cudasched.webhook.state.clusterstate import ClusterState
from cudasched.workloads.view import Role, view_pod
from tests.support.admission import isvcs, nodes, runtimes

SKIP = "cudasched.io/skip"
LLM = {
    "apiVersion": "serving.kserve.io/v1alpha1",
    "kind": "LLMInferenceService",
    "metadata": {
        "name": "qwen",
        "namespace": "ml",
        "annotations": {"cudasched.io/cuda-version": "12.4"},
    },
    "spec": {"model": {"uri": "hf://Qwen/Qwen3-0.6B"}},
}
OWNERS = ["triton-resnet", "llm-chat", "llm-big", "sklearn-iris", "qwen", "gone"]
IMAGES = [
    "nvcr.io/nvidia/tritonserver:24.05-py3",
    "vllm/vllm-openai:v0.6.3",
    "nvidia/cuda:12.4.1-runtime-ubuntu22.04",
    "nvidia/cuda:13.0.0-base-ubuntu24.04",
    "python:3.12",
    "registry.example.com/team/llm:7",
]
RESOURCES = [
    None,
    {"limits": {"nvidia.com/gpu": 1}},
    {"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "2"}},
    {"limits": {"nvidia.com/gpu": "0"}},
    {"requests": {"nvidia.com/mig-1g.10gb": 1}},
    {"limits": {"cpu": "1", "memory": "1Gi"}},
    {"limits": {"nvidia.com/gpu": "lots"}},  # unreadable: every reader must say so alike
]


def _labels(role: str, owner: str) -> dict[str, str]:
    isvc = {"serving.kserve.io/inferenceservice": owner}
    return {
        "plain": {"app": "web"},
        "predictor": {**isvc, "component": "predictor", "app": f"isvc.{owner}-predictor"},
        "transformer": {**isvc, "component": "transformer"},
        "kserve-unknown": {**isvc, "component": "router"},  # KServe's, in no known role
        "model-server": {
            "app.kubernetes.io/part-of": "llminferenceservice",
            "app.kubernetes.io/component": "llminferenceservice-workload",
            "app.kubernetes.io/name": owner,
        },
    }[role]


CONTAINERS = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["main", "kserve-container", "worker-container", "sidecar"]),
        "image": st.sampled_from(IMAGES),
    },
    optional={
        "resources": st.sampled_from(RESOURCES),
        "env": st.just([{"name": "NVIDIA_REQUIRE_CUDA", "value": "cuda>=12.2"}]),
    },
)


@st.composite
def generated_pods(draw: st.DrawFn) -> dict[str, Any]:
    """Pods of every role cudasched tells apart, owned by services the cluster has or not,
    with the annotations users write (some unreadable), GPU or CPU containers, init
    containers, resource claims and pull settings."""
    role = draw(
        st.sampled_from(["plain", "predictor", "transformer", "kserve-unknown", "model-server"])
    )
    annotations = draw(
        st.fixed_dictionaries(
            {},
            optional={
                SKIP: st.sampled_from(["true", " Yes ", "1", "false"]),
                "cudasched.io/cuda-version": st.sampled_from(["12.4", "12.8", "13.0", "twelve"]),
                "cudasched.io/min-compute-capability": st.sampled_from(["8.0", "sm_90", "fast"]),
                "cudasched.io/policy": st.sampled_from(["minor-compat", "forward-compat"]),
            },
        )
    )
    spec: dict[str, Any] = {"containers": draw(st.lists(CONTAINERS, min_size=1, max_size=2))}
    optional = {
        "initContainers": st.lists(CONTAINERS, min_size=1, max_size=1),
        "resourceClaims": st.just([{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]),
        "imagePullSecrets": st.just([{"name": "regcred"}]),
        "serviceAccountName": st.just("runner"),
    }
    for key, values in optional.items():
        if draw(st.booleans()):
            spec[key] = draw(values)
    metadata: dict[str, Any] = {
        "name": f"p-{draw(st.integers(0, 9))}",
        "namespace": draw(st.sampled_from(["ml", "team"])),
        "labels": _labels(role, draw(st.sampled_from(OWNERS))),
    }
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


class Cluster(NamedTuple):
    kb: KnowledgeBase
    images: ImageTable
    snapshot: ClusterSnapshot
    fleet: Fleet
    state: ClusterState
    admitter: Admitter
    kserve_only: Admitter  # constrainGpuPodsByImage off: GPU pods outside KServe left alone

    def __repr__(self) -> str:  # (hypothesis prints the fixture with a failing example)
        return "Cluster(the admission tests' fleet)"


@pytest.fixture(scope="module")
def cluster(kb: KnowledgeBase) -> Cluster:
    snapshot = ClusterSnapshot(
        nodes=tuple(nodes()),
        cluster_serving_runtimes=tuple(runtimes()),
        inference_services=tuple(isvcs()),
        llm_inference_services=(LLM,),
    )
    images = ImageTable.builtin(kb)
    off = WebhookConfig.from_mapping({"constrainGpuPodsByImage": False})
    return Cluster(
        kb,
        images,
        snapshot,
        Fleet.from_snapshot(snapshot, kb),
        ClusterState.from_snapshot(snapshot, kb=kb),
        Admitter(WebhookConfig(), kb, images),
        Admitter(off, kb, images),
    )


def _decide(admitter: Admitter, pod: dict[str, Any], state: ClusterState) -> Decision:
    body = orjson.dumps(creation_review(pod, uid="00000000-0000-4000-8000-000000000002"))
    return admitter.decide("pod", body, state)  # type: ignore[arg-type]


def _explained(pod: dict[str, Any], c: Cluster) -> Explained | InputError:
    try:
        [answer] = explain_snapshot([pod], c.fleet, Policy.STRICT, LabelScheme.AUTO, c.images)
    except InputError as exc:
        return exc
    return answer


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(pod=generated_pods())
def test_admission_explain_audit_and_planning_give_one_answer(
    cluster: Cluster, pod: dict[str, Any]
) -> None:
    c = cluster
    decision = _decide(c.admitter, pod, c.state)
    event(decision.reason.partition(":")[0])
    explained = _explained(pod, c)
    with_pod = dataclasses.replace(c.snapshot, pods=(pod,))
    audit = AuditContext(with_pod, c.fleet, c.images, Policy.STRICT)
    resolved: Resolved = audit.resolve_pod(pod)
    demand = cluster_demand(with_pod, c.fleet, c.images, Policy.STRICT)
    ref = object_ref(pod)
    planned = any(ref in group.workloads for group in demand.groups)
    unplanned = dict(demand.unreadable).get(ref)

    # Skipped: admission reads nothing further, and nobody else refuses or plans the pod.
    skipped = decision.reason == f"skipped: annotation {SKIP}"
    assert resolved.skipped is skipped
    if skipped:
        assert not planned and unplanned is None and resolved.error is None
        if isinstance(explained, InputError):
            # explain still shows where the pod may land, which needs its GPU requests: a pod
            # it cannot read is refused with the view's error, whatever the switch says.
            assert str(explained) == str(view_pod(pod).error)
            return
        assert explained.explanation.skipped and explained.explanation.requirement is None
        return
    assert isinstance(explained, InputError) or not explained.explanation.skipped

    # Unreadable: the same error, word for word, from every reader.
    if decision.reason.startswith("unreadable: "):
        said = decision.reason.removeprefix("unreadable: ")
        assert isinstance(explained, InputError) and str(explained) == said
        assert resolved.error == said and not planned
        # (planning leaves a listed service's pod to its service, before reading it)
        assert unplanned == (None if audit.covered(pod) else said)
        return
    assert not isinstance(explained, InputError), explained
    assert resolved.error is None and unplanned is None

    # GPU use: admission's gate is the audit's answer, and explain's resource check agrees.
    exp = explained.explanation
    cpu_node = next(n for n in exp.nodes if n.node == "cpu-1")
    asks_gpu_resource = any(r.code == NO_GPU_RESOURCE for r in cpu_node.reasons)
    declared = declares_requirement(pod)
    view = view_pod(pod)
    if decision.reason == "no GPU and no declared requirement":
        assert not resolved.gpu and not asks_gpu_resource
    elif not (resolved.gpu or declared or view.role is Role.MODEL_SERVER):
        raise AssertionError(f"admission let a pod the audit calls CPU-only pass: {decision}")
    if asks_gpu_resource:
        assert resolved.gpu

    # KServe's or not: only the admitter that leaves other GPU pods alone asks, and it asks
    # the pod's view, whose role every other reader asks too.
    outside = _decide(c.kserve_only, pod, c.state).reason
    if outside == "GPU pod outside KServe (constrainGpuPodsByImage off)":
        event("outside KServe")
        assert not declared and not view.is_kserve and not audit.covered(pod)
    elif decision.reason != "no GPU and no declared requirement" and not declared:
        assert view.is_kserve

    # The requirement: the record admission writes is what the others enforce or plan; a GPU
    # pod of unknown CUDA is recorded as 'unknown (why)', the audit's unknown record, and
    # enforces nothing.
    record = decision.requirement
    req = resolved.req
    if record.startswith("unknown ("):
        assert resolved.unknown is not None and record == resolved.unknown.record()
        record = ""
    assert (req.record(audit.policy_for(req)) if not req.is_empty else "") == record
    assert (exp.requirement.record(exp.policy) if exp.requirement is not None else "") == record
    assert (explained.runtime.describe() if explained.runtime else None) == (
        resolved.runtime.describe() if resolved.runtime else None
    )
    assert planned == (bool(record) and not audit.covered(pod))
    # Unknown: the same reason code.
    unknowns = {
        decision.unknown[1] if decision.unknown is not None else None,
        resolved.unknown.reason if resolved.unknown is not None else None,
        exp.unknown.reason if exp.unknown is not None else None,
    }
    assert len(unknowns) == 1, unknowns
