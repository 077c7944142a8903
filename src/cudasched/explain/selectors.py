"""A pod's node selection as cudasched would admit it, compiled, and what it says of a node:
the user's ``nodeSelector`` and required affinity (with the reasons they exclude a node for),
the requirement's own selector, the merged required affinity and the preferred score. Which
label keys the selectors read decides which nodes
:func:`cudasched.explain.eligibility.explain` may decide once for; ``matchFields`` (the node
*name*) force per-node matching.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from cudasched.compat.verdict import Reason
from cudasched.explain.explanation import SCORE_ERROR, Score
from cudasched.vocab.nodeaffinity import Node, NodeSelector, PreferredTerms, RequiredNodeAffinity

if TYPE_CHECKING:
    pass

__all__ = [
    "AFFINITY_MISMATCH",
    "NODE_SELECTOR_MISMATCH",
    "NodeParts",
    "Selectors",
    "has_match_fields",
    "node_parts",
    "referenced_keys",
    "selector_identity",
]

NODE_SELECTOR_MISMATCH = "node-selector-mismatch"
AFFINITY_MISMATCH = "affinity-mismatch"


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


def has_match_fields(spec: Mapping[str, Any]) -> bool:
    """Whether any node-affinity term looks at the node name (then grouping cannot decide)."""
    return any(isinstance(t, Mapping) and t.get("matchFields") for t in _affinity_terms(spec))


def referenced_keys(spec: Mapping[str, Any]) -> set[str]:
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


def selector_identity(spec: Mapping[str, Any]) -> bytes | None:
    """The pod's ``nodeSelector`` and ``affinity`` as JSON: two specs with the same identity get
    the same selectors, merges and answers. ``None`` when they are not plain JSON data (a
    caller's own objects): such a spec shares nothing."""
    try:
        return orjson.dumps([spec.get("nodeSelector"), spec.get("affinity")])
    except TypeError:
        return None


@dataclass(frozen=True, slots=True, eq=False)
class Selectors:
    """A pod's node selection as cudasched would admit it, compiled (see
    :class:`cudasched.explain.decision.Plan`)."""

    user_selector: Mapping[str, Any]
    user_affinity: NodeSelector | None
    req_selector: NodeSelector | None
    req_at: dict[int, bool]  # whether req_selector matches the node at a fleet position
    preferred: PreferredTerms | None
    score_error: str | None
    required: RequiredNodeAffinity
    match_fields: bool
    keys: tuple[str, ...]
    # What these selectors say of the node at a fleet position (see :func:`node_parts`):
    # workloads with the same selectors but other requirements or GPU requests ask again.
    at: dict[int, NodeParts] = field(default_factory=dict)


# Whether the merged required affinity matches, the preferred score, whether the requirement's
# own selector matches (None: no selector), and the user's nodeSelector and affinity reasons.
NodeParts = tuple[bool, Score, bool | None, Reason | None, Reason | None]


def node_parts(sel: Selectors, node: Node, position: int | None) -> NodeParts:
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
