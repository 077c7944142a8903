"""Unknown requirements and runtime/image disagreements at admission (issue 12 items 7, 8).

The runtimes are KServe v0.20's and Alauda's from ``tests/data/kserve/runtimes-issue12.yaml``
(KServe's default ``kserve/huggingfaceserver:v0.20.0-gpu``, ``vllm/vllm-openai:v0.20.0``, the
legacy ``tritonserver:20.10-py3`` default, and an Alauda runtime labelled CUDA 12.1 that runs
Triton 25.02 from a Docker Hub mirror); the pods are the predictor pods their ReplicaSets
create. A GPU pod whose requirement cannot be found is never guessed at: it is admitted
unconstrained with a warning naming the image and the fix, refused on CREATE under
``onUnknownRequirement: deny``, admitted silently under ``allow``, and counted by kind and
reason in ``cudasched_webhook_unknown_requirement_total`` (read from the real server's
``/metrics`` over HTTPS, remembered answers included).
"""

from __future__ import annotations

import copy
import ssl
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml

from cudasched.knowledge import KnowledgeBase
from cudasched.settings.config import WebhookConfig
from cudasched.vocab import labels as L
from cudasched.vocab.nodeaffinity import RequiredNodeAffinity
from cudasched.webhook.admission.admitter import Admitter
from cudasched.webhook.admission.once import FirstSeen
from cudasched.webhook.server.app import ISVC_PATH, POD_PATH
from cudasched.webhook.server.serving import serve_in_thread
from cudasched.webhook.state.clusterstate import ClusterState
from tests.support import builders
from tests.support.admission import applied, ask, fleet_node, nodes, recorded_only
from tests.support.k8s_schema import assert_valid_pod

RUNTIMES = Path(__file__).parents[2] / "data" / "kserve" / "runtimes-issue12.yaml"
NS = "ml"

#: The test cluster's GPU nodes by CUDA: test_admission's (R470 to R570, up to CUDA 12.8), a
#: V100 on R570 (compute capability 7.0) and a B200 on R580 (CUDA 13.0).
CUDA_12_8 = {"h100-r570", "l4-r570", "v100-r570"}
CUDA_13 = {"b200-r580"}


def runtimes() -> list[dict[str, Any]]:
    return yaml.safe_load(RUNTIMES.read_text(encoding="utf-8"))["items"]


def isvc(name: str, fmt: str, runtime: str | None = None) -> dict[str, Any]:
    """An InferenceService without resources of its own (the runtime's GPU limit applies)."""
    return builders.isvc(name, NS, model_format=fmt, runtime=runtime, gpus=None)


ISVCS = [
    isvc("hf-llama", "huggingface"),
    isvc("vllm-chat", "vLLM"),
    isvc("triton-legacy", "triton", "kserve-tritonserver"),
    isvc("aml-triton", "triton", "aml-triton-cuda-12.1"),
]


@pytest.fixture(scope="module")
def state(kb: KnowledgeBase) -> ClusterState:
    cluster_nodes = [
        *nodes(),
        fleet_node("v100-r570", "Tesla-V100-SXM2-16GB", "570.124.06"),
        fleet_node("b200-r580", "NVIDIA-B200", "580.95.05"),
    ]
    return ClusterState.from_objects(cluster_nodes, ISVCS, [], runtimes(), kb=kb)


def admitter(kb: KnowledgeBase, **settings: Any) -> Admitter:
    return Admitter.from_config(WebhookConfig.from_mapping(settings), kb=kb)


def predictor_pod(isvc_name: str, image: str, *, replica: str = "x7k2q") -> dict[str, Any]:
    """A predictor pod as its ReplicaSet creates it (KServe's labels, the runtime's container
    with its GPU limit)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{isvc_name}-predictor-6c9f7d8b5-",
            "labels": {
                "app": f"isvc.{isvc_name}-predictor",
                "component": "predictor",
                "serving.kserve.io/inferenceservice": isvc_name,
                "pod-template-hash": "6c9f7d8b5",
            },
            "annotations": {"serving.kserve.io/deploymentMode": "RawDeployment"},
        },
        "spec": {
            "containers": [
                {
                    "name": "kserve-container",
                    "image": image,
                    "args": ["--model_name=" + isvc_name],
                    "resources": {
                        "limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
                        "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
                    },
                }
            ]
        },
    }


def plain_gpu_pod(image: str) -> dict[str, Any]:
    """A GPU pod of a batch controller: no KServe labels, no namespace in the object."""
    return builders.pod(
        None, None, generate_name="batch-", labels={"app": "batch"}, container="work", image=image
    )


def review_of(obj: dict[str, Any], uid: str = "3f1e2d4c-0000-4000-8000-000000000001") -> dict:
    return builders.review(obj, uid=uid, namespace=NS)


def eligible(pod: dict[str, Any], state: ClusterState) -> set[str]:
    affinity = RequiredNodeAffinity.from_pod_spec(pod["spec"])
    return {n.name for n in state.nodes if affinity.match(n)}


# --------------------------------------------------------------------------- now known


@pytest.mark.parametrize(
    ("isvc_name", "image", "nodes_allowed", "record"),
    [
        (
            "hf-llama",
            "kserve/huggingfaceserver:v0.18.1-gpu",
            CUDA_13,  # CUDA 12.9.1 (its Dockerfile at the tag): only R580 here runs it
            "cuda>=12.9 (image kserve/huggingfaceserver:v0.18.1-gpu)",
        ),
        (
            "vllm-chat",
            "vllm/vllm-openai:v0.20.0",
            CUDA_13,
            "cuda>=13.0 (image vllm/vllm-openai:v0.20.0 (at least this CUDA; its exact version "
            "is not recorded))",
        ),
        (
            "triton-legacy",
            "nvcr.io/nvidia/tritonserver:20.10-py3",
            # CUDA 11.1 builds for GPUs up to compute capability 8.x: not Hopper or Blackwell.
            {"a100-r535", "l4-r570", "t4-r470", "v100-r570"},
            "cuda>=11.1, cc>=6.0 (image nvcr.io/nvidia/tritonserver:20.10-py3)",
        ),
    ],
)
def test_kserve_release_images_are_known_and_constrained(
    kb: KnowledgeBase,
    state: ClusterState,
    isvc_name: str,
    image: str,
    nodes_allowed: set[str],
    record: str,
) -> None:
    """The images of issue 12's report that used to pass unchanged are in the table now."""
    review = review_of(predictor_pod(isvc_name, image))
    resp = ask(admitter(kb), "pod", review, state)
    assert resp["allowed"] is True and "warnings" not in resp
    pod = applied(review, resp)
    assert_valid_pod(pod)
    assert pod["metadata"]["annotations"][L.ANN_REQUIREMENT] == record
    assert eligible(pod, state) == nodes_allowed


# --------------------------------------------------------------------------- still unknown


def test_unknown_image_is_warned_with_the_image_and_the_runtime_to_label(
    kb: KnowledgeBase, state: ClusterState
) -> None:
    """``latest-gpu`` (kserve/kserve#4513's tag) names no release: the table cannot tell its
    CUDA. The pod passes unchanged, and the warning says so and which runtime to label."""
    review = review_of(predictor_pod("hf-llama", "kserve/huggingfaceserver:latest-gpu"))
    resp = ask(admitter(kb), "pod", review, state)
    assert resp["allowed"] is True
    # Recorded as unknown, as the README's check of what the webhook recorded expects.
    assert recorded_only(review, resp) == (
        "unknown (tag's CUDA not recorded: kserve/huggingfaceserver:latest-gpu)"
    )
    assert resp["warnings"] == [
        "cudasched: not constrained, CUDA unknown: tag's CUDA not recorded: "
        "kserve/huggingfaceserver:latest-gpu",
        "cudasched: to constrain it, label ClusterServingRuntime kserve-huggingfaceserver with "
        "cudasched.io/cuda-version",
    ]
    # The fix works: the runtime labelled, the same pod is constrained.
    labelled = runtimes()
    labelled[0]["metadata"]["labels"] = {L.ANN_CUDA_VERSION: "12.8"}
    fixed_state = ClusterState.from_objects(state.fleet.nodes, ISVCS, [], labelled, kb=kb)
    fixed = ask(admitter(kb), "pod", review, fixed_state)
    assert "warnings" not in fixed
    assert eligible(applied(review, fixed), state) == CUDA_12_8 | CUDA_13


def test_unknown_plain_pod_is_told_to_annotate_itself(
    kb: KnowledgeBase, state: ClusterState
) -> None:
    review = review_of(plain_gpu_pod("registry.local/team/llm:7"))
    resp = ask(admitter(kb), "pod", review, state)
    assert resp["allowed"] is True
    assert recorded_only(review, resp) == (
        "unknown (image not in the image table: registry.local/team/llm:7)"
    )
    assert resp["warnings"] == [
        "cudasched: not constrained, CUDA unknown: image not in the image table: "
        "registry.local/team/llm:7",
        "cudasched: to constrain it, annotate the pod with cudasched.io/cuda-version or add an "
        "imageOverrides entry",
    ]
    # Pods that need no requirement are never warned: CPU pods, or a transformer.
    cpu = plain_gpu_pod("registry.local/team/llm:7")
    cpu["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
    assert "warnings" not in ask(admitter(kb), "pod", review_of(cpu), state)
    transformer = predictor_pod("hf-llama", "kserve/huggingfaceserver:latest-gpu")
    transformer["metadata"]["labels"]["component"] = "transformer"
    assert "warnings" not in ask(admitter(kb), "pod", review_of(transformer), state)


def test_deny_refuses_creation_with_the_reason(kb: KnowledgeBase, state: ClusterState) -> None:
    deny = admitter(kb, onUnknownRequirement="deny")
    resp = ask(deny, "pod", review_of(plain_gpu_pod("registry.local/team/llm:7")), state)
    assert resp["allowed"] is False and resp["status"]["code"] == 403
    assert resp["status"]["message"] == (
        "cudasched: Pod refused (onUnknownRequirement: deny): its CUDA requirement is "
        "unknown, image not in the image table: registry.local/team/llm:7; annotate the pod "
        "with cudasched.io/cuda-version or add an imageOverrides entry"
    )
    # A known image is admitted and constrained as ever.
    known = ask(deny, "pod", review_of(plain_gpu_pod("vllm/vllm-openai:v0.20.0")), state)
    assert known["allowed"] is True and "patch" in known


def test_inference_service_is_warned_at_apply_and_refused_only_on_create(
    kb: KnowledgeBase, state: ClusterState
) -> None:
    """The InferenceService's own admission says it at ``kubectl apply`` time (its pods'
    warnings go to their ReplicaSet). Under deny a CREATE is refused, never an UPDATE."""
    latest = runtimes()
    latest[0]["spec"]["containers"][0]["image"] = "kserve/huggingfaceserver:latest-gpu"
    unknown_state = ClusterState.from_objects(state.fleet.nodes, ISVCS, [], latest, kb=kb)
    review = review_of(isvc("hf-llama", "huggingface"))
    warned = ask(admitter(kb), "isvc", review, unknown_state)
    assert warned["allowed"] is True
    assert recorded_only(review, warned).startswith("unknown (tag's CUDA not recorded: ")
    assert warned["warnings"][0].endswith("kserve/huggingfaceserver:latest-gpu")
    assert "label ClusterServingRuntime kserve-huggingfaceserver" in warned["warnings"][1]

    deny = admitter(kb, onUnknownRequirement="deny")
    refused = ask(deny, "isvc", review, unknown_state)
    assert refused["allowed"] is False
    assert "InferenceService refused (onUnknownRequirement: deny)" in refused["status"]["message"]
    update = copy.deepcopy(review)
    update["request"]["operation"] = "UPDATE"
    assert ask(deny, "isvc", update, unknown_state)["allowed"] is True


def test_allow_is_silent(kb: KnowledgeBase, state: ClusterState) -> None:
    review = review_of(plain_gpu_pod("registry.local/team/llm:7"))
    resp = ask(admitter(kb, onUnknownRequirement="allow"), "pod", review, state)
    # No warning; what the webhook saw is still recorded on the pod.
    assert set(resp) == {"uid", "allowed", "patch", "patchType"} and resp["allowed"] is True
    assert recorded_only(review, resp).startswith("unknown (image not in the image table")


def test_mirrored_triton_is_known_and_a_configured_mirror_too(
    kb: KnowledgeBase, state: ClusterState
) -> None:
    """``alaudadockerhub/tritonserver`` is Triton (a built-in mirror); a registry's own copy
    is Triton once ``imageMirrors`` says so."""
    alauda = "registry.alauda.cn:60080/alaudadockerhub/tritonserver:25.02-py3"
    review = review_of(plain_gpu_pod(alauda))
    pod = applied(review, ask(admitter(kb), "pod", review, state))
    assert pod["metadata"]["annotations"][L.ANN_REQUIREMENT].startswith("cuda>=12.8, cc>=7.5")
    assert eligible(pod, state) == {"h100-r570", "l4-r570", "b200-r580"}  # not the V100

    harbor = review_of(plain_gpu_pod("harbor.example.com/ngc/tritonserver:25.02-py3"))
    unknown = ask(admitter(kb), "pod", harbor, state)
    assert recorded_only(harbor, unknown).startswith("unknown (")
    assert "image not in the image table" in unknown["warnings"][0]
    mirrored = admitter(kb, imageMirrors={"ngc/tritonserver": "nvidia/tritonserver"})
    resp = ask(mirrored, "pod", harbor, state)
    assert "warnings" not in resp
    assert eligible(applied(harbor, resp), state) == {"h100-r570", "l4-r570", "b200-r580"}


# --------------------------------------------------------------------------- item 8


def test_runtime_label_and_image_disagree_stricter_used_and_said_once(
    kb: KnowledgeBase, state: ClusterState
) -> None:
    """The Alauda runtime says CUDA 12.1; its image (Triton 25.02) needs 12.8 and compute
    capability 7.5, so V100 nodes are refused. The first pod of that runtime is told, the
    next replicas are not (and are answered from the memo); the InferenceService's own
    admission is told once too; another process (a new Admitter) tells again."""
    adm = admitter(kb)
    image = "registry.alauda.cn:60080/alaudadockerhub/tritonserver:25.02-py3"
    first = review_of(
        predictor_pod("aml-triton", image), uid="aaaaaaaa-0000-4000-8000-000000000001"
    )
    resp = ask(adm, "pod", first, state)
    pod = applied(first, resp)
    assert eligible(pod, state) == {"h100-r570", "l4-r570", "b200-r580"}
    (warning,) = resp["warnings"]
    assert "…" not in warning  # it fits the 120 characters a warning may have
    assert warning.startswith(
        "cudasched: using cuda>=12.8, cc>=7.5, what its image needs: ClusterServingRuntime "
        "aml-triton-cuda-12.1 says cuda>=12.1"
    )
    assert pod["metadata"]["annotations"][L.ANN_REQUIREMENT].startswith(
        "cuda>=12.8, cc>=7.5 (ClusterServingRuntime aml-triton-cuda-12.1, label "
        "cpaas.io/cuda-version; stricter image"
    )
    second = copy.deepcopy(first)
    second["request"]["uid"] = "aaaaaaaa-0000-4000-8000-000000000002"
    again = ask(adm, "pod", second, state)
    assert "warnings" not in again and again["patch"] == resp["patch"]
    third = copy.deepcopy(first)
    third["request"]["uid"] = "aaaaaaaa-0000-4000-8000-000000000003"
    body = orjson.dumps(third)
    assert adm.recall(adm.prepare("pod", body), state) is not None  # the quiet answer
    assert "warnings" not in orjson.loads(adm.review("pod", body, state))["response"]

    isvc_review = review_of(isvc("aml-triton", "triton", "aml-triton-cuda-12.1"))
    told = ask(adm, "isvc", isvc_review, state)
    assert told["warnings"] == [warning]
    assert "warnings" not in ask(adm, "isvc", isvc_review, state)

    assert ask(admitter(kb), "pod", second, state)["warnings"] == [warning]


def test_first_seen_is_bounded() -> None:
    seen = FirstSeen(max_keys=2)
    assert seen.first("a") and seen.first("b") and not seen.first("a")
    assert seen.first("c") and len(seen) == 2
    assert seen.first("a")  # the oldest was forgotten: said again
    with pytest.raises(ValueError, match="max_keys"):
        FirstSeen(0)


# --------------------------------------------------------------------------- the metric


def _metric(text: str, kind: str, reason: str) -> float:
    prefix = f'cudasched_webhook_unknown_requirement_total{{kind="{kind}",reason="{reason}"}} '
    (line,) = [x for x in text.splitlines() if x.startswith(prefix)]
    return float(line.removeprefix(prefix))


def test_unknown_requirements_are_counted_over_https(
    kb: KnowledgeBase, state: ClusterState
) -> None:
    """The real server: every answer that admits a workload with an unknown requirement is
    counted by kind and reason, a repeat answered from the decision memo too; known images
    and allowed-silently answers count the same way (the metric sees what warnings hide)."""
    cfg = WebhookConfig.from_mapping({"onUnknownRequirement": "allow"})
    with serve_in_thread(state, config=cfg) as server:
        tls = ssl.create_default_context(cadata=server.ca_pem.decode())
        with httpx.Client(base_url=server.url, verify=tls, timeout=10) as client:
            before = client.get("/metrics").text
            assert _metric(before, "Pod", "tag_not_recorded") == 0
            pod = predictor_pod("hf-llama", "kserve/huggingfaceserver:latest-gpu")
            for number in range(2):
                body = orjson.dumps(
                    review_of(pod, uid=f"bbbbbbbb-0000-4000-8000-00000000000{number}")
                )
                answer = client.post(POD_PATH, content=body).json()["response"]
                assert answer["allowed"] is True and "warnings" not in answer
            plain = review_of(plain_gpu_pod("registry.local/team/llm:7"))
            client.post(POD_PATH, content=orjson.dumps(plain))
            known = review_of(plain_gpu_pod("vllm/vllm-openai:v0.20.0"))
            client.post(POD_PATH, content=orjson.dumps(known))
            service = review_of(isvc("hf-llama", "huggingface"))
            client.post(ISVC_PATH, content=orjson.dumps(service))  # v0.20.0-gpu: known
            text = client.get("/metrics").text
    assert _metric(text, "Pod", "tag_not_recorded") == 2
    assert _metric(text, "Pod", "image_not_in_table") == 1
    assert _metric(text, "InferenceService", "tag_not_recorded") == 0
    remembered = 'cudasched_webhook_remembered_answers_total{endpoint="/mutate/pods"} '
    assert any(x.startswith(remembered) and float(x.split()[-1]) >= 1 for x in text.splitlines())
