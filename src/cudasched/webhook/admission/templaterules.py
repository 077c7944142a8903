"""Admission of workload controllers (Deployments, StatefulSets, Jobs, CronJobs,
LeaderWorkerSets): their pod templates judged as their pods will be, warn-only.

Most GPU workloads reach a cluster as a controller, not as a pod: the user runs ``kubectl apply``
on the Deployment, and its pods are created later by the controller, whose admission warnings
nobody reads. So a pod that no node can run went Pending with the scheduler's generic "didn't
match Pod's node affinity/selector" and the person who applied it was never told (issue 27).
Here each template is turned into the pod its controller creates (:func:`pod_of`: the
template's metadata over the object's annotations, as ``explain deploy/NAME`` reads it) and
decided by the pod rule (:func:`~cudasched.webhook.admission.podrules.admit_pod`); its
warnings, and its denial said as a warning, come back at ``kubectl apply``. The template is
never changed (its pods get their affinity when they are created) and the controller is never
refused (the pods are, under ``onNoFit: deny``). When no node can run them, the NoCompatibleNode
reporter records an Event on the controller (and, once they exist, on the pods and on the
ReplicaSet or Job that makes them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cudasched.vocab.errors import InputError
from cudasched.vocab.objects import as_mapping, metadata_of
from cudasched.webhook.admission.podrules import admit_pod
from cudasched.webhook.admission.review import Decision, ReviewRequest, clip
from cudasched.webhook.admission.reviewed import WORKLOAD_KINDS, placement_of, with_namespace
from cudasched.webhook.admission.steps import RuleContext, skipped
from cudasched.workloads.pods import pod_of

if TYPE_CHECKING:
    from cudasched.webhook.state.clusterstate import ClusterState

__all__ = ["WORKLOAD_KINDS", "admit_template"]


def admit_template(
    ctx: RuleContext, req: ReviewRequest, obj: Mapping[str, Any], state: ClusterState
) -> Decision:
    """The answer for a workload controller: allowed, unchanged, with the warnings its pods
    would get (CREATE and UPDATE)."""
    if req.operation not in ("CREATE", "UPDATE"):
        return Decision(req.uid, reason=f"operation {req.operation}")
    why = skipped(ctx.config, req, obj)
    if why is not None:
        return Decision(req.uid, reason=f"skipped: {why}")
    full = with_namespace(obj, req.namespace)
    try:
        pods = _pods(req.kind, full)
    except InputError as exc:
        return Decision(
            req.uid,
            warnings=(clip(f"cudasched: pods not judged: {exc}"),),
            reason=f"unreadable: {exc}",
        )
    warnings: list[str] = []
    no_fit = check = None
    requirement = ""
    # The pods' own review: created, never a dry run of their own (they are not created now).
    as_pod = req._replace(operation="CREATE", group="", kind="Pod", sub_resource="")
    for where, pod in pods:
        decided = admit_pod(ctx, as_pod, pod, state)
        said = decided.warnings if decided.allowed else (*decided.warnings, decided.message)
        warnings.extend(_of_template(where, w) for w in said if w)
        if no_fit is None and decided.no_fit is not None:
            no_fit, check = decided.no_fit, decided.fit_check
        requirement = requirement or decided.requirement
    placement = placement_of(req, full, no_fit, check)
    return Decision(
        req.uid,
        warnings=tuple(dict.fromkeys(warnings)),
        requirement=requirement,
        reason="template judged" if pods else "no pod template",
        placement=placement,
    )


def _of_template(where: str | None, warning: str) -> str:
    """A pod's warning said of the template it comes from (``None``: the only one)."""
    if where is None:
        return warning
    _, _, rest = warning.partition("cudasched: ")
    return clip(f"cudasched: {where}: {rest or warning}")


def _pods(kind: str, obj: Mapping[str, Any]) -> list[tuple[str | None, dict[str, Any]]]:
    """The pods the controller creates, each with the template it comes from when it has
    several (a LeaderWorkerSet's leader and workers)."""
    if kind != "LeaderWorkerSet":
        return [(None, pod_of(obj))]
    spec = as_mapping(obj.get("spec"), "spec")
    both = as_mapping(spec.get("leaderWorkerTemplate"), "spec.leaderWorkerTemplate")
    out: list[tuple[str | None, dict[str, Any]]] = []
    for part in ("leaderTemplate", "workerTemplate"):
        template = both.get(part)
        if template is None:
            continue
        # Read as a controller with that one template (workloads/pods.pod_of).
        one = {"kind": kind, "metadata": metadata_of(obj), "spec": {"template": template}}
        out.append((part, pod_of(one)))
    return out
