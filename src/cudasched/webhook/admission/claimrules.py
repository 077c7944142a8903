"""Admission of a ResourceClaim made for a pod (``dra.mode`` not ``off``): its GPU requests
narrowed to the devices that can run the pod, the CUDA-aware class's selectors added
(:mod:`cudasched.placement.claimnarrow` writes the patch).

Which claims: those kube-controller-manager's resourceclaim controller makes from a pod's
ResourceClaimTemplate. It makes them after the pod is stored, owned by it (an ownerReference
``v1``/``Pod`` with ``controller: true``, and ``resource.kubernetes.io/pod-claim-name``), so the
pod is there to be read (``get`` by name, within ``kube.runtimeReadSeconds``) and what it runs
is known. A claim a person creates names no pod: the pods that will use it do not exist yet, so
it is left as it is (the registration does not even send it).

What the pod needs is decided again from the pod as stored, by the same reading as its own
admission (:func:`~cudasched.webhook.admission.podrules.pod_need_of`), not taken from its
``cudasched.io/requirement`` annotation: the pod's author can write that annotation, and a pod
the webhook did not constrain keeps whatever it says. The answer is the same as the pod's
(same knowledge, same images), unless the knowledge was swapped in between.

Never a refusal and never a widening: a claim whose pod cannot be read, is skipped, or whose
requirement is unknown is admitted unchanged with a warning (the pod's creator reads none of
them; the controller's log and the audit log keep them), and the patch only ever adds
selectors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cudasched.placement.claimnarrow import narrow_claim
from cudasched.settings.config import DraMode
from cudasched.vocab.errors import InputError
from cudasched.vocab.objects import metadata_of
from cudasched.webhook.admission.podrules import pod_need_of
from cudasched.webhook.admission.review import Decision, ReviewRequest, clip
from cudasched.webhook.admission.reviewed import declares_requirement
from cudasched.webhook.admission.steps import RuleContext, policy_of, skipped
from cudasched.workloads.resolution import NeedStatus

if TYPE_CHECKING:
    from cudasched.webhook.state.clusterstate import ClusterState

__all__ = ["POD_CLAIM_NAME", "admit_claim", "owner_pod"]

#: What kube-controller-manager writes on every claim it makes from a pod's template.
POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"


def owner_pod(claim: Mapping[str, Any]) -> str | None:
    """The name of the pod ``claim`` was made for from its template (an ownerReference
    ``v1``/``Pod`` with ``controller: true``, and :data:`POD_CLAIM_NAME`), or ``None``. The
    claim kube-scheduler makes for a pod's extended resources (KEP-5004) is owned by the pod
    too but carries ``resource.kubernetes.io/extended-resource-claim`` instead: it is made
    with its devices already chosen, and is never narrowed."""
    meta = metadata_of(claim)
    annotations = meta.get("annotations")
    if not isinstance(annotations, Mapping) or POD_CLAIM_NAME not in annotations:
        return None
    refs = meta.get("ownerReferences")
    if not isinstance(refs, list):
        return None
    for ref in refs:
        if (
            isinstance(ref, Mapping)
            and ref.get("apiVersion") == "v1"
            and ref.get("kind") == "Pod"
            and ref.get("controller") is True
            and isinstance(ref.get("name"), str)
        ):
            return str(ref["name"])
    return None


def _left(req: ReviewRequest, why: str, record: str = "") -> Decision:
    """The claim admitted as it is, saying why it was not narrowed."""
    text = clip(f"cudasched: ResourceClaim not narrowed to its pod's CUDA ({why})")
    return Decision(req.uid, warnings=(text,), requirement=record, reason=why)


def admit_claim(
    ctx: RuleContext, req: ReviewRequest, claim: Mapping[str, Any], state: ClusterState
) -> Decision:
    """The answer for a ResourceClaim: CREATE only, ``dra.mode`` on, made for a pod."""
    if req.operation != "CREATE":
        return Decision(req.uid, reason=f"operation {req.operation}")
    if ctx.config.dra.mode is DraMode.OFF:
        return Decision(req.uid, reason="dra.mode off")
    name = owner_pod(claim)
    if name is None:
        return Decision(req.uid, reason="not made for a pod")
    spec = claim.get("spec")
    if not isinstance(spec, Mapping):
        return Decision(req.uid, reason="claim has no spec")
    if ctx.pods is None:
        return _left(req, f"pod {name} cannot be read here")
    pod, why = ctx.pods.read_pod(req.namespace, name)
    if pod is None:
        return _left(req, why)
    return _for_pod(ctx, req, spec, pod, state)


def _for_pod(
    ctx: RuleContext,
    req: ReviewRequest,
    spec: Mapping[str, Any],
    pod: Mapping[str, Any],
    state: ClusterState,
) -> Decision:
    """The claim's answer once its pod is read: narrowed to the class of what the pod needs."""
    who = f"pod {metadata_of(pod).get('name')}"
    skip = skipped(ctx.config, req, pod)
    if skip is not None:
        return Decision(req.uid, reason=f"{who} skipped: {skip}")
    try:
        found = pod_need_of(ctx, req.namespace, pod, state, declares_requirement(pod))
    except InputError as exc:
        return _left(req, f"{who} unreadable: {exc}")
    if isinstance(found, str):
        return Decision(req.uid, reason=f"{who}: {found}")
    need = found.need
    if need.status is not NeedStatus.KNOWN:
        if need.unknown is None:
            return Decision(req.uid, reason=f"{who}: no requirement to enforce")
        return _left(req, f"{who}: requirement unknown", need.unknown.record())
    requirement = need.requirement
    policy = policy_of(ctx.config, requirement)
    record = requirement.record(policy)
    choice = ctx.placer.device_class(requirement, policy)
    if choice is None:
        return _left(req, f"{who}: no GPU can run {record}", record)
    narrowed = narrow_claim(spec, choice.selectors, choice.name)
    notes = tuple(
        clip(f"cudasched: request {left} of the claim not narrowed to {choice.name}")
        for left in narrowed.left
    )
    return Decision(
        req.uid,
        patch=narrowed.ops,
        warnings=notes,
        outcome="patched" if narrowed.ops else "unchanged",
        requirement=record,
        reason=f"narrowed to {choice.name}" if narrowed.ops else "nothing to narrow",
        audit={"requirement": record},
    )
