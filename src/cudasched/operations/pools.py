"""Node pools: the GPU nodes of a cluster grouped the way an operator buys, upgrades and talks
about them, each with one readable name that every command prints (``report``, ``audit``,
``plan-drivers``), and the newest CUDA each pool can run.

A pool is the set of GPU nodes with the same GPU product, current driver, OS, kernel, CPU
architecture (``kubernetes.io/arch``: driver images are built per architecture) and driver
manager (who installs the driver: the GPU Operator, the host, or a cloud node group's image, and
which node group: :func:`cudasched.compat.drivermanager.driver_manager`, from the node's labels
and what the cluster shows of the operator's driver DaemonSets). That is what a cloud node group
or an on-premises rack usually is, and the unit a driver change is planned in. The OS is the
GPU Operator's OS tag, from NFD's ``system-os_release`` labels (the operator splits its own driver
DaemonSets the same way), else the node's ``osImage``; the kernel is NFD's
``kernel-version.full``, else the node status. A GPU node is one whose status reports NVIDIA GPUs,
that the GPU Operator marks ``nvidia.com/gpu.present=true``, or that carries GPU facts; nodes
without GPUs belong to no pool. A GPU node without driver labels is a pool (it still has a GPU to
plan for); one whose GPU is not known at all has no :class:`~cudasched.compat.branches.GpuTarget`.

Names (:func:`pool_names`) read ``<gpu>-r<branch>-<os tag>`` (``a100-sxm4-80gb-r535-ubuntu22.04``);
when two pools would share one, the full driver version replaces the branch and the full
``VERSION_ID`` the OS tag (``rhel9.4``: RHEL nodes of two minor releases are two pools, since GPU
Operator releases before v26.7 pull different images for them), then the node group and the CPU
architecture are added, then ``-2``, ``-3`` in pool order, so a name is the same on every run
over the same nodes. A name describes the pool as it is now; it is not a label value (the driver
plan's own objects are named separately).

The CUDA ceiling of a pool (:func:`cudasched.compat.branches.cuda_ceiling`) is found by asking the
compatibility engine, toolkit release by toolkit release, which is the newest CUDA a workload
with no other constraint can run on every node of the pool: natively (policy ``strict``), and
under minor-version compatibility (``minor-compat``). Asking the engine keeps the ceiling and
every verdict in agreement by construction.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cudasched.compat.branches import GpuTarget, OsTag, cuda_ceiling, gpu_target, os_tag
from cudasched.compat.drivermanager import DriverCluster, Manager, driver_cluster, driver_manager
from cudasched.knowledge.drivers import KernelRelease, parse_kernel
from cudasched.operations.nodelabels import NFD_OS_ID, NFD_OS_VERSION, is_gpu_node, os_of
from cudasched.vocab.errors import InputError
from cudasched.vocab.objects import labels_of, name_of
from cudasched.vocab.requirements import Policy

if TYPE_CHECKING:
    from cudasched.cluster.fleet import Fleet
    from cudasched.cluster.snapshot import ClusterSnapshot
    from cudasched.nodes.facts import NodeFacts
    from cudasched.vocab.nodeaffinity import Node
    from cudasched.vocab.versions import CudaVersion, DriverVersion

__all__ = [
    "ARCH_LABEL",
    "NFD_KERNEL",
    "Ceiling",
    "Pool",
    "cuda_ceiling",
    "gpu_members",
    "node_pools",
    "pool_names",
    "slug",
    "snapshot_drivers",
]

NFD_KERNEL = "feature.node.kubernetes.io/kernel-version.full"
#: The kubelet's CPU architecture label (GOARCH: amd64, arm64).
ARCH_LABEL = "kubernetes.io/arch"
_NAME_LIMIT = 63


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
    """GPU nodes with one GPU product, driver, OS, kernel and driver manager; ``facts`` holds
    each distinct set of GPU facts among them (one, unless their labels differ in other ways)."""

    name: str
    nodes: tuple[str, ...]
    gpu: str | None  # GFD product name(s), "/"-joined for a mixed node
    driver: DriverVersion | None
    os: OsTag | None  # the GPU Operator's OS tag (NFD labels)
    os_image: str | None  # status.nodeInfo.osImage, else NFD's words
    kernel: KernelRelease | None
    manager: Manager
    facts: tuple[NodeFacts, ...]
    ceiling: Ceiling
    target: GpuTarget | None = None
    arch: str | None = None  # kubernetes.io/arch (amd64, arm64); None: not reported

    @property
    def product(self) -> str | None:
        """The GPU product (the report's word for :attr:`gpu`)."""
        return self.gpu

    @property
    def current(self) -> DriverVersion | None:
        """The driver the pool runs now (the planner's word for :attr:`driver`)."""
        return self.driver

    @property
    def os_text(self) -> str:
        """The OS tag, else the OS image (``OS unknown`` when neither is known)."""
        return str(self.os) if self.os is not None else (self.os_image or "OS unknown")

    def describe(self) -> str:
        """``NVIDIA-A100-SXM4-80GB, ubuntu22.04, kernel 5.15.0-124-generic, driver 535.216.01``."""
        parts = [
            self.gpu or "unknown GPU",
            self.os_text,
            f"kernel {self.kernel}" if self.kernel else "kernel unknown",
            f"driver {self.driver}" if self.driver else "no driver reported",
        ]
        return ", ".join(parts)


def gpu_members(
    snapshot: ClusterSnapshot, fleet: Fleet
) -> Iterator[tuple[Node, int, NodeFacts, Mapping[str, Any]]]:
    """The fleet's GPU nodes (GPU facts, or a GPU by NFD, the GPU Operator or capacity), each
    with its fact-group number, facts and object. ``fleet`` must be built from ``snapshot``'s
    nodes: every pool view starts here."""
    objects: Mapping[str, Mapping[str, Any]] = {name_of(n): n for n in snapshot.nodes}
    for node, number, facts in fleet.members():
        obj = objects.get(node.name)
        if obj is None:
            raise InputError(f"node {node.name!r} of the fleet is not in the snapshot")
        if facts.has_gpu or is_gpu_node(obj):
            yield node, number, facts, obj


def _node_os(labels: Mapping[str, str]) -> OsTag | None:
    os_id = labels.get(NFD_OS_ID, "").strip()
    version = labels.get(NFD_OS_VERSION, "").strip()
    return os_tag(os_id, version) if os_id and version else None


def _node_arch(node: Mapping[str, Any], labels: Mapping[str, str]) -> str | None:
    """The node's CPU architecture: the kubelet's label, else ``status.nodeInfo``."""
    text = labels.get(ARCH_LABEL, "").strip()
    if not text:
        status = node.get("status")
        info = status.get("nodeInfo") if isinstance(status, Mapping) else None
        value = info.get("architecture") if isinstance(info, Mapping) else None
        text = value.strip() if isinstance(value, str) else ""
    return text or None


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


def slug(text: str, limit: int = _NAME_LIMIT) -> str:
    """A GPU product as a name part: lower case, dashes, without the ``NVIDIA``/``Tesla``
    prefix (``NVIDIA-A100-SXM4-80GB`` -> ``a100-sxm4-80gb``)."""
    text = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    for prefix in ("nvidia-", "tesla-"):
        if text.startswith(prefix) and len(text) > len(prefix):
            text = text[len(prefix) :]
    return text[:limit].strip("-") or "gpu"


def _os_part(os: OsTag | None, image: str | None, full: bool = False) -> str:
    # An os-release ID may hold "_" (allowed in label values, not in object names). ``full``:
    # the whole VERSION_ID (rhel9.4), which tells apart pools the OS tag (rhel9) does not.
    if os is None:
        return re.sub(r"[^a-z0-9.-]+", "-", (image or "").lower()).strip("-.") or "os-unknown"
    text = f"{os.id}{os.full_version}" if full else str(os)
    return re.sub(r"[^a-z0-9.-]+", "-", text.lower()).strip("-.") or "os-unknown"


@dataclass(frozen=True, slots=True)
class _Key:
    gpu: str | None
    driver: DriverVersion | None
    os: OsTag | None
    image: str | None
    kernel: KernelRelease | None
    manager: Manager
    arch: str | None = None


def _fit(parts: Sequence[str]) -> str:
    name = "-".join(p for p in parts if p)
    if len(name) <= _NAME_LIMIT:
        return name
    head, tail = parts[0], "-".join(p for p in parts[1:] if p)
    return f"{head[: max(4, _NAME_LIMIT - len(tail) - 1)].rstrip('-')}-{tail}"[:_NAME_LIMIT]


def pool_names(keys: Sequence[_Key]) -> list[str]:
    """One readable name per pool key, in order (module docstring)."""

    def parts(key: _Key, driver_full: bool, group: bool, arch: bool = False) -> list[str]:
        gpu = slug(key.gpu) if key.gpu else "unknown-gpu"
        if key.driver is None:
            driver = "nodriver"
        else:
            driver = str(key.driver) if driver_full else f"r{key.driver.branch}"
        tail = [key.manager.group or key.manager.kind.value] if group else []
        if arch and key.arch:
            tail.append(key.arch)
        return [gpu, driver, _os_part(key.os, key.image, driver_full), *tail]

    names = [_fit(parts(k, False, False)) for k in keys]
    for step in ((True, False), (True, True), (True, True, True)):
        clashes: dict[str, list[int]] = {}
        for i, n in enumerate(names):
            clashes.setdefault(n, []).append(i)
        for idx in clashes.values():
            if len(idx) < 2 or (len(step) > 2 and len({keys[i].arch for i in idx}) < 2):
                continue  # the architecture is named only where it tells pools apart
            for i in idx:
                names[i] = _fit(parts(keys[i], *step))
    seen: dict[str, int] = {}
    out: list[str] = []
    for n in names:
        count = seen.get(n, 0) + 1
        seen[n] = count
        out.append(n if count == 1 else f"{n[: _NAME_LIMIT - len(str(count)) - 1]}-{count}")
    return out


def snapshot_drivers(
    snapshot: ClusterSnapshot, fleet: Fleet, extra: tuple[Mapping[str, Any], ...] = ()
) -> DriverCluster:
    """What ``snapshot`` shows of the GPU Operator's driver DaemonSets (its ClusterPolicy, which
    ``extra`` may add: a live read's; NVIDIADriver objects; driver pods; OpenShift)."""
    return driver_cluster(
        fleet.kb,
        (*extra, *snapshot.other),
        drivers=snapshot.nvidia_drivers,
        pods=snapshot.pods,
        nodes=snapshot.nodes,
    )


def node_pools(
    snapshot: ClusterSnapshot, fleet: Fleet, drivers: DriverCluster | None = None
) -> tuple[Pool, ...]:
    """The GPU node pools of a cluster, ordered by GPU, driver, OS, kernel, architecture and
    driver manager. ``fleet`` must be built from ``snapshot``'s nodes (same order); ``drivers``:
    the cluster's evidence of who installs drivers (default: what the snapshot holds)."""
    kb = fleet.kb
    evidence = drivers if drivers is not None else snapshot_drivers(snapshot, fleet)
    groups: dict[_Key, tuple[list[str], dict[int, NodeFacts], str | None]] = {}
    for node, number, facts, obj in gpu_members(snapshot, fleet):
        labels = labels_of(obj)
        os = _node_os(labels)
        key = _Key(
            gpu="/".join(facts.products) or None,
            driver=facts.driver,
            os=os,
            image=None if os is not None else os_of(obj),
            kernel=_node_kernel(obj, labels),
            manager=driver_manager(kb, labels, evidence, node.name),
            arch=_node_arch(obj, labels),
        )
        names, seen, _ = groups.setdefault(key, ([], {}, os_of(obj)))
        names.append(node.name)
        seen.setdefault(number, facts)

    def order(key: _Key) -> tuple[Any, ...]:
        return (
            key.gpu or "~",
            key.driver.code if key.driver is not None else -1,
            str(key.os) if key.os is not None else (key.image or "~"),
            key.kernel.text if key.kernel is not None else "~",
            key.manager.kind.value,
            key.manager.group or "",
            key.arch or "",
        )

    keys = sorted(groups, key=order)
    pools = []
    for key, name in zip(keys, pool_names(keys), strict=True):
        names, seen, image = groups[key]
        members = tuple(seen.values())
        targets = [gpu_target(kb, f) for f in members]
        pools.append(
            Pool(
                name=name,
                nodes=tuple(names),
                gpu=key.gpu,
                driver=key.driver,
                os=key.os,
                os_image=image,
                kernel=key.kernel,
                manager=key.manager,
                facts=members,
                ceiling=Ceiling(
                    cuda_ceiling(members, Policy.STRICT, kb),
                    cuda_ceiling(members, Policy.MINOR_COMPAT, kb),
                ),
                target=targets[0] if targets and all(t is not None for t in targets) else None,
                arch=key.arch,
            )
        )
    return tuple(pools)
