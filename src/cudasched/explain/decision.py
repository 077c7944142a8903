"""One workload's plan (everything that does not depend on the node: its selectors merged
with the requirement's terms and compiled, its GPU requests) and the decision it gives a node:
eligible, the preferred score, and the reasons (the engine's with their fixes, the requirement's
labels missing, no GPU resource, the user's own selectors).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cudasched.compat.engine import check
from cudasched.compat.fixes import with_fixes
from cudasched.compat.verdict import Reason, VerdictStatus
from cudasched.explain.explanation import Score
from cudasched.explain.fit import SELECTOR_FIELDS, Selection, admitted_selection
from cudasched.explain.selectors import (
    Selectors,
    has_match_fields,
    node_parts,
    referenced_keys,
)
from cudasched.explain.shared import Shared, checked_once
from cudasched.nodes.facts import NodeFacts
from cudasched.vocab.nodeaffinity import Node, NodeSelector, PreferredTerms, RequiredNodeAffinity
from cudasched.vocab.nodeterms import NodeSelectorError
from cudasched.vocab.objects import as_mapping
from cudasched.vocab.requirements import Policy, Requirement

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase

__all__ = [
    "NO_GPU_RESOURCE",
    "REQUIREMENT_LABELS_MISSING",
    "Plan",
    "decide",
]

NO_GPU_RESOURCE = "no-gpu-resource"
REQUIREMENT_LABELS_MISSING = "requirement-labels-missing"


def _selectors(
    spec: Mapping[str, Any], has_req: bool, terms: tuple[Any, ...], shared: Shared
) -> Selectors:
    """Merge ``terms`` into the pod's node affinity (when it has a requirement) and compile
    what :func:`decide` matches with. Steps run in the order they always did, so a spec with
    several problems reports the same one first."""
    cache = shared.compiled
    # Only nodeSelector and affinity matter here; merging just these gives the same selectors
    # as merging the whole spec, without copying its containers.
    only = {k: spec[k] for k in SELECTOR_FIELDS if k in spec}
    # Our merge removes cudasched's earlier terms (marked) before ANDing the requirement in;
    # the user's own constraints, on any key, are what is left after that.
    # (Without an affinity there is nothing of ours to remove: the spec is its own.)
    user_spec = admitted_selection(only, []) if has_req and "affinity" in only else only
    # The selection the one eligibility rule reads (explain/fit.py), as admission writes it.
    merged = admitted_selection(only, checked_once(terms, shared)) if has_req else user_spec
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
    return Selectors(
        user_selector=user_selector,
        user_affinity=user_affinity,
        req_selector=req_selector,
        req_at=req_at,
        preferred=preferred,
        score_error=score_error,
        required=RequiredNodeAffinity.from_pod_spec(merged, cache=cache),
        match_fields=has_match_fields(merged),
        keys=tuple(sorted(referenced_keys(merged))),
    )


class Plan:
    """Everything about one workload that does not depend on the node."""

    __slots__ = ("gpu_requests", "req_id", "requirement", "selection", "selectors", "verdicts")

    def __init__(
        self,
        spec: Mapping[str, Any],
        requirement: Requirement | None,
        req_id: str,
        terms: tuple[Any, ...],
        shared: Shared,
        identity: bytes | None,
        gpu_requests: frozenset[str],
    ) -> None:
        self.requirement = requirement
        self.req_id = req_id
        self.verdicts = shared.verdicts
        self.gpu_requests = gpu_requests  # the pod view's: what a node must offer
        has_req = requirement is not None
        if identity is None:  # not plain JSON: nothing to share it with
            found = _selectors(spec, has_req, terms, shared)
        else:
            key = (identity, has_req, id(terms))
            remembered = shared.selectors.get(key)
            if remembered is None:
                remembered = shared.selectors[key] = _selectors(spec, has_req, terms, shared)
            found = remembered
        self.selectors = found
        self.selection = Selection(found.required, self.gpu_requests)


def decide(
    plan: Plan,
    node: Node,
    facts: NodeFacts,
    offered: frozenset[str] | None,
    policy: Policy,
    kb: KnowledgeBase,
    position: int | None = None,
) -> tuple[bool, Score, tuple[Reason, ...]]:
    sel = plan.selectors
    if position is None:  # no fleet position to remember it by
        parts = node_parts(sel, node, None)
    else:
        remembered = sel.at.get(position)
        if remembered is None:
            remembered = sel.at[position] = node_parts(sel, node, position)
        parts = remembered
    matched, score, req_match, mismatch, affinity = parts
    # The one rule (explain/fit.py), with the affinity's answer this node position remembers.
    eligible = plan.selection.admits(node, offered, matched)
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
    if not plan.selection.offers(offered):
        # The scheduler's resource fit: a pod asking for a GPU never lands where none is
        # offered, whatever its affinity says.
        assert offered is not None
        missing = sorted(plan.gpu_requests - offered)
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
