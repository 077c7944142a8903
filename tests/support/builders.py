"""One builder per kind, used by every test package (Karpenter's ``pkg/test`` style).

Each builder returns the object as the API server returns it: a plain ``dict`` with camelCase
keys, never a client model. Defaults describe an ordinary case (an A100 node on R535, a pod
asking for one GPU); a test names only what it is about.

Node labels are never written out by hand here: the GPU and driver facts go through the
product's own labeler (:func:`cudasched.nodes.labelers.build_labels`, the agent's writer,
which also writes GFD's keys in GFD's formats), with the GPU's compute capability and class
and the driver's CUDA from the knowledge base, so a builder cannot drift from what a real
node carries. ``scheme`` picks which generations a node carries: cudasched's codes, GFD's new
keys, GFD's deprecated keys (reference/nvidia-labels.md §1.1).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterable, Mapping
from typing import Any

from cudasched.knowledge import KnowledgeBase
from cudasched.nodes.facts import NodeFacts, facts_from_parts
from cudasched.nodes.hostfacts import DriverFacts, GpuFacts
from cudasched.nodes.labelers import build_labels
from cudasched.vocab import labels as L
from cudasched.vocab.versions import (
    CudaVersion,
    DriverVersion,
    parse_compute_capability,
    parse_cuda,
    parse_driver,
)
from cudasched.webhook.admission.review import creation_review

__all__ = [
    "ALL_SCHEMES",
    "GFD",
    "GFD_DEPRECATED",
    "GFD_SCHEMES",
    "OURS",
    "REQUIRED",
    "expr",
    "isvc",
    "node",
    "node_facts",
    "node_labels",
    "pod",
    "required",
    "review",
    "runtime",
    "term",
]

#: The label generations a node may carry (``node(scheme=...)``).
OURS = "cudasched"  # the agent's cudasched.io/ codes
GFD = "gfd"  # GFD's new keys (cuda.driver-version.*, cuda.runtime-version.*; GFD >= 0.15)
GFD_DEPRECATED = "gfd-deprecated"  # the deprecated keys every GFD sets (older GFD: only these)
ALL_SCHEMES = (OURS, GFD, GFD_DEPRECATED)
GFD_SCHEMES = (GFD, GFD_DEPRECATED)  # a cluster with GFD and no cudasched agent

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"

#: GFD's keys about the GPU itself, written by every GFD generation.
_GFD_GPU_KEYS = frozenset(
    {
        L.GFD_PRODUCT,
        L.GFD_COMPUTE_MAJOR,
        L.GFD_COMPUTE_MINOR,
        L.GFD_FAMILY,
        L.GFD_COUNT,
        "nvidia.com/gpu.memory",
    }
)
_ANY_DRIVER = DriverVersion(1, 0, 0)  # labels a GPU when the node has no driver labels


@functools.cache
def _kb() -> KnowledgeBase:
    return KnowledgeBase.load()


# --------------------------------------------------------------------------------- nodes


def node_labels(
    *,
    gpu: str | None = "NVIDIA-A100-SXM4-80GB",
    driver: str | None = "535.104.05",
    cuda: str | None = None,
    compute: str | None = None,
    datacenter: bool | None = None,
    count: int = 8,
    scheme: str | Iterable[str] = ALL_SCHEMES,
) -> dict[str, str]:
    """The GPU and driver labels of a node, as the agent (``--gfd-compatible``) writes them.

    ``gpu`` is a GPU name as NVML or GFD spells it (``NVIDIA-A100-SXM4-80GB``, ``Tesla T4``,
    ``A100``); its compute capability and data-center class come from the knowledge base
    unless ``compute`` / ``datacenter`` say otherwise. ``cuda`` is the driver's CUDA, from
    NVIDIA's Table 3 for ``driver`` unless given. ``None`` leaves those labels out.
    """
    schemes = {scheme} if isinstance(scheme, str) else set(scheme)
    unknown = schemes - set(ALL_SCHEMES)
    if unknown:
        raise ValueError(f"unknown label scheme(s) {sorted(unknown)}: use {ALL_SCHEMES}")
    if gpu is None and driver is None:
        return {}
    kb = _kb()
    gpus: tuple[GpuFacts, ...] = ()
    if gpu is not None:
        info = kb.gpu(gpu)
        cc = parse_compute_capability(compute) if compute is not None else None
        if cc is None and info is not None:
            cc = info.compute
        if datacenter is None and info is not None:
            datacenter = info.datacenter
        gpus = (GpuFacts(gpu, cc, datacenter=datacenter),) * count
    version = parse_driver(driver) if driver is not None else _ANY_DRIVER
    if cuda is not None:
        max_cuda: CudaVersion | None = parse_cuda(cuda)
    elif driver is not None:
        max_cuda = kb.max_cuda_for_driver(version)
    else:
        max_cuda = None
    built = build_labels(
        DriverFacts(version, max_cuda, gpus, "test"), archs=kb, gfd_compatible=True
    )
    keep: set[str] = set()
    if OURS in schemes:
        keep |= {k for k in built if k.startswith(L.PREFIX)}
    if GFD in schemes:
        keep |= set(L.GFD_VERSION_KEYS)
    if GFD_DEPRECATED in schemes:
        keep |= set(L.GFD_OLD_VERSION_KEYS)
    if schemes & set(GFD_SCHEMES):
        keep |= _GFD_GPU_KEYS
    if driver is None:  # a GPU without driver labels: drop what the stand-in driver wrote
        keep -= {L.DRIVER_CODE, L.DRIVER_VERSION, L.DRIVER_BRANCH, L.CUDA_CODE, L.CUDA_VERSION}
        keep -= {*L.GFD_VERSION_KEYS, *L.GFD_OLD_VERSION_KEYS}
    return {k: v for k, v in built.items() if k in keep}


def node(
    name: str = "gpu-1",
    *,
    gpu: str | None = "NVIDIA-A100-SXM4-80GB",
    driver: str | None = "535.104.05",
    cuda: str | None = None,
    compute: str | None = None,
    datacenter: bool | None = None,
    count: int | None = None,
    scheme: str | Iterable[str] = ALL_SCHEMES,
    labels: Mapping[str, str | None] | None = None,
    os: tuple[str, str] | None = None,
    kernel: str | None = None,
    allocatable: Mapping[str, str] | None = None,
    taints: list[dict[str, Any]] | None = None,
    annotations: Mapping[str, str] | None = None,
    listed: bool = False,
) -> dict[str, Any]:
    """A Node. ``gpu=None, driver=None``: a CPU node (with ``count`` GPUs: a GPU node whose
    GPU labels are missing). GPU nodes carry the GPU Operator's ``gpu.present`` and
    ``nvidia.com/gpu`` capacity; the GPU and driver labels are :func:`node_labels`.

    ``labels`` are merged last; a ``None`` value removes that key. ``os`` (``("ubuntu",
    "22.04")``) and ``kernel`` add NFD's labels and kubelet's ``nodeInfo``, as a cluster
    running NFD shows them. ``allocatable`` replaces the status's allocatable resources.
    ``listed`` adds what a LIST returns and admission never reads (managedFields, NFD's
    annotation, the kubelet's images and conditions; uid and resourceVersion are the
    server's to assign).
    """
    gpus = count if count is not None else (8 if gpu is not None else 0)
    all_labels: dict[str, str] = {
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
    }
    if gpus:
        all_labels[L.GFD_PRESENT] = "true"
    if kernel is not None:
        all_labels["feature.node.kubernetes.io/kernel-version.full"] = kernel
    if os is not None:
        all_labels["feature.node.kubernetes.io/system-os_release.ID"] = os[0]
        all_labels["feature.node.kubernetes.io/system-os_release.VERSION_ID"] = os[1]
    if gpus and (os is not None or kernel is not None):
        all_labels["feature.node.kubernetes.io/pci-10de.present"] = "true"
    all_labels |= node_labels(
        gpu=gpu,
        driver=driver,
        cuda=cuda,
        compute=compute,
        datacenter=datacenter,
        count=gpus or 1,
        scheme=scheme,
    )
    for key, value in (labels or {}).items():
        if value is None:
            all_labels.pop(key, None)
        else:
            all_labels[key] = value
    metadata: dict[str, Any] = {"name": name, "labels": all_labels}
    if annotations:
        metadata["annotations"] = dict(annotations)
    capacity = {"cpu": "64", "memory": "527958712Ki", "pods": "110"}
    if gpus:
        capacity["nvidia.com/gpu"] = str(gpus)
    status: dict[str, Any] = {
        "capacity": capacity,
        "allocatable": dict(allocatable)
        if allocatable is not None
        else {**capacity, "cpu": "63", "memory": "527356312Ki"},
    }
    info: dict[str, str] = {}
    if kernel is not None:
        info["kernelVersion"] = kernel
    if os is not None:
        info["osImage"] = f"{os[0].capitalize()} {os[1]} LTS"
    if info:
        status["nodeInfo"] = {
            **info,
            "architecture": "amd64",
            "operatingSystem": "linux",
            "containerRuntimeVersion": "containerd://1.7.27",
            "kubeletVersion": "v1.33.4",
        }
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": metadata,
        "spec": {"taints": list(taints)} if taints else {},
        "status": status,
    }
    if listed:
        _as_listed(obj)
    return obj


def _as_listed(obj: dict[str, Any]) -> None:
    """The fields a LIST of Nodes carries that admission drops: bookkeeping, NFD's
    annotation, the kubelet's image list and conditions."""
    obj["metadata"] |= {
        "creationTimestamp": "2026-01-10T08:00:00Z",
        "managedFields": [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1"}],
    }
    obj["metadata"].setdefault("annotations", {})
    obj["metadata"]["annotations"] |= {
        "nfd.node.kubernetes.io/feature-labels": "x" * 100,
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
    }
    obj["status"]["images"] = [
        {"names": [f"registry.example.com/image-{i}@sha256:{i:064x}"], "sizeBytes": 1 << 20}
        for i in range(20)
    ]
    obj["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]


def node_facts(
    gpu: str | None = "A100",
    driver: str | None = "535.104.05",
    *,
    cuda: str | None = None,
    name: str = "n",
    kb: KnowledgeBase | None = None,
) -> NodeFacts:
    """A node's facts described by hand, as ``cudasched check --gpu --driver`` reads them."""
    return facts_from_parts(name, gpu=gpu, driver=driver, cuda=cuda, kb=kb or _kb())


# ------------------------------------------------------------------------------ workloads


def pod(
    name: str | None = "p",
    namespace: str | None = "default",
    *,
    image: str = "nvidia/cuda:12.4.1-runtime-ubuntu22.04",
    gpus: int | str | None = 1,
    container: str = "main",
    env: list[dict[str, Any]] | None = None,
    containers: list[dict[str, Any]] | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
    affinity: dict[str, Any] | None = None,
    node_name: str | None = None,
    phase: str | None = None,
    predictor: str | None = None,
    generate_name: str | None = None,
) -> dict[str, Any]:
    """A Pod whose one container (``image``) asks for ``gpus`` NVIDIA GPUs (``None``: a CPU
    pod); ``containers`` replaces that container. ``predictor``: the predictor pod KServe's
    ReplicaSet creates for that InferenceService (its labels, ``kserve-container``).
    ``name=None`` with ``generate_name``: a pod as a controller creates it."""
    pod_labels: dict[str, str] = {}
    if predictor is not None:
        pod_labels |= {
            "app": f"isvc.{predictor}-predictor",
            "component": "predictor",
            "serving.kserve.io/inferenceservice": predictor,
        }
        container = "kserve-container" if container == "main" else container
    pod_labels |= labels or {}
    metadata: dict[str, Any] = {}
    if name is not None:
        metadata["name"] = name
    if generate_name is not None:
        metadata["generateName"] = generate_name
    if namespace is not None:
        metadata["namespace"] = namespace
    if pod_labels:
        metadata["labels"] = pod_labels
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
    if containers is None:
        one: dict[str, Any] = {"name": container, "image": image}
        if env is not None:
            one["env"] = env
        if gpus is not None:
            one["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
        containers = [one]
    spec: dict[str, Any] = {"containers": containers}
    if node_selector is not None:
        spec["nodeSelector"] = dict(node_selector)
    if affinity is not None:
        spec["affinity"] = affinity
    if node_name is not None:
        spec["nodeName"] = node_name
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    if phase is not None:
        obj["status"] = {"phase": phase}
    return obj


def isvc(
    name: str = "svc",
    namespace: str | None = "default",
    *,
    model_format: str = "vllm",
    runtime: str | None = None,
    gpus: int | str | None = 1,
    storage_uri: str | None = None,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    predictor: dict[str, Any] | None = None,
    cluster_runtime: str | None = None,
    namespace_runtime: str | None = None,
) -> dict[str, Any]:
    """A KServe InferenceService (``serving.kserve.io/v1beta1``) serving one model of
    ``model_format``, naming ``runtime`` if given; ``predictor`` replaces the whole predictor.
    ``cluster_runtime`` / ``namespace_runtime``: the runtime KServe (>= 0.16) reports it chose,
    in ``status``."""
    if predictor is None:
        model: dict[str, Any] = {"modelFormat": {"name": model_format}}
        if runtime is not None:
            model["runtime"] = runtime
        model["storageUri"] = storage_uri or f"pvc://models/{name}"
        if gpus is not None:
            model["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
        predictor = {"model": model}
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if labels is not None:
        metadata["labels"] = dict(labels)
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
    obj: dict[str, Any] = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": metadata,
        "spec": {"predictor": predictor},
    }
    if cluster_runtime is not None:
        obj["status"] = {"clusterServingRuntimeName": cluster_runtime}
    elif namespace_runtime is not None:
        obj["status"] = {"servingRuntimeName": namespace_runtime}
    return obj


def runtime(
    name: str = "rt",
    namespace: str | None = None,
    *,
    image: str = "vllm/vllm-openai:v0.6.3",
    formats: Iterable[str | dict[str, Any]] = ("vllm",),
    auto_select: bool = False,
    protocols: Iterable[str] | None = None,
    gpus: int | str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    affinity: dict[str, Any] | None = None,
    containers: list[dict[str, Any]] | None = None,
    created: str | None = None,
    spec: Mapping[str, Any] | None = None,
    kind: str | None = None,
) -> dict[str, Any]:
    """A ClusterServingRuntime, or with ``namespace`` (or ``kind``) a ServingRuntime, whose
    ``kserve-container`` runs ``image``. Its CUDA is declared the ways users do: a label such
    as ``cpaas.io/cuda-version`` or the ``cudasched.io/cuda-version`` annotation, both given
    by the caller. ``formats`` are model-format names (version ``1``) or whole entries;
    ``spec`` adds fields to the spec. A ``formats`` string is written as it is (a malformed
    runtime)."""
    supported: Any = (
        formats
        if isinstance(formats, str)
        else [
            f if isinstance(f, dict) else {"name": f, "version": "1", "autoSelect": auto_select}
            for f in formats
        ]
    )
    if containers is None:
        one: dict[str, Any] = {"name": "kserve-container", "image": image}
        if gpus is not None:
            one["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
        containers = [one]
    body: dict[str, Any] = {"supportedModelFormats": supported}
    if protocols is not None:
        body["protocolVersions"] = list(protocols)
    body["containers"] = containers
    if affinity is not None:
        body["affinity"] = affinity
    body |= spec or {}
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if labels is not None:
        metadata["labels"] = dict(labels)
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
    if created is not None:
        metadata["creationTimestamp"] = created
    return {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": kind or ("ServingRuntime" if namespace is not None else "ClusterServingRuntime"),
        "metadata": metadata,
        "spec": body,
    }


# ------------------------------------------------------------------------------ admission

_OPTIONS = {
    "CREATE": "CreateOptions",
    "UPDATE": "UpdateOptions",
    "DELETE": "DeleteOptions",
}


def review(
    obj: Mapping[str, Any],
    *,
    operation: str = "CREATE",
    uid: str = "7c6d1f0e-0000-4000-8000-000000000001",
    namespace: str | None = None,
    old: Mapping[str, Any] | None = None,
    dry_run: bool = False,
    user: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The AdmissionReview v1 request the API server sends for ``operation`` on ``obj``.

    CREATE is :func:`cudasched.webhook.admission.review.creation_review` (the object as it is before
    it is stored); UPDATE carries the stored object and ``old`` (default: ``obj`` itself);
    DELETE carries no object, the stored one as ``oldObject``. ``namespace`` overrides the
    request's namespace (a pod created by a ReplicaSet has none in its object).
    """
    doc = creation_review(obj, uid=uid)
    request = doc["request"]
    if operation != "CREATE":
        stored = copy.deepcopy(dict(obj))
        before = copy.deepcopy(dict(old if old is not None else obj))
        request["object"] = None if operation == "DELETE" else stored
        request["oldObject"] = before if operation in ("UPDATE", "DELETE") else None
    request["operation"] = operation
    kind = _OPTIONS.get(operation)
    request["options"] = {"kind": kind, "apiVersion": "meta.k8s.io/v1"} if kind else None
    if namespace is not None:
        request["namespace"] = namespace
    request["dryRun"] = dry_run
    if user is not None:
        request["userInfo"] = dict(user)
    return doc


# ------------------------------------------------------------------------------- affinity


def expr(key: str, op: str, *values: object) -> dict[str, Any]:
    """A node-selector requirement; values are written as strings, and omitted when none are
    given (Exists, DoesNotExist), as the API server stores them."""
    out: dict[str, Any] = {"key": key, "operator": op}
    if values:
        out["values"] = [str(v) for v in values]
    return out


def term(*exprs: dict[str, Any]) -> dict[str, Any]:
    return {"matchExpressions": list(exprs)}


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    """A pod's affinity with required node-selector ``terms``."""
    return {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": list(terms)}}}
