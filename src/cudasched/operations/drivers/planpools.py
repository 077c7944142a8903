"""The GPU pools a driver plan decides for: GPU nodes with one GPU product, OS, kernel and
current driver.

The OS is the GPU Operator's OS tag, from NFD's ``system-os_release`` labels (the operator splits
its own driver pools the same way); the kernel is NFD's ``kernel-version.full``, else the node
status. A GPU node without driver labels is a pool (it still has a GPU to plan for); one whose
GPU is not known at all is a pool without a :class:`~cudasched.compat.branches.GpuTarget` (listed,
not planned); CPU nodes are in no pool.

Pool names are ``<gpu>-<os tag>`` (then ``-2``, ``-3``) and stay under 32 characters: they are
label values and NVIDIADriver names, and the operator names its DaemonSet
``nvidia-gpu-driver-<name>-<os tag>``. The current driver is not in the name: the name outlives
the plan.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cudasched.compat.branches import GpuTarget, OsTag, gpu_target, os_tag
from cudasched.knowledge.drivers import KernelRelease, parse_kernel
from cudasched.operations.nodelabels import NFD_OS_ID, NFD_OS_VERSION
from cudasched.operations.pools import gpu_members
from cudasched.vocab.errors import InputError
from cudasched.vocab.objects import labels_of

if TYPE_CHECKING:
    from cudasched.cluster.fleet import Fleet
    from cudasched.cluster.snapshot import ClusterSnapshot
    from cudasched.nodes.facts import NodeFacts
    from cudasched.vocab.versions import DriverVersion

__all__ = ["NFD_KERNEL", "PlanPool", "plan_pools"]

NFD_KERNEL = "feature.node.kubernetes.io/kernel-version.full"
_NAME_LIMIT = 32


@dataclass(frozen=True, slots=True)
class PlanPool:
    """GPU nodes with one GPU product, OS, kernel and current driver."""

    name: str
    nodes: tuple[str, ...]
    gpu: str | None
    os: OsTag | None
    kernel: KernelRelease | None
    current: DriverVersion | None
    facts: tuple[NodeFacts, ...]
    target: GpuTarget | None = None

    def describe(self) -> str:
        parts = [
            self.gpu or "unknown GPU",
            str(self.os) if self.os else "OS unknown",
            f"kernel {self.kernel}" if self.kernel else "kernel unknown",
            f"driver {self.current}" if self.current else "no driver reported",
        ]
        return ", ".join(parts)


def _node_os(labels: Mapping[str, str]) -> OsTag | None:
    os_id = labels.get(NFD_OS_ID, "").strip()
    version = labels.get(NFD_OS_VERSION, "").strip()
    return os_tag(os_id, version) if os_id and version else None


def _node_kernel(node: Mapping[str, Any], labels: Mapping[str, str]) -> KernelRelease | None:
    text = labels.get(NFD_KERNEL, "").strip()
    if not text:
        status = node.get("status")
        info = status.get("nodeInfo") if isinstance(status, Mapping) else None
        value = info.get("kernelVersion") if isinstance(info, Mapping) else None
        text = value.strip() if isinstance(value, str) else ""
    if not text:
        return None
    try:
        return parse_kernel(text)
    except InputError:
        return None


def _slug(text: str, limit: int) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    for prefix in ("nvidia-", "tesla-"):
        if slug.startswith(prefix) and len(slug) > len(prefix):
            slug = slug[len(prefix) :]
    return slug[:limit].strip("-") or "gpu"


def _pool_name(gpu: str | None, os: OsTag | None, taken: set[str]) -> str:
    """``<gpu>-<os tag>`` (``h100-80gb-hbm3-amzn2023``), ``-2``, ``-3`` ... for the next pools
    of the same GPU and OS (another kernel or driver). The current driver is not in the name:
    the name outlives the plan."""
    # An os-release ID may hold "_" (allowed in label values, not in object names).
    tail = re.sub(r"[^a-z0-9.-]+", "-", str(os).lower()).strip("-.") if os is not None else ""
    tail = tail or "os-unknown"
    room = _NAME_LIMIT - len(tail) - 1
    base = f"{_slug(gpu, max(room, 4)) if gpu else 'unknown-gpu'}-{tail}"
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base[: _NAME_LIMIT - len(str(n)) - 1].rstrip('-')}-{n}"
    taken.add(name)
    return name


def plan_pools(snapshot: ClusterSnapshot, fleet: Fleet) -> tuple[PlanPool, ...]:
    """The GPU pools of a cluster (see the module docstring), ordered by GPU, OS, kernel and
    driver. ``fleet`` must be built from ``snapshot``'s nodes."""
    groups: dict[tuple[Any, ...], tuple[list[str], dict[int, NodeFacts], Any]] = {}
    for node, number, facts, obj in gpu_members(snapshot, fleet):
        labels = labels_of(obj)
        os, kernel = _node_os(labels), _node_kernel(obj, labels)
        gpu = "/".join(facts.products) or None
        key = (gpu, str(os) if os else None, kernel.text if kernel else None, facts.driver)
        names, seen, _ = groups.setdefault(key, ([], {}, (os, kernel)))
        names.append(node.name)
        seen.setdefault(number, facts)

    def order(key: tuple[Any, ...]) -> tuple[str, str, str, int]:
        gpu, os, kernel, driver = key
        return (gpu or "~", os or "~", kernel or "~", driver.code if driver is not None else -1)

    taken: set[str] = set()
    pools = []
    for key in sorted(groups, key=order):
        names, seen, (os, kernel) = groups[key]
        facts = tuple(seen.values())
        targets = [gpu_target(fleet.kb, f) for f in facts]
        target = targets[0] if targets and all(t is not None for t in targets) else None
        pools.append(
            PlanPool(
                name=_pool_name(key[0], os, taken),
                nodes=tuple(names),
                gpu=key[0],
                os=os,
                kernel=kernel,
                current=key[3],
                facts=facts,
                target=target,
            )
        )
    return tuple(pools)
