"""Admission of InferenceServices and LLMInferenceServices: the requirement each resolves to,
recorded on the object and warned about at ``kubectl apply`` when no node can run it. Their pods
are placed by the pod rules."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.webhook.admission.once import said_once
from cudasched.webhook.admission.patch import Scope, diff
from cudasched.webhook.admission.review import (
    Decision,
    ReviewRequest,
    clip,
)
from cudasched.webhook.admission.reviewed import (
    copy_decoded,
    placement_of,
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
from cudasched.workloads.kserve import (
    merge_scheduling,
)
from cudasched.workloads.pullscope import pull_scope
from cudasched.workloads.resolution import (
    NeedStatus,
    UnknownRequirement,
    isvc_need,
    llmisvc_need,
)

if TYPE_CHECKING:
    from cudasched.webhook.state.clusterstate import ClusterState

__all__ = ["admit_isvc", "admit_llmisvc"]


def admit_isvc(
    ctx: RuleContext, req: ReviewRequest, isvc: Mapping[str, Any], state: ClusterState
) -> Decision:
    """The answer for an InferenceService: its requirement recorded, warned about when no node
    can run it (and its affinity written, with ``isvcAffinity``)."""
    return _service(ctx, req, isvc, state, _isvc_checked)


def _service(
    ctx: RuleContext,
    req: ReviewRequest,
    service: Mapping[str, Any],
    state: ClusterState,
    checked: Callable[[RuleContext, ReviewRequest, Mapping[str, Any], ClusterState], Decision],
) -> Decision:
    """The gate every service kind shares: CREATE and UPDATE only, the skip rules, and a
    value that does not parse answered with a warning instead of an error."""
    if req.operation not in ("CREATE", "UPDATE"):
        return Decision(req.uid, reason=f"operation {req.operation}")
    why = skipped(ctx.config, req, service)
    if why is not None:
        return Decision(req.uid, reason=f"skipped: {why}")
    try:
        decision = checked(ctx, req, service, state)
    except InputError as exc:
        decision = Decision(
            req.uid,
            warnings=(clip(f"cudasched: requirement not resolved: {exc}"),),
            reason=f"unreadable: {exc}",
        )
    return with_misspellings(decision, service)


def _isvc_checked(
    ctx: RuleContext, req: ReviewRequest, isvc: Mapping[str, Any], state: ClusterState
) -> Decision:
    full = with_namespace(isvc, req.namespace)
    choice = state.select_runtime_for(full)
    runtime = choice.obj if choice is not None else None
    scope = pull_scope(full, req.namespace, runtime=runtime)
    need = isvc_need(full, choice, ctx.images.per_request(scope), ctx.kb)

    mutated = copy_decoded(isvc)
    ann_scope = Scope(("metadata", "annotations"))
    if need.status is not NeedStatus.KNOWN:
        return with_unknown(
            ctx.config,
            _nothing_to_record(req, isvc, full, mutated, need.unknown),
            "InferenceService",
            need.unknown,
            may_deny=req.operation == "CREATE",
        )
    requirement = need.requirement

    policy = policy_of(ctx.config, requirement)
    record = requirement.record(policy)
    compiled = ctx.placer.compile(requirement, policy, state)
    terms, no_fit, key = compiled.terms, compiled.no_fit, compiled.key
    ns = str(full["metadata"].get("namespace") or "")
    notes = said_once(ctx.said, requirement, "InferenceService", choice, ns)
    placement = placement_of(req, full, no_fit, (key, terms) if terms is not None else None)
    set_annotation(mutated, L.ANN_REQUIREMENT, record)
    scopes = [ann_scope]
    spec = mutated.get("spec")
    predictor = spec.get("predictor") if isinstance(spec, dict) else None
    if ctx.config.isvc_affinity and terms is not None and isinstance(predictor, dict):
        # KServe replaces the runtime's node-selector terms with the InferenceService's
        # (strategic merge, no merge key), so the runtime's affinity is folded in first.
        runtime_spec = (runtime or {}).get("spec")
        runtime_aff = runtime_spec.get("affinity") if isinstance(runtime_spec, Mapping) else None
        base = merge_scheduling(runtime_aff, predictor.get("affinity"))
        try:
            merged = ctx.placer.merge({"affinity": base} if base else {}, compiled)
        except InputError as exc:
            admitted = unconstrained(req, record, str(exc), notes)
            return replace(admitted, placement=placement)
        if merged.get("affinity"):
            predictor["affinity"] = merged["affinity"]
            scopes.append(Scope(("spec", "predictor", "affinity")))
    # Denying an UPDATE could wedge a service whose nodes went away (finalizer removal is
    # an UPDATE too), so only a CREATE is ever refused.
    decision = finish(
        ctx.config,
        req,
        isvc,
        mutated,
        scopes,
        record=record,
        no_fit=no_fit,
        may_deny=req.operation == "CREATE",
        notes=notes,
    )
    return replace(decision, placement=placement)


def _nothing_to_record(
    req: ReviewRequest,
    original: Mapping[str, Any],
    full: Mapping[str, Any],
    mutated: dict[str, Any],
    unknown: UnknownRequirement | None,
) -> Decision:
    """A service with no requirement to enforce: record that its CUDA is unknown when it is
    (``unknown (why)``), else drop a stale record left by an earlier version of the object;
    and clear what the no-fit reporter knew of it."""
    record = unknown.record() if unknown is not None else ""
    set_annotation(mutated, L.ANN_REQUIREMENT, record or None)
    ops = diff(original, mutated, (Scope(("metadata", "annotations")),))
    return Decision(
        req.uid,
        patch=tuple(ops),
        outcome="patched" if ops else "unchanged",
        requirement=record,
        reason="no requirement to enforce",
        placement=placement_of(req, full, None, None),
    )


def admit_llmisvc(
    ctx: RuleContext, req: ReviewRequest, service: Mapping[str, Any], state: ClusterState
) -> Decision:
    """The answer for an LLMInferenceService (see :func:`_llmisvc_checked`)."""
    return _service(ctx, req, service, state, _llmisvc_checked)


def _llmisvc_checked(
    ctx: RuleContext, req: ReviewRequest, service: Mapping[str, Any], state: ClusterState
) -> Decision:
    """Like an InferenceService: the requirement recorded in an annotation and the no-fit
    warning (and Event). Its pods are constrained on the pod path; no affinity is written
    into the service."""
    full = with_namespace(service, req.namespace)
    need = llmisvc_need(full, ctx.images.per_request(pull_scope(full, req.namespace)), ctx.kb)
    mutated = copy_decoded(service)
    if need.status is not NeedStatus.KNOWN:
        return with_unknown(
            ctx.config,
            _nothing_to_record(req, service, full, mutated, need.unknown),
            "LLMInferenceService",
            need.unknown,
            may_deny=req.operation == "CREATE",
        )
    requirement = need.requirement
    policy = policy_of(ctx.config, requirement)
    record = requirement.record(policy)
    terms, no_fit, key = ctx.placer.compile(requirement, policy, state)[:3]
    placement = placement_of(req, full, no_fit, (key, terms) if terms is not None else None)
    set_annotation(mutated, L.ANN_REQUIREMENT, record)
    decision = finish(
        ctx.config,
        req,
        service,
        mutated,
        (Scope(("metadata", "annotations")),),
        record=record,
        no_fit=no_fit,
        may_deny=req.operation == "CREATE",
    )
    return replace(decision, placement=placement)
