"""Synthetic but realistic cluster objects for the benchmarks, the recorded answers
(:mod:`tests.answers`) and the tests that need a fleet at scale.

Benchmarks on toy inputs flatter the code: a fleet of identical nodes makes every grouping
trivially cheap, a request with no affinity skips the merge. So everything here is derived from
the bundled sample cluster (``cudasched.cluster.snapshot.bundled_snapshot()``), which was written
to look like ``kubectl get -o yaml`` output of a heterogeneous EKS + on-premises cluster:

* nodes copy a sample node's full object (GFD labels, cudasched labels, NFD labels, status) and
  get their own name, hostname, uid, zone, GFD timestamp and addresses; pools are weighted like
  a real fleet (many A10G/L4/H100, few K80/B200);
* runtimes vary the sample runtimes' images (Triton, vLLM, TorchServe, Hugging Face releases),
  Alauda ``cpaas.io/*`` labels and ``cudasched.io/cuda-version`` annotations, half namespaced,
  half cluster-wide;
* InferenceServices name one of those runtimes (or leave KServe to auto-select), and their
  predictor pods are copies of the sample predictor pods as the API server hands them to a
  mutating webhook at CREATE (``generateName`` only, no status), with varied annotations,
  nodeSelectors and node affinities.

Everything is drawn from a seeded :class:`random.Random`, so two runs see the same objects.
"""

from __future__ import annotations

import copy
import random
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from cudasched.cluster.snapshot import ClusterSnapshot, bundled_snapshot

__all__ = [
    "NAMESPACES",
    "Cluster",
    "admission_review",
    "make_cluster",
    "make_nodes",
    "make_runtimes",
    "make_workloads",
]

KubeObject = dict[str, Any]

NAMESPACES = (
    "team-vision",
    "team-nlp",
    "team-speech",
    "team-recsys",
    "ml-batch",
    "ml-platform",
    "research-a",
    "research-b",
)

_ZONES = ("us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d")

# How common each sample node's pool is in a synthetic fleet (first match of the name wins).
# Cloud pools dominate; the old on-premises Kepler/R470 hardware is a small remainder.
_POOL_WEIGHTS = (
    ("dc1-k80", 1),
    ("dc1-t4-r470", 2),
    ("dc1-v100", 3),
    ("dc1-t4", 6),
    ("dc1-a100", 8),
    ("ws-rtx4090", 1),
    ("ip-10-42-11", 14),
    ("ip-10-42-12", 14),
    ("ip-10-42-13", 10),
    ("ip-10-42-21", 10),
    ("ip-10-42-22", 5),
    ("ip-10-42-23", 4),
    ("ip-10-42-31", 3),
    ("ip-10-42-32", 2),
    ("ip-10-42-1-", 6),  # CPU-only system nodes
)

_IMAGES = {
    "triton": tuple(
        f"nvcr.io/nvidia/tritonserver:{r}-py3"
        for r in ("23.05", "23.10", "24.01", "24.05", "24.08", "24.12", "25.01", "25.03")
    ),
    "vllm": tuple(
        f"docker.io/vllm/vllm-openai:{t}"
        for t in ("v0.6.3", "v0.7.2", "v0.8.4", "v0.9.0", "v0.10.1", "v0.23.0")
    ),
    "torchserve": tuple(
        f"pytorch/torchserve-kfs:{t}" for t in ("0.8.2-gpu", "0.9.0-gpu", "0.11.0-gpu")
    ),
    "huggingface": tuple(
        f"kserve/huggingfaceserver:{t}" for t in ("v0.13.1-gpu", "v0.14.0-gpu", "v0.15.2-gpu")
    ),
    "custom": tuple(
        f"registry.dc1.example.com/nlp/vllm-openai:{t}"
        for t in ("0.6.3-cu124", "0.7.3-cu126", "0.9.1-cu128")
    ),
}
_ALAUDA_CUDA = ("11.8", "12.1", "12.4", "12.6", "12.8", "13.0")
_ANNOTATED_CUDA = ("12.1", "12.2", "12.4", "12.6", "12.8", "13.0")


@dataclass(frozen=True, slots=True)
class Cluster:
    """A synthetic cluster: what the webhook cache lists, and the predictor pods to admit."""

    nodes: tuple[KubeObject, ...]
    inference_services: tuple[KubeObject, ...]
    serving_runtimes: tuple[KubeObject, ...]
    cluster_serving_runtimes: tuple[KubeObject, ...]
    pods: tuple[KubeObject, ...]


def _clone(obj: Mapping[str, Any]) -> KubeObject:
    """A deep copy through JSON: the objects are JSON by construction, and this is ~10x faster
    than ``copy.deepcopy`` for the thousands of copies a large fleet needs."""
    return orjson.loads(orjson.dumps(obj))


def _uid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _pool_of(name: str) -> str:
    for prefix, _ in _POOL_WEIGHTS:
        if name.startswith(prefix):
            return prefix
    return name


def _node_name(template: str, rng: random.Random, serial: int, taken: set[str]) -> str:
    """A name in the template's style: EC2 private DNS names for cloud nodes, a numbered
    rack name for the on-premises pools."""
    while True:
        if template.startswith("ip-"):
            name = f"ip-10-{rng.randrange(32, 64)}-{rng.randrange(256)}-{rng.randrange(1, 255)}"
            name += ".ec2.internal"
        else:
            stem = re.sub(r"-?\d+$", "", template)
            name = f"{stem}-{serial:05d}"
        if name not in taken:
            taken.add(name)
            return name
        serial += 1


def make_nodes(
    count: int, seed: int = 1, snapshot: ClusterSnapshot | None = None
) -> list[KubeObject]:
    """``count`` Node objects drawn from the sample cluster's pools (weighted as above)."""
    snap = snapshot if snapshot is not None else bundled_snapshot()
    rng = random.Random(seed)
    by_pool: dict[str, list[KubeObject]] = {}
    for node in snap.nodes:
        by_pool.setdefault(_pool_of(node["metadata"]["name"]), []).append(node)
    pools = [p for p, _ in _POOL_WEIGHTS if p in by_pool]
    weights = [w for p, w in _POOL_WEIGHTS if p in by_pool]
    taken: set[str] = set()
    base_stamp = 1_764_470_000
    out: list[KubeObject] = []
    for serial in range(count):
        pool = rng.choices(pools, weights)[0]
        template = rng.choice(by_pool[pool])
        node = _clone(template)
        meta = node["metadata"]
        name = _node_name(meta["name"], rng, serial, taken)
        meta["name"] = name
        meta["uid"] = _uid(rng)
        meta["resourceVersion"] = str(48_000_000 + rng.randrange(1_000_000))
        labels = meta.setdefault("labels", {})
        labels["kubernetes.io/hostname"] = name
        if "nvidia.com/gfd.timestamp" in labels:
            labels["nvidia.com/gfd.timestamp"] = str(base_stamp + rng.randrange(3600))
        if "topology.kubernetes.io/zone" in labels:
            zone = rng.choice(_ZONES)
            labels["topology.kubernetes.io/zone"] = zone
            labels["topology.kubernetes.io/region"] = zone[:-1]
        ip = f"10.{rng.randrange(32, 64)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
        status = node.get("status") or {}
        status["addresses"] = [
            {"address": ip, "type": "InternalIP"},
            {"address": name, "type": "Hostname"},
        ]
        info = status.get("nodeInfo")
        if isinstance(info, dict):
            info["bootID"] = _uid(rng)
            info["systemUUID"] = _uid(rng).upper()
            info["machineID"] = uuid.UUID(int=rng.getrandbits(128)).hex
        out.append(node)
    return out


def _family(runtime: Mapping[str, Any]) -> str:
    image = runtime["spec"]["containers"][0]["image"]
    labels = runtime["metadata"].get("labels") or {}
    if labels.get("cpaas.io/accelerator-type"):
        return "alauda-" + labels["cpaas.io/accelerator-type"]
    for family in ("tritonserver", "torchserve", "huggingfaceserver", "sklearn"):
        if family in image:
            return family
    return "vllm-custom" if "registry.dc1" in image else "vllm"


def make_runtimes(
    count: int, seed: int = 2, snapshot: ClusterSnapshot | None = None
) -> tuple[list[KubeObject], list[KubeObject]]:
    """``count`` runtimes: (namespaced ServingRuntimes, ClusterServingRuntimes), about half
    each, every one a variant of a sample runtime with its own name and image or labels."""
    snap = snapshot if snapshot is not None else bundled_snapshot()
    rng = random.Random(seed)
    templates = [*snap.serving_runtimes, *snap.cluster_serving_runtimes]
    namespaced: list[KubeObject] = []
    cluster: list[KubeObject] = []
    for k in range(count):
        template = templates[k % len(templates)]
        family = _family(template)
        rt = _clone(template)
        meta = rt["metadata"]
        meta["uid"] = _uid(rng)
        container = rt["spec"]["containers"][0]
        labels = meta.get("labels") or {}
        annotations = meta.get("annotations") or {}
        if family == "tritonserver":
            container["image"] = rng.choice(_IMAGES["triton"])
        elif family == "vllm":
            container["image"] = rng.choice(_IMAGES["vllm"])
        elif family == "torchserve":
            container["image"] = rng.choice(_IMAGES["torchserve"])
        elif family == "huggingfaceserver":
            container["image"] = rng.choice(_IMAGES["huggingface"])
        elif family == "vllm-custom":
            container["image"] = rng.choice(_IMAGES["custom"])
            annotations["cudasched.io/cuda-version"] = rng.choice(_ANNOTATED_CUDA)
        elif family == "alauda-nvidia":
            cuda = rng.choice(_ALAUDA_CUDA)
            labels["cpaas.io/cuda-version"] = cuda
            annotations["cpaas.io/display-name"] = f"vllm-cuda-{cuda}"
            container["image"] = rng.choice(_IMAGES["vllm"])
        if labels:
            meta["labels"] = labels
        if annotations:
            meta["annotations"] = annotations
        # Only a few runtimes compete in auto-selection, as in a real cluster; the rest are
        # named explicitly by the InferenceServices that use them.
        if k >= len(templates):
            for fmt in rt["spec"].get("supportedModelFormats") or ():
                fmt["autoSelect"] = False
        base = re.sub(r"-\d+$", "", meta["name"])
        meta["name"] = f"{base}-{k:03d}" if k >= len(templates) else meta["name"]
        if k % 2 == 0 or template["kind"] == "ServingRuntime":
            rt["kind"] = "ServingRuntime"
            meta["namespace"] = (
                meta.get("namespace")
                if k < len(templates) and meta.get("namespace")
                else NAMESPACES[k % len(NAMESPACES)]
            )
            namespaced.append(rt)
        else:
            rt["kind"] = "ClusterServingRuntime"
            meta.pop("namespace", None)
            cluster.append(rt)
    return namespaced, cluster


_NODE_SELECTORS: tuple[dict[str, str] | None, ...] = (
    None,
    None,
    None,
    {"node.kubernetes.io/instance-type": "p5.48xlarge"},
    {"node.kubernetes.io/instance-type": "g5.12xlarge"},
    {"topology.kubernetes.io/zone": "us-east-1a"},
    {"kubernetes.io/os": "linux"},
)


def _affinity(rng: random.Random) -> dict[str, Any] | None:
    """A user's own node affinity: none (most pods), a GPU-memory floor, an instance-type
    preference, or both."""
    pick = rng.random()
    if pick < 0.55:
        return None
    required = {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    {
                        "key": "nvidia.com/gpu.memory",
                        "operator": "Gt",
                        "values": [rng.choice(["16000", "20000", "40000"])],
                    }
                ]
            }
        ]
    }
    preferred = [
        {
            "weight": rng.choice([10, 50, 100]),
            "preference": {
                "matchExpressions": [
                    {
                        "key": "node.kubernetes.io/instance-type",
                        "operator": "In",
                        "values": ["p5.48xlarge", "p5e.48xlarge"],
                    }
                ]
            },
        }
    ]
    node_affinity: dict[str, Any] = {}
    if pick < 0.8:
        node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = required
    if pick >= 0.7:
        node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    return {"nodeAffinity": node_affinity}


def _annotate(rng: random.Random, annotations: dict[str, Any]) -> None:
    """Varied ``cudasched.io/*`` annotations: most pods declare nothing and rely on their
    runtime or image; some pin a CUDA version, a policy or a compute capability."""
    pick = rng.random()
    if pick < 0.6:
        return
    if pick < 0.85:
        annotations["cudasched.io/cuda-version"] = rng.choice(_ANNOTATED_CUDA)
        if rng.random() < 0.4:
            annotations["cudasched.io/policy"] = rng.choice(
                ["strict", "minor-compat", "forward-compat"]
            )
    elif pick < 0.95:
        annotations["cudasched.io/min-compute-capability"] = rng.choice(["7.0", "8.0", "8.9"])
    else:
        annotations["cudasched.io/cuda-version"] = rng.choice(["13.2", "11.4"])
        annotations["cudasched.io/policy"] = "strict"


def _predictor_templates(snap: ClusterSnapshot) -> list[KubeObject]:
    return [
        p
        for p in snap.pods
        if (p["metadata"].get("labels") or {}).get("serving.kserve.io/inferenceservice")
    ]


def make_workloads(
    count: int, seed: int = 3, snapshot: ClusterSnapshot | None = None
) -> list[KubeObject]:
    """``count`` Pods for ``explain``: copies of every sample pod with varied annotations,
    nodeSelectors and affinities (each pod's requirement comes from its annotations)."""
    snap = snapshot if snapshot is not None else bundled_snapshot()
    rng = random.Random(seed)
    out: list[KubeObject] = []
    for k in range(count):
        template = snap.pods[k % len(snap.pods)]
        pod = _clone(template)
        meta = pod["metadata"]
        meta["name"] = f"{meta.get('generateName') or meta['name'] + '-'}{k:06d}"
        meta["namespace"] = rng.choice(NAMESPACES)
        annotations = meta.setdefault("annotations", {})
        if rng.random() < 0.5:  # keep the sample's own annotations on half of them
            for key in [a for a in annotations if a.startswith("cudasched.io/")]:
                del annotations[key]
            _annotate(rng, annotations)
        spec = pod["spec"]
        if rng.random() < 0.5:
            selector = rng.choice(_NODE_SELECTORS)
            spec.pop("nodeSelector", None)
            if selector:
                spec["nodeSelector"] = dict(selector)
            affinity = _affinity(rng)
            spec.pop("affinity", None)
            if affinity:
                spec["affinity"] = affinity
        out.append(pod)
    return out


def _runtime_format(runtime: Mapping[str, Any]) -> str:
    formats = runtime["spec"].get("supportedModelFormats") or [{"name": "custom"}]
    return str(formats[0]["name"])


def make_cluster(
    nodes: int,
    runtimes: int = 200,
    isvcs: int = 1000,
    seed: int = 4,
    snapshot: ClusterSnapshot | None = None,
) -> Cluster:
    """A whole synthetic cluster: ``nodes`` Nodes, ``runtimes`` runtimes, ``isvcs``
    InferenceServices (each naming a runtime of its namespace or a cluster runtime, a few left
    to auto-selection), and one pending predictor pod per InferenceService."""
    snap = snapshot if snapshot is not None else bundled_snapshot()
    rng = random.Random(seed)
    node_objs = make_nodes(nodes, seed + 1, snap)
    namespaced, cluster_wide = make_runtimes(runtimes, seed + 2, snap)
    by_ns: dict[str, list[KubeObject]] = {}
    for rt in namespaced:
        by_ns.setdefault(rt["metadata"]["namespace"], []).append(rt)
    isvc_templates = {i["metadata"]["name"]: i for i in snap.inference_services}
    pod_templates = _predictor_templates(snap)
    isvc_objs: list[KubeObject] = []
    pods: list[KubeObject] = []
    for k in range(isvcs):
        ns = NAMESPACES[k % len(NAMESPACES)]
        template_pod = pod_templates[k % len(pod_templates)]
        base = template_pod["metadata"]["labels"]["serving.kserve.io/inferenceservice"]
        name = f"{base}-{k:05d}"
        candidates = by_ns.get(ns, []) + cluster_wide
        runtime = rng.choice(candidates) if candidates else None
        isvc = _clone(isvc_templates[base])
        imeta = isvc["metadata"]
        imeta.update(name=name, namespace=ns, uid=_uid(rng))
        predictor = isvc["spec"]["predictor"]
        model = predictor.get("model")
        if runtime is not None and isinstance(model, dict) and rng.random() < 0.9:
            model["runtime"] = runtime["metadata"]["name"]
            model["modelFormat"] = {"name": _runtime_format(runtime)}
        isvc.pop("status", None)
        isvc_objs.append(isvc)

        pod = _clone(template_pod)
        meta = pod["metadata"]
        rs = f"{name}-predictor-{rng.getrandbits(40):010x}"
        meta.pop("name", None)
        meta.pop("uid", None)
        meta.pop("resourceVersion", None)
        meta.pop("creationTimestamp", None)
        meta["generateName"] = rs + "-"
        meta["namespace"] = ns
        labels = meta.setdefault("labels", {})
        labels["serving.kserve.io/inferenceservice"] = name
        labels["app"] = f"isvc.{name}-predictor"
        labels["pod-template-hash"] = rs.rsplit("-", 1)[1]
        for owner in meta.get("ownerReferences") or ():
            owner["name"] = rs
            owner["uid"] = _uid(rng)
        containers = pod["spec"]["containers"]
        if runtime is not None and containers and isinstance(model, dict) and "runtime" in model:
            containers[0]["image"] = runtime["spec"]["containers"][0]["image"]
        _annotate(rng, meta.setdefault("annotations", {}))
        spec = pod["spec"]
        if rng.random() < 0.3:
            selector = rng.choice(_NODE_SELECTORS)
            if selector:
                spec["nodeSelector"] = dict(selector)
        if "affinity" not in spec and (affinity := _affinity(rng)) is not None:
            spec["affinity"] = affinity
        spec.pop("nodeName", None)
        pod.pop("status", None)
        pods.append(pod)
    return Cluster(
        nodes=tuple(node_objs),
        inference_services=tuple(isvc_objs),
        serving_runtimes=tuple(namespaced),
        cluster_serving_runtimes=tuple(cluster_wide),
        pods=tuple(pods),
    )


def admission_review(pod: Mapping[str, Any], uid: str) -> KubeObject:
    """The AdmissionReview v1 request the API server sends for a Pod CREATE, in its field
    order (Go writes struct fields in declaration order: kind, apiVersion, then the request
    starting with its uid)."""
    ns = pod["metadata"].get("namespace", "default")
    obj = copy.deepcopy(dict(pod))
    return {
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": ns,
            "operation": "CREATE",
            "userInfo": {
                "username": "system:serviceaccount:kube-system:replicaset-controller",
                "uid": "4b1f3c6e-6a53-4a8e-9d0f-2f1b8b9f7c11",
                "groups": [
                    "system:serviceaccounts",
                    "system:serviceaccounts:kube-system",
                    "system:authenticated",
                ],
            },
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def review_bodies(cluster: Cluster, count: int | None = None) -> list[bytes]:
    """Serialised AdmissionReviews for the cluster's predictor pods (cycled to ``count``)."""
    pods: Sequence[KubeObject] = cluster.pods
    n = count if count is not None else len(pods)
    return [
        orjson.dumps(admission_review(pods[k % len(pods)], f"00000000-0000-4000-8000-{k:012d}"))
        for k in range(n)
    ]
