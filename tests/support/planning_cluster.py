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
from tests.support import builders
from tests.support.builders import GFD

__all__ = ["cluster", "gpu_node", "isvc", "runtime"]


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
    """A GPU node labelled by GFD (new keys) and NFD. ``product`` None: a node whose GPU
    labels are missing (only the GPU Operator's ``gpu.present`` and NFD's PCI label);
    ``driver`` None: no driver labels; ``os`` None: no NFD os-release labels."""
    return builders.node(
        name,
        gpu=product,
        driver=driver,
        count=gpus,
        scheme=GFD,
        os=os,
        kernel=kernel,
        labels=extra,
    )


def runtime(
    name: str,
    cuda: str,
    *,
    policy: str | None = None,
    ships_cuda_compat: bool = False,
    namespace: str | None = None,
) -> dict[str, Any]:
    """A ClusterServingRuntime (ServingRuntime with ``namespace``) annotated with its CUDA,
    auto-selected for the model format of its own name."""
    annotations = {"cudasched.io/cuda-version": cuda}
    if policy is not None:
        annotations["cudasched.io/policy"] = policy
    if ships_cuda_compat:
        annotations["cudasched.io/ships-cuda-compat"] = "true"
    return builders.runtime(
        name,
        namespace,
        image=f"registry.example.com/serving/{name}:1.0",
        formats=[name],
        auto_select=True,
        gpus=1,
        annotations=annotations,
    )


def isvc(name: str, namespace: str, runtime_name: str) -> dict[str, Any]:
    """An InferenceService that names its runtime and asks for one GPU."""
    return builders.isvc(
        name,
        namespace,
        model_format=runtime_name,
        runtime=runtime_name,
        storage_uri=f"s3://models/{name}",
    )


def cluster(*objects: dict[str, Any]) -> ClusterSnapshot:
    return ClusterSnapshot.from_objects(objects, source="test cluster")
