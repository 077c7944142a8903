"""Admission of pods: what a pod needs (its annotations, its runtime's labels, its image), the
node affinity that keeps it on nodes that can run it, merged into its own, and a pod already
bound to a node (``spec.nodeName``), which no affinity may exclude."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NamedTuple

from cudasched.compat.engine import check
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.webhook.admission.drapods import admit_through_class
from cudasched.webhook.admission.once import said_once
from cudasched.webhook.admission.patch import Op, Scope, diff
from cudasched.webhook.admission.review import (
    Decision,
    ReviewRequest,
    clip,
)
from cudasched.webhook.admission.reviewed import (
    declares_requirement,
    owner_placement,
    pod_for_mutation,
    set_annotation,
    with_namespace,
)
from cudasched.webhook.admission.steps import (
    RuleContext,
    finish,
    policy_of,
    skipped,
    unconstrained,
    with_misspellings,
    with_unknown,
)
from cudasched.workloads.resolution import (
    NeedStatus,
    UnknownRequirement,
    WorkloadNeed,
    pod_need,
)
from cudasched.workloads.view import PodView, Role, view_pod

if TYPE_CHECKING:
    from cudasched.webhook.state.clusterstate import ClusterState
    from cudasched.workloads.kserve import RuntimeChoice

__all__ = ["PodNeed", "admit_pod", "pod_need_of"]

#: The subtree of a pod that admission diffs itself; spec.affinity's patch comes from the
#: placer (:meth:`~cudasched.webhook.admission.placer.Placer.merge_ops`), after it.
_ANNOTATIONS = (Scope(("metadata", "annotations")),)


def admit_pod(
    ctx: RuleContext, req: ReviewRequest, pod: Mapping[str, Any], state: ClusterState
) -> Decision:
    """The answer for a pod: CREATE only; constrained when it uses a GPU or declares what it
    needs (outside KServe only with ``constrainGpuPodsByImage``)."""
    if req.operation != "CREATE":
        return Decision(req.uid, reason=f"operation {req.operation}")
    why = skipped(ctx.config, req, pod)
    if why is not None:
        return Decision(req.uid, reason=f"skipped: {why}")
    spec = pod.get("spec")
    if not (type(spec) is dict or isinstance(spec, Mapping)):
        return Decision(req.uid, reason="pod has no spec")
    # Only a pod with a cudasched.io/* key of its own can have misspelt one.
    declared = declares_requirement(pod)
    try:
        decision = _pod_checked(ctx, req, pod, spec, state, declared)
    except InputError as exc:
        # The pod says something we cannot read (a bad annotation value, a malformed
        # quantity): never block it for that, but tell the user at once.
        decision = Decision(
            req.uid,
            warnings=(clip(f"cudasched: pod not constrained: {exc}"),),
            reason=f"unreadable: {exc}",
        )
    return with_misspellings(decision, pod) if declared else decision


class PodNeed(NamedTuple):
    """What admission reads of a pod before placing it: its view, the runtime it uses (a
    KServe predictor's), its namespace and its need."""

    view: PodView
    choice: RuntimeChoice | None
    ns: str
    need: WorkloadNeed


def pod_need_of(
    ctx: RuleContext, namespace: str, pod: Mapping[str, Any], state: ClusterState, declared: bool
) -> PodNeed | str:
    """The pod's need as its admission decides it, or why the pod is not constrained at all
    (no GPU and nothing declared; a GPU pod outside KServe with ``constrainGpuPodsByImage``
    off). The one reading for a pod's CREATE and for the claims made for it (claimrules)."""
    view = view_pod(pod).checked()  # every answer below is the view's: read it all
    model_server = view.role is Role.MODEL_SERVER  # may take its GPUs from the configs
    if not declared and not view.requests_gpu and not model_server:
        # Only pods that use a GPU, or say what they need, are ever constrained.
        return "no GPU and no declared requirement"
    if not (view.is_kserve or declared or ctx.config.constrain_gpu_pods_by_image):
        return "GPU pod outside KServe (constrainGpuPodsByImage off)"
    full = with_namespace(pod, namespace)
    ns = str(full["metadata"].get("namespace") or "")
    choice = service = None
    if model_server:
        service = state.llm_inference_service(ns, view.owner) if view.owner else None
    elif view.role is Role.PREDICTOR:
        choice = state.runtime_of(ns, view.owner) if view.owner else None
    need = pod_need(
        view,
        choice,
        ctx.images.per_request(view.pull_scope(namespace)),
        ctx.kb,
        service=service,
    )
    return PodNeed(view, choice, ns, need)


def _pod_checked(
    ctx: RuleContext,
    req: ReviewRequest,
    pod: Mapping[str, Any],
    spec: Mapping[str, Any],
    state: ClusterState,
    declared: bool,
) -> Decision:
    found = pod_need_of(ctx, req.namespace, pod, state, declared)
    if isinstance(found, str):
        return Decision(req.uid, reason=found)
    view, choice, ns, need = found
    if need.status is not NeedStatus.KNOWN:
        nothing = _nothing_to_enforce(req, pod, need.unknown)
        return with_unknown(ctx.config, nothing, "Pod", need.unknown, may_deny=True)
    return _placed(ctx, req, pod, spec, state, view, need.requirement, choice, ns)


def _placed(
    ctx: RuleContext,
    req: ReviewRequest,
    pod: Mapping[str, Any],
    spec: Mapping[str, Any],
    state: ClusterState,
    view: PodView,
    requirement: Requirement,
    choice: RuntimeChoice | None,
    ns: str,
) -> Decision:
    """The answer for a pod whose requirement is known: left alone on the node its creator
    named, its GPUs asked through its DRA class (``dra.mode``), or node affinity."""
    policy = policy_of(ctx.config, requirement)
    record = requirement.record(policy)
    node_name = spec.get("nodeName")
    if isinstance(node_name, str) and node_name:
        return _named_node(ctx, req, node_name, requirement, policy, record, state)
    answered, dra_warnings = admit_through_class(
        ctx,
        req,
        pod,
        spec,
        requirement,
        policy,
        _ANNOTATIONS,
        lambda: said_once(ctx.said, requirement, "Pod", choice, ns),
    )
    if answered is not None:
        return answered
    compiled = ctx.placer.compile(requirement, policy, state)
    no_fit, check = ctx.placer.no_fit(requirement, compiled, spec, view.gpu_resources, state)
    terms = compiled.terms
    placed: list[Op] = []
    unmergeable = None
    if terms is not None:
        try:
            # Called even when `terms` is empty: the merge also replaces cudasched's own
            # earlier terms (recognised by their marker); the pod's own expressions, on any
            # key, are kept and ANDed with ours. The patch of spec.affinity comes with it.
            placed = ctx.placer.merge_ops(spec, compiled, "/spec")
        except InputError as exc:
            unmergeable = exc
    # Only now, once nothing can be deferred to a review thread (answer_inline).
    notes = said_once(ctx.said, requirement, "Pod", choice, ns)
    if unmergeable is not None:
        # The pod's own affinity cannot be combined with ours (malformed, or the cross
        # product would explode): admit it as it is and say why.
        return unconstrained(req, record, str(unmergeable), notes)
    mutated = pod_for_mutation(pod)
    set_annotation(mutated, L.ANN_REQUIREMENT, record)
    decision = finish(
        ctx.config,
        req,
        pod,
        mutated,
        _ANNOTATIONS,
        record=record,
        no_fit=no_fit,
        may_deny=True,
        notes=notes,
        then=placed,
        check=check,
    )
    if dra_warnings:
        decision = replace(decision, warnings=(*decision.warnings, *dra_warnings))
    # No node can run it: the controller that made it is reported (the pod has no name yet),
    # for its Event and for the sweep that finds the pod once stored (background/podevents).
    owner = owner_placement(req, pod, no_fit, check)
    return decision if owner is None else replace(decision, placement=owner)


def _nothing_to_enforce(
    req: ReviewRequest, pod: Mapping[str, Any], unknown: UnknownRequirement | None
) -> Decision:
    """A pod with no requirement to enforce; one whose CUDA is unknown is recorded as such
    (``cudasched.io/requirement: unknown (why)``), so that what the webhook recorded shows it
    saw the pod and could not tell what it needs."""
    if unknown is None:
        return Decision(req.uid, reason="no requirement to enforce")
    record = unknown.record()
    mutated = pod_for_mutation(pod)
    set_annotation(mutated, L.ANN_REQUIREMENT, record)
    ops = diff(pod, mutated, _ANNOTATIONS)
    return Decision(
        req.uid,
        patch=tuple(ops),
        outcome="patched" if ops else "unchanged",
        requirement=record,
        reason="no requirement to enforce",
    )


def _named_node(
    ctx: RuleContext,
    req: ReviewRequest,
    node: str,
    requirement: Requirement,
    policy: Policy,
    record: str,
    state: ClusterState,
) -> Decision:
    """A pod whose creator named its node (``spec.nodeName``) skips the scheduler: the
    kubelet rejects a pod whose required node affinity excludes its own node, so no affinity
    is added; when the cache knows the node cannot run the pod, the answer warns."""
    facts = state.facts_of(node)
    reason = f"spec.nodeName {node} set: not scheduled, left alone"
    if facts is None:
        return Decision(req.uid, requirement=record, reason=reason)
    verdict = check(facts, requirement, policy, ctx.kb)
    if verdict.compatible:
        return Decision(req.uid, requirement=record, reason=reason)
    why = "; ".join(dict.fromkeys(r.message for r in verdict.reasons if r.blocking))
    return Decision(
        req.uid,
        warnings=(clip(f"cudasched: node {node} (spec.nodeName) cannot run {record}: {why}"),),
        requirement=record,
        reason=reason,
    )
