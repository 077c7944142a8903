"""Eligibility: node by node, whether a workload may land there and why (what ``cudasched
explain`` and the operations commands report).

For every node the answer has three parts:

* ``eligible``: exactly what Kubernetes' required node affinity would decide for the pod spec
  *as cudasched would admit it*: the spec as given, with the workload's CUDA requirement compiled
  to node-selector terms and ANDed in by :func:`cudasched.placement.merge.merge_required`, then
  matched by
  the faithful port in :mod:`cudasched.vocab.nodeaffinity` (``spec.nodeSelector`` AND required
  terms).
  Nothing here re-implements matching, so ``explain`` cannot disagree with the webhook's patch.
* ``score``: the raw preferred-affinity sum the scheduler's NodeAffinity plugin starts from
  (before normalisation), or ``"error"`` when the preferred terms do not parse (the scheduler
  then fails the scoring step for the pod).
* ``reasons``: the compatibility engine's reasons for the node, plus ``node-selector-mismatch``
  / ``affinity-mismatch`` when the user's own constraints exclude it, plus
  ``requirement-labels-missing`` when the engine would accept the node but it lacks the labels
  the chosen label scheme selects on (an agent or GFD not rolled out there yet).

A workload states its requirement with annotations on the object or on its pod template
(``cudasched.io/cuda-version``, ``min-compute-capability``, ``policy``, ``ships-cuda-compat``);
a caller that resolved it another way (a KServe runtime, the image) passes ``requirement=``.

Cost: large fleets repeat the same few GPU label sets (one per node pool). The
:class:`~cudasched.cluster.fleet.Fleet` reads GPU facts once per set, and :func:`explain` decides
once
per (facts, values of the label keys the workload's selectors read) signature, so 5,000 nodes cost
a few dozen decisions per workload.
Only ``matchFields`` (which look at the node *name*) force per-node matching.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from cudasched.cluster.fleet import Fleet
from cudasched.compat.engine import resolve_policy
from cudasched.compat.verdict import Reason
from cudasched.explain.decision import Plan, decide
from cudasched.explain.explanation import (
    Decision,
    Explanation,
    NodeAnswers,
    NodeExplanation,
    renamed,
)
from cudasched.explain.selectors import selector_identity
from cudasched.explain.shared import (
    Shared,
    declared_once,
    repr_once,
    requirement_terms_once,
)
from cudasched.nodes.scheme import GfdKeys
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.vocab.nodeaffinity import Node
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.workloads import declared as declarations
from cudasched.workloads.pods import read_pod_template, template_pod, workload_id
from cudasched.workloads.resolution import UnknownRequirement
from cudasched.workloads.view import PodView, view_pod

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase

__all__ = [
    "NO_PODS",
    "explain",
    "explain_many",
    "requirement_from_annotations",
]

# --------------------------------------------------------------------------- requirement


def requirement_from_annotations(obj: Mapping[str, Any]) -> Requirement | None:
    """The CUDA requirement a workload declares with ``cudasched.io/*`` annotations (its own,
    overlaid with its pod template's).

    ``None`` when it declares neither a CUDA version nor a minimum compute capability (a policy
    alone constrains nothing). The values are read by the webhook's own reader
    (:func:`cudasched.workloads.declared.requirement_from_annotations`: same accepted values, same
    ``source``); bad values raise :class:`InputError` naming the annotation and the workload.
    """
    template = read_pod_template(obj)
    return declarations.requirement_from_annotations(template.annotations, template.workload)


def explain(
    workload: Mapping[str, Any],
    nodes: Fleet | Iterable[Mapping[str, Any] | Node],
    policy: Policy | str,
    kb: KnowledgeBase,
    scheme: L.LabelScheme | str = L.LabelScheme.AUTO,
    *,
    requirement: Requirement | None = None,
) -> Explanation:
    """Explain, node by node, where ``workload`` (a Pod, a controller, a CronJob) may land.

    ``requirement`` replaces the one read from the workload's annotations (pass what the
    resolution of a KServe runtime or an image found); ``policy`` is the default the
    requirement's own policy overrides; ``scheme`` ``auto`` picks the labels every GPU node
    carries. A workload with ``cudasched.io/skip: "true"`` is explained as given.
    """
    fleet = nodes if isinstance(nodes, Fleet) else Fleet(nodes, kb)
    return _explain(workload, fleet, policy, scheme, requirement, None, Shared())


# What explain's per-node answers depend on besides the fleet: the pod's nodeSelector and
# affinity (as canonical JSON), the requirement (its repr, patch level included), the effective
# policy, the label scheme and the GPU resources the pod requests. Workloads that agree on all of
# these get the same answers.
_MemoKey = tuple[bytes, str, Policy, L.LabelScheme, frozenset[str]]
_Memo = dict[Any, Any]


def _explain(
    workload: Mapping[str, Any],
    fleet: Fleet,
    policy: Policy | str,
    scheme: L.LabelScheme | str,
    requirement: Requirement | None,
    memo: _Memo | None,
    shared: Shared,
) -> Explanation:
    who, spec, view = _pod_view(workload, shared)
    skipped = view.skipped
    declared = requirement is None
    req = None
    if not skipped:  # a skipped pod's requirement is never read, as admission never reads it
        req = (
            requirement if requirement is not None else declared_once(view.annotations, who, shared)
        )
        if req is not None and req.is_empty:
            req = None
    base_policy = policy if isinstance(policy, Policy) else Policy.parse(str(policy))
    effective = resolve_policy(req, base_policy) if req is not None else base_policy
    chosen = fleet.resolve_scheme(scheme)
    gfd_keys = fleet.gfd_keys if chosen is L.LabelScheme.GFD else None
    selectors = selector_identity(spec)
    req_id = repr_once(req, shared)  # the repr, not equality: it tells patch levels apart
    if declared and req is not None:
        # Workloads that declare the same requirement share one (frozen) object, so a call
        # over thousands of them does not keep thousands of equal copies alive.
        req = shared.declared.setdefault(req_id, req)
    key: _MemoKey | None = None
    gpu_requests = view.gpu_resources
    if memo is not None and selectors is not None:
        key = (selectors, req_id, effective, chosen, gpu_requests)
    hit = memo.get(key) if memo is not None and key is not None else None
    if hit is None:
        terms, requirement_error, score_error, results = _answers(
            spec,
            req,
            req_id,
            effective,
            chosen,
            gfd_keys,
            fleet,
            memo,
            shared,
            selectors,
            gpu_requests,
        )
        if memo is not None and key is not None:
            memo[key] = (terms, requirement_error, score_error, results)
    else:
        terms, requirement_error, score_error, results = hit
    return Explanation(
        workload=who,
        nodes=results,
        requirement=req,
        policy=effective,
        scheme=chosen,
        terms=terms,  # one tuple per requirement, shared by its workloads
        gfd_keys=gfd_keys,
        skipped=skipped,
        score_error=score_error,
        requirement_error=requirement_error,
    )


def _pod_view(
    workload: Mapping[str, Any], shared: Shared
) -> tuple[str, Mapping[str, Any], PodView]:
    """The workload's id, its pods' spec, and the view of the pod it creates, as admission
    reads it (skip, GPU resources, annotations): an unreadable pod cannot be explained. A Pod
    is its own pod; a controller's is built from its template (errors name the workload)."""
    if type(workload) is dict and workload.get("kind") == "Pod":
        view = view_pod(workload, gpu_memo=shared.gpu).checked()
        return workload_id(workload), workload.get("spec") or {}, view
    template = read_pod_template(workload)
    view = view_pod(template_pod(workload, template), gpu_memo=shared.gpu).checked()
    return template.workload, template.spec, view


def _answers(
    spec: Mapping[str, Any],
    req: Requirement | None,
    req_id: str,
    effective: Policy,
    chosen: L.LabelScheme,
    gfd_keys: GfdKeys | None,
    fleet: Fleet,
    memo: _Memo | None,
    shared: Shared,
    selectors: bytes | None,
    gpu_requests: frozenset[str],
) -> tuple[tuple[Any, ...], str | None, str | None, NodeAnswers]:
    """The per-node answers for one pod spec and requirement (the expensive part).

    Without ``matchFields`` the answers are one decision per partition group (a
    :meth:`NodeAnswers.grouped`); the per-node objects are built on first access. With ``memo``, a
    group's block of answers is built once per distinct decision and shared by every workload
    that gets the same decision there."""
    terms: tuple[Any, ...] = ()
    requirement_error: str | None = None
    if req is not None:
        terms, requirement_error = requirement_terms_once(
            req, effective, chosen, gfd_keys or GfdKeys.NEW, fleet.kb, shared
        )
    plan = Plan(spec, req, req_id, terms, shared, selectors, gpu_requests)
    kb = fleet.kb
    results: list[NodeExplanation] = []
    if plan.selectors.match_fields:
        # matchFields look at the node name: no two nodes are alike.
        for node, number, facts in fleet.members():
            offered = fleet.group_resources(number)
            eligible, score, reasons = decide(plan, node, facts, offered, effective, kb)
            # The engine names the node it was shown: the facts group's first member.
            reasons = renamed(reasons, facts.name, node.name)
            if requirement_error is not None:
                eligible = False
            results.append(NodeExplanation(node.name, eligible, score, reasons, facts))
        return terms, requirement_error, plan.selectors.score_error, NodeAnswers.of(results)
    keys = plan.selectors.keys
    part = fleet.partition(keys)
    nodes = fleet.nodes
    decisions: list[Decision] = []
    for position in part.first:
        facts = fleet.facts_at(position)
        offered = fleet.gpu_resources_at(position)
        eligible, score, reasons = decide(
            plan, nodes[position], facts, offered, effective, kb, position
        )
        if requirement_error is not None:
            eligible = False
        decisions.append((eligible, score, reasons, facts))
    # One decision per group; the per-node answers are built only if someone reads them.
    lazy = NodeAnswers.grouped(part, decisions, nodes, memo)
    return terms, requirement_error, plan.selectors.score_error, lazy


def explain_many(
    workloads: Sequence[Mapping[str, Any]],
    nodes: Fleet | Iterable[Mapping[str, Any] | Node],
    policy: Policy | str,
    kb: KnowledgeBase,
    scheme: L.LabelScheme | str = L.LabelScheme.AUTO,
    requirements: Sequence[Requirement | None] | None = None,
    unknowns: Sequence[UnknownRequirement | None] | None = None,
    no_pods: Sequence[str | None] | None = None,
    *,
    class_bound: bool = False,
) -> list[Explanation]:
    """:func:`explain` for several workloads over one prepared fleet; ``unknowns`` says, per
    workload, why a GPU workload's requirement is unknown (``WorkloadNeed.unknown``), and
    ``no_pods`` why its controller creates no pods (``WorkloadNeed.no_pods``: no node can run
    what does not exist); ``class_bound`` compiles requirements as the webhook does under
    ``placement.boundCudaClass``."""
    fleet = nodes if isinstance(nodes, Fleet) else Fleet(nodes, kb)
    if requirements is not None and len(requirements) != len(workloads):
        raise InputError(
            f"got {len(requirements)} requirements for {len(workloads)} workloads: "
            "expected one (or None) per workload"
        )
    reqs = requirements if requirements is not None else [None] * len(workloads)
    # Workloads with the same selectors and requirement share their per-node answers (replicas
    # of one template, pods of one ReplicaSet): computed once, reused as the same tuple.
    if unknowns is not None and len(unknowns) != len(workloads):
        raise InputError(
            f"got {len(unknowns)} unknown reasons for {len(workloads)} workloads: "
            "expected one (or None) per workload"
        )
    whys = unknowns if unknowns is not None else [None] * len(workloads)
    if no_pods is not None and len(no_pods) != len(workloads):
        raise InputError(
            f"got {len(no_pods)} no-pod reasons for {len(workloads)} workloads: "
            "expected one (or None) per workload"
        )
    blocked = no_pods if no_pods is not None else [None] * len(workloads)
    memo: _Memo = {}
    shared = Shared(class_bound=class_bound)
    out = []
    for w, r, why, none in zip(workloads, reqs, whys, blocked, strict=True):
        exp = _explain(w, fleet, policy, scheme, r, memo, shared)
        if why is not None and exp.requirement is None and not exp.skipped:
            exp = replace(exp, unknown=why)
        if none is not None and not exp.skipped:
            exp = _without_pods(exp, none)
        out.append(exp)
    return out


#: The reason every node gives a workload whose controller creates no pods.
NO_PODS = "no-pods"


def _without_pods(exp: Explanation, why: str) -> Explanation:
    """``exp`` of a workload of which no pod can exist (``why``): eligible nowhere."""
    reason = Reason(
        NO_PODS,
        f"no pod of it can exist: {why}",
        "create the runtime it names, or name one that exists and serves its model",
    )
    nodes = NodeAnswers.of(
        replace(n, eligible=False, reasons=(*n.reasons, reason)) for n in exp.nodes
    )
    return replace(exp, nodes=nodes, no_pods=why)
