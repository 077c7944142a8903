"""What ``explain`` answers for a workload: per node, eligible or not, the preferred-affinity
score and the reasons, plus what the answers were computed from.

The per-node answers are :class:`NodeAnswers`, an explicit lazy sequence: ``explain`` decides
once per group of nodes that none of the workload's selectors can tell apart, and the
:class:`NodeExplanation` objects for 5,000 nodes are only built when someone reads them
(iterating, indexing, comparing). Counting eligible nodes needs only the group sizes, so
:meth:`Explanation.summary` never builds them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final, Literal, overload

from cudasched.compat.verdict import Reason
from cudasched.nodes.facts import NodeFacts
from cudasched.nodes.scheme import GfdKeys
from cudasched.vocab.labels import LabelScheme
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.workloads.resolution import NeedStatus, UnknownRequirement

if TYPE_CHECKING:
    from cudasched.cluster.fleet import Partition
    from cudasched.vocab.nodeaffinity import Node

__all__ = [
    "SCORE_ERROR",
    "Decision",
    "Explanation",
    "NodeAnswers",
    "NodeExplanation",
    "Score",
    "renamed",
]

SCORE_ERROR: Final = "error"

Score = int | Literal["error"]

#: One decision for a group of alike nodes: eligible, score, reasons, and the group's facts.
Decision = tuple[bool, Score, tuple[Reason, ...], NodeFacts]


@dataclass(frozen=True, slots=True)
class NodeExplanation:
    """The answer for one node. ``facts`` feeds the table (GPU, driver, CUDA); the JSON
    contract is :meth:`to_dict`."""

    node: str
    eligible: bool
    score: Score
    reasons: tuple[Reason, ...]
    facts: NodeFacts = field(repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        facts = self.facts
        return {
            "node": self.node,
            "eligible": self.eligible,
            "score": self.score,
            "reasons": [r.to_dict() for r in self.reasons],
            "facts": {
                "gpu": list(facts.products),
                "driver": str(facts.driver) if facts.driver else None,
                "cuda": str(facts.cuda) if facts.cuda else None,
                "computeCapability": str(facts.compute) if facts.compute else None,
            },
        }


def renamed(reasons: tuple[Reason, ...], old: str, new: str) -> tuple[Reason, ...]:
    """Reasons computed for a group's first member, reworded for another member."""
    if old == new:
        return reasons
    quoted_old, quoted_new = repr(old), repr(new)
    return tuple(
        replace(r, message=r.message.replace(quoted_old, quoted_new))
        if quoted_old in r.message
        else r
        for r in reasons
    )


class NodeAnswers(Sequence[NodeExplanation]):
    """A workload's answers, one per node in fleet order, built on first access.

    Either given whole (:meth:`of`) or kept as one decision per partition group
    (:meth:`grouped`) until read. ``eligible_count`` and ``len()`` never build the per-node
    objects; iterating, indexing, comparing and hashing do, once (two threads may both build
    them: they build equal tuples and either one is kept).
    """

    __slots__ = ("_built", "_decisions", "_memo", "_nodes", "_part", "eligible_count")

    def __init__(self) -> None:
        self._built: tuple[NodeExplanation, ...] | None = None
        self._part: Partition | None = None
        self._decisions: Sequence[Decision] = ()
        self._nodes: Sequence[Node] = ()
        self._memo: dict[Any, Any] | None = None
        self.eligible_count = 0

    @classmethod
    def of(cls, answers: Iterable[NodeExplanation]) -> NodeAnswers:
        """Answers already built, one per node."""
        out = cls()
        out._built = tuple(answers)
        out.eligible_count = sum(1 for n in out._built if n.eligible)
        return out

    @classmethod
    def grouped(
        cls,
        part: Partition,
        decisions: Sequence[Decision],
        nodes: Sequence[Node],
        memo: dict[Any, Any] | None,
    ) -> NodeAnswers:
        """One decision per group of ``part`` (in group order); with ``memo``, a group's block
        of answers is built once per distinct decision and shared by every workload that gets
        the same decision there."""
        out = cls()
        out._part, out._decisions, out._nodes, out._memo = part, decisions, nodes, memo
        members = part.members
        out.eligible_count = sum(len(members[number]) for number, d in enumerate(decisions) if d[0])
        return out

    @property
    def built(self) -> bool:
        """Whether the per-node objects exist yet."""
        return self._built is not None

    def materialise(self) -> tuple[NodeExplanation, ...]:
        """The per-node answers as a tuple (built now if needed, then kept)."""
        found = self._built
        if found is not None:
            return found
        part, nodes, memo = self._part, self._nodes, self._memo
        assert part is not None
        blocks: list[tuple[NodeExplanation, ...]] = []
        for number, (eligible, score, reasons, facts) in enumerate(self._decisions):
            block_key = (part, number, eligible, score, reasons)
            block = memo.get(block_key) if memo is not None else None
            if block is None:
                # The engine names the node it was shown (the facts group's first member); only
                # reasons that quote that name need rewording per member.
                quoted = repr(facts.name)
                rename = any(quoted in r.message for r in reasons)
                block = tuple(
                    NodeExplanation(
                        nodes[p].name,
                        eligible,
                        score,
                        renamed(reasons, facts.name, nodes[p].name) if rename else reasons,
                        facts,
                    )
                    for p in part.members[number]
                )
                if memo is not None:
                    memo[block_key] = block
            blocks.append(block)
        found = self._built = part.gather(blocks)
        return found

    def __len__(self) -> int:
        return (
            self._part.size
            if self._built is None and self._part is not None
            else len(self.materialise())
        )

    @overload
    def __getitem__(self, index: int) -> NodeExplanation: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[NodeExplanation, ...]: ...

    def __getitem__(self, index: int | slice) -> NodeExplanation | tuple[NodeExplanation, ...]:
        return self.materialise()[index]

    def __iter__(self) -> Iterator[NodeExplanation]:
        return iter(self.materialise())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, NodeAnswers):
            return self.materialise() == other.materialise()
        if isinstance(other, tuple):
            return self.materialise() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.materialise())

    def __repr__(self) -> str:
        return repr(self.materialise())


@dataclass(frozen=True, slots=True)
class Explanation:
    """Per-node answers for one workload, and what they were computed from.

    ``nodes`` is a :class:`NodeAnswers` (a list or tuple given here is wrapped); the summary
    and the counts read it without building the per-node answers.
    """

    workload: str
    nodes: NodeAnswers
    requirement: Requirement | None
    policy: Policy
    scheme: LabelScheme
    terms: tuple[Mapping[str, Any], ...] = field(default=(), compare=False)
    gfd_keys: GfdKeys | None = None
    skipped: bool = False
    score_error: str | None = None
    requirement_error: str | None = None
    # Set when the workload uses a GPU and no source names its CUDA: nodes it may land on
    # are "unknown", not "yes" (the webhook cannot keep it off a node whose driver is too old).
    unknown: UnknownRequirement | None = None
    # Set when its controller creates no pods (an InferenceService whose runtime does not
    # exist or refuses it): no node is eligible, each says why (WorkloadNeed.no_pods).
    no_pods: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.nodes, NodeAnswers):
            object.__setattr__(self, "nodes", NodeAnswers.of(self.nodes))

    @property
    def eligible(self) -> tuple[NodeExplanation, ...]:
        return tuple(n for n in self.nodes if n.eligible)

    @property
    def eligible_count(self) -> int:
        """How many nodes are eligible (no per-node answers built)."""
        return self.nodes.eligible_count

    @property
    def total(self) -> int:
        """How many nodes were explained (no per-node answers built)."""
        return len(self.nodes)

    @property
    def status(self) -> NeedStatus:
        """known, unknown or none: the same answer admission gives (``WorkloadNeed``)."""
        if self.unknown is not None:
            return NeedStatus.UNKNOWN
        return NeedStatus.NONE if self.requirement is None else NeedStatus.KNOWN

    def verdict(self, node: NodeExplanation) -> str:
        """``yes``, ``no`` or, where a workload of unknown CUDA may land, ``unknown``."""
        if not node.eligible:
            return "no"
        return "unknown" if self.unknown is not None else "yes"

    def summary(self) -> dict[str, Any]:
        req = self.requirement
        unknown = self.unknown
        return {
            "workload": self.workload,
            "eligible": self.eligible_count,
            "total": self.total,
            "requirement": req.describe() if req is not None else None,
            "requirementSource": req.source if req is not None else None,
            "policy": self.policy.value,
            "scheme": self.scheme.value,
            "gfdKeys": self.gfd_keys.value if self.gfd_keys is not None else None,
            "requirementTerms": [dict(t) for t in self.terms],
            "requirementError": self.requirement_error,
            "skipped": self.skipped,
            "scoreError": self.score_error,
            "requirementStatus": self.status.value,
            "unknown": (
                {"reason": unknown.reason, "image": unknown.image, "fix": unknown.fix}
                if unknown is not None
                else None
            ),
            "warnings": list(unknown.warnings()) if unknown is not None else [],
            "noPods": self.no_pods,
        }

    def to_dict(self) -> dict[str, Any]:
        nodes = []
        for node in self.nodes:
            doc = node.to_dict()
            doc["verdict"] = self.verdict(node)
            nodes.append(doc)
        return {"nodes": nodes, "summary": self.summary()}
