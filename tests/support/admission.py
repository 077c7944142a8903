"""The admission tests' cluster (a fleet of GPU nodes, cluster runtimes, InferenceServices,
all made with :mod:`tests.support.builders`) and the helpers that send it reviews and read the
answers as the API server does."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import ssl
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import orjson

from cudasched.cluster.snapshot import ClusterSnapshot
from cudasched.knowledge import KnowledgeBase
from cudasched.settings.config import WebhookConfig
from cudasched.vocab import labels as L
from cudasched.webhook.admission.admitter import Admitter
from cudasched.webhook.admission.review import MAX_WARNING_CHARS, creation_review
from cudasched.webhook.server.app import WebhookApp
from cudasched.webhook.server.serving import RunningServer
from cudasched.webhook.state.clusterstate import ClusterState
from tests.support import builders
from tests.support.builders import (
    ALL_SCHEMES,
    GFD_SCHEMES,
    expr,
    isvc,
    node,
    required,
    runtime,
    term,
)


def fleet_node(
    name: str,
    gpu: str,
    driver: str,
    *,
    zone: str = "zone-a",
    scheme: str | tuple[str, ...] = ALL_SCHEMES,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A GPU node of the admission tests' fleet: a zone and the ``tier=gpu`` pool label that
    the runtimes' own affinity (:data:`RUNTIME_AFFINITY`) selects."""
    fleet = {"topology.kubernetes.io/zone": zone, "node-pool.example.com/tier": "gpu"}
    return node(name, gpu=gpu, driver=driver, scheme=scheme, labels=fleet | (labels or {}))


def nodes(*, ours: bool = True) -> list[dict[str, Any]]:
    """The fleet: A100 on R535 (CUDA 12.2), H100 on R550 (12.4) and R570 (12.8, spot), L4 on
    R570, T4 on R470 (11.4), one CPU node; ``ours=False``: the agent has not labelled the
    A100, the R550 H100 and the T4 (GFD only)."""
    some = ALL_SCHEMES if ours else GFD_SCHEMES
    return [
        fleet_node("a100-r535", "NVIDIA-A100-SXM4-80GB", "535.216.01", scheme=some),
        fleet_node("h100-r550", "NVIDIA-H100-80GB-HBM3", "550.90.07", scheme=some),
        fleet_node(
            "h100-r570",
            "NVIDIA-H100-80GB-HBM3",
            "570.124.06",
            zone="zone-b",
            labels={"node-pool.example.com/spot": "true"},
        ),
        fleet_node("l4-r570", "NVIDIA-L4", "570.124.06", zone="zone-b"),
        fleet_node("t4-r470", "Tesla-T4", "470.256.02", scheme=some),
        node("cpu-1", gpu=None, driver=None),
    ]


def runtimes() -> list[dict[str, Any]]:
    return [
        csr(
            "kserve-tritonserver",
            "nvcr.io/nvidia/tritonserver:24.05-py3",
            "triton",
            auto_select=True,
            protocols=("v2", "grpc-v2"),
        ),
        csr(
            "vllm-cuda-12-4",
            "vllm/vllm-openai:v0.6.3",
            "vllm",
            labels={**ALAUDA, "cpaas.io/cuda-version": "12.4"},
            affinity=RUNTIME_AFFINITY,
        ),
        csr(
            "vllm-cuda-12-9",
            "vllm/vllm-openai:v0.11.1",
            "vllm",
            labels={**ALAUDA, "cpaas.io/cuda-version": "12.9"},
        ),
        csr(
            "kserve-sklearnserver",
            "kserve/sklearnserver:v0.14.1",
            "sklearn",
            auto_select=True,
            protocols=("v1", "v2"),
        ),
    ]


def isvcs() -> list[dict[str, Any]]:
    return [
        service("triton-resnet", "triton", "kserve-tritonserver"),
        service("llm-chat", "vllm", "vllm-cuda-12-4"),
        service("llm-big", "vllm", "vllm-cuda-12-9"),
        service("sklearn-iris", "sklearn", "kserve-sklearnserver", gpus=None),
    ]


def ask(adm: Admitter, kind: str, review: dict[str, Any], st_: ClusterState) -> dict[str, Any]:
    """Send a review, check the envelope the API server verifies, return ``response``."""
    answer = orjson.loads(adm.review(kind, orjson.dumps(review), st_))  # type: ignore[arg-type]
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    resp = answer["response"]
    assert resp["uid"] == review["request"]["uid"]
    assert ("patch" in resp) == ("patchType" in resp)
    if "patchType" in resp:
        assert resp["patchType"] == "JSONPatch"
    for warning in resp.get("warnings", []):
        assert 0 < len(warning) <= MAX_WARNING_CHARS
    if not resp["allowed"]:
        assert resp["status"]["code"] >= 400 and resp["status"]["message"]
    return resp


def ops_of(resp: dict[str, Any]) -> list[dict[str, Any]]:
    if "patch" not in resp:
        return []
    ops = json.loads(base64.b64decode(resp["patch"]))
    assert ops, "an empty patch must be sent as no patch at all"
    return ops


def applied(review: dict[str, Any], resp: dict[str, Any]) -> dict[str, Any]:
    """The object after the API server applies our patch (raises if it would not apply)."""
    return jsonpatch.apply_patch(review["request"]["object"], ops_of(resp))


def recorded_only(review: dict[str, Any], resp: dict[str, Any]) -> str:
    """What an answer that constrains nothing records: it patches only the object's
    annotations, and returns its ``cudasched.io/requirement`` (``unknown (why)`` for a GPU
    workload whose CUDA cannot be told)."""
    assert all(op["path"].startswith("/metadata/annotations") for op in ops_of(resp))
    after = applied(review, resp)
    before = review["request"]["object"]
    assert {k: v for k, v in after.items() if k != "metadata"} == {
        k: v for k, v in before.items() if k != "metadata"
    }
    return str(((after.get("metadata") or {}).get("annotations") or {}).get(L.ANN_REQUIREMENT))


def readmit(
    adm: Admitter, kind: str, review: dict[str, Any], obj: dict[str, Any], st_: ClusterState
) -> dict[str, Any]:
    """The same request again with the mutated object (reinvocation, KServe dry-run)."""
    again = copy.deepcopy(review)
    again["request"]["object"] = obj
    again["request"]["uid"] = review["request"]["uid"][:-4] + "beef"
    return ask(adm, kind, again, st_)


def state_of(snap: ClusterSnapshot, kb: KnowledgeBase, nodes: Any = None) -> ClusterState:
    return ClusterState.from_objects(
        snap.nodes if nodes is None else nodes,
        snap.inference_services,
        snap.serving_runtimes,
        snap.cluster_serving_runtimes,
        kb=kb,
    )


def nodes_state(kb: KnowledgeBase, *extra: dict[str, Any]) -> ClusterState:
    """The sample fleet's nodes (:func:`nodes`, then ``extra``) as the webhook's cluster state,
    with no KServe objects: what a rule about pods alone is judged against."""
    return ClusterState.from_objects([*nodes(), *extra], [], [], [], kb=kb)


def admitter(kb: KnowledgeBase, **settings_: Any) -> Admitter:
    return Admitter.from_config(WebhookConfig.from_mapping(settings_), kb=kb)


def admitted_pod(
    kb: KnowledgeBase, snapshot: ClusterSnapshot, bound_to: str | None = None
) -> dict[str, Any]:
    """A CUDA 12.4 pod (``default/llm``) as the webhook admitted it into ``snapshot`` under
    ``kb`` (its requirement annotation and node affinity), running on ``bound_to``."""
    workload = builders.pod("llm", image="nvidia/cuda:12.4.1-runtime-ubuntu22.04")
    review = creation_review(workload, uid="uid-1")
    answer = ask(admitter(kb), "pod", review, state_of(snapshot, kb))
    admitted = applied(review, answer)
    if bound_to is not None:
        admitted["spec"]["nodeName"] = bound_to
    return admitted


def pod_reviews(snap: ClusterSnapshot) -> list[dict[str, Any]]:
    reviews = [creation_review(pod, uid="seed") for pod in snap.pods]
    reviews += [json.loads((DATA / f).read_text()) for f in sorted(p.name for p in DATA.iterdir())]
    return reviews


def with_uid(review: dict[str, Any], uid: str) -> bytes:
    out = copy.deepcopy(review)
    out["request"]["uid"] = uid
    return orjson.dumps(out)


def kind_of(review: dict[str, Any]) -> str:
    return "isvc" if review["request"]["kind"]["kind"] == "InferenceService" else "pod"


def api_server_body(review: dict[str, Any], uid: str) -> bytes:
    """The review laid out the way the API server writes it: Go's field order (kind before
    apiVersion, uid first in the request), no whitespace."""
    request = {"uid": uid, **{k: v for k, v in review["request"].items() if k != "uid"}}
    return orjson.dumps(
        {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request}
    )


def review(uid: str = "uid-1", **request: Any) -> bytes:
    """The body of a GPU pod's CREATE review, with ``request`` fields added (for the fake
    admission, which reads only the uid)."""
    doc = builders.review(builders.pod(), uid=uid)
    doc["request"] |= request
    return orjson.dumps(doc)


class Unsynced:
    """A state source whose cache never finished its first list."""

    state = None
    synced = False
    not_ready_reason = "waiting for the first list of nodes"

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None


def client(server: RunningServer, **kwargs: Any) -> httpx.Client:
    tls = ssl.create_default_context(cadata=server.ca_pem.decode())
    return httpx.Client(base_url=server.url, verify=tls, timeout=10.0, **kwargs)


def call_app(app: WebhookApp, path: str, body: bytes, method: str = "POST") -> tuple[int, bytes]:
    """Drive the ASGI app directly (no network) and collect status and body."""
    sent: list[dict[str, Any]] = []
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "headers": [(b"content-length", str(len(body)).encode())],
    }
    asyncio.run(app(scope, receive, send))
    status = sent[0]["status"]
    return status, b"".join(m.get("body", b"") for m in sent[1:])


ALAUDA = {"cpaas.io/accelerator-type": "nvidia"}


DATA = Path(__file__).parents[1] / "data" / "admission"


RUNTIME_AFFINITY = required(term(expr("node-pool.example.com/tier", "In", "gpu")))


def csr(name: str, image: str, fmt: str, *, auto_select: bool = False, **kw: Any) -> dict[str, Any]:
    """A ClusterServingRuntime of the fleet, created before every test object."""
    return runtime(
        name,
        image=image,
        formats=[fmt],
        auto_select=auto_select,
        protocols=kw.pop("protocols", ("v2",)),
        labels=kw.pop("labels", {}),
        created="2026-01-10T08:00:00Z",
        **kw,
    )


def service(name: str, fmt: str, runtime_name: str, *, gpus: int | None = 1) -> dict[str, Any]:
    """An InferenceService of namespace ``ml`` whose chosen runtime KServe reported."""
    return isvc(
        name,
        "ml",
        model_format=fmt,
        runtime=runtime_name,
        gpus=gpus,
        cluster_runtime=runtime_name,
    )
