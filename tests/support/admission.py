"""Shared test support."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import ssl
import threading
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import orjson

from cudasched.cluster.snapshot import ClusterSnapshot
from cudasched.knowledge import KnowledgeBase
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.webhook.admission import Admitter
from cudasched.webhook.app import WebhookApp
from cudasched.webhook.config import WebhookConfig
from cudasched.webhook.review import MAX_WARNING_CHARS, creation_review
from cudasched.webhook.serving import RunningServer
from cudasched.webhook.state import ClusterState

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def gpu_node(
    name: str,
    driver: str,
    cuda: str,
    cc: str,
    product: str,
    *,
    zone: str = "zone-a",
    ours: bool = True,
    gfd_new: bool = True,
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A GPU Node labelled like GFD (both generations) plus, optionally, our agent."""
    dmaj, dmin, drev = driver.split(".")
    cmaj, cmin = cuda.split(".")
    ccmaj, ccmin = cc.split(".")
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "topology.kubernetes.io/zone": zone,
        "node-pool.example.com/tier": "gpu",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.compute.major": ccmaj,
        "nvidia.com/gpu.compute.minor": ccmin,
        "nvidia.com/cuda.driver.major": dmaj,
        "nvidia.com/cuda.driver.minor": dmin,
        "nvidia.com/cuda.driver.rev": drev,
        "nvidia.com/cuda.runtime.major": cmaj,
        "nvidia.com/cuda.runtime.minor": cmin,
    }
    if gfd_new:
        labels |= {
            "nvidia.com/cuda.driver-version.full": driver,
            "nvidia.com/cuda.driver-version.major": dmaj,
            "nvidia.com/cuda.driver-version.minor": dmin,
            "nvidia.com/cuda.driver-version.revision": drev,
            "nvidia.com/cuda.runtime-version.full": cuda,
            "nvidia.com/cuda.runtime-version.major": cmaj,
            "nvidia.com/cuda.runtime-version.minor": cmin,
        }
    if ours:
        labels |= {
            L.CUDA_CODE: str(int(cmaj) * 1000 + int(cmin) * 10),
            L.CUDA_VERSION: cuda,
            L.DRIVER_CODE: str(int(dmaj) * 1_000_000 + int(dmin) * 1000 + int(drev)),
            L.DRIVER_VERSION: driver,
            L.DRIVER_BRANCH: dmaj,
            L.COMPUTE_CODE: str(int(ccmaj) * 10 + int(ccmin)),
            L.GPU_PRODUCT: product,
            L.GPU_DATACENTER: "true",
        }
    labels |= extra or {}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def nodes(*, ours: bool = True) -> list[dict[str, Any]]:
    return [
        gpu_node("a100-r535", "535.216.01", "12.2", "8.0", "NVIDIA-A100-SXM4-80GB", ours=ours),
        gpu_node("h100-r550", "550.90.07", "12.4", "9.0", "NVIDIA-H100-80GB-HBM3", ours=ours),
        gpu_node(
            "h100-r570",
            "570.124.06",
            "12.8",
            "9.0",
            "NVIDIA-H100-80GB-HBM3",
            zone="zone-b",
            extra={"node-pool.example.com/spot": "true"},
        ),
        gpu_node("l4-r570", "570.124.06", "12.8", "8.9", "NVIDIA-L4", zone="zone-b"),
        gpu_node("t4-r470", "470.256.02", "11.4", "7.5", "Tesla-T4", ours=ours),
        cpu_node("cpu-1"),
    ]


def runtimes() -> list[dict[str, Any]]:
    return [
        csr(
            "kserve-tritonserver",
            "nvcr.io/nvidia/tritonserver:24.05-py3",
            "triton",
            auto=True,
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
            "vllm/vllm-openai:v0.9.1",
            "vllm",
            labels={**ALAUDA, "cpaas.io/cuda-version": "12.9"},
        ),
        csr(
            "kserve-sklearnserver",
            "kserve/sklearnserver:v0.14.1",
            "sklearn",
            auto=True,
            protocols=("v1", "v2"),
        ),
    ]


def isvcs() -> list[dict[str, Any]]:
    return [
        isvc("triton-resnet", "triton", "kserve-tritonserver"),
        isvc("llm-chat", "vllm", "vllm-cuda-12-4"),
        isvc("llm-big", "vllm", "vllm-cuda-12-9"),
        isvc("sklearn-iris", "sklearn", "kserve-sklearnserver", gpu=False),
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


def admitter(kb: KnowledgeBase, **settings_: Any) -> Admitter:
    return Admitter.from_config(WebhookConfig.from_mapping(settings_), kb=kb)


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
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": uid, "operation": "CREATE", **request},
    }
    return orjson.dumps(body)


class StandIn:
    """Plays the Admitter: answers with the request uid; ``mode`` picks the decision."""

    def __init__(self, mode: str = "unchanged") -> None:
        self.mode = mode
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls = 0

    def review(self, kind: str, body: bytes, state: Any) -> bytes:
        self.calls += 1
        doc = orjson.loads(body)
        if doc.get("kind") != "AdmissionReview":
            raise InputError("not an AdmissionReview")
        uid = doc["request"]["uid"]
        if self.mode == "block":
            self.entered.set()
            self.release.wait(30)
        if self.mode == "raise":
            raise RuntimeError("bug in admission")
        response: dict[str, Any] = {"uid": uid, "allowed": self.mode != "deny"}
        if self.mode == "patch":
            ops = [{"op": "add", "path": "/metadata/annotations", "value": {"k": kind}}]
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(orjson.dumps(ops)).decode()
        if self.mode == "deny":
            response["status"] = {"code": 403, "message": "no"}
        return orjson.dumps(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
        )


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


RUNTIME_AFFINITY = {
    "nodeAffinity": {
        REQUIRED: {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "node-pool.example.com/tier", "operator": "In", "values": ["gpu"]}
                    ]
                }
            ]
        }
    }
}


def cpu_node(name: str) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def csr(
    name: str,
    image: str,
    fmt: str,
    *,
    labels: dict[str, str] | None = None,
    auto: bool = False,
    protocols: tuple[str, ...] = ("v2",),
    affinity: dict[str, Any] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "supportedModelFormats": [{"name": fmt, "version": "1", "autoSelect": auto}],
        "protocolVersions": list(protocols),
        "containers": [{"name": "kserve-container", "image": image}],
    }
    if affinity is not None:
        spec["affinity"] = affinity
    return {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "ClusterServingRuntime",
        "metadata": {
            "name": name,
            "labels": labels or {},
            "creationTimestamp": "2026-01-10T08:00:00Z",
        },
        "spec": spec,
    }


def isvc(name: str, fmt: str, runtime: str, *, gpu: bool = True) -> dict[str, Any]:
    model: dict[str, Any] = {
        "modelFormat": {"name": fmt},
        "runtime": runtime,
        "storageUri": f"pvc://models/{name}",
    }
    if gpu:
        model["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"predictor": {"model": model}},
        "status": {"clusterServingRuntimeName": runtime},
    }
