"""Admission of InferenceServices and LLMInferenceServices: the requirement each resolves to,
recorded on the object and warned about at ``kubectl apply`` when no node can run it. Their pods
are placed by the pod rules."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from cudasched.placement.drarequest import managed_dra_selectors
from cudasched.settings.config import DraMode
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.vocab.kserve import MANAGED_DRA_CEL_SELECTOR, MANAGED_DRA_DEVICE_CLASS
from cudasched.vocab.objects import annotations_of, namespace_of
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.webhook.admission.once import said_once
from cudasched.webhook.admission.patch import Scope, diff
from cudasched.webhook.admission.placer import Compiled, FitCheck
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
    RuntimeChoice,
    merge_scheduling,
    predictor_pod,
    runtime_refused,
    select_runtime,
)
from cudasched.workloads.kserve.llm import llmisvc_pod
from cudasched.workloads.pullscope import pull_scope
from cudasched.workloads.resolution import (
    NeedStatus,
    UnknownRequirement,
    isvc_need,
    llmisvc_need,
)
from cudasched.workloads.view import view_pod

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
    choice, refused = _runtime_of(ctx, full, state)
    runtime = choice.obj if choice is not None else None
    scope = pull_scope(full, req.namespace, runtime=runtime)
    need = isvc_need(full, choice, ctx.images.per_request(scope), ctx.kb)

    mutated = copy_decoded(isvc)
    ann_scope = Scope(("metadata", "annotations"))
    if refused is not None:
        # KServe creates no pods for it: say so rather than judge a pod that will not exist.
        nothing = _nothing_to_record(req, isvc, full, mutated, None)
        return replace(nothing, warnings=(clip(refused),), reason="no runtime")
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
    terms = compiled.terms
    built = predictor_pod(full, choice)  # the pod KServe makes: where it must fit
    no_fit, check = _fit(ctx, requirement, compiled, built, state, "its predictor's")
    ns = str(full["metadata"].get("namespace") or "")
    notes = said_once(ctx.said, requirement, "InferenceService", choice, ns)
    placement = placement_of(req, full, no_fit, check)
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


def _runtime_of(
    ctx: RuleContext, isvc: Mapping[str, Any], state: ClusterState
) -> tuple[RuntimeChoice | None, str | None]:
    """The runtime KServe runs ``isvc`` with, and, when it runs none although it needs one
    (it names one that does not exist, or no runtime serves its model), the warning that says
    why.

    The snapshot may lag the API server: ``kubectl apply`` of a runtime and its service sends
    the service before the runtime's watch event reaches the cache. So on a miss the
    namespace's runtimes are read from the API server (``ctx.runtimes``, within its budget)
    and the service judged by them; when they cannot be read in time the answer says the
    runtime is not known yet instead of that it does not exist."""
    choice = state.select_runtime_for(isvc)
    if choice is not None:
        return choice, None
    fleet = state.fleet
    namespace = namespace_of(isvc)
    try:
        why = runtime_refused(
            isvc, fleet.serving_runtimes(namespace), fleet.cluster_serving_runtimes
        )
    except InputError:
        return None, None  # unreadable objects: judged as using no runtime, as before
    source = ctx.runtimes
    if why is None:
        return None, None  # it needs no runtime (custom containers, ModelMesh)
    if source is None:  # the snapshot is all there is (cudasched mutate, the demo)
        return None, _NO_PREDICTOR + why
    live = source.read(namespace)
    if live is None:
        return None, (
            f"cudasched: not judged: its runtime is not known yet ({why} in the webhook's "
            "cache, and the API server did not answer in time)"
        )
    serving, cluster = live
    try:
        choice = select_runtime(isvc, serving, cluster)
        why = None if choice is not None else runtime_refused(isvc, serving, cluster)
    except InputError:
        return None, None
    return choice, None if why is None else _NO_PREDICTOR + why


#: What a service KServe runs no predictor for is told (the reason follows).
_NO_PREDICTOR = "cudasched: no node can run it, KServe runs no predictor for it: "


def _fit(
    ctx: RuleContext,
    requirement: Requirement,
    compiled: Compiled,
    pod: Mapping[str, Any],
    state: ClusterState,
    whose: str,
) -> tuple[str | None, FitCheck | None]:
    """Whether any node can run the service's pod (the predictor KServe builds, the
    LLMInferenceService's model server) as admitted: its own node selection and GPU
    resources with the requirement's terms, the rule ``explain`` and the audit use."""
    spec = pod.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    gpus = view_pod(pod).gpu_resources
    return ctx.placer.no_fit(requirement, compiled, spec, gpus, state, whose=whose)


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
    compiled = ctx.placer.compile(requirement, policy, state)
    no_fit, check = _fit(ctx, requirement, compiled, llmisvc_pod(full), state, "its pods'")
    placement = placement_of(req, full, no_fit, check)
    set_annotation(mutated, L.ANN_REQUIREMENT, record)
    narrowed = _managed_dra(ctx, service, requirement, policy)
    if narrowed is not None:
        set_annotation(mutated, MANAGED_DRA_CEL_SELECTOR, narrowed)
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


def _managed_dra(
    ctx: RuleContext, service: Mapping[str, Any], requirement: Requirement, policy: Policy
) -> str | None:
    """With ``dra.mode`` on, an LLMInferenceService whose pods KServe gives a managed DRA
    claim of NVIDIA's GPU class (or a cudasched class) gets the selectors of its CUDA-aware
    class added to the claim's (``None``: nothing to add)."""
    if ctx.config.dra.mode is DraMode.OFF:
        return None
    annotations = annotations_of(service)
    if MANAGED_DRA_DEVICE_CLASS not in annotations:
        return None
    choice = ctx.placer.device_class(requirement, policy)
    return None if choice is None else managed_dra_selectors(annotations, choice.selectors)
