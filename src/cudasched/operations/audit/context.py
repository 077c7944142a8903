"""One audit run's shared reading of a cluster: its verdicts, and each workload's
requirement resolved once (as the webhook would enforce it), for the rule modules to ask."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from functools import cached_property
from typing import TYPE_CHECKING, Any

from cudasched.explain.fit import requirement_runs_anywhere
from cudasched.explain.shared import Shared
from cudasched.operations.audit.nodegroups import NodeGroup, groups_from_snapshot
from cudasched.operations.nodelabels import (
    UPGRADE_DONE,
    upgrade_state,
)
from cudasched.operations.pools import Pool, node_pools
from cudasched.operations.reach import FleetVerdicts
from cudasched.vocab.errors import InputError
from cudasched.vocab.objects import annotations_of, labels_of, name_of, namespace_of
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.workloads.kserve import (
    predictor_image,
)
from cudasched.workloads.kserve.llm import llmisvc_main_container, llmisvc_uses_gpu
from cudasched.workloads.pods import is_skipped, workload_uses_gpu
from cudasched.workloads.resolution import (
    UnknownRequirement,
    cluster_pod_need,
    workload_need,
)
from cudasched.workloads.view import service_listed, view_pod

if TYPE_CHECKING:
    from cudasched.cluster.fleet import Fleet
    from cudasched.cluster.snapshot import ClusterSnapshot
    from cudasched.knowledge.images import ImageTable
    from cudasched.workloads.kserve import RuntimeChoice


__all__ = ["AuditContext", "Resolved", "wants"]


def wants(req: Requirement, policy: Policy) -> str:
    """A requirement as findings quote it: what, under which policy, from where."""
    source = f" ({req.source})" if req.source else ""
    return f"{req.describe()} [{policy.value}]{source}"


@dataclass(frozen=True, slots=True)
class Resolved:
    """A workload's requirement as the webhook sees it (``error`` when unreadable)."""

    req: Requirement
    gpu: bool
    skipped: bool
    runtime: RuntimeChoice | None = None
    image: str | None = None
    error: str | None = None
    unknown: UnknownRequirement | None = None  # WorkloadNeed.unknown: what admission warns
    pod: Mapping[str, Any] | None = None  # the pod it runs as: its own node selection
    no_pods: str | None = None  # WorkloadNeed.no_pods: why its controller creates no pods


class AuditContext:
    """The cluster of one audit run, its verdicts and each workload's requirement."""

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        fleet: Fleet,
        images: ImageTable,
        policy: Policy,
        node_groups: Sequence[NodeGroup] = (),
        today: date | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.today = today  # the day a fix's branch is judged on (None: the data's own date)
        self.node_groups = [*node_groups, *groups_from_snapshot(snapshot)]
        self.fleet = fleet
        self.kb = fleet.kb
        self.images = images
        self.policy = policy
        self.verdicts = FleetVerdicts(fleet)
        self.isvcs = set(fleet.inference_services)
        self.llms = {(namespace_of(o), name_of(o)) for o in snapshot.llm_inference_services}
        self.upgrading = frozenset(
            name_of(n)
            for n in snapshot.nodes
            if upgrade_state(labels_of(n)) not in (None, UPGRADE_DONE)
        )
        self._pods: dict[int, Resolved] = {}
        self._shared = Shared()  # compiled terms and fits, once per run (explain/fit.py)

    @cached_property
    def pools(self) -> dict[str, Pool]:
        """Each GPU node's pool (who installs its driver, its OS and architecture), as
        ``plan-drivers`` groups them: a fix names a driver change the way the plan would."""
        return {n: p for p in node_pools(self.snapshot, self.fleet) for n in p.nodes}

    def policy_for(self, req: Requirement) -> Policy:
        return self.verdicts.policy_for(req, self.policy)

    def resolve_pod(self, pod: Mapping[str, Any]) -> Resolved:
        found = self._pods.get(id(pod))
        if found is not None:
            return found
        view = view_pod(pod)
        # An unreadable GPU quantity reads as no GPU: the requirement step says what is wrong.
        skipped, gpu = view.skipped, view.requests_gpu
        try:
            need = cluster_pod_need(view, self.fleet, self.images)
            container = view.cuda_container
            image = container.get("image") if container is not None else None
            found = Resolved(
                need.requirement, gpu, skipped, need.runtime, image, None, need.unknown, pod
            )
        except InputError as exc:
            found = Resolved(Requirement(), gpu, skipped, error=str(exc))
        self._pods[id(pod)] = found
        return found

    def resolve_isvc(self, isvc: Mapping[str, Any]) -> Resolved:
        skipped = is_skipped(annotations_of(isvc))
        try:
            pod, need = workload_need(isvc, self.fleet, self.images)
            choice = need.runtime
            gpu = workload_uses_gpu(isvc, choice)
            image = predictor_image(isvc, choice.obj if choice is not None else None)
        except InputError as exc:
            return Resolved(Requirement(), False, skipped, error=str(exc))
        return Resolved(
            need.requirement, gpu, skipped, choice, image, None, need.unknown, pod, need.no_pods
        )

    def resolve_llm(self, obj: Mapping[str, Any]) -> Resolved:
        skipped = is_skipped(annotations_of(obj))
        try:
            pod, need = workload_need(obj, self.fleet, self.images)
            req = need.requirement
            # Its pods usually take resources from the configs: only a GPU the object itself
            # asks for makes a service the audit reports as unprotected.
            gpu = llmisvc_uses_gpu(obj)
            main = llmisvc_main_container(pod["spec"])
        except InputError as exc:
            return Resolved(Requirement(), False, skipped, error=str(exc))
        image = main.get("image") if main is not None else None
        image = image if isinstance(image, str) else None
        return Resolved(req, gpu, skipped, image=image, unknown=need.unknown, pod=pod)

    def runs_somewhere(self, found: Resolved) -> bool:
        """Whether any node can run the workload as the webhook admits it: its pod's own
        selection and GPU resources with the requirement's terms
        (:func:`~cudasched.explain.fit.requirement_runs_anywhere`, the rule the webhook warns
        by and ``explain`` counts by). A pod whose affinity cannot be merged is not held
        against it (the webhook admits it unconstrained)."""
        spec = (found.pod or {}).get("spec")
        if not isinstance(spec, Mapping) or found.req.is_empty:
            return True
        try:
            return requirement_runs_anywhere(spec, found.req, self.policy, self.fleet, self._shared)
        except InputError:
            return True

    def covered(self, pod: Mapping[str, Any]) -> bool:
        """A pod whose service the snapshot lists (findings about it go to the service)."""
        return service_listed(view_pod(pod), namespace_of(pod), self.isvcs, self.llms)
