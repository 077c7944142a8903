"""The CUDA-aware DRA device classes a cluster's workloads need: one per requirement and
policy that some workload asks (:func:`cudasched.operations.drivers.demand.cluster_demand`, the
workloads and requirements the audit and the driver planner read), each saying which workloads
it serves, so a platform team applies the classes and points each workload at its own.

Two demand groups can differ only in words that change no device (where a framework build was
read): they get one class, serving both. A requirement no GPU can meet gets no class and is
listed with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cudasched.placement.deviceclass import DeviceClassDraft, device_class
from cudasched.vocab.errors import InputError

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.operations.drivers.demand import Demand
    from cudasched.vocab.requirements import Policy, Requirement

__all__ = ["ClassPlan", "DemandClass", "classes_for_demand"]


@dataclass(frozen=True, slots=True)
class DemandClass:
    """One device class and the workloads (object references) it serves."""

    draft: DeviceClassDraft
    requirement: Requirement
    policy: Policy
    workloads: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ClassPlan:
    """The classes, and the requirements that get none: (workloads, why)."""

    classes: tuple[DemandClass, ...]
    unservable: tuple[tuple[tuple[str, ...], str], ...] = ()
    unreadable: tuple[tuple[str, str], ...] = ()


def classes_for_demand(demand: Demand, kb: KnowledgeBase) -> ClassPlan:
    """A device class per demand group, merged by name, in the order demand lists them."""
    by_name: dict[str, DemandClass] = {}
    unservable: list[tuple[tuple[str, ...], str]] = []
    for group in demand.groups:
        try:
            draft = device_class(group.requirement, group.policy, kb)
        except InputError as exc:
            unservable.append((group.workloads, str(exc)))
            continue
        known = by_name.get(draft.name)
        if known is None:
            by_name[draft.name] = DemandClass(
                draft, group.requirement, group.policy, group.workloads
            )
        elif known.draft.obj["spec"] != draft.obj["spec"]:
            unservable.append(
                (
                    group.workloads,
                    f"its class would be named {draft.name}, as the class of "
                    f"{known.requirement.describe()}, which selects other devices: print one "
                    "for it with `cudasched device-classes --cuda ... --name NAME`",
                )
            )
        else:
            by_name[draft.name] = DemandClass(
                known.draft,
                known.requirement,
                known.policy,
                (*known.workloads, *group.workloads),
            )
    return ClassPlan(tuple(by_name.values()), tuple(unservable), demand.unreadable)
