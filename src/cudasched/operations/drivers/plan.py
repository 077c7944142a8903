"""A driver plan's result: what happens to each pool (:class:`PoolDecision`) and the whole plan
(:class:`DriverPlan`, whose ``to_dict`` is the ``plan-drivers -o json`` contract), with the
small helpers that describe a pool's change. Built by :mod:`.planning`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import date
from typing import TYPE_CHECKING, Any

from cudasched.operations.drivers.demand import Demand
from cudasched.operations.drivers.nvidiadriver import (
    DriverObject,
    Replacement,
)
from cudasched.operations.drivers.planoptions import (
    Option,
)
from cudasched.operations.pools import Pool
from cudasched.vocab.requirements import Policy

if TYPE_CHECKING:
    from cudasched.knowledge.operator import OperatorVersion
    from cudasched.vocab.versions import CudaVersion, DriverVersion

__all__ = [
    "DOWNGRADE",
    "KEEP",
    "REOWN",
    "UPGRADE",
    "DriverPlan",
    "PoolDecision",
    "change_of",
    "with_action",
    "workload_refs",
]


UPGRADE = "upgrade"
DOWNGRADE = "downgrade"
KEEP = "keep"
#: What the action of a pool that keeps its driver but moves to another NVIDIADriver starts
#: with: its driver pods restart (``PoolDecision.reown``).
REOWN = "re-own"


@dataclass(frozen=True, slots=True)
class PoolDecision:
    """What happens to one pool, and why."""

    pool: Pool
    chosen: Option | None
    current: frozenset[int]
    change: str
    gains: tuple[str, ...]
    loses: tuple[str, ...]
    why: tuple[str, ...]
    action: str = ""
    driver_object: str | None = None  # the NVIDIADriver that drives it after the plan
    blocked: str | None = None  # a better driver exists, but not the way the pool gets it
    floor: DriverVersion | None = None  # the oldest release of the branch that serves the same
    image: str | None = None  # the driver image the GPU Operator pulls for it after the plan
    reown: bool = False  # keeps its driver, moves to another NVIDIADriver: driver pods restart

    @property
    def changes(self) -> bool:
        return self.chosen is not None and not self.chosen.keep

    @property
    def operator(self) -> bool:
        return self.pool.manager.operator

    def to_dict(self) -> dict[str, object]:
        pool, chosen = self.pool, self.chosen
        target = pool.target
        lc = chosen.lifecycle if chosen is not None else None
        return {
            "name": pool.name,
            "nodes": list(pool.nodes),
            "gpu": pool.gpu,
            "arch": target.arch.name if target is not None else None,
            "cpuArch": pool.arch,
            "os": str(pool.os) if pool.os else None,
            "kernel": str(pool.kernel) if pool.kernel else None,
            "currentDriver": str(pool.current) if pool.current else None,
            "driverManager": pool.manager.kind.value,
            "driverManagerEvidence": pool.manager.evidence,
            "nodeGroup": pool.manager.group,
            "targetBranch": str(chosen.branch) if chosen is not None else None,
            "targetVersion": chosen.version if chosen is not None else None,
            "targetFloor": str(self.floor) if self.floor is not None else None,
            "kernelModuleType": chosen.module.value if chosen and chosen.module else None,
            "usePrecompiled": bool(chosen and chosen.precompiled),
            "lifecycle": lc.type if lc is not None else None,
            "eol": lc.eol if lc is not None else None,
            "change": self.change,
            "action": self.action,
            "nvidiaDriver": self.driver_object,
            "driverImage": self.image,
            "reOwn": self.reown,
            "blocked": self.blocked,
            "gains": list(self.gains),
            "loses": list(self.loses),
            "why": list(self.why),
        }


@dataclass(frozen=True, slots=True)
class DriverPlan:
    """A whole plan (``to_dict`` is the ``plan-drivers -o json`` contract)."""

    decisions: tuple[PoolDecision, ...]
    demand: Demand
    objects: tuple[DriverObject, ...]
    node_labels: Mapping[str, Mapping[str, str]]
    waves: tuple[tuple[str, ...], ...]
    wave_capacity: int
    unservable: tuple[tuple[str, str], ...]
    notes: tuple[str, ...]
    warnings: tuple[str, ...]
    policy: Policy
    today: date
    operator: OperatorVersion
    target_cuda: CudaVersion | None = None
    max_unavailable: int | str = "25%"
    gpu_nodes: int = 0
    replaced: tuple[Replacement, ...] = ()
    default_driver: str | None = None
    min_support_months: int = 12
    gpu_count: Mapping[str, int] = field(default_factory=dict)

    @property
    def drivers(self) -> tuple[Mapping[str, Any], ...]:
        """The NVIDIADriver manifests, in object order."""
        return tuple(o.manifest for o in self.objects)

    @property
    def host_actions(self) -> tuple[PoolDecision, ...]:
        """The pools whose driver comes with the host or a node image and should change."""
        return tuple(d for d in self.decisions if not d.operator and d.changes)

    def to_dict(self) -> dict[str, object]:
        return {
            "pools": [d.to_dict() for d in self.decisions],
            "nvidiaDrivers": [dict(o.manifest) for o in self.objects],
            "hostActions": [
                {"pool": d.pool.name, "nodes": list(d.pool.nodes), "action": d.action}
                for d in self.host_actions
            ],
            "nodeLabels": {n: dict(v) for n, v in self.node_labels.items()},
            "waves": [list(w) for w in self.waves],
            "replaced": [{"name": r.name, "by": r.by, "why": r.why} for r in self.replaced],
            "defaultDriver": self.default_driver,
            "gpuOperatorVersion": self.operator.version,
            "unservable": [{"workload": w, "why": why} for w, why in self.unservable],
            "notes": list(self.notes),
            "warnings": list(self.warnings),
            "policy": self.policy.value,
            "asOf": self.today.isoformat(),
            "targetCuda": str(self.target_cuda) if self.target_cuda else None,
            "maxUnavailable": self.max_unavailable,
            "minSupportMonths": self.min_support_months,
            "waveSize": self.wave_capacity,
            "gpuNodes": self.gpu_nodes,
            "workloads": self.demand.workloads,
        }


def change_of(pool: Pool, chosen: Option | None) -> str:
    if chosen is None or chosen.keep:
        return KEEP
    if pool.current is None or chosen.branch > pool.current.branch:
        return UPGRADE
    return DOWNGRADE


def workload_refs(groups: frozenset[int], demand: Demand) -> tuple[str, ...]:
    return tuple(sorted(w for g in groups for w in demand.groups[g].workloads))


def with_action(
    d: PoolDecision, action: str, obj: str | None, image: str | None = None
) -> PoolDecision:
    """``d`` with its action, the NVIDIADriver that drives it and the driver image it pulls."""
    return replace(d, action=action, driver_object=obj, image=image)
