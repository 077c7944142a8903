"""Admission: AdmissionReview v1 in, response out, every patch applied and schema-checked.

The requests under ``tests/data/admission/`` are shaped exactly like what the API server sends
(a ReplicaSet-created predictor pod arrives with ``generateName``, no ``metadata.namespace``,
defaulted fields and the service-account volume; an InferenceService from ``kubectl apply``
carries its last-applied annotation). Every answer is checked the way the API server would use
it: the patch is base64-decoded, applied with an RFC 6902 library to the request object, and
the result validated against the Kubernetes schema plus the node-affinity rules the API server
enforces. The cluster here is small and written out so each expected node set can be checked
by hand.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cudasched.knowledge import KnowledgeBase
from cudasched.nodes.scheme import GfdKeys
from cudasched.settings.config import WebhookConfig
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.vocab.labels import LabelScheme
from cudasched.vocab.nodeaffinity import RequiredNodeAffinity
from cudasched.vocab.versions import CudaVersion
from cudasched.webhook.admission import placer as placer_module
from cudasched.webhook.admission.admitter import Admitter
from cudasched.webhook.admission.review import MAX_WARNING_CHARS, BadReviewError, clip
from cudasched.webhook.state.clusterstate import ClusterState
from tests.support.admission import (
    DATA,
    applied,
    ask,
    fleet_node,
    isvcs,
    nodes,
    ops_of,
    readmit,
    recorded_only,
    runtimes,
)
from tests.support.builders import GFD_DEPRECATED, REQUIRED, node
from tests.support.k8s_schema import assert_valid, assert_valid_pod

PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


# --------------------------------------------------------------------------- the cluster


@pytest.fixture(scope="module")
def state(kb: KnowledgeBase) -> ClusterState:
    return ClusterState.from_objects(nodes(), isvcs(), [], runtimes(), kb=kb)


@pytest.fixture(scope="module")
def admitter(kb: KnowledgeBase) -> Admitter:
    return Admitter.from_config(WebhookConfig(), kb=kb)


def make(kb: KnowledgeBase, **settings_: Any) -> Admitter:
    return Admitter.from_config(WebhookConfig.from_mapping(settings_), kb=kb)


# --------------------------------------------------------------------------- helpers


def load(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


def eligible(pod: dict[str, Any], st_: ClusterState) -> set[str]:
    affinity = RequiredNodeAffinity.from_pod_spec(pod["spec"])
    return {n.name for n in st_.nodes if affinity.match(n)}


def with_pod(review: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(review)
    pod = out["request"]["object"]
    for path, value in changes.items():
        *parents, last = path.split("__")
        cur = pod
        for key in parents:
            cur = cur.setdefault(key, {})
        if value is None:
            cur.pop(last, None)
        else:
            cur[last] = value
    return out


# --------------------------------------------------------------------------- state


def test_state_indexes(state: ClusterState) -> None:
    assert state.synced
    assert state.scheme(LabelScheme.AUTO) is LabelScheme.CUDASCHED
    assert state.gfd_keys is GfdKeys.NEW
    assert {n.name for n in state.fleet.gpu_nodes} == {
        "a100-r535",
        "h100-r550",
        "h100-r570",
        "l4-r570",
        "t4-r470",
    }
    assert state.drivers.newest_cuda == CudaVersion(12, 8)
    assert state.drivers.nodes_with_newest == 2
    assert state.drivers.describe() == "newest driver supports 12.8 (2 nodes)"
    choice = state.runtime_of("ml", "llm-chat")
    assert choice is not None and choice.name == "vllm-cuda-12-4"
    assert state.runtime_of("ml", "nope") is None
    assert state.scheme(LabelScheme.AUTO) is LabelScheme.CUDASCHED
    assert state.scheme(LabelScheme.GFD) is LabelScheme.GFD


def test_state_auto_scheme_falls_back_to_gfd_keys(kb: KnowledgeBase) -> None:
    mixed = nodes(ours=False)
    mixed[0] = fleet_node("old-gfd", "A100", "535.216.01", scheme=GFD_DEPRECATED)
    st_ = ClusterState.from_objects(mixed, [], [], [], kb=kb)
    assert st_.scheme(LabelScheme.AUTO) is LabelScheme.GFD
    assert st_.gfd_keys is GfdKeys.DEPRECATED


def test_state_empty_and_malformed_objects(kb: KnowledgeBase) -> None:
    empty = ClusterState.empty()
    assert not empty.synced and empty.nodes == () and empty.drivers.newest_cuda is None
    assert empty.drivers.describe() == "no GPU node reports a CUDA version"
    st_ = ClusterState.from_objects(
        [{"metadata": {}}, node("c", gpu=None, driver=None)],
        [{"metadata": {"name": ""}}],
        [],
        [],
        kb=kb,
    )
    assert [n.name for n in st_.nodes] == ["c"] and not st_.fleet.inference_services


# --------------------------------------------------------------------------- pods


def test_triton_predictor_pod_gets_required_cuda_affinity(
    admitter: Admitter, state: ClusterState
) -> None:
    review = load("pod-predictor-triton.json")
    resp = ask(admitter, "pod", review, state)
    assert resp["allowed"] is True and "warnings" not in resp
    ops = ops_of(resp)
    # No affinity and annotations present: affinity added whole, annotation added per key.
    assert [(op["op"], op["path"]) for op in ops] == [
        ("add", "/metadata/annotations/cudasched.io~1requirement"),
        ("add", "/spec/affinity"),
    ]
    pod = applied(review, resp)
    assert_valid_pod(pod)
    assert pod["metadata"]["annotations"][L.ANN_REQUIREMENT].startswith("cuda>=12.4, cc>=6.0 (")
    assert "tritonserver:24.05" in pod["metadata"]["annotations"][L.ANN_REQUIREMENT]
    assert eligible(pod, state) == {"h100-r550", "h100-r570", "l4-r570"}
    # Everything else is exactly as it came in.
    original = review["request"]["object"]
    assert {k: v for k, v in pod["spec"].items() if k != "affinity"} == original["spec"]
    assert (
        resp["auditAnnotations"]["requirement"] == pod["metadata"]["annotations"][L.ANN_REQUIREMENT]
    )
    # Idempotent: the mutated pod needs nothing more.
    again = readmit(admitter, "pod", review, pod, state)
    assert again["allowed"] and "patch" not in again


def test_existing_affinity_is_anded_and_everything_else_kept(
    admitter: Admitter, state: ClusterState
) -> None:
    review = load("pod-predictor-affinity.json")
    original = review["request"]["object"]
    resp = ask(admitter, "pod", review, state)
    ops = ops_of(resp)
    assert [op["op"] for op in ops] == ["add", "replace"]
    assert ops[1]["path"] == "/spec/affinity/nodeAffinity"
    pod = applied(review, resp)
    assert_valid_pod(pod)
    assert pod["spec"]["nodeSelector"] == original["spec"]["nodeSelector"]
    assert (
        pod["spec"]["affinity"]["podAntiAffinity"]
        == original["spec"]["affinity"]["podAntiAffinity"]
    )
    assert (
        pod["spec"]["affinity"]["nodeAffinity"][PREFERRED]
        == original["spec"]["affinity"]["nodeAffinity"][PREFERRED]
    )
    # Every required term still carries the user's zone constraint (ANDed, not replaced).
    for term in pod["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]:
        keys = {e["key"] for e in term["matchExpressions"]}
        assert "topology.kubernetes.io/zone" in keys
    # zone-a, or zone-b without spot; and CUDA >= 12.4 (runtime label): H100/R550, L4/R570.
    assert eligible(pod, state) == {"h100-r550", "l4-r570"}
    assert eligible(original, state) == {"a100-r535", "h100-r550", "l4-r570", "t4-r470"}
    annotations = pod["metadata"]["annotations"]
    assert annotations["example.com/cost-center"] == "nlp~gpu/2026"
    assert annotations[L.ANN_REQUIREMENT] == (
        "cuda>=12.4 (ClusterServingRuntime vllm-cuda-12-4, label cpaas.io/cuda-version)"
    )
    assert "patch" not in readmit(admitter, "pod", review, pod, state)


@pytest.mark.parametrize(
    "affinity",
    [
        {},
        {"nodeAffinity": {}},
        {
            "nodeAffinity": {
                PREFERRED: [
                    {
                        "weight": 5,
                        "preference": {
                            "matchExpressions": [
                                {
                                    "key": "nvidia.com/gpu.product",
                                    "operator": "In",
                                    "values": ["NVIDIA-L4"],
                                }
                            ]
                        },
                    }
                ]
            }
        },
        {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"app": "x"}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        },
        {
            "nodeAffinity": {
                REQUIRED: {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "nvidia.com/cuda.runtime.major",
                                    "operator": "Gt",
                                    "values": ["11"],
                                }
                            ]
                        }
                    ]
                }
            }
        },
    ],
    ids=["empty", "empty-node-affinity", "preferred-only", "pod-anti-affinity", "hand-written"],
)
def test_pods_with_various_existing_affinity(
    admitter: Admitter, state: ClusterState, affinity: dict[str, Any]
) -> None:
    review = with_pod(load("pod-predictor-triton.json"), spec__affinity=affinity)
    resp = ask(admitter, "pod", review, state)
    pod = applied(review, resp)
    assert_valid_pod(pod)
    assert eligible(pod, state) == {"h100-r550", "h100-r570", "l4-r570"}
    for key in ("podAntiAffinity",):
        assert pod["spec"]["affinity"].get(key) == affinity.get(key)
    if PREFERRED in affinity.get("nodeAffinity", {}):
        assert (
            pod["spec"]["affinity"]["nodeAffinity"][PREFERRED]
            == (affinity["nodeAffinity"][PREFERRED])
        )
    assert "patch" not in readmit(admitter, "pod", review, pod, state)


def test_pod_without_annotations_gets_the_map_added(
    admitter: Admitter, state: ClusterState
) -> None:
    review = with_pod(load("pod-predictor-triton.json"), metadata__annotations=None)
    resp = ask(admitter, "pod", review, state)
    ops = ops_of(resp)
    assert ops[0]["op"] == "add" and ops[0]["path"] == "/metadata/annotations"
    assert set(ops[0]["value"]) == {L.ANN_REQUIREMENT}
    assert_valid_pod(applied(review, resp))


def test_cpu_predictor_is_untouched(admitter: Admitter, state: ClusterState) -> None:
    resp = ask(admitter, "pod", load("pod-predictor-cpu.json"), state)
    assert resp == {"uid": "4b8d1e6a-2c7f-49b3-a0d5-e8f1c3b7a925", "allowed": True}


def test_skip_annotation(admitter: Admitter, state: ClusterState) -> None:
    review = load("pod-predictor-triton.json")
    review["request"]["object"]["metadata"]["annotations"][L.ANN_SKIP] = "true"
    resp = ask(admitter, "pod", review, state)
    assert resp["allowed"] and "patch" not in resp


def test_excluded_and_included_namespaces(kb: KnowledgeBase, state: ClusterState) -> None:
    review = load("pod-predictor-triton.json")
    system = copy.deepcopy(review)
    system["request"]["namespace"] = "kube-system"
    assert "patch" not in ask(make(kb), "pod", system, state)
    only_prod = make(kb, namespaces={"include": ["prod"]})
    assert "patch" not in ask(only_prod, "pod", review, state)
    only_ml = make(kb, namespaces={"include": ["ml"], "exclude": []})
    assert "patch" in ask(only_ml, "pod", review, state)


def test_plain_gpu_pod_constrained_by_its_image(kb: KnowledgeBase, state: ClusterState) -> None:
    review = load("pod-job-gpu.json")
    resp = ask(make(kb), "pod", review, state)
    pod = applied(review, resp)
    assert_valid_pod(pod)
    assert pod["metadata"]["annotations"][L.ANN_REQUIREMENT] == (
        "cuda>=12.4 (image pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime)"
    )
    assert eligible(pod, state) == {"h100-r550", "h100-r570", "l4-r570"}
    off = make(kb, constrainGpuPodsByImage=False)
    assert "patch" not in ask(off, "pod", review, state)


def test_image_overrides_from_config(kb: KnowledgeBase, state: ClusterState) -> None:
    review = load("pod-job-gpu.json")
    review["request"]["object"]["spec"]["containers"][0]["image"] = "registry.local/team/llm:7"
    unknown = ask(make(kb), "pod", review, state)  # unknown image: only recorded as such
    assert recorded_only(review, unknown).startswith("unknown (image not in the image table")
    adm = make(kb, imageOverrides=[{"pattern": "registry.local/team/*", "cuda": "12.8"}])
    pod = applied(review, ask(adm, "pod", review, state))
    assert_valid_pod(pod)
    assert eligible(pod, state) == {"h100-r570", "l4-r570"}
    assert "registry.local/team/" in pod["metadata"]["annotations"][L.ANN_REQUIREMENT]


def test_annotation_declares_requirement_without_gpu(
    admitter: Admitter, state: ClusterState
) -> None:
    review = with_pod(load("pod-predictor-cpu.json"))
    review["request"]["object"]["metadata"]["annotations"][L.ANN_CUDA_VERSION] = "12.8"
    resp = ask(admitter, "pod", review, state)
    pod = applied(review, resp)
    assert_valid_pod(pod)
    assert eligible(pod, state) == {"h100-r570", "l4-r570"}
    assert pod["metadata"]["annotations"][L.ANN_REQUIREMENT].startswith("cuda>=12.8 (annotation")


def test_transformer_pod_left_alone_unless_declared(
    admitter: Admitter, state: ClusterState
) -> None:
    review = load("pod-predictor-triton.json")
    review["request"]["object"]["metadata"]["labels"]["component"] = "transformer"
    assert "patch" not in ask(admitter, "pod", review, state)
    review["request"]["object"]["metadata"]["annotations"][L.ANN_CUDA_VERSION] = "12.2"
    assert "patch" in ask(admitter, "pod", review, state)


def test_unknown_isvc_falls_back_to_the_image(admitter: Admitter, state: ClusterState) -> None:
    review = load("pod-predictor-triton.json")
    review["request"]["object"]["metadata"]["labels"]["serving.kserve.io/inferenceservice"] = (
        "not-in-cache"
    )
    pod = applied(review, ask(admitter, "pod", review, state))
    assert eligible(pod, state) == {"h100-r550", "h100-r570", "l4-r570"}


@pytest.mark.parametrize(
    ("scheme", "policy"),
    [
        ("cudasched", "strict"),
        ("gfd", "strict"),
        ("cudasched", "minor-compat"),
        ("gfd", "minor-compat"),
    ],
)
def test_schemes_and_policies_give_valid_idempotent_patches(
    kb: KnowledgeBase, state: ClusterState, scheme: str, policy: str
) -> None:
    adm = make(kb, labelScheme=scheme, policy=policy)
    review = load("pod-predictor-affinity.json")
    resp = ask(adm, "pod", review, state)
    pod = applied(review, resp)
    assert_valid_pod(pod)
    # Under either policy: vllm/vllm-openai:v0.6.3 is built on nvidia/cuda 12.4 and carries
    # NVIDIA_REQUIRE_CUDA=cuda>=12.4 (issue 19's image rows), a gate the container toolkit holds
    # under minor-version compatibility too, so R535 (12.2) stays out.
    assert eligible(pod, state) == {"h100-r550", "l4-r570"}
    if policy != "strict":
        assert "[minor-compat]" in pod["metadata"]["annotations"][L.ANN_REQUIREMENT]
    assert "patch" not in readmit(adm, "pod", review, pod, state)


def test_preferred_mode(kb: KnowledgeBase, state: ClusterState) -> None:
    adm = make(kb, mode="preferred")
    review = load("pod-predictor-triton.json")
    pod = applied(review, ask(adm, "pod", review, state))
    assert_valid_pod(pod)
    node_affinity = pod["spec"]["affinity"]["nodeAffinity"]
    assert REQUIRED not in node_affinity
    assert node_affinity[PREFERRED] and all(t["weight"] == 100 for t in node_affinity[PREFERRED])
    assert "patch" not in readmit(adm, "pod", review, pod, state)


def _big_pod_review() -> dict[str, Any]:
    review = load("pod-predictor-triton.json")
    review["request"]["object"]["metadata"]["labels"]["serving.kserve.io/inferenceservice"] = (
        "llm-big"
    )
    review["request"]["object"]["spec"]["containers"][0]["image"] = "vllm/vllm-openai:v0.11.1"
    return review


def test_on_no_fit_warn_constrains_and_warns(kb: KnowledgeBase, state: ClusterState) -> None:
    review = _big_pod_review()
    resp = ask(make(kb, onNoFit="warn"), "pod", review, state)
    assert resp["allowed"] is True
    assert resp["warnings"] == [
        "cudasched: no node can run CUDA 12.9; newest driver supports 12.8 (2 nodes)"
    ]
    pod = applied(review, resp)
    assert_valid_pod(pod)
    assert eligible(pod, state) == set()


def test_on_no_fit_deny(kb: KnowledgeBase, state: ClusterState) -> None:
    resp = ask(make(kb, onNoFit="deny"), "pod", _big_pod_review(), state)
    assert resp["allowed"] is False and "patch" not in resp
    assert resp["status"]["code"] == 403
    assert resp["status"]["reason"] == "Forbidden"
    assert "no node can run CUDA 12.9" in resp["status"]["message"]


def test_on_no_fit_allow_is_silent(kb: KnowledgeBase, state: ClusterState) -> None:
    resp = ask(make(kb, onNoFit="allow"), "pod", _big_pod_review(), state)
    assert resp["allowed"] is True and "warnings" not in resp and "patch" in resp


def test_unsynced_state_never_warns_or_denies(kb: KnowledgeBase) -> None:
    unsynced = ClusterState.from_objects(nodes(), isvcs(), [], runtimes(), kb=kb, synced=False)
    resp = ask(make(kb, onNoFit="deny"), "pod", _big_pod_review(), unsynced)
    assert resp["allowed"] is True and "warnings" not in resp


def test_warnings_are_clipped(kb: KnowledgeBase, state: ClusterState) -> None:
    review = load("pod-predictor-triton.json")
    review["request"]["object"]["metadata"]["annotations"][L.ANN_CUDA_VERSION] = "not-a-version"
    resp = ask(make(kb), "pod", review, state)  # ask() checks the 120-character limit
    assert resp["allowed"] and "patch" not in resp
    assert resp["warnings"][0].startswith("cudasched: pod not constrained: ")
    assert clip("x" * 500).endswith("…")
    assert len(clip("x" * 500)) == MAX_WARNING_CHARS


def test_a_misspelt_annotation_key_gets_a_did_you_mean(
    kb: KnowledgeBase, state: ClusterState
) -> None:
    review = load("pod-predictor-triton.json")
    annotations = review["request"]["object"]["metadata"]["annotations"]
    annotations["cudasched.io/cuda-verison"] = "12.4"
    resp = ask(make(kb), "pod", review, state)
    assert resp["allowed"] is True
    assert resp["warnings"][-1] == (
        "cudasched: annotation cudasched.io/cuda-verison is not one cudasched reads; "
        "did you mean cudasched.io/cuda-version?"
    )
    # The pod is still judged by what it runs (its runtime and image), as before.
    assert "patch" in resp
    service = load("isvc-create.json")
    service["request"]["object"]["metadata"].setdefault("annotations", {})["cudasched.io/polcy"] = (
        "minor-compat"
    )
    said = ask(make(kb), "isvc", service, state)["warnings"]
    assert said[-1].endswith("did you mean cudasched.io/policy?")


# --------------------------------------------------------------------------- InferenceServices


def test_isvc_create_annotated_and_warned(kb: KnowledgeBase, state: ClusterState) -> None:
    review = load("isvc-create.json")
    resp = ask(make(kb), "isvc", review, state)
    assert resp["allowed"] is True
    assert resp["warnings"] == [
        "cudasched: no node can run CUDA 12.9; newest driver supports 12.8 (2 nodes)"
    ]
    obj = applied(review, resp)
    assert_valid(obj)
    assert obj["metadata"]["annotations"][L.ANN_REQUIREMENT] == (
        "cuda>=12.9 (ClusterServingRuntime vllm-cuda-12-9, label cpaas.io/cuda-version)"
    )
    assert obj["spec"] == review["request"]["object"]["spec"]  # no affinity unless opted in
    again = readmit(make(kb), "isvc", review, obj, state)
    assert "patch" not in again and again["warnings"] == resp["warnings"]


def test_isvc_deny_only_on_create(kb: KnowledgeBase, state: ClusterState) -> None:
    adm = make(kb, onNoFit="deny")
    review = load("isvc-create.json")
    assert ask(adm, "isvc", review, state)["allowed"] is False
    update = copy.deepcopy(review)
    update["request"]["operation"] = "UPDATE"
    update["request"]["oldObject"] = copy.deepcopy(review["request"]["object"])
    update["request"]["options"] = {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"}
    resp = ask(adm, "isvc", update, state)
    assert resp["allowed"] is True and resp["warnings"]


def test_isvc_that_fits_gets_no_warning(admitter: Admitter, state: ClusterState) -> None:
    review = load("isvc-create.json")
    review["request"]["object"]["spec"]["predictor"]["model"]["runtime"] = "vllm-cuda-12-4"
    resp = ask(admitter, "isvc", review, state)
    assert "warnings" not in resp
    obj = applied(review, resp)
    assert obj["metadata"]["annotations"][L.ANN_REQUIREMENT].startswith("cuda>=12.4 (")


def test_cpu_isvc_not_annotated_and_stale_record_removed(
    admitter: Admitter, state: ClusterState
) -> None:
    review = load("isvc-create.json")
    obj = review["request"]["object"]
    obj["spec"]["predictor"]["model"] = {
        "modelFormat": {"name": "sklearn"},
        "storageUri": "gs://x/iris",
    }
    assert "patch" not in ask(admitter, "isvc", review, state)
    obj["metadata"]["annotations"][L.ANN_REQUIREMENT] = "cuda>=12.4 (old)"
    resp = ask(admitter, "isvc", review, state)
    assert ops_of(resp) == [
        {"op": "remove", "path": "/metadata/annotations/cudasched.io~1requirement"}
    ]


def test_isvc_affinity_opt_in_merges_runtime_affinity(
    kb: KnowledgeBase, state: ClusterState
) -> None:
    adm = make(kb, isvcAffinity=True)
    review = load("isvc-create.json")
    review["request"]["object"]["spec"]["predictor"]["model"]["runtime"] = "vllm-cuda-12-4"
    resp = ask(adm, "isvc", review, state)
    obj = applied(review, resp)
    assert_valid(obj)
    predictor = obj["spec"]["predictor"]
    terms = predictor["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]
    # The runtime's own term (tier In [gpu]) survives in every term: KServe would otherwise
    # replace it with ours.
    for term in terms:
        assert {"key": "node-pool.example.com/tier", "operator": "In", "values": ["gpu"]} in (
            term["matchExpressions"]
        )
    assert eligible({"spec": predictor}, state) == {"h100-r550", "h100-r570", "l4-r570"}
    assert "patch" not in readmit(adm, "isvc", review, obj, state)


# --------------------------------------------------------------------------- envelope


def test_delete_connect_and_other_kinds_allowed_without_patch(
    admitter: Admitter, state: ClusterState
) -> None:
    resp = ask(admitter, "pod", load("pod-delete.json"), state)
    assert resp == {"uid": "e1d3b5a7-9c2f-4e68-8a0b-6f4d2c8e1b39", "allowed": True}
    review = load("pod-predictor-triton.json")
    for operation in ("UPDATE", "CONNECT"):
        other = copy.deepcopy(review)
        other["request"]["operation"] = operation
        assert "patch" not in ask(admitter, "pod", other, state)
    deployment = copy.deepcopy(review)
    deployment["request"]["kind"] = {"group": "apps", "version": "v1", "kind": "Deployment"}
    assert "patch" not in ask(admitter, "pod", deployment, state)
    binding = copy.deepcopy(review)
    binding["request"]["subResource"] = "binding"
    assert "patch" not in ask(admitter, "pod", binding, state)
    # A pod sent to the InferenceService endpoint is not an InferenceService.
    assert "patch" not in ask(admitter, "isvc", review, state)


def test_dry_run_answered_the_same(admitter: Admitter, state: ClusterState) -> None:
    review = load("pod-predictor-triton.json")
    dry = copy.deepcopy(review)
    dry["request"]["dryRun"] = True
    assert ops_of(ask(admitter, "pod", dry, state)) == ops_of(ask(admitter, "pod", review, state))


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"not json", "not JSON"),
        (b"[]", "JSON object"),
        (b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}', "v1"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "request"),
        (
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", '
            b'"request": {"operation": "CREATE"}}',
            "uid",
        ),
    ],
)
def test_bad_reviews_raise(
    admitter: Admitter, state: ClusterState, body: bytes, fragment: str
) -> None:
    with pytest.raises(BadReviewError, match=fragment):
        admitter.review("pod", body, state)


def test_bad_kind_argument(admitter: Admitter, state: ClusterState) -> None:
    with pytest.raises(
        InputError, match="expected 'pod', 'isvc', 'llmisvc', 'workload' or 'claim'"
    ):
        admitter.review("deployment", b"{}", state)  # type: ignore[arg-type]


def test_internal_error_fails_open_or_closed(
    kb: KnowledgeBase, state: ClusterState, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*_: Any, **__: Any) -> Any:
        raise RuntimeError("kaboom")

    monkeypatch.setattr(placer_module, "compile_requirement", boom)
    review = load("pod-predictor-triton.json")
    resp = ask(make(kb), "pod", review, state)
    assert resp["allowed"] is True and "patch" not in resp
    assert "internal error (RuntimeError)" in resp["warnings"][0]
    closed = ask(make(kb, failClosed=True), "pod", review, state)
    assert closed["allowed"] is False and closed["status"]["code"] == 500


def test_decision_reports_outcome(admitter: Admitter, state: ClusterState) -> None:
    body = (DATA / "pod-predictor-triton.json").read_bytes()
    decision = admitter.decide("pod", body, state)
    assert decision.outcome == "patched" and decision.requirement.startswith("cuda>=12.4")
    cpu = admitter.decide("pod", (DATA / "pod-predictor-cpu.json").read_bytes(), state)
    assert cpu.outcome == "unchanged" and not cpu.patch


# --------------------------------------------------------------------------- property

_IMAGES = [
    "nvcr.io/nvidia/tritonserver:24.05-py3",
    "nvcr.io/nvidia/pytorch:24.05-py3",
    "vllm/vllm-openai:v0.6.3",
    "busybox:1.36",
    "registry.local/team/app:1",
]
_EXPRS = [
    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]},
    {"key": "topology.kubernetes.io/zone", "operator": "NotIn", "values": ["zone-b"]},
    {"key": "node-pool.example.com/spot", "operator": "DoesNotExist"},
    {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["20000"]},
    {"key": "nvidia.com/cuda.runtime.major", "operator": "Gt", "values": ["11"]},
    {"key": L.CUDA_CODE, "operator": "Gt", "values": ["12039"]},
]
_ANNOTATIONS = st.dictionaries(
    st.sampled_from(
        ["example.com/a", "a~b", "plain", "x/y~z", L.ANN_REQUIREMENT, L.ANN_CUDA_VERSION]
    ),
    st.sampled_from(["v", "12.4", "11.8", "13.0"]),
    max_size=3,
)
_terms = st.lists(
    st.lists(st.sampled_from(_EXPRS), min_size=1, max_size=3, unique_by=lambda e: e["key"]).map(
        lambda exprs: {"matchExpressions": exprs}
    ),
    min_size=1,
    max_size=3,
)
_preferred = st.lists(
    st.builds(
        lambda w, t: {"weight": w, "preference": t},
        st.integers(1, 100),
        _terms.map(lambda ts: ts[0]),
    ),
    max_size=2,
)


@st.composite
def pod_reviews(draw: st.DrawFn) -> dict[str, Any]:
    review = load("pod-predictor-triton.json")
    pod = review["request"]["object"]
    meta = pod["metadata"]
    # Weighted towards pods that get constrained, so most examples carry a patch.
    meta["labels"]["component"] = draw(st.sampled_from(["predictor"] * 3 + ["transformer"]))
    meta["labels"]["serving.kserve.io/inferenceservice"] = draw(
        st.sampled_from(["triton-resnet", "llm-chat", "llm-big", "unknown"])
    )
    if draw(st.integers(0, 3)) == 0:
        del meta["labels"]["serving.kserve.io/inferenceservice"]
    annotations = draw(_ANNOTATIONS)
    if annotations or draw(st.booleans()):
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    container = pod["spec"]["containers"][0]
    container["image"] = draw(st.sampled_from(_IMAGES))
    gpus = draw(st.sampled_from([None, "0", "1", "1", "2"]))
    container["resources"] = {"limits": {"nvidia.com/gpu": gpus}} if gpus else {}
    if draw(st.booleans()):
        pod["spec"]["nodeSelector"] = {"kubernetes.io/os": "linux"}
    affinity: dict[str, Any] = {}
    node_affinity: dict[str, Any] = {}
    if draw(st.booleans()):
        node_affinity[REQUIRED] = {"nodeSelectorTerms": draw(_terms)}
    if draw(st.booleans()):
        node_affinity[PREFERRED] = draw(_preferred)
        if not node_affinity[PREFERRED]:
            del node_affinity[PREFERRED]
    if node_affinity or draw(st.booleans()):
        affinity["nodeAffinity"] = node_affinity
    if draw(st.booleans()):
        affinity["podAntiAffinity"] = {
            PREFERRED: [
                {
                    "weight": 10,
                    "podAffinityTerm": {
                        "labelSelector": {"matchLabels": {"app": "a"}},
                        "topologyKey": "kubernetes.io/hostname",
                    },
                }
            ]
        }
    if affinity or draw(st.booleans()):
        pod["spec"]["affinity"] = affinity
    return review


@pytest.fixture(scope="module")
def admitters(kb: KnowledgeBase) -> dict[str, Admitter]:
    return {
        "required": make(kb),
        "preferred": make(kb, mode="preferred"),
        "gfd": make(kb, labelScheme="gfd"),
    }


@settings(max_examples=100, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(review=pod_reviews(), which=st.sampled_from(["required", "preferred", "gfd"]))
def test_property_patch_applies_is_valid_and_idempotent(
    admitters: dict[str, Admitter], state: ClusterState, review: dict[str, Any], which: str
) -> None:
    adm = admitters[which]
    resp = ask(adm, "pod", review, state)
    pod = applied(review, resp)
    if "patch" in resp:
        assert_valid_pod(pod)
        assert L.ANN_REQUIREMENT in pod["metadata"]["annotations"]
    again = readmit(adm, "pod", review, pod, state)
    assert "patch" not in again, ops_of(again)


def test_a_pod_that_names_its_node_is_never_given_an_affinity(
    kb: KnowledgeBase, state: ClusterState
) -> None:
    """spec.nodeName skips the scheduler, and the kubelet rejects a pod whose required affinity
    excludes its own node: no patch; a warning when the node cannot run the pod."""
    review = load("pod-job-gpu.json")  # cuda>=12.4 from its image
    assert "patch" in ask(make(kb), "pod", review, state)
    able = with_pod(review, spec__nodeName="h100-r550")
    resp = ask(make(kb), "pod", able, state)
    assert "patch" not in resp and resp["allowed"] and not resp.get("warnings")
    unable = with_pod(review, spec__nodeName="a100-r535")
    resp = ask(make(kb), "pod", unable, state)
    assert "patch" not in resp and resp["allowed"]
    [warning] = resp["warnings"]
    assert "node a100-r535 (spec.nodeName) cannot run cuda>=12.4" in warning
    unknown = with_pod(review, spec__nodeName="not-in-the-cache")
    resp = ask(make(kb, onNoFit="deny"), "pod", unknown, state)
    assert "patch" not in resp and resp["allowed"] and not resp.get("warnings")
