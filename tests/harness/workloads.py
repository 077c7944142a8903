"""Generated GPU workloads for the end-to-end placement test and the benchmarks.

A seeded mix of what a GPU cluster runs, each pod as a user or KServe would create it (before
admission): KServe predictor pods of InferenceServices on serving runtimes (Alauda's
``cpaas.io/cuda-version`` label among them), GPU pods of well-known images (Triton, vLLM, NGC
PyTorch, CUDA base images, SGLang), pods that declare ``cudasched.io/cuda-version``, pods with
their own nodeSelector or required node affinity, pods that opt out (``cudasched.io/skip``) and
CPU pods. Whether a pod may run on a node is never decided here: the tests ask cudasched
(``explain -o json``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

__all__ = ["IMAGES", "Workloads", "generate", "gpu_pod", "runtimes"]

JSON = dict[str, Any]

#: Images cudasched's image table knows (their CUDA ranges from 11.8 to 13.0) and one it does
#: not (NGC PyTorch 24.10 resolves to no requirement).
IMAGES = (
    "nvcr.io/nvidia/tritonserver:23.05-py3",
    "nvcr.io/nvidia/tritonserver:24.05-py3",
    "nvcr.io/nvidia/tritonserver:25.01-py3",
    "nvidia/cuda:11.8.0-runtime-ubuntu22.04",
    "nvidia/cuda:12.8.0-runtime-ubuntu22.04",
    "nvidia/cuda:13.0.0-runtime-ubuntu24.04",
    "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
    "vllm/vllm-openai:v0.9.0",
    "vllm/vllm-openai:v0.23.0",
    "lmsysorg/sglang:v0.4.6-cu124",
    "nvcr.io/nvidia/pytorch:24.10-py3",
)

_CUDA_ANNOTATIONS = ("11.8", "12.2", "12.4", "12.8", "13.0")
_PRODUCTS = ("NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "Tesla-T4", "NVIDIA-L4")
_FAMILIES = (["ampere", "hopper"], ["turing", "ampere"], ["blackwell"], ["hopper", "blackwell"])


def gpu_pod(
    name: str,
    namespace: str,
    image: str,
    *,
    gpus: int = 1,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
    affinity: JSON | None = None,
    container: str = "main",
) -> JSON:
    """A pod asking ``gpus`` ``nvidia.com/gpu`` (0: a CPU pod), small CPU and memory."""
    resources: JSON = {"requests": {"cpu": "100m", "memory": "256Mi"}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    meta: JSON = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    spec: JSON = {
        "containers": [{"name": container, "image": image, "resources": resources}],
        "terminationGracePeriodSeconds": 0,
    }
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if affinity:
        spec["affinity"] = affinity
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def runtimes() -> list[JSON]:
    """ClusterServingRuntimes labelled the way Alauda labels its runtimes, one unlabelled."""

    def runtime(name: str, image: str, labels: dict[str, str]) -> JSON:
        return {
            "apiVersion": "serving.kserve.io/v1alpha1",
            "kind": "ClusterServingRuntime",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "supportedModelFormats": [{"name": "vllm", "autoSelect": False}],
                "protocolVersions": ["v2"],
                "containers": [
                    {
                        "name": "kserve-container",
                        "image": image,
                        "resources": {"requests": {"cpu": "1", "memory": "8Gi"}},
                    }
                ],
            },
        }

    alauda = {"cpaas.io/accelerator-type": "nvidia", "cpaas.io/runtime-class": "vllm"}
    return [
        runtime(
            "e2e-vllm-cuda-12.4",
            "registry.local/aml/vllm:0.6.3",
            {**alauda, "cpaas.io/cuda-version": "12.4"},
        ),
        runtime(
            "e2e-vllm-cuda-12.8",
            "registry.local/aml/vllm:0.9.0",
            {**alauda, "cpaas.io/cuda-version": "12.8"},
        ),
        runtime(
            "e2e-vllm-cuda-13.0",
            "registry.local/aml/vllm:0.23.0",
            {**alauda, "cpaas.io/cuda-version": "13.0"},
        ),
        runtime("e2e-triton", "nvcr.io/nvidia/tritonserver:24.05-py3", {}),
    ]


@dataclass
class Workloads:
    """What :func:`generate` made: services first (runtimes, InferenceServices), then pods."""

    namespace: str
    services: list[JSON] = field(default_factory=list)
    pods: list[JSON] = field(default_factory=list)

    def gpu_pods(self) -> list[JSON]:
        return [p for p in self.pods if "limits" in p["spec"]["containers"][0]["resources"]]


def _isvc(name: str, namespace: str, runtime: str) -> JSON:
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {"serving.kserve.io/deploymentMode": "RawDeployment"},
        },
        "spec": {
            "predictor": {
                "model": {
                    "modelFormat": {"name": "vllm"},
                    "runtime": runtime,
                    "storageUri": f"pvc://models/{name}",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            }
        },
    }


def generate(count: int, namespace: str, *, seed: int = 21) -> Workloads:
    """``count`` pods (and the InferenceServices their predictor pods belong to)."""
    rng = random.Random(seed)
    out = Workloads(namespace)
    runtime_list = runtimes()
    isvcs: list[tuple[str, JSON]] = []
    for i in range(max(1, count // 12)):
        runtime = runtime_list[i % len(runtime_list)]
        name = f"svc-{i:02d}"
        isvcs.append((name, runtime))
        out.services.append(_isvc(name, namespace, runtime["metadata"]["name"]))
    kinds = ("predictor", "image", "image", "annotated", "selector", "affinity", "skip", "cpu")
    for i in range(count):
        kind = kinds[i % len(kinds)]
        gpus = rng.choice((1, 1, 1, 2, 2, 4))
        name = f"w{i:03d}-{kind}"
        image = rng.choice(IMAGES)
        if kind == "predictor":
            isvc, runtime = isvcs[rng.randrange(len(isvcs))]
            pod = gpu_pod(
                f"{isvc}-predictor-{i:03d}",
                namespace,
                runtime["spec"]["containers"][0]["image"],
                gpus=gpus,
                labels={
                    "serving.kserve.io/inferenceservice": isvc,
                    "component": "predictor",
                    "app": f"isvc.{isvc}-predictor",
                },
                annotations={"serving.kserve.io/deploymentMode": "RawDeployment"},
                container="kserve-container",
            )
        elif kind == "image":
            pod = gpu_pod(name, namespace, image, gpus=gpus)
        elif kind == "annotated":
            pod = gpu_pod(
                name,
                namespace,
                f"registry.local/team/app:{i}",
                gpus=gpus,
                annotations={"cudasched.io/cuda-version": rng.choice(_CUDA_ANNOTATIONS)},
            )
        elif kind == "selector":
            pod = gpu_pod(
                name,
                namespace,
                image,
                gpus=gpus,
                node_selector={"nvidia.com/gpu.product": rng.choice(_PRODUCTS)},
            )
        elif kind == "affinity":
            families = rng.choice(_FAMILIES)
            pod = gpu_pod(
                name,
                namespace,
                image,
                gpus=gpus,
                affinity={
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {
                                            "key": "nvidia.com/gpu.family",
                                            "operator": "In",
                                            "values": families,
                                        }
                                    ]
                                }
                            ]
                        }
                    }
                },
            )
        elif kind == "skip":
            pod = gpu_pod(name, namespace, image, gpus=1, annotations={"cudasched.io/skip": "true"})
        else:
            pod = gpu_pod(name, namespace, "registry.local/team/web:1", gpus=0)
        out.pods.append(pod)
    return out
