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
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import orjson

from cudasched.cluster.fleet import Fleet
from cudasched.compat.engine import Reason, VerdictStatus, check, resolve_policy
from cudasched.compat.fixes import with_fixes
from cudasched.explain.explanation import (
    SCORE_ERROR,
    Decision,
    Explanation,
    NodeAnswers,
    NodeExplanation,
    Score,
    renamed,
)
from cudasched.nodes.facts import NodeFacts
from cudasched.nodes.scheme import GfdKeys
from cudasched.placement.compile import compile_requirement
from cudasched.placement.merge import checked_terms, merge_required
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.vocab.nodeaffinity import (
    CompileCache,
    Node,
    NodeSelector,
    NodeSelectorError,
    PreferredTerms,
    RequiredNodeAffinity,
)
from cudasched.vocab.objects import as_mapping
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.workloads import declared as declarations
from cudasched.workloads.gpu import requested_gpu_resources
from cudasched.workloads.pods import is_skipped, read_pod_template
from cudasched.workloads.resolution import UnknownRequirement

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase

__all__ = [
    "AFFINITY_MISMATCH",
    "NODE_SELECTOR_MISMATCH",
    "NO_GPU_RESOURCE",
    "REQUIREMENT_LABELS_MISSING",
    "explain",
    "explain_many",
    "requirement_from_annotations",
]

NO_GPU_RESOURCE = "no-gpu-resource"
NODE_SELECTOR_MISMATCH = "node-selector-mismatch"
AFFINITY_MISMATCH = "affinity-mismatch"
REQUIREMENT_LABELS_MISSING = "requirement-labels-missing"


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


# The annotations resolution's reader looks at: what a declared requirement depends on.
_DECLARING = (L.ANN_CUDA_VERSION, L.ANN_MIN_COMPUTE, L.ANN_POLICY, L.ANN_SHIPS_CUDA_COMPAT)


def _declared(annotations: Mapping[str, Any], who: str, shared: _Shared) -> Requirement | None:
    """:func:`requirement_from_annotations`, parsed once per distinct set of values in a call
    (thousands of replicas declare the same few). Only answers are kept: a bad value raises
    for every workload that carries it, naming that workload."""
    get = annotations.get
    values = (get(_DECLARING[0]), get(_DECLARING[1]), get(_DECLARING[2]), get(_DECLARING[3]))
    # Types are part of the key: True == 1 == 1.0 in Python, but not as annotation values.
    key = (*values, *map(type, values))
    try:
        found = shared.annotated.get(key, _MISSING)
    except TypeError:  # an unhashable value (a list): read it every time
        return declarations.requirement_from_annotations(annotations, who)
    if found is _MISSING:
        found = shared.annotated[key] = declarations.requirement_from_annotations(annotations, who)
    return found


_MISSING = object()


def _gpu_requests(spec: Mapping[str, Any], shared: _Shared) -> frozenset[str]:
    """:func:`requested_gpu_resources`, read once per distinct set of containers' resources in
    a call (replicas and copies of a few templates ask for the same). The answer depends only
    on the ``resources`` of the containers and init containers (as JSON, types included);
    anything else than lists of mappings, or values that are not plain JSON, is read every
    time, so the reader's errors are raised exactly as before."""
    containers, inits = spec.get("containers"), spec.get("initContainers")
    key = None
    if type(containers) is list and (inits is None or type(inits) is list):
        try:
            key = orjson.dumps(
                [
                    [c.get("resources") for c in containers],
                    [c.get("resources") for c in inits or ()],
                ]
            )
        except (AttributeError, TypeError):  # a container that is not a mapping, or not JSON
            key = None
    if key is None:
        return requested_gpu_resources(spec)
    found = shared.gpu_requests.get(key)
    if found is None:
        found = shared.gpu_requests[key] = requested_gpu_resources(spec)
    return found


def _repr(req: Requirement | None, shared: _Shared) -> str:
    """``repr(req)``, once per requirement object of a call (workloads that declare the same
    requirement share one object; a dataclass repr formats every field)."""
    if req is None:
        return "None"
    found = shared.reprs.get(id(req))
    if found is None or found[0] is not req:
        found = shared.reprs[id(req)] = (req, repr(req))
    return found[1]


# --------------------------------------------------------------------------- explain


def _affinity_terms(spec: Mapping[str, Any]) -> list[Any]:
    """The pod's required node-selector terms and preferred preferences, as written."""
    affinity = spec.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    if not isinstance(node_affinity, Mapping):
        return []
    terms: list[Any] = []
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if isinstance(required, Mapping) and isinstance(required.get("nodeSelectorTerms"), list):
        terms.extend(required["nodeSelectorTerms"])
    preferred = node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution")
    if isinstance(preferred, list):
        terms.extend(p.get("preference") for p in preferred if isinstance(p, Mapping))
    return terms


def _has_match_fields(spec: Mapping[str, Any]) -> bool:
    """Whether any node-affinity term looks at the node name (then grouping cannot decide)."""
    return any(isinstance(t, Mapping) and t.get("matchFields") for t in _affinity_terms(spec))


def _referenced_keys(spec: Mapping[str, Any]) -> set[str]:
    """Every label key the pod's nodeSelector and node-affinity terms read: two nodes that agree
    on these (and share GPU facts) get the same answer for this pod."""
    keys: set[str] = set()
    selector = spec.get("nodeSelector")
    if isinstance(selector, Mapping):
        keys.update(str(k) for k in selector)
    for term in _affinity_terms(spec):
        expressions = term.get("matchExpressions") if isinstance(term, Mapping) else None
        if isinstance(expressions, list):
            keys.update(
                str(e.get("key")) for e in expressions if isinstance(e, Mapping) and "key" in e
            )
    return keys


def _selector_mismatch(selector: Mapping[str, Any], node: Node) -> Reason | None:
    wrong = []
    for key, want in selector.items():
        have = node.labels.get(key)
        if have != want:
            shown = "absent" if have is None else repr(have)
            wrong.append(f"{key}={want} (node: {shown})")
    if not wrong:
        return None
    return Reason(NODE_SELECTOR_MISMATCH, "the pod's nodeSelector wants " + ", ".join(wrong))


def _selector_identity(spec: Mapping[str, Any]) -> bytes | None:
    """The pod's ``nodeSelector`` and ``affinity`` as JSON: two specs with the same identity get
    the same selectors, merges and answers. ``None`` when they are not plain JSON data (a
    caller's own objects): such a spec shares nothing."""
    try:
        return orjson.dumps([spec.get("nodeSelector"), spec.get("affinity")])
    except TypeError:
        return None


# The only parts of a pod spec that node affinity reads.
_SELECTOR_FIELDS = ("nodeSelector", "affinity")


class _Shared:
    """What the workloads of one :func:`explain` / :func:`explain_many` call have in common,
    computed once per call and dropped with it (no cache outlives the call).

    Thousands of workloads usually state a few dozen requirements and a few dozen selector
    shapes, so: requirement terms are compiled once per (requirement, policy, scheme, GFD keys);
    merges and compiled selectors once per (selectors, requirement terms); and every
    ``matchExpressions`` entry once per distinct expression (:class:`CompileCache`), since a
    merged affinity repeats the requirement's expressions in every term it crosses them into.
    Only compiled results are kept, not the merged pod specs they came from: those are many
    small dicts that would only feed the garbage collector.
    """

    __slots__ = (
        "annotated",
        "checked",
        "compiled",
        "declared",
        "gpu_requests",
        "reprs",
        "requirement_selectors",
        "requirements",
        "selectors",
        "terms",
        "verdicts",
    )

    def __init__(self) -> None:
        self.compiled = CompileCache()
        # the values (and their types) of the annotations a requirement is read from -> it
        self.annotated: dict[tuple[Any, ...], Requirement | None] = {}
        # requirement repr -> the first equal requirement read from annotations in this call
        self.declared: dict[str, Requirement] = {}
        # the JSON of the containers' resources -> the GPU resources they request
        self.gpu_requests: dict[bytes, frozenset[str]] = {}
        # id of a requirement -> it and its repr (kept with it, so the id cannot be reused)
        self.reprs: dict[int, tuple[Requirement, str]] = {}
        # (what the compiler reads of a requirement, policy, scheme, GFD keys) -> (terms,
        # requirement error); see _requirement_terms
        self.requirements: dict[Any, tuple[tuple[Any, ...], str | None]] = {}
        # the JSON of a terms tuple -> the first equal tuple compiled in this call
        self.terms: dict[bytes, tuple[Any, ...]] = {}
        # id of a terms tuple held in ``requirements`` -> its compiled selector
        # and whether it matches the node at each fleet position asked so far (shared by every
        # spec merged with these terms)
        self.requirement_selectors: dict[int, tuple[NodeSelector, dict[int, bool]]] = {}
        # (selector identity, has a requirement, id of its terms) -> compiled selectors
        self.selectors: dict[tuple[bytes, bool, int], _Selectors] = {}
        # (requirement repr, policy, id of a fleet's facts group) -> the engine's verdict
        # status and its reasons with their fixes: they depend on nothing else, so workloads
        # with other selectors but the same requirement share them
        self.verdicts: dict[tuple[str, Policy, int], tuple[bool, tuple[Reason, ...]]] = {}
        # id of a terms tuple held in ``requirements`` -> the terms checked for merging once
        # (the merge reports invalid terms itself: those are passed as they are)
        self.checked: dict[int, Sequence[Any]] = {}


@dataclass(frozen=True, slots=True, eq=False)
class _Selectors:
    """A pod's node selection as cudasched would admit it, compiled (see :func:`_selectors`)."""

    user_selector: Mapping[str, Any]
    user_affinity: NodeSelector | None
    req_selector: NodeSelector | None
    req_at: dict[int, bool]  # whether req_selector matches the node at a fleet position
    preferred: PreferredTerms | None
    score_error: str | None
    required: RequiredNodeAffinity
    match_fields: bool
    keys: tuple[str, ...]
    # What these selectors say of the node at a fleet position (see :func:`_node_parts`):
    # workloads with the same selectors but other requirements or GPU requests ask again.
    at: dict[int, _NodeParts] = field(default_factory=dict)


# Whether the merged required affinity matches, the preferred score, whether the requirement's
# own selector matches (None: no selector), and the user's nodeSelector and affinity reasons.
_NodeParts = tuple[bool, Score, bool | None, Reason | None, Reason | None]


def _node_parts(sel: _Selectors, node: Node, position: int | None) -> _NodeParts:
    """What ``sel`` says of ``node`` (at fleet ``position``, when it has one), independent of
    the requirement's verdict and the GPU requests."""
    eligible = sel.required.match(node)
    score: Score = sel.preferred.score(node) if sel.preferred is not None else SCORE_ERROR
    req_match = None
    if sel.req_selector is not None:
        req_match = sel.req_at.get(position) if position is not None else None
        if req_match is None:
            req_match = sel.req_selector.match(node)
            if position is not None:
                sel.req_at[position] = req_match
    affinity = None
    user_affinity = sel.user_affinity
    if user_affinity is not None and not user_affinity.match(node):
        count = user_affinity.term_count
        detail = f"none of its {count} term(s) match" if count else "it has no usable term"
        if user_affinity.errors:
            detail += "; skipped terms: " + "; ".join(user_affinity.errors)
        affinity = Reason(
            AFFINITY_MISMATCH, f"the pod's required node affinity excludes it: {detail}"
        )
    return eligible, score, req_match, _selector_mismatch(sel.user_selector, node), affinity


def _selectors(
    spec: Mapping[str, Any], has_req: bool, terms: tuple[Any, ...], shared: _Shared
) -> _Selectors:
    """Merge ``terms`` into the pod's node affinity (when it has a requirement) and compile
    what :func:`_decide` matches with. Steps run in the order they always did, so a spec with
    several problems reports the same one first."""
    cache = shared.compiled
    # Only nodeSelector and affinity matter here; merging just these gives the same selectors
    # as merging the whole spec, without copying its containers.
    only = {k: spec[k] for k in _SELECTOR_FIELDS if k in spec}
    # Our merge removes cudasched's earlier terms (marked) before ANDing the requirement in;
    # the user's own constraints, on any key, are what is left after that.
    # (Without an affinity there is nothing of ours to remove: the spec is its own.)
    user_spec = merge_required(only, []) if has_req and "affinity" in only else only
    merged = merge_required(only, _checked(terms, shared)) if has_req else user_spec
    user_selector = as_mapping(spec.get("nodeSelector"), "spec.nodeSelector")
    user_affinity = RequiredNodeAffinity.from_pod_spec(
        {"affinity": user_spec.get("affinity")}, cache=cache
    ).affinity
    req_selector = None
    req_at: dict[int, bool] = {}
    if terms:
        # ``terms`` is the very tuple the call's requirement cache holds (alive for the whole
        # call), so its id names it.
        found = shared.requirement_selectors.get(id(terms))
        if found is None:
            found = (NodeSelector.from_terms(terms, cache=cache), req_at)
            shared.requirement_selectors[id(terms)] = found
        req_selector, req_at = found
    preferred: PreferredTerms | None = None
    score_error: str | None = None
    try:
        preferred = PreferredTerms.from_pod_spec(merged, cache=cache)
    except NodeSelectorError as exc:
        score_error = str(exc)
    return _Selectors(
        user_selector=user_selector,
        user_affinity=user_affinity,
        req_selector=req_selector,
        req_at=req_at,
        preferred=preferred,
        score_error=score_error,
        required=RequiredNodeAffinity.from_pod_spec(merged, cache=cache),
        match_fields=_has_match_fields(merged),
        keys=tuple(sorted(_referenced_keys(merged))),
    )


def _checked(terms: tuple[Any, ...], shared: _Shared) -> Sequence[Any]:
    """``terms`` checked for merging once per call (``terms`` is the very tuple the call's
    requirement cache holds, so its id names it)."""
    found = shared.checked.get(id(terms))
    if found is None:
        try:
            found = checked_terms(terms)
        except InputError:
            found = terms  # the merge says why, as it always did
        shared.checked[id(terms)] = found
    return found


class _Plan:
    """Everything about one workload that does not depend on the node."""

    __slots__ = ("gpu_requests", "req_id", "requirement", "selectors", "verdicts")

    def __init__(
        self,
        spec: Mapping[str, Any],
        requirement: Requirement | None,
        req_id: str,
        terms: tuple[Any, ...],
        shared: _Shared,
        identity: bytes | None,
        gpu_requests: frozenset[str] | None = None,
    ) -> None:
        self.requirement = requirement
        self.req_id = req_id
        self.verdicts = shared.verdicts
        self.gpu_requests = (
            gpu_requests if gpu_requests is not None else requested_gpu_resources(spec)
        )
        has_req = requirement is not None
        if identity is None:  # not plain JSON: nothing to share it with
            self.selectors = _selectors(spec, has_req, terms, shared)
            return
        key = (identity, has_req, id(terms))
        found = shared.selectors.get(key)
        if found is None:
            found = shared.selectors[key] = _selectors(spec, has_req, terms, shared)
        self.selectors = found


def _decide(
    plan: _Plan,
    node: Node,
    facts: NodeFacts,
    offered: frozenset[str] | None,
    policy: Policy,
    kb: KnowledgeBase,
    position: int | None = None,
) -> tuple[bool, Score, tuple[Reason, ...]]:
    sel = plan.selectors
    if position is None:  # no fleet position to remember it by
        parts = _node_parts(sel, node, None)
    else:
        parts = sel.at.get(position)
        if parts is None:
            parts = sel.at[position] = _node_parts(sel, node, position)
    eligible, score, req_match, mismatch, affinity = parts
    reasons: list[Reason] = []
    if plan.requirement is not None:
        key = (plan.req_id, policy, id(facts))  # the facts group lives as long as the call
        known = plan.verdicts.get(key)
        if known is None:
            verdict = check(facts, plan.requirement, policy, kb)
            fixed = with_fixes(verdict.reasons, facts, plan.requirement, policy, kb)
            known = plan.verdicts[key] = (verdict.status is not VerdictStatus.INCOMPATIBLE, fixed)
        accepted, fixed = known
        reasons.extend(fixed)
        if accepted and req_match is False:
            reasons.append(
                Reason(
                    REQUIREMENT_LABELS_MISSING,
                    "the node could run the workload but lacks the labels the compiled "
                    "requirement selects on (label scheme not published on this node yet)",
                    "run the cudasched agent on the node, or compile for labels every GPU "
                    "node carries (--scheme auto)",
                )
            )
    missing = sorted(plan.gpu_requests - offered) if offered is not None else []
    if missing:
        # The scheduler's resource fit: a pod asking for a GPU never lands where none is
        # offered, whatever its affinity says.
        eligible = False
        have = ", ".join(sorted(offered or ())) or "no NVIDIA GPU resource"
        fix = (
            "request a GPU resource the node offers"
            if offered
            else "check that NVIDIA's device plugin (or the GPU Operator) runs there and "
            "reports healthy GPUs"
        )
        reasons.append(
            Reason(
                NO_GPU_RESOURCE,
                f"the pod requests {', '.join(missing)}; the node offers {have}",
                fix,
            )
        )
    if mismatch is not None:
        reasons.append(mismatch)
    if affinity is not None:
        reasons.append(affinity)
    return eligible, score, tuple(reasons)


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
    return _explain(workload, fleet, policy, scheme, requirement, None, _Shared())


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
    shared: _Shared,
) -> Explanation:
    template = read_pod_template(workload)
    who, spec, annotations = template.workload, template.spec, template.annotations
    skipped = is_skipped(annotations)
    declared = requirement is None
    req = requirement if requirement is not None else _declared(annotations, who, shared)
    if req is not None and req.is_empty:
        req = None
    if skipped:
        req = None
    base_policy = policy if isinstance(policy, Policy) else Policy.parse(str(policy))
    effective = resolve_policy(req, base_policy) if req is not None else base_policy
    chosen = fleet.resolve_scheme(scheme)
    gfd_keys = fleet.gfd_keys if chosen is L.LabelScheme.GFD else None
    selectors = _selector_identity(spec)
    req_id = _repr(req, shared)  # the repr, not equality: it tells patch levels apart
    if declared and req is not None:
        # Workloads that declare the same requirement share one (frozen) object, so a call
        # over thousands of them does not keep thousands of equal copies alive.
        req = shared.declared.setdefault(req_id, req)
    key: _MemoKey | None = None
    gpu_requests = None
    if memo is not None and selectors is not None:
        gpu_requests = _gpu_requests(spec, shared)
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


def _requirement_terms(
    req: Requirement,
    effective: Policy,
    chosen: L.LabelScheme,
    gfd_keys: GfdKeys,
    kb: KnowledgeBase,
    shared: _Shared,
) -> tuple[tuple[Any, ...], str | None]:
    """The requirement's node-selector terms (or why there are none), once per call."""
    # What the compiler reads of the requirement: its rule-relevant fields (``needs``) and the
    # CUDA versions as written (an unknown toolkit's message quotes the patch level), never
    # its source; requirements that differ only in wording compile once.
    framework_cuda = req.framework.cuda if req.framework is not None else None
    key = (
        req.needs,
        None if req.cuda is None else str(req.cuda),
        None if framework_cuda is None else str(framework_cuda),
        effective,
        chosen,
        gfd_keys,
    )
    found = shared.requirements.get(key)
    if found is None:
        try:
            terms = tuple(compile_requirement(req, effective, chosen, kb, gfd_keys))
        except InputError as exc:
            # No selector can express "no node": the webhook refuses such a pod, so no node is
            # eligible; the engine's per-node reasons say why.
            found = ((), str(exc))
        else:
            # Requirements that differ only in wording (their source) compile to equal terms:
            # one tuple for all of them lets their workloads share merges and selectors.
            found = (shared.terms.setdefault(orjson.dumps(terms), terms), None)
        shared.requirements[key] = found
    return found


def _answers(
    spec: Mapping[str, Any],
    req: Requirement | None,
    req_id: str,
    effective: Policy,
    chosen: L.LabelScheme,
    gfd_keys: GfdKeys | None,
    fleet: Fleet,
    memo: _Memo | None,
    shared: _Shared,
    selectors: bytes | None,
    gpu_requests: frozenset[str] | None = None,
) -> tuple[tuple[Any, ...], str | None, str | None, NodeAnswers]:
    """The per-node answers for one pod spec and requirement (the expensive part).

    Without ``matchFields`` the answers are one decision per partition group (a
    :meth:`NodeAnswers.grouped`); the per-node objects are built on first access. With ``memo``, a
    group's block of answers is built once per distinct decision and shared by every workload
    that gets the same decision there."""
    terms: tuple[Any, ...] = ()
    requirement_error: str | None = None
    if req is not None:
        terms, requirement_error = _requirement_terms(
            req, effective, chosen, gfd_keys or GfdKeys.NEW, fleet.kb, shared
        )
    plan = _Plan(spec, req, req_id, terms, shared, selectors, gpu_requests)
    kb = fleet.kb
    results: list[NodeExplanation] = []
    if plan.selectors.match_fields:
        # matchFields look at the node name: no two nodes are alike.
        for node, number, facts in fleet.members():
            offered = fleet.group_resources(number)
            eligible, score, reasons = _decide(plan, node, facts, offered, effective, kb)
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
        eligible, score, reasons = _decide(
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
) -> list[Explanation]:
    """:func:`explain` for several workloads over one prepared fleet; ``unknowns`` says, per
    workload, why a GPU workload's requirement is unknown (``WorkloadNeed.unknown``)."""
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
    memo: _Memo = {}
    shared = _Shared()
    out = []
    for w, r, why in zip(workloads, reqs, whys, strict=True):
        exp = _explain(w, fleet, policy, scheme, r, memo, shared)
        if why is not None and exp.requirement is None and not exp.skipped:
            exp = replace(exp, unknown=why)
        out.append(exp)
    return out
