"""Node pools: the GPU nodes of a cluster grouped the way an operator buys, upgrades and talks
about them, with the newest CUDA each pool can run.

A pool is the set of GPU nodes with the same GPU product, driver version and OS: what a cloud
node group or an on-premises rack usually is, and the unit a driver upgrade (an ``NVIDIADriver``
per OS and product) is planned in. A GPU node is one whose status reports NVIDIA GPUs, that the
GPU Operator marks ``nvidia.com/gpu.present=true``, or that carries GPU facts; nodes without GPUs
belong to no pool.

The CUDA ceiling of a pool (:func:`cudasched.compat.branches.cuda_ceiling`) is found by asking the
compatibility engine, toolkit release by toolkit release, which is the newest CUDA a workload
with no other constraint can run on every node of the pool: natively (policy ``strict``: the
driver supports it, and the GPU's architecture is still built for), and under minor-version
compatibility (policy ``minor-compat``: any release of a CUDA major whose driver floor the
node meets, without PTX JIT). Asking the engine keeps the ceiling and every verdict in
agreement by construction.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cudasched.compat.branches import cuda_ceiling
from cudasched.operations.nodelabels import is_gpu_node, os_of
from cudasched.vocab.errors import InputError
from cudasched.vocab.objects import name_of
from cudasched.vocab.requirements import Policy

if TYPE_CHECKING:
    from cudasched.cluster.fleet import Fleet
    from cudasched.cluster.snapshot import ClusterSnapshot
    from cudasched.nodes.facts import NodeFacts
    from cudasched.vocab.nodeaffinity import Node
    from cudasched.vocab.versions import CudaVersion, DriverVersion

__all__ = ["Ceiling", "Pool", "cuda_ceiling", "gpu_members", "node_pools"]


@dataclass(frozen=True, slots=True)
class Ceiling:
    """The newest CUDA a pool runs natively and with minor-version compatibility (``None``:
    no known release at all, e.g. a pool without GPU facts)."""

    native: CudaVersion | None
    minor_compat: CudaVersion | None

    def describe(self) -> str:
        if self.native is None and self.minor_compat is None:
            return "none"
        text = f"CUDA {self.native}" if self.native is not None else "no CUDA natively"
        if self.minor_compat is not None and self.minor_compat != self.native:
            text += f" ({self.minor_compat} with minor-version compatibility)"
        return text


@dataclass(frozen=True, slots=True)
class Pool:
    """GPU nodes with one GPU product, driver version and OS; ``facts`` holds each distinct set
    of GPU facts among them (one, unless their labels differ in other ways)."""

    number: int
    product: str | None
    driver: DriverVersion | None
    os: str | None
    nodes: tuple[str, ...]
    facts: tuple[NodeFacts, ...]
    ceiling: Ceiling

    @property
    def id(self) -> str:
        """A stable identifier within one report (``pool-3``)."""
        return f"pool-{self.number}"

    @property
    def name(self) -> str:
        """``NVIDIA-A10G · driver 550.127.05 · Amazon Linux 2023.6.20241121``."""
        return " · ".join(
            (
                self.product or "unknown GPU",
                f"driver {self.driver}" if self.driver is not None else "driver unknown",
                self.os or "OS unknown",
            )
        )


def gpu_members(
    snapshot: ClusterSnapshot, fleet: Fleet
) -> Iterator[tuple[Node, int, NodeFacts, Mapping[str, Any]]]:
    """The fleet's GPU nodes (GPU facts, or a GPU by NFD, the GPU Operator or capacity), each
    with its fact-group number, facts and object. ``fleet`` must be built from ``snapshot``'s
    nodes: every pool view (the report's, the planner's) starts here."""
    objects: Mapping[str, Mapping[str, Any]] = {name_of(n): n for n in snapshot.nodes}
    for node, number, facts in fleet.members():
        obj = objects.get(node.name)
        if obj is None:
            raise InputError(f"node {node.name!r} of the fleet is not in the snapshot")
        if facts.has_gpu or is_gpu_node(obj):
            yield node, number, facts, obj


def node_pools(snapshot: ClusterSnapshot, fleet: Fleet) -> tuple[Pool, ...]:
    """The GPU node pools of a cluster, ordered by product, driver and OS. ``fleet`` must be
    built from ``snapshot``'s nodes (same order)."""
    groups: dict[tuple[Any, ...], tuple[list[str], dict[int, NodeFacts]]] = {}
    for node, number, facts, obj in gpu_members(snapshot, fleet):
        key = ("/".join(facts.products) or None, facts.driver, os_of(obj))
        names, seen = groups.setdefault(key, ([], {}))
        names.append(node.name)
        seen.setdefault(number, facts)

    def order(key: tuple[Any, ...]) -> tuple[str, int, str]:
        product, driver, os_name = key
        return (product or "~", driver.code if driver is not None else -1, os_name or "~")

    pools = []
    for number, key in enumerate(sorted(groups, key=order), start=1):
        names, seen = groups[key]
        facts = tuple(seen.values())
        pools.append(
            Pool(
                number=number,
                product=key[0],
                driver=key[1],
                os=key[2],
                nodes=tuple(names),
                facts=facts,
                ceiling=Ceiling(
                    cuda_ceiling(facts, Policy.STRICT, fleet.kb),
                    cuda_ceiling(facts, Policy.MINOR_COMPAT, fleet.kb),
                ),
            )
        )
    return tuple(pools)
