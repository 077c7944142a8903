"""Test helper: small clusters for the driver planner, with the labels real GPU nodes carry.

Nodes carry what GPU Feature Discovery (new keys), the GPU Operator and Node Feature Discovery
write on a real node (reference/nvidia-labels.md §1-§3; the bundled sample cluster's nodes are
shaped the same), and a status with NVIDIA GPU capacity, OS image and kernel. The driver's CUDA
label is what NVIDIA's Table 3 gives for the driver (the knowledge base's
``max_cuda_for_driver``), as GFD reads it from the driver. Serving runtimes declare their CUDA
with the ``cudasched.io/cuda-version`` annotation (README), InferenceServices name a runtime.
"""

from __future__ import annotations

from datetime import date
from typing import Any

from cudasched.cluster.fleet import Fleet
from cudasched.cluster.snapshot import ClusterSnapshot
from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.images import ImageTable
from cudasched.operations.drivers.plan import DriverPlan
from cudasched.operations.drivers.planning import plan_drivers
from tests.support import builders
from tests.support.builders import GFD

__all__ = [
    "EKS_AL2023",
    "HOST_DRIVER",
    "OPERATOR_DRIVER",
    "TODAY",
    "cluster",
    "eks_node",
    "gpu_node",
    "isvc",
    "plan_of",
    "runtime",
]

#: The GPU Operator's per-node driver switch as it labels a node whose driver it installs, and
#: as k8s-driver-manager relabels a node where it found a host driver (reference/nvidia-labels.md
#: §3; the bundled sample's on-premises nodes).
OPERATOR_DRIVER = {"nvidia.com/gpu.deploy.driver": "true"}
HOST_DRIVER = {"nvidia.com/gpu.deploy.driver": "pre-installed"}
#: An EKS managed node group on Amazon Linux 2023 (the bundled sample's p5 nodes).
EKS_AL2023 = {"os": ("amzn", "2023"), "kernel": "6.1.115-126.197.amzn2023.x86_64"}


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


def eks_node(
    name: str,
    product: str,
    driver: str,
    group: str,
    *,
    instance: str = "p5.48xlarge",
    deploy: str | None = "pre-installed",
    os: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """A node of an EKS managed node group on Amazon Linux 2023 (``os``: another OS-release ID
    and VERSION_ID, a self-built Ubuntu AMI), labelled as EKS, NFD and the GPU Operator label one
    (``deploy``: the operator's ``nvidia.com/gpu.deploy.driver``, None for a cluster without the
    operator's driver state)."""
    extra = {
        "eks.amazonaws.com/nodegroup": group,
        "eks.amazonaws.com/nodegroup-image": "ami-0c4f1b5f6a2e8d7e1",
        "eks.amazonaws.com/capacityType": "ON_DEMAND",
        "node.kubernetes.io/instance-type": instance,
        "topology.kubernetes.io/region": "us-west-2",
    }
    if deploy is not None:
        extra["nvidia.com/gpu.deploy.driver"] = deploy
    if os is not None:
        node = gpu_node(name, product, driver, extra=extra, os=os)
        node["status"]["nodeInfo"]["osImage"] = f"{os[0].capitalize()} {os[1]}"
        return node
    node = gpu_node(name, product, driver, extra=extra, **EKS_AL2023)  # type: ignore[arg-type]
    node["status"]["nodeInfo"]["osImage"] = "Amazon Linux 2023.6.20241121"
    return node


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


#: The date lifecycles are judged on in the planner's tests: a fixed one.
TODAY = date(2026, 12, 1)


def plan_of(
    snapshot: ClusterSnapshot, kb: KnowledgeBase, images: ImageTable, **options: Any
) -> DriverPlan:
    """``plan_drivers`` on ``snapshot`` as the command calls it, judged on :data:`TODAY` unless
    ``today`` is given; an ``operator`` given as a release string is looked up."""
    options.setdefault("today", TODAY)
    if isinstance(options.get("operator"), str):
        options["operator"] = kb.operator.version(options["operator"])
    return plan_drivers(snapshot, Fleet.from_snapshot(snapshot, kb), images, **options)
