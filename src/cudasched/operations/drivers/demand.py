"""What a cluster asks of its drivers: every workload with a CUDA requirement, each once.

Workloads are the ones the audit looks at, and their requirements are resolved by the same
functions (what the webhook would enforce): InferenceServices and LLMInferenceServices through
:func:`cudasched.workloads.resolution.resolve_workload`, Pods and controllers through the view
of the pod they create (:func:`cudasched.workloads.resolution.cluster_pod_need`: its skip
switch and need, as admission reads them from that pod), serving runtimes through
:func:`cudasched.operations.runtimes.runtime_rows`. A predictor pod whose InferenceService is
listed, or a pod of a listed LLMInferenceService, is its service's demand, not its own; pods
owned by a listed controller are their controller's. Workloads without a requirement (CPU
pods, ``cudasched.io/skip``, runtimes for another accelerator, disabled runtimes) ask nothing.

Workloads that ask the same (requirement, policy) form one :class:`DemandGroup`, so a planner
decides once per pool and group instead of once per node and workload.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from cudasched.compat.engine import resolve_policy
from cudasched.operations.refs import finished, object_ref
from cudasched.operations.runtimes import runtime_rows
from cudasched.vocab.errors import InputError
from cudasched.vocab.objects import annotations_of, name_of, namespace_of
from cudasched.workloads.pods import is_inference_service, is_skipped, pod_of, workloads_of
from cudasched.workloads.resolution import cluster_pod_need, resolve_workload
from cudasched.workloads.view import service_listed, view_pod

if TYPE_CHECKING:
    from cudasched.cluster.fleet import Fleet
    from cudasched.cluster.snapshot import ClusterSnapshot
    from cudasched.knowledge.images import ImageTable
    from cudasched.vocab.requirements import Policy, Requirement

__all__ = ["Demand", "DemandGroup", "cluster_demand"]


@dataclass(frozen=True, slots=True)
class DemandGroup:
    """Workloads that ask the same requirement under the same policy."""

    number: int
    requirement: Requirement
    policy: Policy
    workloads: tuple[str, ...]  # object references (``InferenceService/ns/name``)

    def describe(self) -> str:
        return f"{self.requirement.describe()} [{self.policy.value}]"


@dataclass(frozen=True, slots=True)
class Demand:
    """A cluster's demand: groups, and the workloads whose requirement could not be read."""

    groups: tuple[DemandGroup, ...]
    unreadable: tuple[tuple[str, str], ...] = ()  # (object reference, error)

    @property
    def workloads(self) -> int:
        return sum(len(g.workloads) for g in self.groups)


def cluster_demand(
    snapshot: ClusterSnapshot, fleet: Fleet, images: ImageTable, policy: Policy
) -> Demand:
    """Every workload of ``snapshot`` with a CUDA requirement, grouped by (requirement,
    policy); ``policy`` is the default for workloads that name none (the webhook's).
    ``fleet`` must be built from ``snapshot``."""
    found: list[tuple[str, Requirement]] = []
    unreadable: list[tuple[str, str]] = []

    def add(obj: Mapping[str, Any], resolve: Any) -> None:
        ref = object_ref(obj)
        if is_skipped(annotations_of(obj)):  # a service's own switch, as admission reads it
            return
        try:
            req = resolve()
        except InputError as exc:
            unreadable.append((ref, str(exc)))
            return
        if not req.is_empty:
            found.append((ref, req))

    for service in (*snapshot.inference_services, *snapshot.llm_inference_services):
        add(service, lambda o=service: resolve_workload(o, fleet, images)[1])
    isvcs = {(namespace_of(o), name_of(o)) for o in snapshot.inference_services}
    llms = {(namespace_of(o), name_of(o)) for o in snapshot.llm_inference_services}
    for obj in workloads_of(snapshot):
        if is_inference_service(obj) or (obj.get("kind") == "Pod" and finished(obj)):
            continue
        try:
            # The pod it creates, as admission sees it: its skip switch, service and need.
            view = view_pod(pod_of(obj))
            if view.skipped or (
                obj.get("kind") == "Pod" and service_listed(view, view.namespace, isvcs, llms)
            ):
                continue
            req = cluster_pod_need(view, fleet, images).requirement
        except InputError as exc:
            unreadable.append((object_ref(obj), str(exc)))
            continue
        if not req.is_empty:
            found.append((object_ref(obj), req))
    for row in runtime_rows(fleet, images):
        if row.error is not None:
            unreadable.append((row.ref, row.error))
        elif not row.disabled and row.requirement is not None and not row.requirement.is_empty:
            found.append((row.ref, row.requirement))

    # Where a requirement was found (its ``source``) changes no verdict: group without it.
    index: dict[tuple[Requirement, Policy], list[str]] = {}
    for ref, req in found:
        index.setdefault((replace(req, source=""), resolve_policy(req, policy)), []).append(ref)
    groups = tuple(
        DemandGroup(number, req, pol, tuple(refs))
        for number, ((req, pol), refs) in enumerate(index.items())
    )
    return Demand(groups, tuple(unreadable))
