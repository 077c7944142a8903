"""explain: eligibility is Kubernetes' own matching of the merged spec; reasons and scores."""

from __future__ import annotations

import copy
import itertools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.cluster.fleet import Fleet
from cudasched.cluster.snapshot import ClusterSnapshot, bundled_snapshot, load_nodes, load_snapshot
from cudasched.compat.engine import check
from cudasched.compat.verdict import VerdictStatus
from cudasched.explain.decision import NO_GPU_RESOURCE, REQUIREMENT_LABELS_MISSING
from cudasched.explain.eligibility import explain, explain_many, requirement_from_annotations
from cudasched.explain.selectors import AFFINITY_MISMATCH, NODE_SELECTOR_MISMATCH
from cudasched.knowledge import KnowledgeBase
from cudasched.placement.compile import compile_requirement
from cudasched.placement.merge import merge_required
from cudasched.vocab.errors import InputError
from cudasched.vocab.labels import LabelScheme
from cudasched.vocab.nodeaffinity import Node, PreferredTerms, RequiredNodeAffinity
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.vocab.versions import ComputeCapability, CudaVersion
from cudasched.workloads.pods import pod_spec_of, workload_id
from tests.support import builders
from tests.support.builders import expr

DATA = Path(__file__).parents[1] / "data"

H100_R570 = "ip-10-42-22-41.us-west-2.compute.internal"
H200 = "ip-10-42-23-17.us-west-2.compute.internal"
B200_R570 = "ip-10-42-31-8.us-west-2.compute.internal"
B200_R580 = "ip-10-42-32-66.us-west-2.compute.internal"
CPU = "ip-10-42-1-12.us-west-2.compute.internal"
L4_NEW = "ip-10-42-13-64.us-west-2.compute.internal"


@pytest.fixture(scope="module")
def sample() -> ClusterSnapshot:
    return bundled_snapshot()


@pytest.fixture(scope="module")
def fleet(sample: ClusterSnapshot, kb: KnowledgeBase) -> Fleet:
    return Fleet(sample.nodes, kb)


def pod(spec: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "ns"}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


GPU_CONTAINER = {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}


def required(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": list(t)} for t in terms]
            }
        }
    }


def eligible_names(exp: Any) -> set[str]:
    return {n.node for n in exp.nodes if n.eligible}


# --------------------------------------------------------------------------- pod specs


def test_pod_spec_of_every_workload_kind() -> None:
    spec = {"containers": [GPU_CONTAINER]}
    template = {"metadata": {"labels": {"a": "b"}}, "spec": spec}
    for api, kind in [
        ("apps/v1", "Deployment"),
        ("apps/v1", "StatefulSet"),
        ("apps/v1", "DaemonSet"),
        ("apps/v1", "ReplicaSet"),
        ("batch/v1", "Job"),
        ("v1", "ReplicationController"),
        ("example.com/v1", "Notebook"),  # any CRD with a pod template
    ]:
        obj = {
            "apiVersion": api,
            "kind": kind,
            "metadata": {"name": "x"},
            "spec": {"template": template},
        }
        assert pod_spec_of(obj) == spec, kind
    cron = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "c"},
        "spec": {"jobTemplate": {"spec": {"template": template}}},
    }
    assert pod_spec_of(cron) == spec
    assert pod_spec_of({"apiVersion": "v1", "kind": "PodTemplate", "template": template}) == spec
    assert pod_spec_of(pod(spec)) == spec
    holder = {"apiVersion": "example.com/v1", "kind": "Runner", "spec": {"containers": []}}
    assert pod_spec_of(holder) == {"containers": []}


def test_pod_spec_of_rejects_objects_without_one() -> None:
    with pytest.raises(InputError, match=r"ns/ConfigMap/cm: no pod spec found"):
        pod_spec_of(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns"}}
        )
    isvc = bundled_snapshot().inference_services[0]
    with pytest.raises(InputError, match="no pod spec found"):
        pod_spec_of(isvc)
    with pytest.raises(InputError, match="pod template has no spec"):
        pod_spec_of({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"template": {}}})
    with pytest.raises(InputError, match="expected a Kubernetes object"):
        pod_spec_of(["not", "an", "object"])  # type: ignore[arg-type]
    with pytest.raises(InputError, match="expected a mapping"):
        pod_spec_of({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"template": "x"}})


def test_workload_id() -> None:
    assert workload_id(pod({})) == "ns/Pod/p"
    assert workload_id({"kind": "Job", "metadata": {"name": "j"}}) == "default/Job/j"


# --------------------------------------------------------------------------- annotations


def test_requirement_from_annotations_object_and_template() -> None:
    deploy = load_snapshot(DATA / "deployment-vllm.yaml").workloads[0]
    req = requirement_from_annotations(deploy)
    # The source names every annotation that stated the requirement (the webhook's wording).
    assert req == Requirement(
        cuda=CudaVersion(12, 8),
        min_compute=ComputeCapability(8, 0),
        source="annotation cudasched.io/cuda-version, cudasched.io/min-compute-capability",
    )
    job = load_snapshot(DATA / "job-cuda-compat.json").workloads[0]
    req = requirement_from_annotations(job)
    assert req is not None and req.cuda == CudaVersion(12, 4)
    assert req.policy is Policy.MINOR_COMPAT
    # The template's annotation (what the pods get) wins over the controller's own.
    job["spec"]["template"]["metadata"]["annotations"] = {"cudasched.io/cuda-version": "12.8"}
    req = requirement_from_annotations(job)
    assert req is not None and req.cuda == CudaVersion(12, 8)
    assert req.policy is Policy.MINOR_COMPAT


def test_requirement_from_annotations_values() -> None:
    assert requirement_from_annotations(pod({})) is None
    assert requirement_from_annotations(pod({}, {"cudasched.io/policy": "strict"})) is None
    req = requirement_from_annotations(
        pod(
            {},
            {
                "cudasched.io/min-compute-capability": " sm_90 ",
                "cudasched.io/ships-cuda-compat": "True",
            },
        )
    )
    assert req == Requirement(
        min_compute=ComputeCapability(9, 0),
        ships_cuda_compat=True,
        source="annotation cudasched.io/min-compute-capability",
    )
    for text in ("false", "FALSE", " False "):
        req = requirement_from_annotations(
            pod({}, {"cudasched.io/cuda-version": "12.4", "cudasched.io/ships-cuda-compat": text})
        )
        assert req is not None and req.ships_cuda_compat is False


@pytest.mark.parametrize(
    ("given_annotations", "message"),
    [
        (
            {"cudasched.io/cuda-version": "twelve"},
            "invalid cudasched.io/cuda-version on ns/Pod/p: invalid CUDA version 'twelve'",
        ),
        # Present but empty says something, and nothing valid: an error, as in the webhook.
        ({"cudasched.io/cuda-version": " "}, "invalid cudasched.io/cuda-version on ns/Pod/p"),
        ({"cudasched.io/cuda-version": "12.4", "cudasched.io/policy": "lax"}, "invalid policy"),
        ({"cudasched.io/min-compute-capability": "fast"}, "invalid compute capability"),
        ({"cudasched.io/cuda-version": True}, "invalid cudasched.io/cuda-version True"),
        ({"cudasched.io/cuda-version": ["12.4"]}, "expected a string"),
    ],
)
def test_requirement_from_annotations_rejects(
    given_annotations: dict[str, Any], message: str
) -> None:
    with pytest.raises(InputError) as info:
        requirement_from_annotations(pod({}, given_annotations))
    assert message in str(info.value)


@pytest.mark.parametrize("value", ["yes", "no", "1", "0", "on", "maybe", "ture", ""])
def test_ships_cuda_compat_is_true_or_false_only(value: str) -> None:
    """One rule with the webhook: ``true``/``false`` in any case; anything else is an error
    naming the annotation, never a silent ``false``."""
    annotations = {"cudasched.io/cuda-version": "12.4", "cudasched.io/ships-cuda-compat": value}
    with pytest.raises(InputError, match=r"cudasched\.io/ships-cuda-compat .* expected true or"):
        requirement_from_annotations(pod({}, annotations))


def test_unquoted_yaml_values_are_read_by_their_text() -> None:
    """The API server only stores strings, but a workload file parsed from YAML written without
    quotes carries numbers and booleans: numbers are read as their decimal text, a boolean
    only where a boolean is meant."""
    req = requirement_from_annotations(
        pod(
            {},
            {
                "cudasched.io/cuda-version": 12.4,  # type: ignore[dict-item]
                "cudasched.io/min-compute-capability": 8.0,  # type: ignore[dict-item]
                "cudasched.io/ships-cuda-compat": True,  # type: ignore[dict-item]
            },
        )
    )
    assert req == Requirement(
        cuda=CudaVersion(12, 4),
        min_compute=ComputeCapability(8, 0),
        ships_cuda_compat=True,
        source="annotation cudasched.io/cuda-version, cudasched.io/min-compute-capability",
    )
    req = requirement_from_annotations(pod({}, {"cudasched.io/cuda-version": 12040}))  # type: ignore[dict-item]
    assert req is not None and req.cuda == CudaVersion(12, 4)


# --------------------------------------------------------------------------- eligibility


def _direct(
    spec: dict[str, Any],
    req: Requirement | None,
    fleet: Fleet,
    kb: KnowledgeBase,
    scheme: LabelScheme,
) -> list[bool]:
    """Eligibility computed straight from the pieces: compile, merge, Kubernetes matching."""
    merged = spec
    if req is not None:
        keys = fleet.gfd_keys
        merged = merge_required(spec, compile_requirement(req, Policy.STRICT, scheme, kb, keys))
    rna = RequiredNodeAffinity.from_pod_spec(merged)
    return [rna.match(n) for n in fleet.nodes]


def test_sample_smoke_pod(sample: ClusterSnapshot, fleet: Fleet, kb: KnowledgeBase) -> None:
    smoke = next(p for p in sample.pods if p["metadata"]["name"] == "cuda-smoke-test")
    exp = explain(smoke, fleet, Policy.STRICT, kb)
    assert eligible_names(exp) == {H100_R570, H200, B200_R570, B200_R580}
    assert exp.scheme is LabelScheme.GFD  # one L4 lacks our labels
    assert exp.gfd_keys is not None and exp.gfd_keys.value == "deprecated"  # old GFD pool
    assert [n.eligible for n in exp.nodes] == _direct(
        pod_spec_of(smoke), exp.requirement, fleet, kb, LabelScheme.GFD
    )
    summary = exp.summary()
    assert summary["eligible"] == 4 and summary["total"] == 21
    assert summary["requirement"] == "cuda>=12.8"
    assert summary["requirementSource"] == "annotation cudasched.io/cuda-version"
    by_name = {n.node: n for n in exp.nodes}
    assert [r.code for r in by_name[H200].reasons] == ["native"]
    assert [r.code for r in by_name["dc1-t4-01"].reasons] == ["driver-too-old"]
    assert [r.code for r in by_name["dc1-k80-01"].reasons] == ["arch-dropped", "driver-too-old"]
    assert by_name[CPU].reasons[0].code == "no-gpu-facts"
    assert "no-gpu-resource" in [r.code for r in by_name[CPU].reasons]
    assert CPU in by_name[CPU].reasons[0].message


def test_user_nodeselector_and_affinity_are_anded(fleet: Fleet, kb: KnowledgeBase) -> None:
    spec = {
        "containers": [GPU_CONTAINER],
        "nodeSelector": {"topology.kubernetes.io/zone": "us-west-2c"},
        "affinity": required(
            [expr("nvidia.com/gpu.family", "In", "hopper")],
            [expr("nvidia.com/gpu.product", "In", "NVIDIA-B200")],
        ),
    }
    workload = pod(spec, {"cudasched.io/cuda-version": "12.8"})
    exp = explain(workload, fleet, "strict", kb)
    # Zone us-west-2c holds the three H100s and the H200; CUDA 12.8 leaves the R570 ones.
    assert eligible_names(exp) == {H100_R570, H200}
    assert [n.eligible for n in exp.nodes] == _direct(
        spec, exp.requirement, fleet, kb, LabelScheme.GFD
    )
    by_name = {n.node: n for n in exp.nodes}
    b200 = [r.code for r in by_name[B200_R580].reasons]
    assert b200 == ["native", NODE_SELECTOR_MISMATCH]  # the product term matches, zone does not
    t4 = [r.code for r in by_name["dc1-t4-01"].reasons]
    assert t4 == ["driver-too-old", NODE_SELECTOR_MISMATCH, AFFINITY_MISMATCH]
    message = next(
        r.message for r in by_name["dc1-t4-01"].reasons if r.code == NODE_SELECTOR_MISMATCH
    )
    assert message == (
        "the pod's nodeSelector wants topology.kubernetes.io/zone=us-west-2c (node: absent)"
    )


def test_without_requirement_eligibility_is_the_spec_as_given(
    fleet: Fleet, kb: KnowledgeBase
) -> None:
    spec = {
        "containers": [{"name": "c", "image": "x"}],
        "affinity": required([expr("nvidia.com/gpu.memory", "Gt", "20000")]),
    }
    exp = explain(pod(spec), fleet, "strict", kb)
    assert exp.requirement is None and exp.terms == ()
    assert [n.eligible for n in exp.nodes] == _direct(spec, None, fleet, kb, LabelScheme.GFD)
    assert all(
        [r.code for r in n.reasons] == ([] if n.eligible else [AFFINITY_MISMATCH])
        for n in exp.nodes
    )


def test_recorded_deployment_on_sample_nodes(
    sample: ClusterSnapshot, fleet: Fleet, kb: KnowledgeBase
) -> None:
    deploy = load_snapshot(DATA / "deployment-vllm.yaml").workloads[0]
    exp = explain(deploy, fleet, "strict", kb)
    assert exp.workload == "serving/Deployment/vllm-llama"
    assert eligible_names(exp) == {H100_R570, H200, B200_R570, B200_R580}
    scores = {n.node: n.score for n in exp.nodes}
    assert scores[H200] == 30 and scores[H100_R570] == 0
    assert exp.summary()["requirement"] == "cuda>=12.8, cc>=8.0"


def test_old_gfd_nodes_file_strict(kb: KnowledgeBase) -> None:
    nodes = load_nodes(DATA / "nodes-gfd-old.yaml")
    job = load_snapshot(DATA / "job-cuda-compat.json").workloads[0]
    exp = explain(job, nodes, "strict", kb, requirement=Requirement(cuda=CudaVersion(12, 2)))
    assert exp.gfd_keys is not None and exp.gfd_keys.value == "deprecated"
    assert eligible_names(exp) == {"gpu-a100-02"}
    strict = explain(job, nodes, "strict", kb, requirement=Requirement(cuda=CudaVersion(12, 4)))
    assert eligible_names(strict) == set()
    assert [r.code for r in strict.nodes[1].reasons] == ["driver-too-old"]


def test_old_gfd_nodes_file_minor_compat(kb: KnowledgeBase) -> None:
    nodes = load_nodes(DATA / "nodes-gfd-old.yaml")
    job = load_snapshot(DATA / "job-cuda-compat.json").workloads[0]
    exp = explain(job, nodes, "strict", kb)
    # The job asks for minor-compat: the A100 on 535 (CUDA 12.2) runs a 12.4 build; the T4 on
    # R470 is below the CUDA 12 floor.
    assert exp.policy is Policy.MINOR_COMPAT
    assert eligible_names(exp) == {"gpu-a100-02"}
    assert [r.code for r in exp.nodes[1].reasons] == ["minor-version-compat"]


def test_scheme_without_labels_on_some_nodes(fleet: Fleet, kb: KnowledgeBase) -> None:
    workload = pod({"containers": [GPU_CONTAINER]}, {"cudasched.io/cuda-version": "12.4"})
    exp = explain(workload, fleet, "strict", kb, LabelScheme.CUDASCHED)
    by_name = {n.node: n for n in exp.nodes}
    # The newest L4 runs CUDA 12.4 but has no cudasched.io labels: the compiled selector
    # cannot see it, and explain says so.
    assert not by_name[L4_NEW].eligible
    assert [r.code for r in by_name[L4_NEW].reasons] == ["native", REQUIREMENT_LABELS_MISSING]
    assert by_name["ip-10-42-13-5.us-west-2.compute.internal"].eligible
    assert exp.summary()["scheme"] == "cudasched"
    assert exp.summary()["gfdKeys"] is None


def test_preferred_score_and_error(fleet: Fleet, kb: KnowledgeBase) -> None:
    spec = {
        "containers": [GPU_CONTAINER],
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 7,
                        "preference": {
                            "matchExpressions": [expr("nvidia.com/gpu.family", "In", "hopper")]
                        },
                    },
                    {
                        "weight": 5,
                        "preference": {
                            "matchExpressions": [expr("nvidia.com/gpu.memory", "Gt", "100000")]
                        },
                    },
                ]
            }
        },
    }
    exp = explain(pod(spec), fleet, "strict", kb)
    scores = {n.node: n.score for n in exp.nodes}
    assert scores[H200] == 12 and scores[H100_R570] == 7 and scores[B200_R580] == 5
    assert scores[CPU] == 0
    # The Alauda recipe for CUDA X.0 writes `Gt "-1"`: the scheduler fails scoring for the pod.
    broken = copy.deepcopy(spec)
    prefs = broken["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    prefs[1]["preference"]["matchExpressions"] = [expr("nvidia.com/cuda.runtime.minor", "Gt", "-1")]
    exp = explain(pod(broken), fleet, "strict", kb)
    assert {n.score for n in exp.nodes} == {"error"}
    assert exp.score_error is not None and "-1" in exp.score_error
    assert exp.summary()["scoreError"] == exp.score_error
    # Required affinity is unaffected; the CPU node offers no GPU for the pod's request.
    assert len(exp.eligible) == 20


def test_match_fields_are_decided_per_node(fleet: Fleet, kb: KnowledgeBase) -> None:
    spec = {
        "containers": [GPU_CONTAINER],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["dc1-t4-02"]}
                            ]
                        }
                    ]
                }
            }
        },
    }
    exp = explain(pod(spec, {"cudasched.io/cuda-version": "12.4"}), fleet, "strict", kb)
    # dc1-t4-01 and dc1-t4-02 carry the same GPU facts: only the name tells them apart.
    assert eligible_names(exp) == {"dc1-t4-02"}


def test_unsatisfiable_requirement(fleet: Fleet, kb: KnowledgeBase) -> None:
    workload = pod({"containers": [GPU_CONTAINER]}, {"cudasched.io/cuda-version": "19.0"})
    exp = explain(workload, fleet, "strict", kb)
    assert exp.eligible == ()
    assert exp.requirement_error is not None
    assert exp.summary()["requirementError"] == exp.requirement_error
    assert all(n.reasons for n in exp.nodes)


def test_skip_annotation_and_explicit_requirement(fleet: Fleet, kb: KnowledgeBase) -> None:
    annotations = {"cudasched.io/cuda-version": "13.0", "cudasched.io/skip": "true"}
    exp = explain(pod({"containers": [GPU_CONTAINER]}, annotations), fleet, "strict", kb)
    # Skipped: no CUDA constraint; only the CPU node is out (it offers no nvidia.com/gpu).
    assert exp.skipped and exp.requirement is None and len(exp.eligible) == 20
    plain = pod({"containers": [GPU_CONTAINER]})
    exp = explain(plain, fleet, "strict", kb, requirement=Requirement(cuda=CudaVersion(13, 0)))
    assert eligible_names(exp) == {B200_R580}
    exp = explain(plain, fleet, "strict", kb, requirement=Requirement())
    assert exp.requirement is None and len(exp.eligible) == 20  # the CPU node offers no GPU


def test_a_skipped_workload_is_explained_whatever_its_annotations_say(
    fleet: Fleet, kb: KnowledgeBase
) -> None:
    """Admission leaves a skipped pod alone without reading its requirement, so a value it
    could not read is no error there; ``explain`` used to read it first and refuse the pod."""
    annotations = {"cudasched.io/cuda-version": "twelve", "cudasched.io/skip": "true"}
    exp = explain(pod({"containers": [GPU_CONTAINER]}, annotations), fleet, "strict", kb)
    assert exp.skipped and exp.requirement is None and len(exp.eligible) == 20
    del annotations["cudasched.io/skip"]
    with pytest.raises(InputError, match="twelve"):
        explain(pod({"containers": [GPU_CONTAINER]}, annotations), fleet, "strict", kb)


def test_users_own_cuda_expressions_are_kept(fleet: Fleet, kb: KnowledgeBase) -> None:
    # The user's own CUDA rule (major In [12]) stays and is ANDed with the computed
    # requirement (issue 12 item 6): the CUDA 13 node is refused by the pod's own affinity.
    spec = {
        "containers": [GPU_CONTAINER],
        "affinity": required([expr("nvidia.com/cuda.runtime.major", "In", "12")]),
    }
    exp = explain(pod(spec, {"cudasched.io/cuda-version": "12.8"}), fleet, "strict", kb)
    assert eligible_names(exp) == {H100_R570, H200, B200_R570}
    refused = [n for n in exp.nodes if n.node == B200_R580]
    assert refused and any(r.code == AFFINITY_MISMATCH for r in refused[0].reasons)


def test_reasons_name_each_node(kb: KnowledgeBase) -> None:
    cpu = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"cpu-{i}", "labels": {"kubernetes.io/hostname": f"cpu-{i}"}},
        }
        for i in range(3)
    ]
    fleet = Fleet(cpu, kb)
    assert fleet.group_count == 1
    exp = explain(
        pod({"containers": [GPU_CONTAINER]}, {"cudasched.io/cuda-version": "12.4"}),
        fleet,
        "strict",
        kb,
    )
    for i, node in enumerate(exp.nodes):
        assert f"'cpu-{i}'" in node.reasons[0].message


def test_explain_many_and_errors(sample: ClusterSnapshot, fleet: Fleet, kb: KnowledgeBase) -> None:
    results = explain_many(sample.pods, fleet, "strict", kb)
    assert [r.workload for r in results] == [workload_id(p) for p in sample.pods]
    with pytest.raises(InputError, match="expected one"):
        explain_many(sample.pods, fleet, "strict", kb, requirements=[None])
    with pytest.raises(InputError, match="invalid policy"):
        explain(sample.pods[0], fleet, "lenient", kb)
    with pytest.raises(InputError, match="invalid label scheme"):
        explain(sample.pods[0], fleet, "strict", kb, "nfd")
    with pytest.raises(InputError, match=r"no metadata\.name"):
        Fleet([{"apiVersion": "v1", "kind": "Node", "metadata": {}}], kb)


def _sharing_workloads() -> list[dict[str, Any]]:
    """Workloads that share selectors, requirements and terms in every combination
    ``explain_many`` caches: equal requirements worded differently (same terms), the same
    selectors under different requirements, an unsatisfiable requirement, a skipped workload,
    matchFields, a broken preferred term and a broken required term."""
    zone = {"affinity": required([expr("pool", "In", "a", "b")])}
    owned = {"affinity": required([expr("nvidia.com/cuda.runtime.major", "In", "12")])}
    by_name = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["dc1-t4-02"]}
                            ]
                        }
                    ]
                }
            }
        }
    }
    broken_preferred = {
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 3, "preference": {"matchExpressions": [expr("x", "Gt", "y")]}}
                ]
            }
        }
    }
    broken_required = {"affinity": required([expr("pool", "Bogus", "a")], [expr("pool", "In")])}
    shapes: list[dict[str, Any]] = [
        {},
        {"nodeSelector": {"pool": "a"}},
        zone,
        owned,
        by_name,
        broken_preferred,
        broken_required,
    ]
    annotation_sets: list[dict[str, str]] = [
        {},
        {"cudasched.io/cuda-version": "12.4"},
        {"cudasched.io/cuda-version": "12.4.1"},
        {"cudasched.io/cuda-version": "12.4", "cudasched.io/policy": "minor-compat"},
        {"cudasched.io/cuda-version": "12.8", "cudasched.io/min-compute-capability": "8.0"},
        {"cudasched.io/min-compute-capability": "8.0"},
        {"cudasched.io/cuda-version": "19.0"},
        {"cudasched.io/cuda-version": "13.0", "cudasched.io/skip": "true"},
    ]
    out = []
    for i, (shape, declared) in enumerate(itertools.product(shapes, annotation_sets)):
        workload = pod({"containers": [GPU_CONTAINER], **copy.deepcopy(shape)}, declared)
        workload["metadata"]["name"] = f"w{i}"
        out.append(workload)
    return out


def test_explain_many_shares_without_changing_answers(
    sample: ClusterSnapshot, fleet: Fleet, kb: KnowledgeBase
) -> None:
    """One call shares requirement terms, merges and compiled selectors between workloads;
    every answer must still be what explaining that workload alone gives."""
    workloads = _sharing_workloads()
    workloads = workloads + workloads[::-1]  # each shape again, after all the others
    together = explain_many(workloads, fleet, "strict", kb)
    for workload, shared in zip(workloads, together, strict=True):
        alone = explain(workload, fleet, "strict", kb)
        assert shared.to_dict() == alone.to_dict(), shared.workload
        assert shared.requirement == alone.requirement
        assert repr(shared.requirement) == repr(alone.requirement)
        assert shared.terms == alone.terms
    # Equal declared requirements are one object, and so are their terms.
    first, again = together[1], together[len(workloads) - 2]
    assert first.workload == again.workload
    assert first.requirement is again.requirement and first.terms is again.terms


def test_explain_many_reports_a_bad_spec_like_explain(fleet: Fleet, kb: KnowledgeBase) -> None:
    bad = pod({"containers": [GPU_CONTAINER], "affinity": required([{"key": "pool"}])})
    bad["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ][0]["matchExpressions"] = "pool"
    annotated = copy.deepcopy(bad)
    annotated["metadata"]["annotations"] = {"cudasched.io/cuda-version": "12.4"}
    for workload in (bad, annotated):
        with pytest.raises(InputError) as alone:
            explain(workload, fleet, "strict", kb)
        for _ in range(2):
            with pytest.raises(InputError) as shared:
                explain_many([pod({"containers": [GPU_CONTAINER]}), workload], fleet, "strict", kb)
            assert str(shared.value) == str(alone.value)


def test_json_shape(sample: ClusterSnapshot, fleet: Fleet, kb: KnowledgeBase) -> None:
    doc = explain(sample.pods[0], fleet, "strict", kb).to_dict()
    assert set(doc) == {"nodes", "summary"}
    for node in doc["nodes"]:
        assert set(node) == {"node", "eligible", "score", "reasons", "facts", "verdict"}
        assert node["verdict"] == ("yes" if node["eligible"] else "no")
        assert set(node["facts"]) == {"gpu", "driver", "cuda", "computeCapability"}
        assert all(
            {"code", "message"} <= set(r) <= {"code", "message", "fix"} for r in node["reasons"]
        )


# --------------------------------------------------------------------------- property

KEYS = ["pool", "zone", "nvidia.com/gpu.family", "nvidia.com/gpu.memory"]
VALUES = ["a", "b", "hopper", "ampere", "16000", "80000"]


@st.composite
def expressions(draw: st.DrawFn) -> dict[str, Any]:
    key = draw(st.sampled_from(KEYS))
    op = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]))
    if op in ("Exists", "DoesNotExist"):
        return expr(key, op)
    if op in ("Gt", "Lt"):
        return expr(key, op, draw(st.sampled_from(["20000", "50000", "x"])))
    return expr(key, op, *draw(st.lists(st.sampled_from(VALUES), min_size=1, max_size=2)))


@st.composite
def pod_specs(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [GPU_CONTAINER]}
    if draw(st.booleans()):
        spec["nodeSelector"] = draw(
            st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=1)
        )
    terms = draw(st.lists(st.lists(expressions(), min_size=1, max_size=2), max_size=2))
    prefs = draw(
        st.lists(
            st.tuples(st.integers(1, 100), st.lists(expressions(), min_size=1, max_size=2)),
            max_size=2,
        )
    )
    node_affinity: dict[str, Any] = {}
    if terms:
        node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]
        }
    if prefs:
        node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": w, "preference": {"matchExpressions": t}} for w, t in prefs
        ]
    if node_affinity:
        spec["affinity"] = {"nodeAffinity": node_affinity}
    return spec


@st.composite
def node_sets(draw: st.DrawFn) -> list[dict[str, Any]]:
    pools = draw(
        st.lists(
            st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=4),
            min_size=1,
            max_size=4,
        )
    )
    sizes = draw(st.lists(st.integers(1, 3), min_size=len(pools), max_size=len(pools)))
    return [
        builders.node(f"n{p}-{i}", gpu=None, driver=None, count=1, labels=labels)
        for p, (labels, size) in enumerate(zip(pools, sizes, strict=True))
        for i in range(size)
    ]


@settings(max_examples=60)
@given(node_sets(), pod_specs())
def test_grouped_answers_equal_direct_kubernetes_matching(
    kb: KnowledgeBase, nodes: list[dict[str, Any]], spec: dict[str, Any]
) -> None:
    exp = explain(pod(spec), nodes, "strict", kb)
    rna = RequiredNodeAffinity.from_pod_spec(spec)
    parsed = [Node.from_k8s(n) for n in nodes]
    assert [n.eligible for n in exp.nodes] == [rna.match(n) for n in parsed]
    try:
        preferred = PreferredTerms.from_pod_spec(spec)
    except InputError:
        assert {n.score for n in exp.nodes} == {"error"}
    else:
        assert [n.score for n in exp.nodes] == [preferred.score(n) for n in parsed]
    for node, parsed_node in zip(exp.nodes, parsed, strict=True):
        codes = {r.code for r in node.reasons}
        assert node.eligible == (not codes)  # no requirement: only user constraints exclude
        assert (NODE_SELECTOR_MISMATCH in codes) == (
            not RequiredNodeAffinity({**spec.get("nodeSelector", {})}).match(parsed_node)
        )


@settings(max_examples=40)
@given(
    cuda=st.sampled_from(["11.8", "12.0", "12.2", "12.4", "12.6", "12.8", "12.9", "13.0", "13.1"]),
    cc=st.sampled_from([None, "7.0", "8.0", "9.0"]),
    scheme=st.sampled_from([LabelScheme.CUDASCHED, LabelScheme.GFD]),
)
def test_requirement_eligibility_matches_engine_on_labelled_nodes(
    fleet: Fleet, kb: KnowledgeBase, cuda: str, cc: str | None, scheme: LabelScheme
) -> None:
    annotations = {"cudasched.io/cuda-version": cuda}
    if cc is not None:
        annotations["cudasched.io/min-compute-capability"] = cc
    workload = pod({"containers": [GPU_CONTAINER]}, annotations)
    exp = explain(workload, fleet, Policy.STRICT, kb, scheme)
    assert [n.eligible for n in exp.nodes] == _direct(
        pod_spec_of(workload), exp.requirement, fleet, kb, scheme
    )
    for node, (_, _, facts) in zip(exp.nodes, fleet.members(), strict=True):
        codes = {r.code for r in node.reasons}
        if REQUIREMENT_LABELS_MISSING in codes:
            assert scheme is LabelScheme.CUDASCHED and node.node == L4_NEW
            continue
        # Strict policy, no user constraints: eligible exactly when the engine accepts the
        # node (the compiled selector and the engine agree), and the reasons are the engine's.
        verdict = check(facts, exp.requirement, Policy.STRICT, kb)
        assert node.eligible == (verdict.status is not VerdictStatus.INCOMPATIBLE), node.node
        # A node without GPU facts here is the CPU node, which also offers no GPU.
        assert {r.code for r in verdict.reasons} == codes - {NO_GPU_RESOURCE}


def _offering(name: str, allocatable: dict[str, str] | None) -> dict[str, Any]:
    """A node known only by the resources it offers (``None``: a node without a status)."""
    offered = {"cpu": "8", **(allocatable or {})}
    built = builders.node(name, gpu=None, driver=None, allocatable=offered)
    if allocatable is None:
        del built["status"]
    return built


def test_a_gpu_pod_is_not_eligible_where_no_gpu_is_offered(kb: KnowledgeBase) -> None:
    nodes = [
        _offering("gpu", {"nvidia.com/gpu": "8"}),
        _offering("cpu", {}),
        _offering("mig-only", {"nvidia.com/mig-1g.10gb": "7"}),
        _offering("drained", {"nvidia.com/gpu": "0"}),
        _offering("unknown", None),  # no status: nothing is known, nothing is excluded
    ]
    exp = explain(pod({"containers": [GPU_CONTAINER]}), nodes, "strict", kb)
    assert eligible_names(exp) == {"gpu", "unknown"}
    by_name = {n.node: n for n in exp.nodes}
    assert [r.code for r in by_name["cpu"].reasons] == [NO_GPU_RESOURCE]
    assert "no NVIDIA GPU resource" in by_name["cpu"].reasons[0].message
    assert "nvidia.com/mig-1g.10gb" in by_name["mig-only"].reasons[0].message
    assert "device plugin" in by_name["cpu"].reasons[0].fix
    assert by_name["mig-only"].reasons[0].fix == "request a GPU resource the node offers"
    cpu_pod = pod({"containers": [{"name": "web", "image": "nginx"}]})
    assert len(explain(cpu_pod, nodes, "strict", kb).eligible) == 5
    mig_pod = pod(
        {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}]}
    )
    assert eligible_names(explain(mig_pod, nodes, "strict", kb)) == {"mig-only", "unknown"}


def test_workloads_differing_only_in_gpu_requests_do_not_share_answers(kb: KnowledgeBase) -> None:
    nodes = [_offering("gpu", {"nvidia.com/gpu": "1"}), _offering("cpu", {})]
    gpu_pod = pod({"containers": [GPU_CONTAINER]})
    cpu_pod = pod({"containers": [{"name": "web", "image": "nginx"}]})
    first, second = explain_many([gpu_pod, cpu_pod], nodes, "strict", kb)
    assert (first.eligible_count, second.eligible_count) == (1, 2)


def test_explain_compiles_the_class_bound_as_the_webhook_does(
    sample: ClusterSnapshot, fleet: Fleet, kb: KnowledgeBase
) -> None:
    """``placement.boundCudaClass``: explain shows the terms with the class bound the webhook
    injects, and on the agent's truthful labels every node keeps its answer."""
    ours = LabelScheme.CUDASCHED
    plain = explain_many(sample.pods, fleet, "strict", kb, ours)
    bounded = explain_many(sample.pods, fleet, "strict", kb, ours, class_bound=True)
    keys = {e["key"] for r in bounded for t in r.terms for e in t["matchExpressions"]} - {
        e["key"] for r in plain for t in r.terms for e in t["matchExpressions"]
    }
    assert keys == {"cudasched.io/cuda.code"}
    assert [[(n.node, n.eligible) for n in r.nodes] for r in bounded] == [
        [(n.node, n.eligible) for n in r.nodes] for r in plain
    ]
