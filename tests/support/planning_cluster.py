"""Test helper: small clusters for the driver planner, with the labels real GPU nodes carry.

Nodes carry what GPU Feature Discovery (new keys), the GPU Operator and Node Feature Discovery
write on a real node (reference/nvidia-labels.md §1-§3; the bundled sample cluster's nodes are
shaped the same), and a status with NVIDIA GPU capacity, OS image and kernel. The driver's CUDA
label is what NVIDIA's Table 3 gives for the driver (the knowledge base's
``max_cuda_for_driver``), as GFD reads it from the driver. Serving runtimes declare their CUDA
with the ``cudasched.io/cuda-version`` annotation (README), InferenceServices name a runtime.
"""

from __future__ import annotations

from typing import Any

from cudasched.cluster.snapshot import ClusterSnapshot
from cudasched.knowledge import KnowledgeBase
from cudasched.vocab.versions import parse_driver

__all__ = ["cluster", "gpu_node", "isvc", "runtime"]

_KB: KnowledgeBase | None = None


def _kb() -> KnowledgeBase:
    global _KB
    if _KB is None:
        _KB = KnowledgeBase.load()
    return _KB


def gpu_node(
    name: str,
    product: str | None,
    driver: str | None,
    *,
    os: tuple[str, str] | None = ("ubuntu", "22.04"),
    kernel: str = "5.15.0-124-generic",
    gpus: int = 8,
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A GPU node. ``product`` None: a node whose GPU labels are missing (only the GPU
    Operator's ``gpu.present`` and NFD's PCI label); ``driver`` None: no driver labels."""
    labels: dict[str, str] = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "feature.node.kubernetes.io/kernel-version.full": kernel,
        "nvidia.com/gpu.present": "true",
    }
    if os is not None:
        labels["feature.node.kubernetes.io/system-os_release.ID"] = os[0]
        labels["feature.node.kubernetes.io/system-os_release.VERSION_ID"] = os[1]
    if product is not None:
        info = _kb().gpu(product)
        assert info is not None, product
        labels["nvidia.com/gpu.product"] = product
        labels["nvidia.com/gpu.compute.major"] = str(info.compute.major)
        labels["nvidia.com/gpu.compute.minor"] = str(info.compute.minor)
        labels["nvidia.com/gpu.count"] = str(gpus)
    if driver is not None:
        version = parse_driver(driver)
        cuda = _kb().max_cuda_for_driver(version)
        assert cuda is not None
        major, minor, *rest = driver.split(".")
        labels.update(
            {
                "nvidia.com/cuda.driver-version.full": driver,
                "nvidia.com/cuda.driver-version.major": major,
                "nvidia.com/cuda.driver-version.minor": minor,
                "nvidia.com/cuda.driver-version.revision": rest[0] if rest else "",
                "nvidia.com/cuda.runtime-version.full": f"{cuda.major}.{cuda.minor}",
                "nvidia.com/cuda.runtime-version.major": str(cuda.major),
                "nvidia.com/cuda.runtime-version.minor": str(cuda.minor),
            }
        )
    labels.update(extra or {})
    os_image = f"{os[0].capitalize()} {os[1]} LTS" if os is not None else ""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {
            "capacity": {"cpu": "64", "nvidia.com/gpu": str(gpus)},
            "allocatable": {"cpu": "63", "nvidia.com/gpu": str(gpus)},
            "nodeInfo": {"kernelVersion": kernel, "osImage": os_image},
        },
    }


def runtime(
    name: str,
    cuda: str,
    *,
    policy: str | None = None,
    ships_cuda_compat: bool = False,
    namespace: str | None = None,
) -> dict[str, Any]:
    """A ClusterServingRuntime (ServingRuntime with ``namespace``) annotated with its CUDA."""
    annotations = {"cudasched.io/cuda-version": cuda}
    if policy is not None:
        annotations["cudasched.io/policy"] = policy
    if ships_cuda_compat:
        annotations["cudasched.io/ships-cuda-compat"] = "true"
    meta: dict[str, Any] = {"name": name, "annotations": annotations}
    if namespace is not None:
        meta["namespace"] = namespace
    return {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "ServingRuntime" if namespace is not None else "ClusterServingRuntime",
        "metadata": meta,
        "spec": {
            "supportedModelFormats": [{"name": name, "autoSelect": True, "version": "1"}],
            "containers": [
                {
                    "name": "kserve-container",
                    "image": f"registry.example.com/serving/{name}:1.0",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }


def isvc(name: str, namespace: str, runtime_name: str) -> dict[str, Any]:
    """An InferenceService that names its runtime and asks for one GPU."""
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "predictor": {
                "model": {
                    "modelFormat": {"name": runtime_name},
                    "runtime": runtime_name,
                    "storageUri": f"s3://models/{name}",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            }
        },
    }


def cluster(*objects: dict[str, Any]) -> ClusterSnapshot:
    return ClusterSnapshot.from_objects(objects, source="test cluster")
