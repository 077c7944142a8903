"""The webhook's pod path never drops the user's own node affinity (issue 12 item 6).

A pod that requires ``nvidia.com/cuda.runtime.major In [12]`` of its own used to lose that
term and be admitted to CUDA 13 drivers. Here the whole pod path is exercised (resolution,
compiled terms in the cluster's label scheme, the merge, the JSON patch), once over HTTPS on
the real server and then as a property through ``Admitter.review``: for random user affinities
on GFD and cudasched keys, the nodes the mutated pod may use are a subset of the nodes the
user's pod allowed, judged by Kubernetes' own matching rules.
"""

from __future__ import annotations

import functools
import ssl
from typing import Any

import httpx
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cudasched.knowledge import KnowledgeBase
from cudasched.settings.config import WebhookConfig
from cudasched.vocab import labels as L
from cudasched.vocab.nodeaffinity import RequiredNodeAffinity
from cudasched.webhook.admission.admitter import Admitter
from cudasched.webhook.admission.review import creation_review
from cudasched.webhook.server.app import POD_PATH
from cudasched.webhook.server.serving import serve_in_thread
from cudasched.webhook.state.clusterstate import ClusterState
from tests.support import builders
from tests.support.admission import applied, ask, fleet_node, nodes_state, readmit
from tests.support.k8s_schema import assert_valid_pod

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PRODUCTS = (
    "NVIDIA-A100-SXM4-80GB",
    "NVIDIA-H100-80GB-HBM3",
    "NVIDIA-L4",
    "Tesla-T4",
    "NVIDIA-B200",
)


@functools.cache
def kb() -> KnowledgeBase:
    return KnowledgeBase.load()


@functools.cache
def state() -> ClusterState:
    """test_admission's cluster (R470 to R570) plus CUDA 13 drivers (R580) and a V100."""
    return nodes_state(
        kb(),
        fleet_node("h100-r580", "NVIDIA-H100-80GB-HBM3", "580.95.05"),
        fleet_node("b200-r580", "NVIDIA-B200", "580.95.05", zone="zone-b"),
        fleet_node("v100-r570", "Tesla-V100-SXM2-16GB", "570.124.06"),
    )


@functools.cache
def admitter(scheme: str, policy: str) -> Admitter:
    config = WebhookConfig.from_mapping({"labelScheme": scheme, "policy": policy})
    return Admitter.from_config(config, kb=kb())


def gpu_pod(image: str, affinity_terms: list[dict[str, Any]] | None) -> dict[str, Any]:
    """A GPU pod with the user's own required node-selector terms."""
    return builders.pod(
        None,
        "ml",
        generate_name="work-",
        labels={"app": "work"},
        container="work",
        image=image,
        affinity=builders.required(*affinity_terms) if affinity_terms is not None else None,
    )


def eligible(pod: dict[str, Any]) -> set[str]:
    affinity = RequiredNodeAffinity.from_pod_spec(pod["spec"])
    return {n.name for n in state().nodes if affinity.match(n)}


CUDA_12_TERM = {
    "matchExpressions": [
        {"key": "nvidia.com/cuda.runtime.major", "operator": "In", "values": ["12"]}
    ]
}


def test_users_cuda_12_term_is_kept_over_https() -> None:
    """A CUDA 12.4 image runs on CUDA 13 drivers, but the user asked for CUDA 12 nodes: the
    mutated pod keeps that and is admitted to no R580 node."""
    image = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
    with serve_in_thread(state()) as server:
        tls = ssl.create_default_context(cadata=server.ca_pem.decode())
        with httpx.Client(base_url=server.url, verify=tls, timeout=10) as client:

            def admit(pod: dict[str, Any]) -> dict[str, Any]:
                review = creation_review(pod)
                answer = client.post(POD_PATH, content=orjson.dumps(review)).json()["response"]
                assert answer["allowed"] is True and "patch" in answer
                mutated = applied(review, answer)
                assert_valid_pod(mutated)
                return mutated

            theirs = admit(gpu_pod(image, [CUDA_12_TERM]))
            unconstrained = admit(gpu_pod(image, None))
    # torch 2.5.1+cu124 ships no Blackwell kernels, but runs on the R580 H100.
    assert "h100-r580" in eligible(unconstrained)
    assert eligible(theirs) == {"h100-r550", "h100-r570", "l4-r570", "v100-r570"}
    # Every term still carries the user's expression, before cudasched's marker.
    terms = theirs["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]
    for term in terms:
        expressions = term["matchExpressions"]
        assert expressions[0] == CUDA_12_TERM["matchExpressions"][0]
        assert {"key": "cudasched.io/injected", "operator": "DoesNotExist"} in expressions


# --------------------------------------------------------------------------- the property

_INTS = {
    "nvidia.com/cuda.runtime.major": (10, 14),
    "nvidia.com/cuda.runtime-version.major": (10, 14),
    "nvidia.com/cuda.runtime.minor": (0, 9),
    "nvidia.com/cuda.driver.major": (460, 590),
    "nvidia.com/cuda.driver-version.major": (460, 590),
    "nvidia.com/gpu.compute.major": (5, 11),
    L.CUDA_CODE: (11000, 13100),
    L.DRIVER_CODE: (470_000_000, 590_000_000),
    L.COMPUTE_CODE: (60, 110),
    L.DRIVER_BRANCH: (460, 590),
}
_VALUES = {
    "nvidia.com/gpu.product": PRODUCTS,
    L.GPU_PRODUCT: PRODUCTS,
    "topology.kubernetes.io/zone": ("zone-a", "zone-b"),
    L.GPU_DATACENTER: ("true", "false"),
    L.CUDA_VERSION: ("12.2", "12.4", "12.8", "13.0"),
}


@st.composite
def expressions(draw: st.DrawFn) -> dict[str, Any]:
    key = draw(st.sampled_from(sorted({*_INTS, *_VALUES})))
    operators = ["In", "NotIn", "Exists", "DoesNotExist"]
    if key in _INTS:
        operators += ["Gt", "Lt"]
    op = draw(st.sampled_from(operators))
    if op in ("Exists", "DoesNotExist"):
        return {"key": key, "operator": op}
    if op in ("Gt", "Lt"):
        low, high = _INTS[key]
        return {"key": key, "operator": op, "values": [str(draw(st.integers(low, high)))]}
    if key in _INTS:
        low, high = _INTS[key]
        pool = st.integers(low, high).map(str)
    else:
        pool = st.sampled_from(_VALUES[key])
    values = draw(st.lists(pool, min_size=1, max_size=3, unique=True))
    return {"key": key, "operator": op, "values": values}


USER_TERMS = st.lists(
    st.lists(expressions(), min_size=1, max_size=3).map(lambda es: {"matchExpressions": es}),
    min_size=1,
    max_size=3,
)
IMAGES = st.sampled_from(
    (
        "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
        "nvidia/cuda:12.8.1-runtime-ubuntu22.04",
        "nvcr.io/nvidia/tritonserver:24.05-py3",
        "nvcr.io/nvidia/tritonserver:20.10-py3",
        "vllm/vllm-openai:v0.20.0",
    )
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    terms=USER_TERMS,
    image=IMAGES,
    scheme=st.sampled_from(("cudasched", "gfd")),
    policy=st.sampled_from(("strict", "minor-compat")),
)
def test_mutation_never_widens_the_users_affinity(
    terms: list[dict[str, Any]], image: str, scheme: str, policy: str
) -> None:
    """Eligible after mutation ⊆ eligible by the user's own affinity, for random user terms
    on GFD and cudasched keys; and a second admission of the mutated pod changes nothing."""
    adm = admitter(scheme, policy)
    pod = gpu_pod(image, terms)
    review = creation_review(pod, uid="7d3c2b1a-0000-4000-8000-000000000001")
    resp = ask(adm, "pod", review, state())
    assert resp["allowed"] is True
    mutated = applied(review, resp)
    assert eligible(mutated) <= eligible(pod)
    if "patch" in resp:
        assert_valid_pod(mutated)
        assert "patch" not in readmit(adm, "pod", review, mutated, state())
