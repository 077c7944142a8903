"""An explanation read by node pool: the nodes that answer alike, together.

``explain`` answers per node; a person asks per pool ("5 pools can run it, 8 cannot, because
..."). :func:`by_pool` groups an :class:`~cudasched.explain.explanation.Explanation`'s nodes by
the pool each belongs to (a mapping the caller gives: node name -> pool name, from whatever
defines pools) and, inside a pool, by the answer (eligible, how it runs, what blocks it), so a
pool whose nodes answer differently (one has a taint-free nodeSelector match, one not) is shown
as two groups and nothing is averaged away. Nodes in no pool (no GPU) form their own groups.

Invariants (tested): every node is in exactly one group; a group's nodes share one answer; the
counts of :class:`PoolSummary` add up to the explanation's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cudasched.explain.explanation import Explanation, NodeExplanation

__all__ = ["NO_POOL", "NodeGroup", "PoolSummary", "by_pool", "summarise"]

#: The pool name of a node that belongs to no GPU pool.
NO_POOL = "no GPU pool"


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """Nodes of one pool with one answer."""

    pool: str
    eligible: bool
    modes: tuple[str, ...]  # how it runs there (native, minor-version-compat ...)
    blocking: tuple[tuple[str, str], ...]  # (code, fix) of what keeps it off, in order
    nodes: tuple[NodeExplanation, ...]

    @property
    def codes(self) -> tuple[str, ...]:
        return tuple(code for code, _ in self.blocking)


def _answer(node: NodeExplanation) -> tuple[bool, tuple[str, ...], tuple[tuple[str, str], ...]]:
    modes = tuple(dict.fromkeys(r.code for r in node.reasons if not r.blocking))
    blocking = tuple(dict.fromkeys((r.code, r.fix) for r in node.reasons if r.blocking))
    return node.eligible, modes, blocking


def by_pool(explanation: Explanation, pools: Mapping[str, str]) -> tuple[NodeGroup, ...]:
    """The explanation's nodes grouped by pool (``pools``: node name -> pool name; a node not
    in it is in :data:`NO_POOL`) and answer; groups that can run the workload first, then in the
    order their first node appears."""
    groups: dict[
        tuple[str, bool, tuple[str, ...], tuple[tuple[str, str], ...]], list[NodeExplanation]
    ] = {}
    for node in explanation.nodes:
        key = (pools.get(node.node, NO_POOL), *_answer(node))
        groups.setdefault(key, []).append(node)
    out = [
        NodeGroup(pool, eligible, modes, blocking, tuple(nodes))
        for (pool, eligible, modes, blocking), nodes in groups.items()
    ]
    return tuple(sorted(out, key=lambda g: not g.eligible))


@dataclass(frozen=True, slots=True)
class PoolSummary:
    """The counts the summary line says: GPU pools and their nodes that can and cannot run it,
    the codes that keep it off (each with how many pools it blocks), and the nodes in no pool.
    Node counts are the explanation's own (``eligible_nodes + unpooled_eligible`` is its
    ``eligible_count``)."""

    pools: int
    nodes: int  # every node, pooled or not
    eligible_pools: int
    eligible_nodes: int  # pooled nodes that can run it
    blocked_pools: int
    blocked_nodes: int  # pooled nodes that cannot
    mixed_pools: int  # pools in both counts (their nodes answer differently)
    because: tuple[tuple[str, int], ...]
    unpooled_nodes: int = 0
    unpooled_eligible: int = 0
    unpooled_because: tuple[str, ...] = ()


def summarise(groups: Sequence[NodeGroup]) -> PoolSummary:
    """What :func:`by_pool`'s groups add up to."""
    pooled = [g for g in groups if g.pool != NO_POOL]
    unpooled = [g for g in groups if g.pool == NO_POOL]
    eligible = {g.pool for g in pooled if g.eligible}
    blocked = {g.pool for g in pooled if not g.eligible}
    because: Counter[str] = Counter()
    seen: set[tuple[str, str]] = set()
    for group in pooled:
        for code in group.codes:
            if (group.pool, code) not in seen:
                seen.add((group.pool, code))
                because[code] += 1
    return PoolSummary(
        pools=len(eligible | blocked),
        nodes=sum(len(g.nodes) for g in groups),
        eligible_pools=len(eligible),
        eligible_nodes=sum(len(g.nodes) for g in pooled if g.eligible),
        blocked_pools=len(blocked),
        blocked_nodes=sum(len(g.nodes) for g in pooled if not g.eligible),
        mixed_pools=len(eligible & blocked),
        because=tuple(sorted(because.items(), key=lambda kv: (-kv[1], kv[0]))),
        unpooled_nodes=sum(len(g.nodes) for g in unpooled),
        unpooled_eligible=sum(len(g.nodes) for g in unpooled if g.eligible),
        unpooled_because=tuple(dict.fromkeys(c for g in unpooled for c in g.codes)),
    )
