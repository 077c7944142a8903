"""Kueue ResourceFlavors by CUDA class: one flavor per CUDA class and GPU of the cluster's GPU
nodes, whose ``nodeLabels`` declare the agent's class label (``cudasched.io/cuda.code``, the
CUDA the node's driver runs: the same for every patch release of a branch, unlike the driver
version), the GPU's compute capability and product, and whether it is a data-center GPU (where
the agent says); a ClusterQueue fragment that lists them
oldest CUDA first; and, per flavor, which of the cluster's workloads its nodes can run.

Why the keys matter: Kueue copies a flavor's ``nodeLabels`` into the pods it admits and
matches a workload's node affinity only on the keys a flavor declares (kueue#15136), so a
requirement on a key no flavor declares is dropped at admission. Declaring the class, the
compute capability and the data-center flag lets Kueue see those parts of a requirement (the
class once the webhook bounds it, ``placement.boundCudaClass``); an exact driver version would
go stale at the next patch upgrade and strand every pod Kueue admits with it.

Nodes without the agent's labels cannot be put in a flavor keyed on them; they are listed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cudasched.operations.pools import slug
from cudasched.operations.reach import FleetVerdicts
from cudasched.vocab import labels as L
from cudasched.vocab.versions import CudaVersion

if TYPE_CHECKING:
    from cudasched.cluster.fleet import Fleet
    from cudasched.cluster.snapshot import ClusterSnapshot
    from cudasched.operations.drivers.demand import Demand
    from cudasched.vocab.requirements import Policy

__all__ = [
    "API_VERSION",
    "FLAVOR_KEYS",
    "GPU_RESOURCE",
    "OPTIONAL_KEYS",
    "Flavor",
    "FlavorPlan",
    "flavor_name",
    "kueue_flavors",
]

API_VERSION = "kueue.x-k8s.io/v1beta2"
GPU_RESOURCE = "nvidia.com/gpu"
#: What a flavor's nodeLabels declare: the CUDA class first, then the GPU.
FLAVOR_KEYS = (L.CUDA_CODE, L.COMPUTE_CODE, L.GPU_PRODUCT)
#: Declared too where the agent wrote it (it leaves it out for a GPU the tables do not know):
#: forward compatibility asks for a data-center GPU, and Kueue sees only declared keys.
OPTIONAL_KEYS = (L.GPU_DATACENTER,)
MANAGED_BY = {"app.kubernetes.io/managed-by": "cudasched"}


@dataclass(frozen=True, slots=True)
class Flavor:
    """One flavor: its labels, its nodes, their GPUs, and the workloads (object references)
    every one of its nodes can run (``serves``) or only some can (``partly``)."""

    name: str
    node_labels: Mapping[str, str]
    nodes: tuple[str, ...]
    gpus: int
    serves: tuple[str, ...]
    partly: tuple[str, ...]

    @property
    def cuda(self) -> CudaVersion:
        return CudaVersion.from_code(int(self.node_labels[L.CUDA_CODE]))

    def resource_flavor(self) -> dict[str, Any]:
        return {
            "apiVersion": API_VERSION,
            "kind": "ResourceFlavor",
            "metadata": {"name": self.name, "labels": dict(MANAGED_BY)},
            "spec": {"nodeLabels": dict(self.node_labels)},
        }


@dataclass(frozen=True, slots=True)
class FlavorPlan:
    """The flavors, oldest CUDA class first, and the GPU nodes left out (no agent labels)."""

    flavors: tuple[Flavor, ...]
    unlabelled: tuple[str, ...]
    queue_name: str = "gpu"

    def cluster_queue(self) -> dict[str, Any]:
        """A ClusterQueue fragment: the flavors in the order Kueue should try them (oldest CUDA
        first, so a workload that runs anywhere leaves the newest drivers to those that need
        them), each with its nodes' GPUs as nominal quota."""
        flavors = [
            {
                "name": f.name,
                "resources": [{"name": GPU_RESOURCE, "nominalQuota": f.gpus}],
            }
            for f in self.flavors
        ]
        return {
            "apiVersion": API_VERSION,
            "kind": "ClusterQueue",
            "metadata": {"name": self.queue_name, "labels": dict(MANAGED_BY)},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [{"coveredResources": [GPU_RESOURCE], "flavors": flavors}],
            },
        }


def _gpus(node: Mapping[str, Any]) -> int:
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    value = str(allocatable.get(GPU_RESOURCE, "0"))
    return int(value) if value.isdigit() else 0


def flavor_name(labels: Mapping[str, str]) -> str:
    """``cuda-12-8-h100-80gb-hbm3``: the class, then the GPU (a DNS subdomain)."""
    cuda = CudaVersion.from_code(int(labels[L.CUDA_CODE]))
    return f"cuda-{cuda.major}-{cuda.minor}-{slug(labels[L.GPU_PRODUCT])}"


def kueue_flavors(
    snapshot: ClusterSnapshot, fleet: Fleet, demand: Demand, policy: Policy
) -> FlavorPlan:
    """The flavors of the GPU nodes of ``snapshot`` (``fleet`` built from it) and what each
    serves of ``demand``; ``policy`` is the default for workloads that name none."""
    members: dict[tuple[str, ...], list[str]] = {}
    unlabelled: list[str] = []
    for node, _, facts in fleet.members():
        if not facts.has_gpu:
            continue
        values = tuple(node.labels.get(k, "") for k in FLAVOR_KEYS)
        if not all(values) or not values[0].isdigit():
            unlabelled.append(node.name)
            continue
        values += tuple(node.labels.get(k, "") for k in OPTIONAL_KEYS)
        members.setdefault(values, []).append(node.name)
    gpus = {str((n.get("metadata") or {}).get("name")): _gpus(n) for n in snapshot.nodes}
    verdicts = FleetVerdicts(fleet)
    reach = {
        group.number: set(verdicts.reach(group.requirement, policy).compatible)
        for group in demand.groups
    }
    flavors = []
    for values, nodes in sorted(members.items(), key=lambda kv: (int(kv[0][0]), kv[0][2])):
        labels = {k: v for k, v in zip(FLAVOR_KEYS + OPTIONAL_KEYS, values, strict=True) if v}
        names = tuple(nodes)
        serves: list[str] = []
        partly: list[str] = []
        for group in demand.groups:
            can = reach[group.number].intersection(names)
            if len(can) == len(names):
                serves.extend(group.workloads)
            elif can:
                partly.extend(group.workloads)
        flavors.append(
            Flavor(
                flavor_name(labels),
                labels,
                names,
                sum(gpus.get(n, 0) for n in names),
                tuple(serves),
                tuple(partly),
            )
        )
    return FlavorPlan(tuple(flavors), tuple(unlabelled))
